//! Hostile input through the real router: every malformed request gets a problem-JSON 4xx,
//! never a 500, and reserves nothing. Includes a fuzz test (proptest over raw bytes).

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use carmy_test_support::InProcess;
use http_body_util::BodyExt;
use proptest::prelude::*;
use serde_json::Value;
use tower::ServiceExt;

/// The gateway built by `carmy_gateway::build` on a 100-entry in-memory store.
async fn gateway() -> InProcess {
    InProcess::start(&["--memory-capacity", "100"]).await
}

/// Sends `body` with `content_type`; returns the status and, for errors, checks the problem body.
async fn send(router: &Router, content_type: Option<&str>, body: Vec<u8>) -> (StatusCode, Value) {
    let mut request = Request::post("/v1/executions");
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    let response = router
        .clone()
        .oneshot(request.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value: Value = serde_json::from_slice(&bytes).expect("every answer is JSON");
    assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR, "{value}");
    if !status.is_success() {
        assert!(status.is_client_error(), "{status}: {value}");
        assert_eq!(headers["content-type"], "application/problem+json");
        assert_eq!(value["status"], status.as_u16());
        assert!(value["code"].is_string());
    }
    (status, value)
}

fn with_arguments(arguments: &str) -> Vec<u8> {
    format!(r#"{{"tool":"echo","request_id":"hostile","arguments":{arguments}}}"#).into_bytes()
}

#[tokio::test]
async fn hostile_bodies_get_problem_json_and_reserve_nothing() {
    let gateway = gateway().await;
    let (router, store) = (gateway.router(), gateway.memory_store());
    let json = Some("application/json");
    let deep = format!("{}1{}", r#"{"a":"#.repeat(10_000), "}".repeat(10_000));
    let deep_array = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let cases: Vec<(&str, Option<&str>, Vec<u8>, StatusCode)> = vec![
        (
            "deeply nested object",
            json,
            with_arguments(&deep),
            StatusCode::BAD_REQUEST,
        ),
        (
            "deeply nested array",
            json,
            with_arguments(&format!(r#"{{"a":{deep_array}}}"#)),
            StatusCode::BAD_REQUEST,
        ),
        (
            "huge string over the body limit",
            json,
            with_arguments(&format!(r#"{{"s":"{}"}}"#, "x".repeat(3 << 20))),
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        (
            "invalid UTF-8",
            json,
            [&with_arguments(r#"{"s":""#)[..], &[0xff, 0xfe], b"\"}}"].concat(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "lone high surrogate",
            json,
            with_arguments(r#"{"s":"\ud800"}"#),
            StatusCode::BAD_REQUEST,
        ),
        (
            "lone low surrogate",
            json,
            with_arguments(r#"{"s":"\udc00x"}"#),
            StatusCode::BAD_REQUEST,
        ),
        (
            "byte order mark",
            json,
            [&[0xef, 0xbb, 0xbf][..], &with_arguments("{}")].concat(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "no content type",
            None,
            with_arguments("{}"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            "form content type",
            Some("application/x-www-form-urlencoded"),
            with_arguments("{}"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            "text content type",
            Some("text/plain"),
            with_arguments("{}"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        ("empty body", json, Vec::new(), StatusCode::BAD_REQUEST),
        ("null body", json, b"null".to_vec(), StatusCode::BAD_REQUEST),
        (
            "arguments not an object",
            json,
            with_arguments("[1]"),
            StatusCode::BAD_REQUEST,
        ),
        (
            "metadata not an object",
            json,
            br#"{"tool":"echo","arguments":{},"metadata":[1],"request_id":"hostile"}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "tool not a string",
            json,
            br#"{"tool":1,"arguments":{},"request_id":"hostile"}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "empty tool",
            json,
            br#"{"tool":"","arguments":{},"request_id":"hostile"}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "unknown member",
            json,
            br#"{"tool":"echo","arguments":{},"requestid":"hostile"}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "huge exponent",
            json,
            with_arguments(r#"{"x":1e99999999999999999999}"#),
            StatusCode::BAD_REQUEST,
        ),
        (
            "tiny number",
            json,
            with_arguments(r#"{"x":1e-400}"#),
            StatusCode::BAD_REQUEST,
        ),
        (
            "reserved member name",
            json,
            with_arguments(r#"{"$serde_json::private::Number":"1"}"#),
            StatusCode::BAD_REQUEST,
        ),
        (
            "trailing garbage",
            json,
            [&with_arguments("{}")[..], b"{}"].concat(),
            StatusCode::BAD_REQUEST,
        ),
        (
            "NaN",
            json,
            with_arguments(r#"{"x":NaN}"#),
            StatusCode::BAD_REQUEST,
        ),
        (
            "request_id with U+0085",
            json,
            "{\"tool\":\"echo\",\"arguments\":{},\"request_id\":\"a\u{85}b\"}"
                .as_bytes()
                .to_vec(),
            StatusCode::BAD_REQUEST,
        ),
    ];
    for (name, content_type, body, expected) in cases {
        let (status, problem) = send(&router, content_type, body).await;
        assert_eq!(status, expected, "{name}: {problem}");
        assert_eq!(store.len(), 0, "{name} reserved something");
    }

    // Valid but large: very many members, long strings within the limit, U+2028 in an id.
    let many: String = (0..50_000)
        .map(|i| format!(r#""k{i}":{i}"#))
        .collect::<Vec<_>>()
        .join(",");
    let (status, answer) = send(&router, json, with_arguments(&format!("{{{many}}}"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        answer["data"].as_object().map(serde_json::Map::len),
        Some(50_000),
        "{}",
        answer["error"]
    );
    let (status, _) = send(
        &router,
        json,
        "{\"tool\":\"echo\",\"arguments\":{},\"request_id\":\"line\u{2028}separator\"}"
            .as_bytes()
            .to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "U+2028 is not a control character");
    // zero with an exponent beyond 64 bits is still zero
    let (status, zero) = send(
        &router,
        json,
        br#"{"tool":"echo","request_id":"zero","arguments":{"x":0e99999999999999999999}}"#.to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{zero}");
    let (status, same) = send(
        &router,
        json,
        br#"{"tool":"echo","request_id":"zero","arguments":{"x":0}}"#.to_vec(),
    )
    .await;
    assert_eq!(
        (status, same["replayed"].clone()),
        (StatusCode::OK, Value::Bool(true))
    );
    assert_eq!(store.len(), 3);
}

#[tokio::test]
async fn malformed_paths_and_credentials_are_problem_json() {
    let router = gateway().await.router();
    for path in [
        "/v1/executions/%00",
        "/v1/executions/%FF",
        "/v1/executions/exec_%00abc",
        "/v1/executions/a%20b/cancel",
        "/v1/executions/%ED%A0%80",
    ] {
        let method = if path.ends_with("/cancel") {
            "POST"
        } else {
            "GET"
        };
        let request = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json",
            "{path}"
        );
    }
    let keyed = InProcess::start(&["--api-keys", "k1=alice,k2=bob"]).await;
    let request = Request::get("/v1/tools")
        .header("authorization", "Bearer k1")
        .header("authorization", "Bearer k2")
        .body(Body::empty())
        .unwrap();
    let response = keyed.router().oneshot(request).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::UNAUTHORIZED,
        "two credentials are refused"
    );
}

fn request_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..256),
        r#"\{"tool":"(echo|create_order|x)","arguments":[\[\]{}":,0-9a-z\\ .eE+\-]{0,40}(,"request_id":"[a-z\\"]{0,8}")?\}"#
            .prop_map(String::into_bytes),
        r#"[\[\]{}":,0-9a-z\\ ]{0,80}"#.prop_map(String::into_bytes),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Fuzz: arbitrary bytes never produce a 500 or a panic; a 4xx is problem JSON and reserves
    /// nothing.
    #[test]
    fn arbitrary_bytes_never_break_the_api(body in request_like_bytes()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let gateway = gateway().await;
            let (router, store) = (gateway.router(), gateway.memory_store());
            let (status, _) = send(&router, Some("application/json"), body).await;
            if !status.is_success() {
                assert_eq!(store.len(), 0);
            }
        });
    }
}
