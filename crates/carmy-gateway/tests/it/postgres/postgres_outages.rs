//! PostgreSQL outages against real gateway processes: the database down before a call, the
//! database restarted while tools run, and an exhausted pool.

use carmy_test_support::{
    call, client, eventually, eventually_eq, post, spawn_post, tool_runs, Cluster, Replica, TestDb,
};
use serde_json::{json, Value};
use std::time::Duration;

/// Texts that would reveal database internals in a response body.
const DATABASE_WORDS: [&str; 6] = ["sqlx", "postgres", "connection", "refused", "pool", "SQL"];

fn assert_no_database_text(body: &Value) {
    let text = body.to_string();
    for word in DATABASE_WORDS {
        assert!(!text.contains(word), "response leaks {word:?}: {text}");
    }
}

async fn status_of(http: &reqwest::Client, replica: &Replica, path: &str) -> u16 {
    http.get(replica.url(path))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn database_down_before_a_call_is_503_and_nothing_runs() {
    let cluster = Cluster::start();
    let url = cluster.url();
    let gateway = Replica::start(
        "outage-a",
        &[
            ("DATABASE_URL", &url),
            ("CARMY_DB_ACQUIRE_TIMEOUT_MS", "1000"),
        ],
    );
    let http = client();
    assert_eq!(status_of(&http, &gateway, "/readyz").await, 200);
    cluster.stop();

    let body = call("create_order", json!({"sku": "down"}), "down-1");
    let (status, problem) = post(&http, &gateway, &body).await;
    assert_eq!(
        (status, problem["code"].clone()),
        (503, json!("STORE_UNAVAILABLE"))
    );
    assert_no_database_text(&problem);
    assert_eq!(tool_runs(&http, &gateway, "create_order").await, 0);
    assert_eq!(
        status_of(&http, &gateway, "/healthz").await,
        200,
        "the gateway stays up"
    );
    let response = http.get(gateway.url("/readyz")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 503);
    let readiness: Value = response.json().await.unwrap();
    assert_eq!(readiness["code"], "NOT_READY");
    assert_no_database_text(&readiness);

    cluster.start_again();
    eventually_eq(Duration::from_secs(20), "ready again", 200, || {
        status_of(&http, &gateway, "/readyz")
    })
    .await;
    let (status, ran) = post(&http, &gateway, &body).await;
    assert_eq!(
        (status, ran["replayed"].clone()),
        (200, json!(false)),
        "{ran}"
    );
    assert_eq!(tool_runs(&http, &gateway, "create_order").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn database_restarted_while_tools_run_records_every_outcome() {
    let cluster = Cluster::start();
    let url = cluster.url();
    let gateway = Replica::start(
        "outage-b",
        &[
            ("DATABASE_URL", &url),
            ("CARMY_DB_ACQUIRE_TIMEOUT_MS", "1000"),
        ],
    );
    let http = client();
    let calls: Vec<Value> = (0..3)
        .map(|i| call("sleep", json!({"ms": 1500 + i}), &format!("restart-{i}")))
        .collect();
    let running: Vec<_> = calls
        .iter()
        .map(|body| spawn_post(&http, &gateway, body))
        .collect();
    eventually_eq(
        Duration::from_secs(10),
        "all three sleeps started",
        3,
        || tool_runs(&http, &gateway, "sleep"),
    )
    .await;
    cluster.stop();
    // The tools finish while the database is down: their callers cannot get a recorded outcome.
    let mut uncertain = Vec::new();
    for task in running {
        let (status, answer) = task.await.unwrap();
        assert_eq!(
            (status, answer["code"].clone()),
            (503, json!("EXECUTION_UNCERTAIN")),
            "{answer}"
        );
        assert_no_database_text(&answer);
        uncertain.push(answer["execution_id"].clone());
    }
    cluster.start_again();
    // The gateway keeps retrying the recording; a later retry replays each outcome.
    for (body, execution_id) in calls.iter().zip(&uncertain) {
        let replay = eventually(Duration::from_secs(30), "the outcome recorded", || async {
            let (status, answer) = post(&http, &gateway, body).await;
            if status == 200 {
                Ok(answer)
            } else {
                Err((status, answer))
            }
        })
        .await;
        assert_eq!(replay["replayed"], true, "never recorded: {body}");
        assert_eq!(replay["status"], "completed");
        assert_eq!(&replay["execution_id"], execution_id);
    }
    assert_eq!(
        tool_runs(&http, &gateway, "sleep").await,
        3,
        "nothing ran twice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exhausted_pool_answers_503_after_a_bounded_wait() {
    let db = TestDb::create().await;
    let gateway = Replica::start(
        "pool-1",
        &[
            ("DATABASE_URL", &db.url),
            ("CARMY_DB_POOL_SIZE", "1"),
            ("CARMY_DB_ACQUIRE_TIMEOUT_MS", "500"),
        ],
    );
    let http = client();
    // Warm the store (instance lease) before taking the pool's only connection away.
    let (status, _) = post(&http, &gateway, &call("echo", json!({}), "warm")).await;
    assert_eq!(status, 200);

    // Lock the reservations table: the holder's reserve then waits on the lock while it holds
    // the store's only hot-path connection.
    let mut locker = db.connect().await;
    sqlx::raw_sql("BEGIN; LOCK TABLE carmy.reservations IN ACCESS EXCLUSIVE MODE")
        .execute(&mut locker)
        .await
        .unwrap();
    let holder = spawn_post(&http, &gateway, &call("echo", json!({}), "holder"));
    db.until_lock_waiters(1, "the holder waiting on the lock")
        .await;

    let bounded = client();
    let answer = bounded
        .post(gateway.url("/v1/executions"))
        .header("content-type", "application/json")
        .timeout(Duration::from_secs(20))
        .body(call("echo", json!({}), "starved").to_string())
        .send()
        .await
        .expect("an exhausted pool answers instead of hanging");
    assert_eq!(answer.status().as_u16(), 503);
    let problem: Value = answer.json().await.unwrap();
    assert_eq!(problem["code"], "STORE_UNAVAILABLE");
    assert_no_database_text(&problem);

    sqlx::raw_sql("COMMIT").execute(&mut locker).await.unwrap();
    let (status, held) = holder.await.unwrap();
    assert_eq!(
        (status, held["status"].clone()),
        (200, json!("completed")),
        "{held}"
    );
    let (status, retried) = post(&http, &gateway, &call("echo", json!({}), "starved")).await;
    assert_eq!(
        (status, retried["replayed"].clone()),
        (200, json!(false)),
        "the 503 reserved nothing"
    );
    drop(gateway);
}
