//! What a tool's error says about its effect (docs/semantics.md §4): a plain failure is recorded
//! and replayed; "effect unknown" is recorded and says so; "not executed" records nothing, frees
//! the identity and answers 503 with the tool's code and `Retry-After`. Also the behaviour hints
//! `GET /v1/tools` shows. A tool that stops at its deadline itself (`ToolError::timed_out`) is
//! recorded `timed_out`, effect unknown, with its details.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use carmy::tool::FnTool;
use carmy::{ToolAnnotations, ToolError};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

struct Harness {
    router: Router,
    app: carmy_http::App,
    /// How many times `flaky` has been called.
    flaky_calls: Arc<AtomicUsize>,
}

/// `flaky` reports "not executed" on its first call and succeeds afterwards; `lost_ack` reports
/// an unknown effect; `slow` outlives its 50 ms deadline.
fn harness() -> Harness {
    let flaky_calls = Arc::new(AtomicUsize::new(0));
    let calls = Arc::clone(&flaky_calls);
    let app = carmy_http::app()
        .tool(FnTool::new(
            "flaky",
            json!({"type": "object"}),
            move |_c, arguments| {
                let attempt = calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    if attempt == 0 {
                        Err(ToolError::not_executed(
                            "UPSTREAM_UNAVAILABLE",
                            "the upstream refused the connection",
                        )
                        .with_retry_after(Duration::from_millis(1500)))
                    } else {
                        Ok(arguments)
                    }
                }
            },
        ))
        .tool(FnTool::new(
            "lost_ack",
            json!({"type": "object"}),
            |_c, _a| async move {
                Err(ToolError::effect_unknown(
                    "COMMIT_UNACKNOWLEDGED",
                    "the commit's acknowledgement was lost",
                ))
            },
        ))
        .tool(
            FnTool::new("slow", json!({"type": "object"}), |_c, _a| async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok(Value::Null)
            })
            .with_timeout(Duration::from_millis(50))
            .with_annotations(ToolAnnotations {
                title: Some("Slow".into()),
                read_only_hint: Some(true),
                ..ToolAnnotations::default()
            }),
        )
        .tool(
            FnTool::new("gave_up", json!({"type": "object"}), |context, _a| async move {
                // Stops waiting on its own just before the deadline the engine gave it, and
                // says what it was waiting on.
                Err(ToolError::timed_out(
                    "UPSTREAM_TASK_TIMEOUT",
                    "the upstream task was still working",
                )
                .with_details(json!({"upstream_task_id": "t-9", "timeout_ms": context.timeout.as_millis() as u64})))
            })
            .with_timeout(Duration::from_millis(1234)),
        )
        .build()
        .unwrap();
    Harness {
        router: app.router(),
        app,
        flaky_calls,
    }
}

async fn send(router: &Router, request: Request<Body>) -> (StatusCode, Option<String>, Value) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|value| value.to_str().unwrap().to_owned());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, retry_after, serde_json::from_slice(&bytes).unwrap())
}

async fn post(
    router: &Router,
    tool: &str,
    request_id: &str,
) -> (StatusCode, Option<String>, Value) {
    let body = json!({"tool": tool, "arguments": {"n": 1}, "request_id": request_id});
    let request = Request::post("/v1/executions")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    send(router, request).await
}

#[tokio::test]
async fn not_executed_records_nothing_and_the_same_call_then_runs() {
    let h = harness();
    let (status, retry_after, problem) = post(&h.router, "flaky", "r1").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{problem}");
    assert_eq!(problem["code"], "UPSTREAM_UNAVAILABLE");
    assert_eq!(retry_after.as_deref(), Some("2"), "1.5 s rounds up");
    assert_eq!(problem.get("execution_id"), None, "nothing was recorded");
    assert_eq!(
        problem["detail"],
        "the upstream refused the connection. The call had no effect and nothing was recorded; \
         retry the same call (same request_id) after 2 s"
    );
    // The identity is free at once: the same request_id runs now, and then replays.
    let (status, _, first) = post(&h.router, "flaky", "r1").await;
    assert_eq!(
        (status, first["replayed"].clone()),
        (StatusCode::OK, json!(false))
    );
    assert_eq!(first["data"], json!({"n": 1}));
    let (status, _, replay) = post(&h.router, "flaky", "r1").await;
    assert_eq!(
        (status, replay["replayed"].clone()),
        (StatusCode::OK, json!(true))
    );
    assert_eq!(replay["execution_id"], first["execution_id"]);
    assert_eq!(h.flaky_calls.load(Ordering::SeqCst), 2);
    let metrics = h.app.engine().metrics().encode();
    assert!(
        metrics.contains(r#"tool="flaky",status="not_executed"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn effect_unknown_failures_are_recorded_and_say_so() {
    let h = harness();
    let (status, _, first) = post(&h.router, "lost_ack", "u1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(first["status"], "failed");
    assert_eq!(
        first["error"],
        json!({"code": "COMMIT_UNACKNOWLEDGED", "message": "the commit's acknowledgement was lost", "effect": "unknown"})
    );
    let (_, _, replay) = post(&h.router, "lost_ack", "u1").await;
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["error"], first["error"]);

    let (status, _, timed_out) = post(&h.router, "slow", "t1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(timed_out["status"], "timed_out");
    assert_eq!(timed_out["error"]["code"], "TIMEOUT");
    assert_eq!(timed_out["error"]["effect"], "unknown");
}

#[tokio::test]
async fn plain_failures_carry_no_effect_member() {
    let app = carmy_http::app()
        .tool(FnTool::new(
            "fail",
            json!({"type": "object"}),
            |_c, _a| async move { Err(ToolError::new("OUT_OF_STOCK", "no such sku")) },
        ))
        .build()
        .unwrap();
    let (_, _, failed) = post(&app.router(), "fail", "f1").await;
    assert_eq!(
        failed["error"],
        json!({"code": "OUT_OF_STOCK", "message": "no such sku"})
    );
}

#[tokio::test]
async fn tools_list_shows_annotations_where_declared() {
    let h = harness();
    let request = Request::get("/v1/tools").body(Body::empty()).unwrap();
    let (status, _, body) = send(&h.router, request).await;
    assert_eq!(status, StatusCode::OK);
    let tools = body["tools"].as_array().unwrap();
    let slow = tools.iter().find(|tool| tool["name"] == "slow").unwrap();
    assert_eq!(
        slow["annotations"],
        json!({"title": "Slow", "readOnlyHint": true})
    );
    let flaky = tools.iter().find(|tool| tool["name"] == "flaky").unwrap();
    assert_eq!(flaky.get("annotations"), None);
}

#[tokio::test]
async fn a_tool_that_stops_at_its_deadline_is_recorded_timed_out_with_its_details() {
    let h = harness();
    let (status, _, first) = post(&h.router, "gave_up", "g1").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["status"], "timed_out", "{first}");
    assert_eq!(
        first["error"],
        json!({
            "code": "UPSTREAM_TASK_TIMEOUT",
            "message": "the upstream task was still working",
            "effect": "unknown",
            "details": {"upstream_task_id": "t-9", "timeout_ms": 1234},
        })
    );
    let (_, _, replay) = post(&h.router, "gave_up", "g1").await;
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["error"], first["error"]);
}
