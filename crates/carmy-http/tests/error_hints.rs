//! Errors that say what to do next (docs/semantics.md §5): a member of the wrong type is named,
//! an unknown tool points to `GET /v1/tools` and names the closest tool, and `EXECUTION_UNCERTAIN`
//! for a running execution carries `Retry-After` from the tool's deadline.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use carmy::tool::FnTool;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tower::ServiceExt;

/// Notified by a holding tool when it starts, and by the test to let it finish.
#[derive(Default)]
struct Gates {
    started: Notify,
    release: Notify,
}

/// `create_order`, and two tools that wait for `gates.release`: `hold` with a 2.5 s deadline,
/// `hold_long` with the default one (30 s).
fn router(gates: &Arc<Gates>) -> Router {
    let hold = |name: &str, gates: Arc<Gates>| {
        FnTool::new(name, json!({"type": "object"}), move |_c, _a| {
            let gates = Arc::clone(&gates);
            async move {
                gates.started.notify_one();
                gates.release.notified().await;
                Ok(Value::Null)
            }
        })
    };
    carmy_http::app()
        .tool(FnTool::new(
            "create_order",
            json!({"type": "object"}),
            |_c, a| async move { Ok(a) },
        ))
        .tool(hold("hold", Arc::clone(gates)).with_timeout(Duration::from_millis(2500)))
        .tool(hold("hold_long", Arc::clone(gates)))
        .build()
        .unwrap()
        .router()
}

async fn post(router: &Router, body: &str) -> (StatusCode, Option<String>, String) {
    let request = Request::post("/v1/executions")
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|value| value.to_str().unwrap().to_owned());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        retry_after,
        String::from_utf8(bytes.to_vec()).unwrap(),
    )
}

async fn problem(router: &Router, body: &str) -> (StatusCode, Value) {
    let (status, _, text) = post(router, body).await;
    (status, serde_json::from_str(&text).unwrap())
}

#[tokio::test]
async fn a_member_of_the_wrong_type_is_named() {
    let router = router(&Arc::default());
    for (body, detail) in [
        (
            r#"{"tool":"create_order","arguments":{},"request_id":123}"#,
            "request_id must be a string (got a number) at line 1 column 55",
        ),
        (
            r#"{"tool":"create_order","arguments":{},"session_id":null}"#,
            "session_id must be a string (got null) at line 1 column 56",
        ),
        (
            r#"{"tool":["create_order"],"arguments":{}}"#,
            "tool must be a string (got an array) at line 1 column 24",
        ),
    ] {
        let (status, problem) = problem(&router, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
        assert_eq!(problem["code"], "INVALID_REQUEST");
        assert_eq!(problem["detail"], detail, "{body}");
    }
}

#[tokio::test]
async fn an_unknown_tool_points_to_the_tool_list_and_the_closest_name() {
    let router = router(&Arc::default());
    for (tool, detail) in [
        (
            "create_ordr",
            r#"no tool named "create_ordr" (did you mean "create_order"?); GET /v1/tools lists the tools"#,
        ),
        (
            "Create_Order",
            r#"no tool named "Create_Order" (did you mean "create_order"?); GET /v1/tools lists the tools"#,
        ),
        (
            "refund",
            r#"no tool named "refund"; GET /v1/tools lists the tools"#,
        ),
    ] {
        let body = json!({"tool": tool, "arguments": {}, "request_id": "r-1"}).to_string();
        let (status, problem) = problem(&router, &body).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{problem}");
        assert_eq!(problem["code"], "UNKNOWN_TOOL");
        assert_eq!(problem["detail"], detail);
    }
}

#[tokio::test]
async fn a_running_execution_answers_with_retry_after_from_the_tools_deadline() {
    let gates = Arc::new(Gates::default());
    let router = router(&gates);
    for (tool, seconds) in [("hold", "3"), ("hold_long", "5")] {
        let body = json!({"tool": tool, "arguments": {}, "request_id": tool}).to_string();
        let first = tokio::spawn({
            let (router, body) = (router.clone(), body.clone());
            async move { post(&router, &body).await }
        });
        tokio::time::timeout(Duration::from_secs(10), gates.started.notified())
            .await
            .expect("the first call's tool starts");
        let (status, retry_after, text) = post(&router, &body).await;
        let problem: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (status, problem["code"].as_str(), problem["state"].as_str()),
            (
                StatusCode::CONFLICT,
                Some("EXECUTION_UNCERTAIN"),
                Some("running")
            )
        );
        assert_eq!(retry_after.as_deref(), Some(seconds), "{tool}");
        assert!(
            problem["detail"].as_str().unwrap().ends_with(&format!(
                " retry the same call in {seconds} s to get its outcome"
            )),
            "{problem}"
        );
        gates.release.notify_one();
        assert_eq!(first.await.unwrap().0, StatusCode::OK);
    }
}
