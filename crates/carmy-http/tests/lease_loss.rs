//! Lease loss in the engine (docs/semantics.md §12.2), without PostgreSQL: a store that reports
//! its own lease (`IdempotencyStore::lease_state`) turns it lapsed while tools run; the tool of
//! the reserved execution is stopped and recorded `cancelled` with the lease-loss message, a
//! call without a request id keeps running, a reserved execution started while the lease reads
//! lapsed is stopped at once, and after a renewal calls run normally again.

use axum::body::Body;
use axum::http::Request;
use carmy::memory::InMemoryIdempotencyStore;
use carmy::store::{IdempotencyStore, LeaseState};
use carmy::tool::FnTool;
use carmy_test_support::eventually;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tower::ServiceExt;

const LEASE_LOSS: &str = "the execution was stopped because its replica lost its lease (cut off from the database); its effects are unknown";

/// The in-memory store with a lease the test turns lapsed and held.
struct Leased {
    inner: InMemoryIdempotencyStore,
    lease: watch::Sender<LeaseState>,
}

impl IdempotencyStore for Leased {
    carmy::forward_store!(inner =>
        reserve, complete, release, lookup, find_execution, check_ready, resolve_execution,
        release_execution, list_executions, audit_trail, record_late_arrival, take_over,
        wait_for_outcome, prune_expired, request_cancel, cancel_requests, record_changes,
        drop_cached, shutdown,
    );

    fn lease_state(&self) -> Option<watch::Receiver<LeaseState>> {
        Some(self.lease.subscribe())
    }
}

/// POSTs a call of `hold` (a tool that never finishes by itself) on a task of its own;
/// `request_id` `None` makes a call without replay protection.
fn spawn_hold(app: &carmy_http::App, request_id: Option<&str>) -> tokio::task::JoinHandle<Value> {
    let router = app.router();
    let mut body = json!({"tool": "hold", "arguments": {}});
    if let Some(request_id) = request_id {
        body["request_id"] = json!(request_id);
    }
    tokio::spawn(async move {
        let request = Request::post("/v1/executions")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = router.oneshot(request).await.unwrap();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    })
}

/// Waits until `carmy_executions_running{tool="hold"}` reads `expected`.
async fn until_holding(app: &carmy_http::App, expected: u32) {
    eventually(Duration::from_secs(10), "running hold calls", || async {
        let request = Request::get("/metrics").body(Body::empty()).unwrap();
        let response = app.router().oneshot(request).await.unwrap();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        let running = text
            .lines()
            .find_map(|line| line.strip_prefix("carmy_executions_running{tool=\"hold\"} "))
            .map(|value| value.trim().parse::<f64>().unwrap());
        (running == Some(f64::from(expected)))
            .then_some(())
            .ok_or(running)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_lease_stops_reserved_tools_until_it_is_held_again() {
    let (lease, _) = watch::channel(LeaseState::Held);
    let store = Arc::new(Leased {
        inner: InMemoryIdempotencyStore::default(),
        lease,
    });
    let hold = FnTool::new("hold", json!({"type": "object"}), |_, _| async {
        std::future::pending::<()>().await;
        Ok(json!("never"))
    });
    let app = carmy_http::app()
        .idempotency_store(Arc::clone(&store) as Arc<dyn IdempotencyStore>)
        .tool(hold)
        .build()
        .unwrap();
    app.start_background();

    let reserved = spawn_hold(&app, Some("reserved"));
    let unprotected = spawn_hold(&app, None);
    until_holding(&app, 2).await;
    store.lease.send_replace(LeaseState::Lapsed);
    let answer = reserved.await.unwrap();
    assert_eq!(
        (
            &answer["status"],
            &answer["error"]["code"],
            &answer["error"]["message"]
        ),
        (&json!("cancelled"), &json!("CANCELLED"), &json!(LEASE_LOSS)),
        "{answer}"
    );
    assert_eq!(answer["error"]["effect"], "unknown", "{answer}");
    // The call without a request id holds nothing in the store: it keeps running.
    until_holding(&app, 1).await;
    assert!(!unprotected.is_finished());

    // Started while the lease reads lapsed: stopped at once.
    let late = spawn_hold(&app, Some("while-lapsed")).await.unwrap();
    assert_eq!(
        (&late["status"], &late["error"]["message"]),
        (&json!("cancelled"), &json!(LEASE_LOSS)),
        "{late}"
    );

    // Held again: a cancel request is reported as such, not as a lease loss.
    store.lease.send_replace(LeaseState::Held);
    let renewed = spawn_hold(&app, Some("renewed"));
    until_holding(&app, 2).await;
    let listed = app
        .router()
        .oneshot(
            Request::get("/v1/executions?request_id=renewed")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let bytes = listed.into_body().collect().await.unwrap().to_bytes();
    let record: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(record["status"], "running", "{record}");
    let cancel = Request::post(format!(
        "/v1/executions/{}/cancel",
        record["execution_id"].as_str().unwrap()
    ))
    .body(Body::empty())
    .unwrap();
    app.router().oneshot(cancel).await.unwrap();
    let answer = renewed.await.unwrap();
    assert_eq!(
        (&answer["status"], &answer["error"]["message"]),
        (
            &json!("cancelled"),
            &json!("the execution was cancelled on request; its effects are unknown")
        ),
        "{answer}"
    );
    unprotected.abort();
}
