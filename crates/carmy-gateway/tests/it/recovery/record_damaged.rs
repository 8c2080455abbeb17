//! A record that cannot be read back (docs/semantics.md §5): a real gateway process on a real
//! PostgreSQL answers retries and `GET` with 500 `RECORD_DAMAGED` naming the execution and the
//! problem (never "nothing was run"), counts it in `carmy_records_damaged_total`, and stays
//! ready. The schema refuses such a row (migration V5); the test forces it past the constraint.

use carmy_test_support::{call, client, metric, post, Replica, TestDb};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_record_is_reported_as_damaged_and_the_gateway_stays_ready() {
    let db = TestDb::migrated().await;
    // No replay cache: every retry reads the row.
    let replica = Replica::start(
        "damaged",
        &[
            ("DATABASE_URL", &db.url),
            ("CARMY_REPLAY_CACHE_ENTRIES", "0"),
        ],
    );
    let http = client();
    let body = call("echo", json!({"n": 1}), "fix-me");
    let (status, first) = post(&http, &replica, &body).await;
    assert_eq!(status, 200, "{first}");
    let execution_id = first["execution_id"].as_str().unwrap().to_owned();

    let pool = db.pool().await;
    let refused = sqlx::query("UPDATE carmy.reservations SET outcome = '{\"n\": 1}'")
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("reservations_outcome_is_record"),
        "{refused}"
    );
    sqlx::query("ALTER TABLE carmy.reservations DROP CONSTRAINT reservations_outcome_is_record")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE carmy.reservations SET outcome = '{\"n\": 1}'")
        .execute(&pool)
        .await
        .unwrap();

    let expected = json!({
        "type": "urn:carmy:problem:record-damaged",
        "title": "Record damaged",
        "status": 500,
        "detail": format!(
            "the recorded outcome of execution {execution_id} cannot be read back (outcome is not \
             a record: missing field `execution_id` at line 1 column 8); the tool did run, so \
             nothing was run again: an operator must repair the record (see docs/operations.md, \
             \"Inspecting reservations with SQL\")"
        ),
        "code": "RECORD_DAMAGED",
        "execution_id": execution_id,
    });
    let (status, retry) = post(&http, &replica, &body).await;
    assert_eq!((status, &retry), (500, &expected));
    let response = http
        .get(replica.url(&format!("/v1/executions/{execution_id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 500);
    assert_eq!(response.json::<Value>().await.unwrap(), expected);
    assert_eq!(
        metric(&http, &replica, "carmy_records_damaged_total").await,
        2
    );
    assert_eq!(
        metric(&http, &replica, "carmy_tool_runs_total{tool=\"echo\"}").await,
        1
    );
    let ready = http.get(replica.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
}
