//! Gateways behind a real PgBouncer in transaction mode (docs/semantics.md §14.3): with
//! `CARMY_DATABASE_SESSION_URL` two replicas serve orders, replays, conflicts, a wait for a
//! running duplicate and a cancel through it; without it the gateway refuses to start, naming
//! what breaks and the variable to set.

use carmy_test_support::replica::gateway_binary;
use carmy_test_support::{
    call, client, eventually_eq, post as post_once, spawn_post, tool_runs, Bouncer, Replica, TestDb,
};
use serde_json::{json, Value};
use sqlx::Row;
use std::time::Duration;

/// POSTs `call` to `replica`; a 503 (nothing ran: the same call may be sent again, §5) is sent
/// again for up to 30 s and each one printed. The suite's other tests share the PostgreSQL
/// server behind PgBouncer, which answers an error while it cannot open a server connection
/// (e.g. the server is at `max_connections`); an incompatibility with the pooler would stay 503
/// and fail the test with its body.
async fn post(http: &reqwest::Client, replica: &Replica, call: &Value) -> (u16, Value) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = post_once(http, replica, call).await;
        if status != 503 || std::time::Instant::now() >= deadline {
            return (status, body);
        }
        eprintln!("503 through PgBouncer, sent again: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// POSTs `call` to `replica` with `Prefer: wait=<seconds>`.
async fn post_waiting(replica: &Replica, call: &Value, seconds: u64) -> (u16, Value) {
    let response = client()
        .post(replica.url("/v1/executions"))
        .header("content-type", "application/json")
        .header("prefer", format!("wait={seconds}"))
        .body(call.to_string())
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_serve_through_a_transaction_pooler_with_a_session_url() {
    let db = TestDb::create().await;
    // Three server processes for both replicas' pools and hot paths.
    let bouncer = Bouncer::start_with("transaction", 3).await;
    let pooled = bouncer.url(&db.name);
    // Three server connections serve two replicas: on a loaded machine a statement may queue
    // in PgBouncer for seconds, which is not what this test is about (the default 5 s wait for
    // a connection would answer 503).
    let env = [
        ("DATABASE_URL", pooled.as_str()),
        ("CARMY_DATABASE_SESSION_URL", db.url.as_str()),
        ("CARMY_DB_ACQUIRE_TIMEOUT_MS", "60000"),
    ];
    let a = Replica::start("pgbouncer-a", &env);
    let b = Replica::start("pgbouncer-b", &env);
    let http = client();
    for replica in [&a, &b] {
        // Ready once its first readiness check went through the pooler (on a loaded machine the
        // three server connections may all be busy with the other replica's start for a while).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let ready = http.get(replica.url("/readyz")).send().await.unwrap();
            let status = ready.status().as_u16();
            if status == 200 {
                break;
            }
            let body = ready.text().await.unwrap_or_default();
            assert!(
                std::time::Instant::now() < deadline,
                "not ready through the pooler within 30 s: {status} {body}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // An order, replayed by both replicas.
    let order = call(
        "create_order",
        json!({"sku": "PGB", "quantity": 2}),
        "pgb-1",
    );
    let (status, first) = post(&http, &a, &order).await;
    assert_eq!(
        (status, first["status"].clone(), first["replayed"].clone()),
        (200, json!("completed"), json!(false)),
        "{first}"
    );
    for replica in [&a, &b, &a] {
        let (status, replay) = post(&http, replica, &order).await;
        assert_eq!(
            (status, replay["replayed"].clone(), replay["data"].clone()),
            (200, json!(true), first["data"].clone()),
            "{replay}"
        );
        assert_eq!(replay["execution_id"], first["execution_id"]);
    }
    // The same request id with other arguments: a conflict on both replicas.
    let changed = call(
        "create_order",
        json!({"sku": "OTHER", "quantity": 2}),
        "pgb-1",
    );
    for replica in [&a, &b] {
        let (status, conflict) = post(&http, replica, &changed).await;
        assert_eq!(
            (status, conflict["code"].clone()),
            (409, json!("IDEMPOTENCY_CONFLICT"))
        );
    }
    // Concurrent duplicates over both replicas: one order.
    let racing = call(
        "create_order",
        json!({"sku": "RACE", "quantity": 1}),
        "pgb-race",
    );
    let calls: Vec<_> = (0..20)
        .map(|n| spawn_post(&http, if n % 2 == 0 { &a } else { &b }, &racing))
        .collect();
    // One runs; the others replay it, or (arriving while it runs) are told it is running.
    let mut fresh = Vec::new();
    for running in calls {
        let (status, body) = running.await.unwrap();
        match (status, body["replayed"].as_bool(), body["code"].as_str()) {
            (200, Some(false), _) => fresh.push(body),
            (200, Some(true), _) => {}
            (409, _, Some("EXECUTION_UNCERTAIN")) => {
                assert_eq!(body["state"], "running", "{body}");
            }
            _ => panic!("{status} {body}"),
        }
    }
    assert_eq!(fresh.len(), 1);
    for replica in [&a, &b] {
        let (status, replay) = post(&http, replica, &racing).await;
        assert_eq!(
            (
                status,
                replay["replayed"].clone(),
                replay["execution_id"].clone()
            ),
            (200, json!(true), fresh[0]["execution_id"].clone())
        );
    }

    // A duplicate on B waits for A's sleep and gets its outcome (the outcome's notification
    // reaches B over its session URL's LISTEN).
    let sleep = call("sleep", json!({"ms": 1500}), "pgb-wait");
    let running = spawn_post(&http, &a, &sleep);
    eventually_eq(Duration::from_secs(10), "sleep started on A", 1, || {
        tool_runs(&http, &a, "sleep")
    })
    .await;
    let (status, waited) = post_waiting(&b, &sleep, 10).await;
    assert_eq!(
        (status, waited["replayed"].clone(), waited["data"].clone()),
        (200, json!(true), json!({"slept_ms": 1500})),
        "{waited}"
    );
    assert_eq!(running.await.unwrap().0, 200);

    // A cancel sent to B reaches the execution running on A.
    let long = call("sleep", json!({"ms": 30000}), "pgb-cancel");
    let running = spawn_post(&http, &a, &long);
    eventually_eq(
        Duration::from_secs(10),
        "the long sleep started on A",
        2,
        || tool_runs(&http, &a, "sleep"),
    )
    .await;
    let (status, uncertain) = post(&http, &b, &long).await;
    assert_eq!(
        (status, uncertain["state"].clone()),
        (409, json!("running"))
    );
    let execution_id = uncertain["execution_id"].as_str().unwrap().to_owned();
    let response = http
        .post(b.url(&format!("/v1/executions/{execution_id}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let (status, first) = running.await.unwrap();
    assert_eq!((status, first["status"].clone()), (200, json!("cancelled")));
    let (status, replay) = post(&http, &b, &long).await;
    assert_eq!(
        (status, replay["status"].clone(), replay["replayed"].clone()),
        (200, json!("cancelled"), json!(true))
    );

    // Exactly the orders and runs the answers say.
    let mut connection = db.connect().await;
    let orders: Vec<(String, i64)> =
        sqlx::query("SELECT sku, count(*) FROM carmy.example_orders GROUP BY sku ORDER BY sku")
            .fetch_all(&mut connection)
            .await
            .unwrap()
            .into_iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
    assert_eq!(orders, vec![("PGB".to_owned(), 1), ("RACE".to_owned(), 1)]);
    assert_eq!(
        tool_runs(&http, &a, "sleep").await + tool_runs(&http, &b, "sleep").await,
        2
    );
    // Each replica's lease and listener hold a session of their own on the direct URL; the
    // pools and hot paths of both (up to 40 client connections) shared PgBouncer's 3 servers.
    let sessions: Vec<(String, i64)> = sqlx::query(
        "SELECT split_part(application_name, ' ', 2), count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND application_name ~ '^carmy (lease|listen) ' \
         GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(&mut connection)
    .await
    .unwrap()
    .into_iter()
    .map(|row| (row.get(0), row.get(1)))
    .collect();
    assert_eq!(
        sessions,
        vec![("lease".to_owned(), 2), ("listen".to_owned(), 2)]
    );
    // Client backends only (autovacuum workers of this database are listed too), and a
    // connection closed a moment ago (the start's path checks, the migration) may still be
    // leaving: the count must come down to PgBouncer's 3 servers within 10 s and stay there.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let others: Vec<(String, String)> = sqlx::query(
            "SELECT application_name, coalesce(state, '') FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
             AND backend_type = 'client backend' \
             AND application_name !~ '^carmy (lease|listen) ' ORDER BY 1",
        )
        .fetch_all(&mut connection)
        .await
        .unwrap()
        .into_iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
        if others.len() <= 3 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} server connections besides the sessions after 10 s: {others:?}",
            others.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_session_url_a_transaction_pooler_is_refused_with_what_breaks() {
    let db = TestDb::create().await;
    let bouncer = Bouncer::start("transaction").await;
    let output = tokio::process::Command::new(gateway_binary())
        .env("DATABASE_URL", bouncer.url(&db.name))
        .env_remove("CARMY_DATABASE_SESSION_URL")
        .env("CARMY_LISTEN", "127.0.0.1:0")
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    for part in [
        "DATABASE_URL goes through a transaction-mode pooler",
        "the instance lease",
        "the LISTEN connection",
        "migrations",
        "set CARMY_DATABASE_SESSION_URL to a direct or session-mode URL",
    ] {
        assert!(stderr.contains(part), "{part:?} missing from: {stderr}");
    }
    // Nothing ran through it: not even the migrations.
    let mut connection = db.connect().await;
    let migrated: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('carmy.reservations')::text")
            .fetch_one(&mut connection)
            .await
            .unwrap();
    assert_eq!(migrated, None);
    // A session URL that goes through the same pooler is refused too.
    let output = tokio::process::Command::new(gateway_binary())
        .env("DATABASE_URL", bouncer.url(&db.name))
        .env("CARMY_DATABASE_SESSION_URL", bouncer.url(&db.name))
        .env("CARMY_LISTEN", "127.0.0.1:0")
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("CARMY_DATABASE_SESSION_URL goes through a transaction-mode pooler too"),
        "{stderr}"
    );
}
