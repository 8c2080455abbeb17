//! Replay caches follow a DBA's SQL (docs/semantics.md §8.4, §12.3): two real `carmy-gateway`
//! processes with the replay cache on and a 10 minute time to live both replay a finished
//! execution (so both cached it); then a DBA deletes or rewrites its row with SQL, and within
//! seconds (not the time to live) both replicas answer from the row: the deleted one runs as
//! new once (a new execution, a second order) and is replayed as that by the other replica;
//! the rewritten one replays its new outcome on both.

use carmy_test_support::{call, client, eventually, post, Replica, TestDb};
use serde_json::{json, Value};
use std::time::Duration;

/// Far below the cache's time to live: only the announcement can make a replica see the change.
const DEADLINE: Duration = Duration::from_secs(10);

fn two_cached_replicas(db: &TestDb) -> (Replica, Replica) {
    let env = [
        ("DATABASE_URL", db.url.as_str()),
        ("CARMY_REPLAY_CACHE_ENTRIES", "1000"),
        ("CARMY_REPLAY_CACHE_TTL_MS", "600000"),
    ];
    (
        Replica::start("cached-a", &env),
        Replica::start("cached-b", &env),
    )
}

/// Runs `create_order` for `request_id` on `a`, then replays it on `a` and `b`: both cache the
/// record. Returns the first answer.
async fn finished_and_cached(
    http: &reqwest::Client,
    a: &Replica,
    b: &Replica,
    request_id: &str,
) -> Value {
    let body = call("create_order", json!({"sku": request_id}), request_id);
    let (status, first) = post(http, a, &body).await;
    assert_eq!(status, 200, "{first}");
    for replica in [a, b] {
        let (status, replay) = post(http, replica, &body).await;
        assert_eq!(
            (status, &replay["execution_id"], &replay["replayed"]),
            (200, &first["execution_id"], &json!(true)),
            "{replay}"
        );
    }
    first
}

async fn orders(db: &TestDb, sku: &str) -> Vec<i64> {
    let mut connection = db.connect().await;
    sqlx::query_scalar("SELECT order_id FROM carmy.example_orders WHERE sku = $1 ORDER BY 1")
        .bind(sku)
        .fetch_all(&mut connection)
        .await
        .unwrap()
}

/// Posts `body` to `replica` until `accept` takes the answer (within [`DEADLINE`]).
async fn until_answer(
    http: &reqwest::Client,
    replica: &Replica,
    body: &Value,
    what: &str,
    accept: impl Fn(&Value) -> bool,
) -> Value {
    eventually(DEADLINE, what, || async {
        let (status, answer) = post(http, replica, body).await;
        if status == 200 && accept(&answer) {
            Ok(answer)
        } else {
            Err((status, answer))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_row_deleted_by_sql_runs_as_new_on_every_replica_that_cached_it() {
    let db = TestDb::migrated().await;
    let (a, b) = two_cached_replicas(&db);
    let http = client();
    let first = finished_and_cached(&http, &a, &b, "deleted").await;
    let old = first["execution_id"].clone();
    let mut connection = db.connect().await;
    // As docs/operations.md tells a DBA: the edit and its announcement in one transaction.
    let announced: Vec<String> = sqlx::query_scalar(
        "WITH gone AS ( \
             DELETE FROM carmy.reservations WHERE request_id = 'deleted' \
             RETURNING principal, session_id, request_id \
         ) \
         SELECT carmy.announce_change(principal, session_id, request_id)::text FROM gone",
    )
    .fetch_all(&mut connection)
    .await
    .unwrap();
    assert_eq!(announced.len(), 1);

    let body = call("create_order", json!({"sku": "deleted"}), "deleted");
    let ran = until_answer(
        &http,
        &a,
        &body,
        "replica a runs the call as new",
        |answer| answer["execution_id"] != old,
    )
    .await;
    assert_eq!(ran["replayed"], json!(false), "{ran}");
    assert_eq!(ran["data"]["order_id"], json!(2), "{ran}");
    let replayed = until_answer(
        &http,
        &b,
        &body,
        "replica b answers the new execution",
        |answer| answer["execution_id"] != old,
    )
    .await;
    assert_eq!(
        (
            &replayed["execution_id"],
            &replayed["replayed"],
            &replayed["data"]
        ),
        (&ran["execution_id"], &json!(true), &ran["data"]),
        "{replayed}"
    );
    assert_eq!(orders(&db, "deleted").await, vec![1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_row_rewritten_by_sql_replays_its_new_outcome_on_every_replica() {
    let db = TestDb::migrated().await;
    let (a, b) = two_cached_replicas(&db);
    let http = client();
    let first = finished_and_cached(&http, &a, &b, "rewritten").await;
    let edited = json!({"order_id": 1, "sku": "rewritten", "quantity": 1, "edited": "by a DBA"});
    let mut connection = db.connect().await;
    let updated: (String, String) = sqlx::query_as(
        "UPDATE carmy.reservations \
         SET outcome = jsonb_set(outcome::jsonb, '{data}', $1::jsonb)::text \
         WHERE request_id = 'rewritten' RETURNING principal, session_id",
    )
    .bind(edited.to_string())
    .fetch_one(&mut connection)
    .await
    .unwrap();
    sqlx::query("SELECT carmy.announce_change($1, $2, 'rewritten')")
        .bind(&updated.0)
        .bind(&updated.1)
        .execute(&mut connection)
        .await
        .unwrap();

    let body = call("create_order", json!({"sku": "rewritten"}), "rewritten");
    for (name, replica) in [("a", &a), ("b", &b)] {
        let replay = until_answer(
            &http,
            replica,
            &body,
            &format!("replica {name} replays the new outcome"),
            |answer| answer["data"] == edited,
        )
        .await;
        assert_eq!(
            (&replay["execution_id"], &replay["replayed"]),
            (&first["execution_id"], &json!(true)),
            "{replay}"
        );
    }
    assert_eq!(orders(&db, "rewritten").await, vec![1]);
}
