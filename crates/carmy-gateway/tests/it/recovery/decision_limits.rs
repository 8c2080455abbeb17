//! One set of limits for every door (docs/semantics.md §12.1, rules 5 to 8): the SQL decision
//! functions refuse what the API refuses, with the same words; a number PostgreSQL's `numeric`
//! cannot hold is refused by a decision (400 naming the field) and kept by a late arrival; a
//! damaged record is decided again with `force`; `carmy.prune_expired` refuses a retention under
//! an hour unless told.

use super::recovery_replicas::{env, interrupted_execution};
use carmy_test_support::{call, client, post, request, Replica, TestDb};
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::PgPool;

/// A number `jsonb` refuses (16,384 digits after the decimal point, one more than `numeric`
/// holds) that strict JSON accepts (it is about 0.1).
fn unstorable_number() -> String {
    format!("0.1{}1", "0".repeat(16_382))
}

fn nested(levels: usize) -> Value {
    (0..levels).fold(json!(1), |inner, _| json!([inner]))
}

/// Runs `statement` (binds: `$1` the execution id, `$2` a value) and returns the SQLSTATE and
/// message it was refused with.
async fn refused(
    pool: &PgPool,
    statement: &str,
    execution_id: &str,
    value: &str,
) -> (String, String) {
    let error = sqlx::query(statement)
        .bind(execution_id)
        .bind(value)
        .execute(pool)
        .await
        .expect_err(statement);
    let error = error.as_database_error().expect("a database error");
    (
        error.code().unwrap().into_owned(),
        error.message().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sql_functions_refuse_what_the_api_refuses() {
    let db = TestDb::migrated().await;
    let mut owner = Replica::start("limits-owner", &env(&db));
    let reader = Replica::start("limits-reader", &env(&db));
    let id = interrupted_execution(&mut owner, &reader, "limits").await;
    let http = client();
    let pool = db.pool().await;
    let resolve = format!("/v1/executions/{id}/resolve");
    let api = |body: Value| {
        let (http, reader, resolve) = (&http, &reader, &resolve);
        async move { request(http, reader, Method::POST, resolve, Some("ko"), Some(&body)).await }
    };
    let resolve_data =
        "SELECT carmy.resolve_execution($1, 'completed', $2::jsonb, NULL, 'n', 'dba')";
    let resolve_note = "SELECT carmy.resolve_execution($1, 'completed', '{}', NULL, $2, 'dba')";
    let release_note = "SELECT carmy.release_execution($1, $2, 'dba')";

    let long_note = "x".repeat(4097);
    let (status, body) = api(json!({"status": "completed", "data": {}, "note": long_note})).await;
    assert_eq!(
        (status, &body["detail"]),
        (400, &json!("note is longer than 4096 bytes"))
    );
    for statement in [resolve_note, release_note] {
        assert_eq!(
            refused(&pool, statement, &id, &long_note).await,
            ("CR400".into(), "note is longer than 4096 bytes".into())
        );
    }

    let large = json!("x".repeat(1_048_577));
    let (status, body) = api(json!({"status": "completed", "data": large, "note": "n"})).await;
    let too_large = "data is larger than 1048576 bytes of JSON";
    assert_eq!((status, &body["detail"]), (400, &json!(too_large)));
    assert_eq!(
        refused(&pool, resolve_data, &id, &large.to_string()).await,
        ("CR400".into(), too_large.into())
    );

    // The API's parser reads no deeper and refuses reserved names itself (docs/semantics.md §2.3).
    let deep = nested(127);
    let (status, body) = api(json!({"status": "completed", "data": deep, "note": "n"})).await;
    assert_eq!((status, &body["code"]), (400, &json!("INVALID_REQUEST")));
    assert_eq!(
        refused(&pool, resolve_data, &id, &deep.to_string()).await,
        (
            "CR400".into(),
            "data is nested deeper than 126 levels".into()
        )
    );
    let reserved_name = json!({"a": {"$serde_json::private::Number": "1"}});
    let (status, body) =
        api(json!({"status": "completed", "data": reserved_name, "note": "n"})).await;
    assert_eq!((status, &body["code"]), (400, &json!("INVALID_REQUEST")));
    assert_eq!(
        refused(&pool, resolve_data, &id, &reserved_name.to_string()).await,
        (
            "CR400".into(),
            "data uses the reserved member name $serde_json::private::Number".into()
        )
    );
    let deep_error = json!({"code": "X", "message": "m", "details": nested(126)});
    let resolve_error = "SELECT carmy.resolve_execution($1, 'failed', NULL, $2::jsonb, 'n', 'dba')";
    assert_eq!(
        refused(&pool, resolve_error, &id, &deep_error.to_string()).await,
        (
            "CR400".into(),
            "error is nested deeper than 126 levels".into()
        )
    );

    // A number jsonb cannot hold: refused up front, naming the field, never a 503.
    let number = unstorable_number();
    let text = format!(r#"{{"status":"completed","data":{{"n":{number}}},"note":"n"}}"#);
    let response = http
        .post(reader.url(&resolve))
        .bearer_auth("ko")
        .header("content-type", "application/json")
        .body(text)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["detail"],
        "data holds a number PostgreSQL cannot store exactly (more than 16383 digits after the decimal point or 131072 before it) at /n"
    );

    // Nothing was decided.
    let path = "/v1/executions?request_id=limits";
    let (_, body) = request(&http, &reader, Method::GET, path, None, None).await;
    assert_eq!(body["status"], "interrupted", "{body}");
}

/// Replaces the stored outcome of `execution_id` by one whose `data` nests deeper than the
/// gateway reads: a record the constraint accepts and nobody can replay.
async fn damage(pool: &PgPool, execution_id: &str) {
    let outcome: String =
        sqlx::query_scalar("SELECT outcome FROM carmy.reservations WHERE execution_id = $1")
            .bind(execution_id)
            .fetch_one(pool)
            .await
            .unwrap();
    let mut record: Value = serde_json::from_str(&outcome).unwrap();
    record["data"] = nested(130);
    sqlx::query("UPDATE carmy.reservations SET outcome = $2 WHERE execution_id = $1")
        .bind(execution_id)
        .bind(record.to_string())
        .execute(pool)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_record_is_decided_again_with_force() {
    let db = TestDb::migrated().await;
    let mut settings = env(&db);
    settings.push(("CARMY_REPLAY_CACHE_ENTRIES", "0"));
    let replica = Replica::start("damaged-force", &settings);
    let http = client();
    let pool = db.pool().await;
    let mut ids = Vec::new();
    for request_id in ["to-resolve", "to-release"] {
        let body = call("echo", json!({"v": request_id}), request_id);
        let (status, first) = post(&http, &replica, &body).await;
        assert_eq!(status, 200, "{first}");
        let id = first["execution_id"].as_str().unwrap().to_owned();
        damage(&pool, &id).await;
        let (status, body) = post(&http, &replica, &body).await;
        assert_eq!((status, &body["code"]), (500, &json!("RECORD_DAMAGED")));
        ids.push(id);
    }

    let decide = |id: &str, action: &str| format!("/v1/executions/{id}/{action}");
    let resolution = json!({"status": "completed", "data": {"v": "repaired"},
                            "note": "the echo ran; its value was lost to a hand edit"});
    let (status, body) = request(
        &http,
        &replica,
        Method::POST,
        &decide(&ids[0], "resolve"),
        Some("ko"),
        Some(&resolution),
    )
    .await;
    assert_eq!(
        (status, &body["code"]),
        (409, &json!("EXECUTION_FINISHED")),
        "{body}"
    );
    let mut forced = resolution.clone();
    forced["force"] = json!(true);
    let (status, body) = request(
        &http,
        &replica,
        Method::POST,
        &decide(&ids[0], "resolve"),
        Some("ko"),
        Some(&forced),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, replay) = post(
        &http,
        &replica,
        &call("echo", json!({"v": "to-resolve"}), "to-resolve"),
    )
    .await;
    assert_eq!(
        (
            status,
            &replay["execution_id"],
            &replay["data"],
            &replay["replayed"]
        ),
        (200, &json!(ids[0]), &json!({"v": "repaired"}), &json!(true)),
        "{replay}"
    );

    let release = json!({"note": "nothing to keep", "force": true});
    let (status, body) = request(
        &http,
        &replica,
        Method::POST,
        &decide(&ids[1], "release"),
        Some("ko"),
        Some(&release),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, again) = post(
        &http,
        &replica,
        &call("echo", json!({"v": "to-release"}), "to-release"),
    )
    .await;
    assert_eq!(
        (status, &again["replayed"]),
        (200, &json!(false)),
        "{again}"
    );
    assert_ne!(again["execution_id"], json!(ids[1]));

    let damaged: Vec<(String, bool)> = sqlx::query_as(
        "SELECT action, (before ->> 'damaged')::boolean FROM carmy.audit_log \
         WHERE execution_id = ANY($1) ORDER BY id",
    )
    .bind(&ids)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        damaged,
        vec![("resolve".to_owned(), true), ("release".to_owned(), true)]
    );
}

#[tokio::test]
async fn prune_expired_refuses_a_retention_under_an_hour_unless_told() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;
    sqlx::query(
        "INSERT INTO carmy.released_executions (execution_id, principal, session_id, request_id, \
         tool, fingerprint, fingerprint_version, in_flight_state, created_at, released_at, \
         released_by, note) VALUES ('exec_old', 'p', 's', 'r', 't', 'f', 'v1', 'interrupted', \
         now() - interval '1 minute', now() - interval '1 minute', 'dba', 'n')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let error = sqlx::query("SELECT * FROM carmy.prune_expired(interval '0')")
        .execute(&pool)
        .await
        .unwrap_err();
    let error = error.as_database_error().unwrap();
    assert_eq!(
        (error.code().unwrap().as_ref(), error.message()),
        (
            "CR400",
            "retention 00:00:00 is under one hour: every record finished longer ago than that would be deleted"
        )
    );
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM carmy.released_executions")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(kept, 1);
    let released: i64 = sqlx::query_scalar(
        "SELECT released FROM carmy.prune_expired(interval '0', 1000, short_retention_ok => true)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(released, 1);
}

/// A late arrival whose outcome holds a number `jsonb` refuses is kept (as the text of its
/// record) and its caller is answered: the owner stalls after its tool while an operator
/// releases the execution.
#[cfg(feature = "fault-injection")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_arrival_beyond_numeric_is_kept_and_its_caller_answered() {
    let db = TestDb::migrated().await;
    let mut stalled = env(&db);
    stalled.push(("FAILPOINTS", "carmy::after_tool=sleep(3000)"));
    let owner = Replica::start("late-number-owner", &stalled);
    let other = Replica::start("late-number-other", &env(&db));
    let http = client();
    let number = unstorable_number();
    let body =
        format!(r#"{{"tool":"echo","arguments":{{"n":{number}}},"request_id":"late-number"}}"#);
    let url = owner.url("/v1/executions");
    let answer = tokio::spawn({
        let http = http.clone();
        async move {
            let response = http
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        }
    });
    let id = super::recovery_replicas::reserved(&other, "late-number").await;
    let route = format!("/v1/executions/{}/release", id.as_str().unwrap());
    let release = json!({"note": "released while its owner records", "force": true});
    let (status, released) = request(
        &http,
        &other,
        Method::POST,
        &route,
        Some("ko"),
        Some(&release),
    )
    .await;
    assert_eq!(status, 200, "{released}");

    let (status, body) = tokio::time::timeout(std::time::Duration::from_secs(30), answer)
        .await
        .expect("the owner's caller is answered")
        .unwrap();
    assert_eq!(
        (status, &body["code"], &body["execution_id"]),
        (409, &json!("EXECUTION_SUPERSEDED"), &id),
        "{body}"
    );
    let pool = db.pool().await;
    let (status, kind, text): (String, String, String) = sqlx::query_as(
        "SELECT status, jsonb_typeof(outcome), outcome #>> '{}' FROM carmy.late_arrivals \
         WHERE execution_id = $1",
    )
    .bind(id.as_str().unwrap())
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((status.as_str(), kind.as_str()), ("completed", "string"));
    assert!(
        text.contains(&format!(r#""data":{{"n":{number}}}"#)),
        "{text}"
    );
}
