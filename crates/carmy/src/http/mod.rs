//! The HTTP API (docs/semantics.md §7): routes, request parsing and responses. The engine answers
//! in the domain's terms; [`error`] maps them to status codes and problem details in one place, and
//! [`auth`] finds the principal.

mod auth;
pub mod error;
mod recovery;

use crate::auth::ApiKeys;
use crate::call::{CallRejected, CallRequest, ValidatedCall};
use crate::engine::{CancelAnswer, Engine};
use crate::outcome::ExecutionId;
use auth::Principal;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use error::ApiError;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::sync::Arc;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_http::trace::TraceLayer;

/// Default limit of a request body, in bytes (2 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// Default limit on receiving a request body once its headers arrived (30 s): a client that
/// trickles or stalls its body gets 408 instead of holding a connection (and shutdown) forever.
pub const DEFAULT_BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Shared state of every handler.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) engine: Arc<Engine>,
    pub(crate) keys: Arc<ApiKeys>,
    /// Operator keys (docs/semantics.md §12), checked before `keys`.
    pub(crate) operators: Arc<ApiKeys>,
    pub(crate) max_body_bytes: usize,
    pub(crate) body_timeout: std::time::Duration,
}

/// Builds the router of docs/semantics.md §7 over `state`.
pub(crate) fn router(state: AppState) -> Router {
    let max_body_bytes = state.max_body_bytes;
    let body_timeout = state.body_timeout;
    Router::new()
        .route(
            "/v1/executions",
            post(create_execution).get(recovery::list_executions),
        )
        .route("/v1/executions/{execution_id}", get(get_execution))
        .route(
            "/v1/executions/{execution_id}/cancel",
            post(cancel_execution),
        )
        .route(
            "/v1/executions/{execution_id}/resolve",
            post(recovery::resolve_execution),
        )
        .route(
            "/v1/executions/{execution_id}/release",
            post(recovery::release_execution),
        )
        .route("/v1/tools", get(list_tools))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(RequestBodyTimeoutLayer::new(body_timeout))
        .layer(CatchPanicLayer::custom(
            |_panic: Box<dyn std::any::Any + Send>| {
                tracing::error!("a request handler panicked");
                ApiError::Internal.into_response()
            },
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// The body of `POST /v1/executions` (docs/semantics.md §7). Unknown members are refused so that a
/// misspelt `request_id` never runs a call without replay protection.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecutionRequest {
    tool: String,
    arguments: Box<RawValue>,
    /// Absent means no replay protection; `null` is refused like any non-string
    /// (docs/semantics.md §2).
    #[serde(default, deserialize_with = "present_string")]
    request_id: Option<String>,
    #[serde(default, deserialize_with = "present_string")]
    session_id: Option<String>,
    #[serde(default)]
    metadata: Option<Box<RawValue>>,
}

/// A member that, when present, must be a string (`null` included in what is refused).
fn present_string<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    String::deserialize(deserializer).map(Some)
}

fn invalid(message: impl std::fmt::Display) -> ApiError {
    CallRejected::new(message).into()
}

fn is_json_content_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Parses a request body and checks the call; everything here is stateless, so a rejected call
/// reserves nothing (docs/semantics.md §3).
fn validate_call(principal: String, body: &[u8]) -> Result<ValidatedCall, ApiError> {
    let request: ExecutionRequest = serde_json::from_slice(body).map_err(invalid)?;
    let call = CallRequest {
        tool: &request.tool,
        arguments: request.arguments.get(),
        request_id: request.request_id.as_deref(),
        session_id: request.session_id.as_deref(),
        metadata: request.metadata.as_deref().map(RawValue::get),
    };
    Ok(ValidatedCall::parse(principal, call)?)
}

/// Whether reading the body failed because [`RequestBodyTimeoutLayer`] cut it off.
fn is_body_timeout(rejection: &BytesRejection) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(rejection);
    while let Some(error) = source {
        if error.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        source = error.source();
    }
    false
}

fn json_response(status: StatusCode, body: String) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

async fn create_execution(
    State(state): State<AppState>,
    Principal(principal): Principal,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge {
                limit: state.max_body_bytes,
            }
        } else if is_body_timeout(&rejection) {
            ApiError::RequestTimeout
        } else {
            invalid(rejection.body_text())
        }
    })?;
    if !is_json_content_type(&headers) {
        return Err(ApiError::UnsupportedMediaType);
    }
    let mut call = validate_call(principal, &body)?;
    if let Some(wait) = recovery::prefer_wait(&headers) {
        call = call.with_wait(wait);
    }
    let answer = state.engine.execute(call).await?;
    Ok(json_response(
        StatusCode::OK,
        answer.result.to_response_json(answer.replayed),
    ))
}

/// An execution id from a path. Ids are ASCII letters, digits, `_` and `-`, at most 64 bytes;
/// anything else (including text that is not UTF-8) cannot name an execution: 404.
fn execution_id_from_path(
    path: Result<Path<String>, PathRejection>,
) -> Result<ExecutionId, ApiError> {
    let not_found = || ApiError::NotFound("no such execution".into());
    let Ok(Path(text)) = path else {
        return Err(not_found());
    };
    let plausible = !text.is_empty()
        && text.len() <= 64
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !plausible {
        return Err(not_found());
    }
    Ok(ExecutionId::from_stored(text))
}

async fn get_execution(
    State(state): State<AppState>,
    Principal(principal): Principal,
    execution_id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let execution_id = execution_id_from_path(execution_id)?;
    let found = state.engine.find(&principal, &execution_id).await?;
    let body = recovery::record_body(&found);
    Ok(json_response(StatusCode::OK, body))
}

async fn cancel_execution(
    State(state): State<AppState>,
    Principal(principal): Principal,
    execution_id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let execution_id = execution_id_from_path(execution_id)?;
    match state.engine.cancel(&principal, &execution_id).await? {
        CancelAnswer::Finished(result) => {
            Ok(json_response(StatusCode::OK, result.to_record_json()))
        }
        CancelAnswer::Pending(execution_id) => Ok(json_response(
            StatusCode::ACCEPTED,
            json!({"execution_id": execution_id, "status": "cancelling"}).to_string(),
        )),
    }
}

async fn list_tools(State(state): State<AppState>, _principal: Principal) -> Response {
    let tools: Vec<Value> = state
        .engine
        .tools()
        .iter()
        .map(|tool| {
            let mut entry = json!({
                "name": tool.name(),
                "description": tool.description(),
                "input_schema": tool.input_schema(),
            });
            if let Some(annotations) = tool.annotations() {
                entry["annotations"] = json!(annotations);
            }
            entry
        })
        .collect();
    json_response(StatusCode::OK, json!({ "tools": tools }).to_string())
}

async fn healthz() -> Response {
    json_response(StatusCode::OK, r#"{"status":"ok"}"#.into())
}

async fn readyz(State(state): State<AppState>) -> Result<Response, ApiError> {
    state.engine.check_ready().await.map_err(|refusal| {
        tracing::warn!(%refusal, "not ready");
        ApiError::NotReady("the idempotency store is not ready".into())
    })?;
    Ok(json_response(
        StatusCode::OK,
        r#"{"status":"ready"}"#.into(),
    ))
}

async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        state.engine.metrics().encode(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        let check = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_str(value).unwrap());
            is_json_content_type(&headers)
        };
        assert!(check("application/json"));
        assert!(check("Application/JSON; charset=utf-8"));
        assert!(check("application/merge-patch+json"));
        assert!(!check("text/plain"));
        assert!(!check("application/x-www-form-urlencoded"));
        assert!(!check("+json"));
        assert!(!is_json_content_type(&HeaderMap::new()));
    }
}
