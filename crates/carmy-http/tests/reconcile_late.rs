//! A late arrival after the reconciler's decision (docs/semantics.md §12.10): the
//! owner's outcome that contradicts what the probe decided (a failure after the probe found the
//! effect) is kept as a late arrival, never as the record, and counted in
//! `carmy_late_arrivals_contradicting_total`. The PostgreSQL flag is tested with the gateway
//! (`tests/it/recovery/reconcile.rs`).

use axum::body::Body;
use axum::http::Request;
use axum::Router;
use carmy::decision::{Decision, ExecutionQuery, ResolveRequest};
use carmy::memory::InMemoryIdempotencyStore;
use carmy::outcome::ExecutionStatus;
use carmy::reconcile::RECONCILER_ACTOR;
use carmy::store::IdempotencyStore;
use carmy::tool::FnTool;
use carmy::ToolError;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tower::ServiceExt;

/// Reads the counter `series` from `GET /metrics`.
async fn counter(router: &Router, series: &str) -> u64 {
    let response = router
        .clone()
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |value| value.trim().parse().unwrap())
}

/// Runs a call whose tool waits for `go` and then fails; the reconciler resolves it
/// `completed` meanwhile (as a probe that found the effect would); returns the call's answer.
async fn late_failure(
    router: &Router,
    store: &Arc<InMemoryIdempotencyStore>,
    started: &Notify,
    go: &Notify,
    request_id: &str,
) -> Value {
    let call = json!({"tool": "pay", "arguments": {}, "request_id": request_id});
    let answer = tokio::spawn(
        router.clone().oneshot(
            Request::post("/v1/executions")
                .header("content-type", "application/json")
                .body(Body::from(call.to_string()))
                .unwrap(),
        ),
    );
    started.notified().await;
    let query = ExecutionQuery {
        request_id: Some(request_id.to_owned()),
        limit: 1,
        ..ExecutionQuery::default()
    };
    let running = store.list_executions(&query).await.unwrap().remove(0);
    let request = ResolveRequest {
        decision: Decision {
            execution_id: running.record.execution_id.clone(),
            principal: None,
            note: "the upstream's probe found the effect".into(),
            actor: RECONCILER_ACTOR.into(),
            force: true,
        },
        status: ExecutionStatus::Completed,
        data: json!({"payment_id": "pay_1"}),
        error: None,
    };
    store.resolve_execution(&request).await.unwrap().unwrap();
    go.notify_one();
    let response = answer.await.unwrap().unwrap();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn a_late_failure_after_a_reconciled_completion_is_flagged() {
    let store = Arc::new(InMemoryIdempotencyStore::new(1000));
    let started = Arc::new(Notify::new());
    let go = Arc::new(Notify::new());
    let (tool_started, tool_go) = (Arc::clone(&started), Arc::clone(&go));
    let app = carmy_http::app()
        .idempotency_store(store.clone())
        .tool(FnTool::new(
            "pay",
            json!({"type": "object"}),
            move |_context, _arguments| {
                let (started, go) = (Arc::clone(&tool_started), Arc::clone(&tool_go));
                async move {
                    started.notify_one();
                    go.notified().await;
                    Err::<Value, _>(ToolError::new("DECLINED", "the card was declined"))
                }
            },
        ))
        .build()
        .unwrap();
    let router = app.router();
    let answer = late_failure(&router, &store, &started, &go, "late-1").await;
    assert_eq!(answer["code"], "EXECUTION_SUPERSEDED", "{answer}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while counter(&router, "carmy_late_arrivals_contradicting_total").await != 1 {
        assert!(
            Instant::now() < deadline,
            "the contradiction was not counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(counter(&router, "carmy_late_arrivals_total").await, 1);
}
