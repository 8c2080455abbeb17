//! The routes of the HTTP API (docs/semantics.md §7) and the handlers of calls, executions,
//! tools and probes: request parsing and responses. The engine answers in the domain's terms;
//! [`crate::error`] maps them to status codes and problem details in one place, and
//! `extractors.rs` finds the principal.

use crate::bodies::{
    CallHeaders, CancellingBody, ExecutionPath, ExecutionState, ProbeBody, RecordBody, ToolEntry,
    ToolList, NO_SUCH_EXECUTION,
};
use crate::error::ApiError;
use crate::extractors::{AuthenticatedCaller, Principal};
use crate::{console, held_routes, openapi, reconcile_route, recovery};
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use carmy::call::{CallRejected, CallRequest, ValidatedCall};
use carmy::engine::{CancelAnswer, Engine};
use carmy::outcome::ExecutionId;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::sync::Arc;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;
use tower_http::trace::TraceLayer;
use utoipa::{OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Shared state of every handler.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) engine: Arc<Engine>,
    /// API keys and operator keys (docs/semantics.md §6, §12).
    pub(crate) credentials: Arc<carmy::auth::Credentials>,
    pub(crate) max_body_bytes: usize,
    pub(crate) body_timeout: std::time::Duration,
    /// The operator console's sessions (`/console`).
    pub(crate) console: Arc<console::Sessions>,
    /// The limits on console logins, per client address and key prefix.
    pub(crate) console_logins: Arc<console::LoginLimits>,
}

/// Every route with its OpenAPI description: each handler is registered through `routes!`, which
/// takes its method and path from the handler's `#[utoipa::path]`, so a route and its
/// description cannot part (docs/semantics.md §13). Register new routes here the same way.
pub(crate) fn api_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(create_execution, recovery::list_executions))
        .routes(routes!(get_execution))
        .routes(routes!(cancel_execution))
        .routes(routes!(recovery::resolve_execution))
        .routes(routes!(recovery::release_execution))
        .routes(routes!(reconcile_route::reconcile_execution))
        .routes(routes!(held_routes::hold_execution))
        .routes(routes!(held_routes::renew_hold))
        .routes(routes!(held_routes::record_held))
        .routes(routes!(list_tools))
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
        .routes(routes!(openapi::openapi_json))
}

/// Builds the router of docs/semantics.md §7 over `state`.
pub(crate) fn router(state: AppState) -> Router {
    let max_body_bytes = state.max_body_bytes;
    let body_timeout = state.body_timeout;
    let (routes, _document) = api_routes().split_for_parts();
    routes
        .merge(console::routes())
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
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"tool": "echo", "arguments": {"text": "hello"}, "request_id": "req-1"}))]
struct ExecutionRequest {
    /// The tool's name: one of the tools this gateway serves (`GET /v1/tools`; the served
    /// document lists them).
    #[schema(min_length = 1, max_length = 255)]
    #[serde(deserialize_with = "tool_name")]
    tool: String,
    /// The tool's arguments; they must also satisfy the tool's `input_schema` (`GET /v1/tools`).
    #[schema(value_type = Object)]
    arguments: Box<RawValue>,
    /// The caller's id for this call, the same on every retry: 1 to 255 bytes of UTF-8 without
    /// control characters. Absent means no replay protection; `null` is refused like any
    /// non-string (docs/semantics.md §2).
    #[serde(default, deserialize_with = "request_id")]
    #[schema(value_type = String, min_length = 1, max_length = 255, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    request_id: Option<String>,
    /// The session (default `default`), part of the identity; same rules as `request_id`.
    #[serde(default, deserialize_with = "session_id")]
    #[schema(value_type = String, min_length = 1, max_length = 255, pattern = r"^[^\u0000-\u001f\u007f-\u009f]*$")]
    session_id: Option<String>,
    /// Caller data that is part of the fingerprint: an object, or `null` (the same as absent).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    metadata: Option<Box<RawValue>>,
}

/// A member that must be a string: anything else is refused with a message naming `field` and
/// what was sent instead, e.g. `request_id must be a string (got a number)` (`null` included).
fn string_member<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
    field: &str,
) -> Result<String, D::Error> {
    let sent = match Value::deserialize(deserializer)? {
        Value::String(text) => return Ok(text),
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    Err(serde::de::Error::custom(format!(
        "{field} must be a string (got {sent})"
    )))
}

pub(crate) fn tool_name<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<String, D::Error> {
    string_member(deserializer, "tool")
}

pub(crate) fn request_id<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    string_member(deserializer, "request_id").map(Some)
}

pub(crate) fn session_id<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<String>, D::Error> {
    string_member(deserializer, "session_id").map(Some)
}

pub(crate) fn invalid(message: impl std::fmt::Display) -> ApiError {
    CallRejected::new(message).into()
}

pub(crate) fn is_json_content_type(headers: &HeaderMap) -> bool {
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

/// A JSON response; `body` gets a final newline (docs/semantics.md §7), so that `curl` output
/// does not run into the shell prompt.
pub(crate) fn json_response(status: StatusCode, mut body: String) -> Response {
    body.push('\n');
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

/// The header that tells a replayed answer from a fresh one (the body's `replayed` says the same).
pub(crate) const REPLAYED_HEADER: &str = "idempotent-replayed";

/// Runs a call, or answers it from its identity's record (docs/semantics.md §3).
#[utoipa::path(
    post,
    path = "/v1/executions",
    tag = "executions",
    security(("bearer" = [])),
    params(CallHeaders),
    request_body(content = ExecutionRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The outcome: new (`replayed: false`) or the recorded one (`replayed: true`). `status` may be `completed`, `failed`, `timed_out` or `cancelled`; all are recorded and replayed alike.", body = openapi::ExecutionAnswer,
            headers(("Idempotent-Replayed" = bool, description = "`true` when the answer is the recorded one and the tool did not run")),
            links(
                ("GetExecution" = (operation_id = "get_execution", parameters(("execution_id" = "$response.body#/execution_id")))),
                ("CancelExecution" = (operation_id = "cancel_execution", parameters(("execution_id" = "$response.body#/execution_id")))),
            )),
        (status = 400, description = "`INVALID_REQUEST`: bad JSON, identifiers, or arguments failing the tool's schema; nothing was reserved", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 401, response = openapi::Unauthorized),
        (status = 404, description = "`UNKNOWN_TOOL`: no tool of that name (and no record for the identity)", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 408, description = "`REQUEST_TIMEOUT`: the body did not arrive in time", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`IDEMPOTENCY_CONFLICT` (the request_id holds a different call) or `EXECUTION_UNCERTAIN` (`state` `running`: retry later; `interrupted`: reconcile, do not retry blindly)", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "`PAYLOAD_TOO_LARGE` (the body), or `ARGUMENTS_TOO_LARGE` (the arguments as kept with the execution are over `CARMY_MAX_RESULT_BYTES`; nothing was reserved; a call whose identity has a record is answered from it instead)", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: send `Content-Type: application/json`", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 503, response = openapi::Unavailable),
        (status = 507, description = "`IDEMPOTENCY_CAPACITY`: the in-memory store is full; nothing ran", body = openapi::Problem, content_type = "application/problem+json"),
    )
)]
async fn create_execution(
    State(state): State<AppState>,
    Principal(principal): Principal,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = call_body(&state, &headers, body)?;
    let traceparent = headers
        .get("traceparent")
        .and_then(|value| value.to_str().ok());
    let mut call = validate_call(principal, &body)?.with_traceparent(traceparent);
    if let Some(wait) = recovery::prefer_wait(&headers) {
        call = call.with_wait(wait);
    }
    let answer = state.engine.execute(call).await?;
    let mut response = json_response(
        StatusCode::OK,
        crate::bodies::with_rerun_of(
            answer
                .result
                .to_response_json(answer.replayed, answer.expires_at),
            answer.rerun_of.as_ref(),
        ),
    );
    response.headers_mut().insert(
        REPLAYED_HEADER,
        HeaderValue::from_static(if answer.replayed { "true" } else { "false" }),
    );
    Ok(response)
}

/// A call's body as read within its limits (413, 408, 400) and declared JSON (415), for the
/// routes that take a call (docs/semantics.md §3 steps 2 and 3).
pub(crate) fn call_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Bytes, ApiError> {
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
    if !is_json_content_type(headers) {
        return Err(ApiError::UnsupportedMediaType);
    }
    Ok(body)
}

/// An execution id from a path ([`ExecutionId::parse`]); anything else (including text that is
/// not UTF-8) cannot name an execution: 404.
pub(crate) fn execution_id_from_path(
    path: Result<Path<String>, PathRejection>,
) -> Result<ExecutionId, ApiError> {
    path.ok()
        .and_then(|Path(text)| ExecutionId::parse(&text))
        .ok_or_else(|| ApiError::NotFound("no such execution".into()))
}

/// Reads one of the caller's executions, or, with an operator key, any principal's
/// (docs/semantics.md §7, §12).
#[utoipa::path(
    get,
    path = "/v1/executions/{execution_id}",
    tag = "executions",
    security(("bearer" = [])),
    params(ExecutionPath),
    responses(
        (status = 200, description = "The record, or `running` / `interrupted` before it finishes (an operator key reads any principal's)", body = ExecutionState),
        (status = 401, response = openapi::Unauthorized),
        (status = 404, description = NO_SUCH_EXECUTION, body = openapi::Problem, content_type = "application/problem+json"),
        (status = 503, response = openapi::Unavailable),
    )
)]
async fn get_execution(
    State(state): State<AppState>,
    AuthenticatedCaller(caller): AuthenticatedCaller,
    execution_id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let execution_id = execution_id_from_path(execution_id)?;
    let found = state.engine.find_as(&caller, &execution_id).await?;
    let body = recovery::record_body(&state.engine, &found);
    Ok(json_response(StatusCode::OK, body))
}

/// Cancels a running execution of the caller's, on whichever replica runs it (docs/semantics.md
/// §7).
#[utoipa::path(
    post,
    path = "/v1/executions/{execution_id}/cancel",
    tag = "executions",
    security(("bearer" = [])),
    params(ExecutionPath),
    responses(
        (status = 200, description = "The recorded outcome (normally `status: cancelled`)", body = RecordBody),
        (status = 202, description = "Cancellation delivered, no outcome recorded within 10 s; read the execution later", body = CancellingBody<'static>),
        (status = 401, response = openapi::Unauthorized),
        (status = 404, description = NO_SUCH_EXECUTION, body = openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`EXECUTION_FINISHED` (the record is unchanged) or `EXECUTION_UNCERTAIN` with `state: interrupted`", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 503, response = openapi::Unavailable),
    )
)]
async fn cancel_execution(
    State(state): State<AppState>,
    Principal(principal): Principal,
    execution_id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let execution_id = execution_id_from_path(execution_id)?;
    match state.engine.cancel(&principal, &execution_id).await? {
        CancelAnswer::Finished(result) => {
            let body = result.to_body_json(state.engine.expires_at(&result));
            Ok(json_response(StatusCode::OK, body))
        }
        CancelAnswer::Pending(execution_id) => Ok(json_response(
            StatusCode::ACCEPTED,
            serde_json::to_string(&CancellingBody {
                execution_id: &execution_id,
                status: "cancelling",
            })
            .expect("a cancelling body always serializes"),
        )),
        // `CancelAnswer` is non-exhaustive: one added to carmy later is logged, never guessed at.
        other => {
            tracing::error!(answer = ?other, "the HTTP API got a cancel answer it does not know");
            Err(ApiError::Internal)
        }
    }
}

/// Lists the tools and their argument schemas.
#[utoipa::path(
    get,
    path = "/v1/tools",
    tag = "tools",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every tool this gateway serves", body = ToolList<'static>),
        (status = 401, response = openapi::Unauthorized),
    )
)]
async fn list_tools(State(state): State<AppState>, _principal: Principal) -> Response {
    let tools = state.engine.tools();
    let list = ToolList {
        tools: tools
            .iter()
            .map(|tool| ToolEntry {
                name: tool.name(),
                description: tool.description(),
                input_schema: tool.input_schema(),
                annotations: tool.annotations(),
                request_id_argument: state.engine.key_argument(tool.as_ref()).ok().flatten(),
                held_by_client: tool.held_by_client(),
            })
            .collect(),
    };
    let body = serde_json::to_string(&list).expect("a tool list always serializes");
    json_response(StatusCode::OK, body)
}

fn probe(status: &'static str) -> Response {
    probe_with(status, Vec::new())
}

/// A probe body with `warnings` (left out when empty).
fn probe_with(status: &'static str, warnings: Vec<String>) -> Response {
    let body =
        serde_json::to_string(&ProbeBody { status, warnings }).expect("a probe body serializes");
    json_response(StatusCode::OK, body)
}

/// Liveness: the process serves.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses((status = 200, description = "`{\"status\":\"ok\"}`", body = ProbeBody))
)]
async fn healthz() -> Response {
    probe("ok")
}

/// Readiness: the store is reachable and migrated; `warnings` lists what the store warns about
/// while ready (e.g. asynchronous standbys, docs/semantics.md §14).
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "`{\"status\":\"ready\"}`, with `warnings` when the store has any", body = ProbeBody),
        (status = 503, description = "`NOT_READY`", body = openapi::Problem, content_type = "application/problem+json"),
    )
)]
async fn readyz(State(state): State<AppState>) -> Result<Response, ApiError> {
    let warnings = state.engine.readiness().await.map_err(|reason| {
        tracing::warn!(%reason, "not ready");
        ApiError::NotReady(format!("not ready: {reason}"))
    })?;
    Ok(probe_with("ready", warnings))
}

/// Prometheus metrics of this process (the names are listed in `carmy::metrics`).
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses((status = 200, description = "The Prometheus text exposition", body = String, content_type = "text/plain"))
)]
async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        state.engine.metrics_text().await,
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
