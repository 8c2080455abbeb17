//! What a person at a terminal sees (docs/semantics.md §6, §7): every JSON and problem body ends
//! with a newline, and a server without API keys refuses an `Authorization` header with 401
//! saying it has no keys, instead of running the call as `anonymous`.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use carmy::tool::FnTool;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

fn router() -> Router {
    carmy_http::app()
        .tool(FnTool::new(
            "echo",
            json!({"type": "object"}),
            |_c, a| async move { Ok(a) },
        ))
        .build()
        .unwrap()
        .router()
}

async fn text(router: &Router, request: Request<Body>) -> (StatusCode, Option<String>, String) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|value| value.to_str().unwrap().to_owned());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        challenge,
        String::from_utf8(bytes.to_vec()).unwrap(),
    )
}

fn execution(authorization: Option<&str>) -> Request<Body> {
    let mut request = Request::post("/v1/executions").header("content-type", "application/json");
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let body = json!({"tool": "echo", "arguments": {"n": 1}, "request_id": "r-1"});
    request.body(Body::from(body.to_string())).unwrap()
}

#[tokio::test]
async fn every_json_body_ends_with_a_newline() {
    let router = router();
    let first = text(&router, execution(None)).await;
    let replay = text(&router, execution(None)).await;
    let execution_id = serde_json::from_str::<Value>(&first.2).unwrap()["execution_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let get = |path: String| Request::get(path).body(Body::empty()).unwrap();
    let bodies = [
        ("first answer", first),
        ("replay", replay),
        (
            "GET execution",
            text(&router, get(format!("/v1/executions/{execution_id}"))).await,
        ),
        ("tools", text(&router, get("/v1/tools".into())).await),
        ("healthz", text(&router, get("/healthz".into())).await),
        ("readyz", text(&router, get("/readyz".into())).await),
        ("problem", text(&router, get("/nowhere".into())).await),
    ];
    for (what, (status, _, body)) in bodies {
        assert!(body.ends_with("}\n"), "{what} ({status}): {body:?}");
        assert!(!body[..body.len() - 1].contains('\n'), "{what}: {body:?}");
    }
}

#[tokio::test]
async fn without_keys_an_authorization_header_is_refused_saying_so() {
    let router = router();
    for authorization in ["Bearer sk-123", "Basic YTpi"] {
        let (status, challenge, body) = text(&router, execution(Some(authorization))).await;
        let problem: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{problem}");
        assert_eq!(challenge.as_deref(), Some("Bearer"));
        assert_eq!(problem["code"], "UNAUTHORIZED");
        assert_eq!(
            problem["detail"],
            "this server has no API keys configured, so it cannot check the Authorization \
             header: send the request without it (every caller is the principal anonymous), or \
             configure API keys on the server (gateway: CARMY_API_KEYS or CARMY_API_KEYS_FILE)"
        );
    }
    // Nothing ran: the identity is still free, and the call without a header runs.
    let (status, _, body) = text(&router, execution(None)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["replayed"],
        false
    );
}
