//! The default lease (docs/semantics.md §12.2): a replica killed with SIGKILL while it runs a
//! call has that call read `interrupted` on another replica within the lease (9 s after the
//! kill at most: its last renewal was sent before the kill, and its expiry is that renewal
//! plus 9 s), `running` until then, and nothing else; over MCP the model then reads the
//! interrupted text.

use crate::mcp::mcp_client::{call, connect, structured};
use carmy_test_support::{client, eventually, request, spawn_post_unanswered, Replica, TestDb};
use reqwest::Method;
use serde_json::json;
use std::time::{Duration, Instant};

/// The default lease, as `carmy_postgres::DEFAULT_LEASE_TTL`.
const LEASE: Duration = Duration::from_secs(9);

/// What polling may add to the lease on a loaded machine: one request to the reader.
const POLL_SLACK: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_replicas_call_reads_interrupted_within_the_default_lease() {
    assert_eq!(carmy_postgres::DEFAULT_LEASE_TTL, LEASE);
    let db = TestDb::migrated().await;
    // No CARMY_LEASE_TTL_MS: the default.
    let env = [("DATABASE_URL", db.url.as_str())];
    let mut owner = Replica::start("default-lease-owner", &env);
    let reader = Replica::start("default-lease-reader", &env);
    let http = client();
    let body = json!({"tool": "sleep", "arguments": {"ms": 600_000}, "request_id": "lease-k9"});
    spawn_post_unanswered(&http, &owner, &body);
    let path = "/v1/executions?request_id=lease-k9";
    eventually(Duration::from_secs(10), "the call runs", || async {
        let (_, body) = request(&http, &reader, Method::GET, path, None, None).await;
        (body["status"] == "running").then_some(()).ok_or(body)
    })
    .await;
    owner.kill9();
    let killed = Instant::now();
    let (_, at_once) = request(&http, &reader, Method::GET, path, None, None).await;
    assert_eq!(
        at_once["status"], "running",
        "the lease still holds: {at_once}"
    );
    // Every state read after the kill, in order, each once.
    let seen = std::sync::Mutex::new(vec!["running".to_owned()]);
    eventually(LEASE + POLL_SLACK, "the call reads interrupted", || async {
        let (_, body) = request(&http, &reader, Method::GET, path, None, None).await;
        let status = body["status"].as_str().unwrap_or_default().to_owned();
        let mut seen = seen.lock().unwrap();
        if seen.last() != Some(&status) {
            seen.push(status.clone());
        }
        (status == "interrupted").then_some(()).ok_or(body)
    })
    .await;
    let took = killed.elapsed();
    assert_eq!(
        *seen.lock().unwrap(),
        ["running", "interrupted"],
        "no other state in between"
    );
    assert!(took <= LEASE + POLL_SLACK, "interrupted after {took:?}");
    // The model reads it as such over MCP on the other replica.
    let model = connect(&reader.url("/mcp"), None).await;
    let answer = model
        .call_tool(call("sleep", json!({"ms": 600_000}), "lease-k9"))
        .await
        .unwrap();
    assert_eq!(structured(&answer)["code"], "EXECUTION_UNCERTAIN");
    assert_eq!(structured(&answer)["state"], "interrupted");
}
