//! Retention over HTTP (docs/semantics.md §12.9): every finished record states `expires_at`
//! (its `finished_at` plus the retention, the same for the first answer, the replay and a read);
//! after it, the same request_id runs as new and the expired execution is gone; running records
//! state `null`; with no retention, `null` everywhere.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use carmy::engine::EngineConfig;
use carmy::tool::FnTool;
use chrono::{DateTime, Utc};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::time::Duration;
use tower::ServiceExt;

fn router(retention: Option<Duration>) -> Router {
    carmy_http::app()
        .engine_config(EngineConfig {
            retention,
            ..EngineConfig::default()
        })
        .tool(FnTool::new(
            "echo",
            json!({"type": "object"}),
            |_c, a| async move { Ok(a) },
        ))
        .build()
        .unwrap()
        .router()
}

async fn send(router: &Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

async fn post(router: &Router, request_id: &str) -> Value {
    let body = json!({"tool": "echo", "arguments": {"a": 1}, "request_id": request_id});
    let request = Request::post("/v1/executions")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let (status, body) = send(router, request).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn get(router: &Router, execution_id: &str) -> (StatusCode, Value) {
    let request = Request::get(format!("/v1/executions/{execution_id}"))
        .body(Body::empty())
        .unwrap();
    send(router, request).await
}

fn instant(value: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(value.as_str().expect("an instant"))
        .unwrap()
        .to_utc()
}

#[tokio::test]
async fn a_record_states_when_it_expires_and_runs_as_new_after() {
    let retention = Duration::from_millis(300);
    let r = router(Some(retention));
    let first = post(&r, "r1").await;
    let finished = instant(&first["finished_at"]);
    assert_eq!(
        instant(&first["expires_at"]),
        finished + chrono::Duration::milliseconds(300)
    );
    let replay = post(&r, "r1").await;
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["expires_at"], first["expires_at"]);
    let execution_id = first["execution_id"].as_str().unwrap();
    let (status, read) = get(&r, execution_id).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(read["expires_at"], first["expires_at"]);

    tokio::time::sleep(retention + Duration::from_millis(200)).await;
    let again = post(&r, "r1").await;
    assert_eq!(
        again["replayed"], false,
        "after expires_at the call runs as new"
    );
    assert_ne!(again["execution_id"], first["execution_id"]);
    let (status, _) = get(&r, execution_id).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "the expired execution is gone"
    );
}

#[tokio::test]
async fn the_default_retention_is_seven_days_and_zero_keeps_forever() {
    let r = router(EngineConfig::default().retention);
    let first = post(&r, "week").await;
    assert_eq!(
        instant(&first["expires_at"]),
        instant(&first["finished_at"]) + chrono::Duration::days(7)
    );
    let forever = router(None);
    let kept = post(&forever, "forever").await;
    assert_eq!(kept["expires_at"], Value::Null);
    let (_, read) = get(&forever, kept["execution_id"].as_str().unwrap()).await;
    assert_eq!(read["expires_at"], Value::Null);
}
