//! Requests outside the field cases against the in-memory gateway's real router: malformed
//! bodies, unknown routes and methods get problem JSON and reserve nothing; the tools list,
//! `/healthz` and `/readyz`; schema bounds checked on the exact numbers sent.

use super::memory_cases::{gateway, send_raw};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

#[tokio::test]
async fn malformed_bodies_get_problem_json() {
    let g = gateway().await;
    for (body, content_type, expected) in [
        ("{", "application/json", StatusCode::BAD_REQUEST),
        ("[]", "application/json", StatusCode::BAD_REQUEST),
        (
            r#"{"tool":"echo","arguments":{},"extra":1}"#,
            "application/json",
            StatusCode::BAD_REQUEST,
        ),
        (
            r#"{"tool":"echo","arguments":{}}"#,
            "text/plain",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            r#"{"tool":"echo","arguments":{"s":"\ud800"}}"#,
            "application/json",
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let request = Request::post("/v1/executions")
            .header("content-type", content_type)
            .body(Body::from(body))
            .unwrap();
        let response = g.router.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), expected, "{body}");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
    }
    let huge = format!(
        r#"{{"tool":"echo","arguments":{{"s":"{}"}}}}"#,
        "x".repeat(3 * 1024 * 1024)
    );
    let (status, problem) = send_raw(&g.router, &huge, &[]).await;
    assert_eq!(
        (status, problem["code"].clone()),
        (StatusCode::PAYLOAD_TOO_LARGE, json!("PAYLOAD_TOO_LARGE"))
    );
    let request = Request::get("/nowhere").body(Body::empty()).unwrap();
    let response = g.router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let request = Request::delete("/v1/executions")
        .body(Body::empty())
        .unwrap();
    let response = g.router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    assert_eq!(g.stored(), 0);
}

#[tokio::test]
async fn tools_health_and_readiness() {
    let g = gateway().await;
    let response = g
        .router
        .clone()
        .oneshot(Request::get("/v1/tools").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let tools: Value = serde_json::from_slice(&bytes).unwrap();
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "create_order",
            "echo",
            "fail",
            "find_orders",
            "get_order",
            "sleep"
        ]
    );
    for path in ["/healthz", "/readyz"] {
        let response = g
            .router
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
}

#[tokio::test]
async fn schema_bounds_are_checked_on_exact_numbers() {
    let g = gateway().await;
    for (request_id, quantity) in [
        ("q1", "0.99999999999999999999"),
        ("q2", "1.00000000000000000001"),
        ("q3", "1000000.00000000000001"),
        ("q4", "1000001"),
        ("q5", "0"),
    ] {
        let body = format!(
            r#"{{"tool":"create_order","request_id":"{request_id}","arguments":{{"sku":"Q","quantity":{quantity}}}}}"#
        );
        let (status, problem) = send_raw(&g.router, &body, &[]).await;
        assert_eq!(
            (status, problem["code"].clone()),
            (StatusCode::BAD_REQUEST, json!("INVALID_REQUEST")),
            "{quantity}"
        );
    }
    let body =
        r#"{"tool":"create_order","request_id":"q6","arguments":{"sku":"Q","quantity":2.0}}"#;
    let (status, ran) = send_raw(&g.router, body, &[]).await;
    assert_eq!(status, StatusCode::OK, "{ran}");
    assert_eq!(g.runs("create_order"), 1);
}
