//! The lease renewer has a connection of its own (docs/semantics.md §12.2): database-bound tools
//! that hold every pooled connection, blocked on a table lock for longer than the lease, leave a
//! healthy replica's executions `running`.

use carmy_test_support::{client, eventually, request, spawn_post_unanswered, Replica, TestDb};
use reqwest::Method;
use serde_json::json;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_blocked_database_tools_never_starve_the_lease() {
    let db = TestDb::create().await;
    let env = [
        ("DATABASE_URL", db.url.as_str()),
        ("CARMY_LEASE_TTL_MS", "1500"),
        ("CARMY_DB_POOL_SIZE", "2"),
    ];
    let owner = Replica::start("starved-owner", &env);
    let reader = Replica::start("starved-reader", &env);
    let http = client();
    let healthy = json!({"tool": "sleep", "arguments": {"ms": 600_000}, "request_id": "healthy"});
    spawn_post_unanswered(&http, &owner, &healthy);
    let path = "/v1/executions?request_id=healthy";
    let status = |body: &serde_json::Value| body["status"].as_str().unwrap_or("").to_owned();
    eventually(
        Duration::from_secs(10),
        "the healthy call is reserved",
        || async {
            let (_, body) = request(&http, &reader, Method::GET, path, None, None).await;
            (status(&body) == "running").then_some(()).ok_or(body)
        },
    )
    .await;

    // A transaction of the test holds the orders table; ten find_orders calls block on it and
    // hold (or wait for) both pooled connections of the owner.
    let mut locker = db.connect().await;
    sqlx::query("BEGIN").execute(&mut locker).await.unwrap();
    sqlx::query("LOCK TABLE carmy.example_orders IN ACCESS EXCLUSIVE MODE")
        .execute(&mut locker)
        .await
        .unwrap();
    for n in 0..10 {
        let find =
            json!({"tool": "find_orders", "arguments": {}, "request_id": format!("find-{n}")});
        spawn_post_unanswered(&http, &owner, &find);
    }
    db.until_lock_waiters(2, "find_orders blocked on the table lock")
        .await;

    // For three lease lengths, the owner's executions keep reading running.
    let until = Instant::now() + Duration::from_millis(4500);
    while Instant::now() < until {
        let (_, body) = request(&http, &reader, Method::GET, path, None, None).await;
        assert_eq!(status(&body), "running", "the owner is alive: {body}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    sqlx::query("ROLLBACK").execute(&mut locker).await.unwrap();
}
