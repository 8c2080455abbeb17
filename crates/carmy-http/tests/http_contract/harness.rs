//! The harness of the contract tests: an application on an in-memory store with switches that
//! make it fail or report an interrupted owner, and requests through its router.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use carmy::memory::InMemoryIdempotencyStore;
use carmy::outcome::RecordedResult;
use carmy::store::{
    Claim, ExecutionIntent, Existing, IdempotencyKey, IdempotencyStore, InFlightState, Reservation,
    StoreError, StoreFuture,
};
use carmy::tool::{FnTool, ToolError};
use carmy::ExecutionId;
use carmy_test_support::eventually_eq;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// The in-memory store with switches that make it fail or report an interrupted owner.
#[derive(Default)]
pub(crate) struct FaultyStore {
    pub(crate) inner: InMemoryIdempotencyStore,
    pub(crate) reserve_fails: AtomicBool,
    /// Reserve in the inner store, then answer as if the connection broke before the answer.
    pub(crate) reserve_indeterminate: AtomicBool,
    /// Reserve in the inner store, then hold the answer back for a while (an answer in transit).
    pub(crate) reserve_answer_delayed: AtomicBool,
    pub(crate) complete_failures_left: AtomicUsize,
    pub(crate) release_failures_left: AtomicUsize,
    pub(crate) report_interrupted: AtomicBool,
    pub(crate) shutdowns: AtomicUsize,
}

impl IdempotencyStore for FaultyStore {
    fn reserve<'a>(
        &'a self,
        claim: Claim<'a>,
        intent: &'a ExecutionIntent,
    ) -> StoreFuture<'a, Reservation> {
        Box::pin(async move {
            if self.reserve_fails.load(Ordering::SeqCst) {
                return Err(StoreError::Unavailable("switched off".into()));
            }
            let answer = self.inner.reserve(claim, intent).await?;
            if self.reserve_indeterminate.load(Ordering::SeqCst) {
                return Err(StoreError::Indeterminate("connection lost".into()));
            }
            if self.reserve_answer_delayed.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Ok(match answer {
                Reservation::Existing(Existing::Uncertain { execution_id, .. })
                    if self.report_interrupted.load(Ordering::SeqCst) =>
                {
                    Reservation::Existing(Existing::Uncertain {
                        execution_id,
                        state: InFlightState::Interrupted,
                    })
                }
                other => other,
            })
        })
    }

    fn complete<'a>(&'a self, claim: Claim<'a>, result: &'a RecordedResult) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let left = self.complete_failures_left.load(Ordering::SeqCst);
            if left > 0 {
                self.complete_failures_left
                    .store(left - 1, Ordering::SeqCst);
                return Err(StoreError::Unavailable("switched off".into()));
            }
            self.inner.complete(claim, result).await
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let left = self.release_failures_left.load(Ordering::SeqCst);
            if left > 0 {
                self.release_failures_left.store(left - 1, Ordering::SeqCst);
                return Err(StoreError::Unavailable("switched off".into()));
            }
            self.inner.release(key, execution_id).await
        })
    }

    carmy::forward_store!(inner =>
        lookup, find_execution, check_ready, resolve_execution, release_execution,
        list_executions, audit_trail, record_late_arrival, take_over, wait_for_outcome,
        prune_expired, lease_state, request_cancel, cancel_requests, record_changes, drop_cached,
    );

    fn shutdown(&self) -> StoreFuture<'_, ()> {
        self.shutdowns.fetch_add(1, Ordering::SeqCst);
        self.inner.shutdown()
    }
}

/// An application on a [`FaultyStore`] with the tools the rows call: `echo`, `wait` (until
/// `release` is notified), `typed`, `fail` and `reserved` (a value that would not read back).
pub(crate) struct Harness {
    pub(crate) router: Router,
    pub(crate) store: Arc<FaultyStore>,
    pub(crate) app: carmy_http::App,
    pub(crate) release: Arc<tokio::sync::Notify>,
}

/// A [`Harness`] whose in-memory store holds `capacity` identities.
pub(crate) fn harness(capacity: usize) -> Harness {
    let store = Arc::new(FaultyStore {
        inner: InMemoryIdempotencyStore::new(capacity),
        ..FaultyStore::default()
    });
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = Arc::clone(&release);
    let app = carmy_http::app()
        .idempotency_store(store.clone())
        .tool(FnTool::new(
            "echo",
            json!({"type": "object"}),
            |_c, a| async move { Ok(a) },
        ))
        .tool(FnTool::new(
            "wait",
            json!({"type": "object"}),
            move |_c, _a| {
                let gate = Arc::clone(&gate);
                async move {
                    gate.notified().await;
                    Ok(json!("released"))
                }
            },
        ))
        .tool(FnTool::new(
            "typed",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
            |_c, a| async move { Ok(a) },
        ))
        .tool(FnTool::new(
            "fail",
            json!({"type": "object"}),
            |_c, _a| async move { Err(ToolError::new("TOOL_ERROR", "boom")) },
        ))
        .tool(FnTool::new(
            "reserved",
            json!({"type": "object"}),
            |_c, _a| async move {
                // A value serde_json would read back as the parsed text `[1]`.
                Ok(json!({"$serde_json::private::RawValue": "[1]"}))
            },
        ))
        .build()
        .unwrap();
    Harness {
        router: app.router(),
        store,
        app,
        release,
    }
}

/// `POST /v1/executions` with `body`: the status and the JSON body, whose content type and
/// problem members are checked.
pub(crate) async fn post(router: &Router, body: Value) -> (StatusCode, Value) {
    let request = Request::post("/v1/executions")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    if status.is_success() {
        assert_eq!(content_type, "application/json");
    } else {
        assert_eq!(content_type, "application/problem+json");
        assert_eq!(body["status"], json!(status.as_u16()));
        for member in ["type", "title", "detail", "code"] {
            assert!(
                body.get(member).is_some(),
                "problem body lacks {member}: {body}"
            );
        }
    }
    (status, body)
}

/// A call's body.
pub(crate) fn call(tool: &str, arguments: Value, request_id: &str) -> Value {
    json!({"tool": tool, "arguments": arguments, "request_id": request_id})
}

/// Waits until `tool` started `runs` times.
pub(crate) async fn wait_for_runs(app: &carmy_http::App, tool: &str, runs: u64) {
    eventually_eq(
        Duration::from_secs(10),
        "the tool to start",
        runs,
        || async { app.engine().metrics().tool_runs(tool) },
    )
    .await;
}

/// `POST path` without a body: the status and the JSON body.
pub(crate) async fn post_path(router: &Router, path: &str) -> (StatusCode, Value) {
    let request = Request::post(path).body(Body::empty()).unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}
