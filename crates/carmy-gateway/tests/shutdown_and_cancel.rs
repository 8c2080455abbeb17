//! Graceful shutdown (SIGTERM: drain, then record `cancelled`) and cancellation across replicas,
//! with real gateway processes on one PostgreSQL database.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::{call, client, eventually, post, spawn_post, tool_runs, Replica, TestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_drains_then_records_cancelled() {
    let db = TestDb::create().await;
    let env = [
        ("DATABASE_URL", db.url.as_str()),
        ("CARMY_DRAIN_MS", "1500"),
    ];
    let mut a = Replica::start("drain-a", &env);
    let http = client();
    let long = call("sleep", json!({"ms": 30000}), "drain-long");
    let short = call("sleep", json!({"ms": 500}), "drain-short");
    let long_call = spawn_post(&http, &a, &long);
    let short_call = spawn_post(&http, &a, &short);
    eventually(Duration::from_secs(10), "both sleeps started", || async {
        tool_runs(&http, &a, "sleep").await == 2
    })
    .await;

    assert!(a.terminate(), "the gateway exits cleanly after SIGTERM");
    let (status, short_answer) = short_call.await.unwrap();
    assert_eq!(
        (status, short_answer["status"].clone()),
        (200, json!("completed")),
        "finished within the drain period"
    );
    let (status, long_answer) = long_call.await.unwrap();
    assert_eq!(
        (status, long_answer["status"].clone()),
        (200, json!("cancelled")),
        "{long_answer}"
    );
    assert_eq!(long_answer["error"]["code"], "CANCELLED");

    // Only A has registered so far: its lease ended at shutdown instead of lapsing later.
    let lease_ended: bool =
        sqlx::query_scalar("SELECT bool_and(lease_expires_at <= now()) FROM carmy.instances")
            .fetch_one(&mut db.connect().await)
            .await
            .unwrap();
    assert!(lease_ended, "the stopped process ended its lease");

    let b = Replica::start("drain-b", &env);
    for (body, answer) in [(&long, &long_answer), (&short, &short_answer)] {
        let (status, replay) = post(&http, &b, body).await;
        assert_eq!(status, 200);
        assert_eq!(replay["replayed"], true);
        assert_eq!(replay["status"], answer["status"]);
        assert_eq!(replay["execution_id"], answer["execution_id"]);
    }
    assert_eq!(tool_runs(&http, &b, "sleep").await, 0);
    let running: i64 =
        sqlx::query_scalar("SELECT count(*) FROM carmy.reservations WHERE state = 'running'")
            .fetch_one(&mut db.connect().await)
            .await
            .unwrap();
    assert_eq!(running, 0, "nothing is left running after a clean shutdown");
    drop(b);
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_reaches_the_replica_that_runs_the_execution() {
    let db = TestDb::create().await;
    let env = [("DATABASE_URL", db.url.as_str())];
    let a = Replica::start("cancel-a", &env);
    let b = Replica::start("cancel-b", &env);
    let http = client();
    let body = call("sleep", json!({"ms": 30000}), "cancel-me");
    let running = spawn_post(&http, &a, &body);
    eventually(Duration::from_secs(10), "sleep started on A", || async {
        tool_runs(&http, &a, "sleep").await == 1
    })
    .await;
    let (status, uncertain) = post(&http, &b, &body).await;
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
    let cancelled: Value = response.json().await.unwrap();
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["execution_id"], execution_id.as_str());

    let (status, first) = running.await.unwrap();
    assert_eq!((status, first["status"].clone()), (200, json!("cancelled")));
    for replica in [&a, &b] {
        let (status, replay) = post(&http, replica, &body).await;
        assert_eq!(
            (status, replay["status"].clone(), replay["replayed"].clone()),
            (200, json!("cancelled"), json!(true))
        );
    }
    let response = http
        .post(a.url(&format!("/v1/executions/{execution_id}/cancel")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 409);
    let finished: Value = response.json().await.unwrap();
    assert_eq!(finished["code"], "EXECUTION_FINISHED");
    assert_eq!(
        tool_runs(&http, &a, "sleep").await + tool_runs(&http, &b, "sleep").await,
        1
    );
    drop((a, b));
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stalled_clients_neither_hang_requests_nor_shutdown() {
    use std::io::Write;
    let mut gateway = Replica::start(
        "stalled",
        &[("CARMY_BODY_TIMEOUT_MS", "300"), ("CARMY_DRAIN_MS", "200")],
    );
    let address = gateway.base.trim_start_matches("http://").to_owned();

    // A body that never completes gets 408 once the body timeout passes.
    let mut slow = std::net::TcpStream::connect(&address).unwrap();
    slow.write_all(b"POST /v1/executions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"tool\"")
        .unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut answer = vec![0u8; 4096];
    let read = std::io::Read::read(&mut slow, &mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]).to_string();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert!(answer.contains("REQUEST_TIMEOUT"), "{answer}");

    // A client stuck in its headers does not keep the process alive after SIGTERM.
    let mut stuck = std::net::TcpStream::connect(&address).unwrap();
    stuck
        .write_all(b"POST /v1/executions HTTP/1.1\r\nAuthor")
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        gateway.terminate(),
        "exits (cleanly) despite the stuck connection"
    );
    drop(stuck);
}
