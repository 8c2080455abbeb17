//! Late arrivals keep the real outcome (docs/semantics.md §12.2): a
//! replica frozen with SIGSTOP past its lease while its `create_order` INSERT commits in the
//! database, its execution released meanwhile on another replica, then continued: the tool's
//! order id, not `cancelled`, is what lands in `carmy.late_arrivals`.

use super::recovery_replicas::{env, reserved, signal};
use carmy_test_support::{client, eventually, request, spawn_post, Replica, TestDb};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;

/// Makes every INSERT into `carmy.example_orders` take `seconds` inside the database.
async fn slow_inserts(db: &TestDb, seconds: u32) {
    let mut connection = db.connect().await;
    for statement in [
        format!(
            "CREATE FUNCTION public.slow_order() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN PERFORM pg_sleep({seconds}); RETURN NEW; END $$"
        ),
        "CREATE TRIGGER slow_order BEFORE INSERT ON carmy.example_orders \
         FOR EACH ROW EXECUTE FUNCTION public.slow_order()"
            .to_owned(),
    ] {
        sqlx::query(&statement)
            .execute(&mut connection)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_replica_whose_order_commits_leaves_the_order_id_as_its_late_arrival() {
    let db = TestDb::migrated().await;
    let a = Replica::start("order-frozen-a", &env(&db));
    let b = Replica::start("order-frozen-b", &env(&db));
    slow_inserts(&db, 3).await;
    let http = client();
    let call = json!({"tool": "create_order", "arguments": {"sku": "KB-01"},
                      "request_id": "frozen-order"});
    let first = spawn_post(&http, &a, &call);
    let id = reserved(&b, "frozen-order").await;
    let pool = db.pool().await;
    eventually(
        Duration::from_secs(10),
        "the INSERT is inside the database",
        || async {
            let sleeping: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            (sleeping == 1).then_some(()).ok_or(sleeping)
        },
    )
    .await;
    signal(&a, "STOP");
    let path = "/v1/executions?request_id=frozen-order";
    eventually(
        Duration::from_secs(10),
        "the frozen owner reads interrupted",
        || async {
            let (_, body) = request(&http, &b, Method::GET, path, None, None).await;
            (body["status"] == "interrupted").then_some(()).ok_or(body)
        },
    )
    .await;
    let release = json!({"note": "owner frozen; no order found yet"});
    let route = format!("/v1/executions/{}/release", id.as_str().unwrap());
    let (status, body) = request(&http, &b, Method::POST, &route, Some("ko"), Some(&release)).await;
    assert_eq!(status, 200, "{body}");
    let order_id: i64 = eventually(
        Duration::from_secs(10),
        "the order commits while its replica is frozen",
        || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT order_id FROM carmy.example_orders WHERE sku = 'KB-01'",
            )
            .fetch_optional(&pool)
            .await
            .unwrap()
            .ok_or(())
        },
    )
    .await;
    signal(&a, "CONT");

    let (status, body) = first.await.unwrap();
    assert_eq!(
        (status, &body["code"], &body["execution_id"]),
        (409, &json!("EXECUTION_SUPERSEDED"), &id),
        "{body}"
    );
    let (status, outcome): (String, String) = sqlx::query_as(
        "SELECT status, outcome::text FROM carmy.late_arrivals WHERE execution_id = $1",
    )
    .bind(id.as_str().unwrap())
    .fetch_one(&pool)
    .await
    .unwrap();
    let outcome: Value = serde_json::from_str(&outcome).unwrap();
    assert_eq!(
        (status.as_str(), &outcome["data"]),
        ("completed", &json!({"order_id": order_id})),
        "{outcome}"
    );
}
