//! Graceful shutdown (SIGTERM: drain, then record `cancelled`) and cancellation across replicas,
//! with real gateway processes on one PostgreSQL database.

use carmy_test_support::{
    call, client, eventually_eq, post, spawn_post, tool_runs, Replica, TestDb,
};
use serde_json::{json, Value};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_drains_then_records_cancelled() {
    let db = TestDb::migrated().await;
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
    eventually_eq(Duration::from_secs(10), "both sleeps started", 2, || {
        tool_runs(&http, &a, "sleep")
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_reaches_the_replica_that_runs_the_execution() {
    let db = TestDb::migrated().await;
    let env = [("DATABASE_URL", db.url.as_str())];
    let a = Replica::start("cancel-a", &env);
    let b = Replica::start("cancel-b", &env);
    let http = client();
    let body = call("sleep", json!({"ms": 30000}), "cancel-me");
    let running = spawn_post(&http, &a, &body);
    eventually_eq(Duration::from_secs(10), "sleep started on A", 1, || {
        tool_runs(&http, &a, "sleep")
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

    // A client stuck in its headers does not keep the process alive after SIGTERM. The
    // connection is first served once (so the gateway accepted it), then left in the middle of
    // the headers of its next request.
    let mut stuck = std::net::TcpStream::connect(&address).unwrap();
    stuck
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stuck
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    let served = read_one_response(&mut stuck);
    assert!(served.starts_with("HTTP/1.1 200"), "{served}");
    stuck
        .write_all(b"POST /v1/executions HTTP/1.1\r\nAuthor")
        .unwrap();
    // Still open when shutdown begins: nothing to read, and no end of stream.
    stuck.set_nonblocking(true).unwrap();
    let peeked = stuck.peek(&mut [0u8; 1]);
    assert!(
        matches!(&peeked, Err(error) if error.kind() == std::io::ErrorKind::WouldBlock),
        "the stuck connection is open and idle when SIGTERM is sent: {peeked:?}"
    );
    stuck.set_nonblocking(false).unwrap();
    let started = std::time::Instant::now();
    assert!(
        gateway.terminate(),
        "exits (cleanly) despite the stuck connection"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "shutdown took {:?}",
        started.elapsed()
    );
    // The exit closed the stuck connection (end of stream or reset, never a read timeout).
    let mut rest = Vec::new();
    let closed = std::io::Read::read_to_end(&mut stuck, &mut rest);
    assert!(
        !matches!(&closed, Err(error) if matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
        "{closed:?}"
    );
}

/// Reads one HTTP/1.1 response with a `content-length` body from `stream`; returns its text.
fn read_one_response(stream: &mut std::net::TcpStream) -> String {
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&received).into_owned();
        if let Some(end_of_head) = text.find("\r\n\r\n") {
            let length = text[..end_of_head]
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().unwrap())
                })
                .expect("a content-length");
            if received.len() >= end_of_head + 4 + length {
                return text;
            }
        }
        // Bounded by the stream's read timeout: a silent server fails the test.
        let read = std::io::Read::read(stream, &mut chunk).expect("the response");
        assert!(read > 0, "closed before a whole response: {text}");
        received.extend_from_slice(&chunk[..read]);
    }
}
