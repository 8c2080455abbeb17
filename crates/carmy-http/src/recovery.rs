//! The recovery routes (docs/semantics.md §12.1): `POST /v1/executions/{id}/resolve`,
//! `POST /v1/executions/{id}/release` and `GET /v1/executions` (listing, and lookup by
//! identity), plus the one body of a record read by id.

use crate::bodies::{ExecutionPath, ExecutionState, InFlightBody, ListAnswer, NO_SUCH_EXECUTION};
use crate::error::ApiError;
use crate::extractors::{acting_principal, AuthenticatedCaller};
use crate::openapi;
use crate::routes::{
    execution_id_from_path, invalid, is_json_content_type, json_response, AppState,
};
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use carmy::auth::Caller;
use carmy::decision::ExecutionQuery;
use carmy::engine::{Release, Resolve};
use carmy::identity::validate_identifier;
use carmy::outcome::{ExecutionError, ExecutionId, ExecutionStatus};
use carmy::store::{ExecutionLookup, InFlightState, RecordState, DEFAULT_SESSION};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

/// How many records `GET /v1/executions` lists when the query names no `limit`.
const DEFAULT_LIST_LIMIT: usize = 100;

/// The body of `POST /v1/executions/{id}/resolve`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ResolveBody {
    /// The outcome reconciliation found: `completed`, `failed`, `timed_out` or `cancelled`.
    #[schema(pattern = "^(completed|failed|timed_out|cancelled)$")]
    status: String,
    /// The outcome's `data` (for `completed`).
    #[serde(default)]
    #[schema(value_type = Object)]
    data: Value,
    /// The outcome's `error` (for the other statuses).
    #[serde(default)]
    error: Option<ExecutionError>,
    /// Why: what reconciliation found (required, recorded in the audit log).
    #[schema(min_length = 1, max_length = 4096)]
    note: String,
    /// Also decide an execution that is still `running` (check that its owner is gone first).
    #[serde(default)]
    force: bool,
}

/// The body of `POST /v1/executions/{id}/release`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ReleaseBody {
    /// Why (required, recorded in the audit log).
    #[schema(min_length = 1, max_length = 4096)]
    note: String,
    /// Also release an execution that is still `running`.
    #[serde(default)]
    force: bool,
}

/// The query of `GET /v1/executions`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    /// Only executions in this state: `running` or `interrupted`.
    #[param(pattern = "^(running|interrupted)$")]
    state: Option<String>,
    /// The caller's record for this request_id (with `session_id`, default `default`); `state`
    /// and `arguments` given beside it filter it too (404 when it does not match them).
    request_id: Option<String>,
    /// The session of `request_id`, or a filter of the listing.
    session_id: Option<String>,
    /// At most this many records (default 100).
    limit: Option<usize>,
    /// Only executions whose kept arguments contain this JSON object, e.g.
    /// `{"customer":"cus_42"}` (docs/semantics.md §8.5).
    arguments: Option<String>,
}

/// What a decision route reads from its request (docs/semantics.md §12.1): the execution id from
/// the path (404 when it cannot name one) and then the body, JSON read strictly into `T`
/// (400, or 415 for another content type).
pub(super) struct Decision<T> {
    pub(super) execution_id: ExecutionId,
    pub(super) body: T,
}

impl<T: DeserializeOwned> FromRequest<AppState> for Decision<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let (mut parts, body) = request.into_parts();
        let path = Path::<String>::from_request_parts(&mut parts, state).await;
        let execution_id = execution_id_from_path(path)?;
        let headers = parts.headers.clone();
        let bytes = Bytes::from_request(Request::from_parts(parts, body), state).await;
        let body = read_body(&headers, bytes)?;
        Ok(Self { execution_id, body })
    }
}

/// The answers both decision routes share besides 200, 400 and 409.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // describes the responses only
pub(super) enum DecisionProblems {
    #[response(status = 401)]
    Unauthorized(#[ref_response] openapi::Unauthorized),
    #[response(status = 404, description = NO_SUCH_EXECUTION, content_type = "application/problem+json")]
    NotFound(openapi::Problem),
    #[response(
        status = 413,
        description = "`PAYLOAD_TOO_LARGE`",
        content_type = "application/problem+json"
    )]
    PayloadTooLarge(openapi::Problem),
    #[response(
        status = 415,
        description = "`UNSUPPORTED_MEDIA_TYPE`",
        content_type = "application/problem+json"
    )]
    UnsupportedMediaType(openapi::Problem),
    #[response(status = 503)]
    Unavailable(#[ref_response] openapi::Unavailable),
}

/// Reads a JSON body strictly (duplicate members refused) into `T`.
fn read_body<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let body = body.map_err(|rejection| invalid(rejection.body_text()))?;
    if !is_json_content_type(headers) {
        return Err(ApiError::UnsupportedMediaType);
    }
    let text = std::str::from_utf8(&body).map_err(|_| invalid("the body is not UTF-8"))?;
    let value = carmy::strict_json::parse(text).map_err(invalid)?;
    serde_json::from_value(value).map_err(invalid)
}

/// Records the outcome that reconciliation found for an uncertain execution
/// (docs/semantics.md §12.1).
#[utoipa::path(
    post,
    path = "/v1/executions/{execution_id}/resolve",
    tag = "recovery",
    security(("bearer" = [])),
    params(ExecutionPath),
    request_body(content = ResolveBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The record as it now replays, with `resolution: {by, at, note}`", body = crate::bodies::RecordBody),
        (status = 400, description = "`INVALID_REQUEST`: bad body, status, note or outcome", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`EXECUTION_FINISHED` (already decided: it has an outcome or was released; nothing changed) or `EXECUTION_RUNNING` (still running: send `force: true` once its owner is known to be gone)", body = openapi::Problem, content_type = "application/problem+json"),
        DecisionProblems,
    )
)]
pub(super) async fn resolve_execution(
    State(state): State<AppState>,
    AuthenticatedCaller(caller): AuthenticatedCaller,
    Decision { execution_id, body }: Decision<ResolveBody>,
) -> Result<Response, ApiError> {
    let status = ExecutionStatus::parse(&body.status)
        .ok_or_else(|| invalid("status must be one of completed, failed, timed_out, cancelled"))?;
    let resolve = Resolve {
        status,
        data: body.data,
        error: body.error,
        note: body.note,
        force: body.force,
    };
    let result = state
        .engine
        .resolve(&caller, &execution_id, resolve)
        .await?;
    let body = result.to_body_json(state.engine.expires_at(&result));
    Ok(json_response(StatusCode::OK, body))
}

/// Frees an uncertain execution's identity so the next attempt runs the tool; the execution
/// stays in history (docs/semantics.md §12.1).
#[utoipa::path(
    post,
    path = "/v1/executions/{execution_id}/release",
    tag = "recovery",
    security(("bearer" = [])),
    params(ExecutionPath),
    request_body(content = ReleaseBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The released execution (`status: released`, `resolution: {by, at, note}`)", body = ExecutionState),
        (status = 400, description = "`INVALID_REQUEST`: bad body or note", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`EXECUTION_FINISHED` (already decided) or `EXECUTION_RUNNING` (still running: send `force: true` once its owner is known to be gone)", body = openapi::Problem, content_type = "application/problem+json"),
        DecisionProblems,
    )
)]
pub(super) async fn release_execution(
    State(state): State<AppState>,
    AuthenticatedCaller(caller): AuthenticatedCaller,
    Decision { execution_id, body }: Decision<ReleaseBody>,
) -> Result<Response, ApiError> {
    let release = Release {
        note: body.note,
        force: body.force,
    };
    let released = state
        .engine
        .release(&caller, &execution_id, release)
        .await?;
    let body = InFlightBody {
        execution_id: &released.execution_id,
        status: "released",
        data: (),
        error: (),
        tool: &released.tool,
        request_id: &released.key.request_id,
        session_id: &released.key.session_id,
        resolution: Some(&released.resolution),
        expires_at: rfc3339(state.engine.history_expires_at(released.resolution.at)),
        arguments: None,
    };
    Ok(json_response(StatusCode::OK, to_json(&body)))
}

#[utoipa::path(
    get,
    path = "/v1/executions",
    tag = "recovery",
    security(("bearer" = [])),
    params(ListQuery),
    responses(
        (status = 200, description = "With `request_id`: that identity's record; otherwise `{\"executions\": [...]}`", body = ListAnswer),
        (status = 400, description = "`INVALID_REQUEST`: a bad query member", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 401, response = openapi::Unauthorized),
        (status = 404, description = "`NOT_FOUND`: no record for this request_id and session_id", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 503, response = openapi::Unavailable),
    )
)]
/// `GET /v1/executions`: with `request_id`, the caller's record for the identity
/// (`session_id` defaults to `default`; 404 when none, or when `state` or `arguments` given
/// beside it do not match it); otherwise the caller's records (an
/// operator's: every principal's), optionally only those `running` or `interrupted`.
pub(super) async fn list_executions(
    State(state): State<AppState>,
    headers: HeaderMap,
    AuthenticatedCaller(caller): AuthenticatedCaller,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|rejection| invalid(rejection.body_text()))?;
    let in_flight = match query.state.as_deref() {
        None => None,
        Some("running") => Some(InFlightState::Running),
        Some("interrupted") => Some(InFlightState::Interrupted),
        Some(_) => return Err(invalid("state must be running or interrupted")),
    };
    for (field, value) in [
        ("request_id", &query.request_id),
        ("session_id", &query.session_id),
    ] {
        if let Some(value) = value {
            validate_identifier(field, value).map_err(invalid)?;
        }
    }
    let arguments = query
        .arguments
        .as_deref()
        .map(carmy::arguments::search_value)
        .transpose()
        .map_err(invalid)?;
    if let Some(request_id) = query.request_id {
        let session_id = query.session_id.unwrap_or_else(|| DEFAULT_SESSION.into());
        // An identity names one principal's record: the caller's own. An operator key is no
        // principal (docs/semantics.md §6): it lists by state or session instead. A token with
        // the operator scope is its own principal too (§6.1): it looks up its own identity.
        let caller = if caller.operator.is_some() {
            Caller::principal(acting_principal(&state.credentials, &headers).await?)
        } else {
            caller
        };
        // Every filter given applies: `arguments` too (docs/semantics.md §12.4).
        let found = state
            .engine
            .list_matching(
                &caller,
                ExecutionQuery {
                    in_flight,
                    session_id: Some(session_id),
                    request_id: Some(request_id),
                    arguments,
                    limit: 1,
                    ..ExecutionQuery::default()
                },
            )
            .await?;
        let found = found.first().ok_or(ApiError::NotFound(
            "no record for this request_id and session_id (that matches the filters given)".into(),
        ))?;
        return Ok(json_response(
            StatusCode::OK,
            record_body(&state.engine, found),
        ));
    }
    let found = state
        .engine
        .list_matching(
            &caller,
            ExecutionQuery {
                in_flight,
                session_id: query.session_id,
                arguments,
                limit: query.limit.unwrap_or(DEFAULT_LIST_LIMIT),
                ..ExecutionQuery::default()
            },
        )
        .await?;
    let bodies: Vec<String> = found
        .iter()
        .map(|found| record_body(&state.engine, found))
        .collect();
    Ok(json_response(
        StatusCode::OK,
        format!("{{\"executions\":[{}]}}", bodies.join(",")),
    ))
}

fn to_json(body: &InFlightBody<'_>) -> String {
    serde_json::to_string(body).expect("a record body always serializes")
}

/// An instant as records write it (UTC, RFC 3339 with milliseconds).
fn rfc3339(at: Option<chrono::DateTime<chrono::Utc>>) -> Option<String> {
    at.map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

/// The JSON of a record read back (`GET /v1/executions/{id}` and listings): a finished
/// record's stored text with its `expires_at`, else an [`InFlightBody`] (`expires_at` `null`
/// while running or interrupted: such a record never expires; a released one's history
/// expires with the retention counted from its release, docs/semantics.md §12.9).
pub(super) fn record_body(engine: &carmy::engine::Engine, found: &ExecutionLookup) -> String {
    let arguments = kept_arguments(found.arguments.as_deref());
    let (status, expires_at) = match (&found.released, &found.record.state) {
        (None, RecordState::Finished(result)) => {
            let body = result.to_body_json(engine.expires_at(result));
            return match (&arguments, body.strip_suffix('}')) {
                (Some(arguments), Some(open)) => {
                    format!("{open},\"arguments\":{}}}", arguments.get())
                }
                _ => body,
            };
        }
        (Some(released), _) => ("released", engine.history_expires_at(released.at)),
        (None, RecordState::InFlight(in_flight)) => (in_flight.as_str(), None),
    };
    to_json(&InFlightBody {
        execution_id: &found.record.execution_id,
        status,
        data: (),
        error: (),
        tool: &found.record.tool,
        request_id: &found.key.request_id,
        session_id: &found.key.session_id,
        resolution: found.released.as_ref(),
        expires_at: rfc3339(expires_at),
        arguments: arguments.as_deref(),
    })
}

/// The kept arguments as a JSON value to embed (docs/semantics.md §8.5). The text is JSON as
/// the gateway wrote it; a row a DBA changed into text that is not JSON is shown as a JSON
/// string of that text rather than breaking the body.
fn kept_arguments(text: Option<&str>) -> Option<Box<serde_json::value::RawValue>> {
    let text = text?;
    serde_json::value::RawValue::from_string(text.to_owned())
        .or_else(|_| {
            serde_json::value::to_raw_value(text).map_err(|error| {
                tracing::error!(%error, "kept arguments that cannot be shown");
            })
        })
        .ok()
}

/// The `wait` preference of a request's `Prefer` headers (RFC 7240 §4.3: `Prefer: wait=N`, N
/// whole seconds; several preferences may share a header, separated by commas). A malformed or
/// absent preference is ignored, as RFC 7240 asks; the engine caps the wait.
pub(super) fn prefer_wait(headers: &HeaderMap) -> Option<std::time::Duration> {
    headers
        .get_all(axum::http::header::HeaderName::from_static("prefer"))
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|preference| {
            let (name, value) = preference.split(';').next()?.split_once('=')?;
            if !name.trim().eq_ignore_ascii_case("wait") {
                return None;
            }
            let seconds: u64 = value.trim().trim_matches('"').parse().ok()?;
            Some(std::time::Duration::from_secs(seconds))
        })
        .next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use std::time::Duration;

    #[test]
    fn the_wait_preference() {
        let wait = |values: &[&str]| {
            let mut headers = HeaderMap::new();
            for value in values {
                headers.append("prefer", HeaderValue::from_str(value).unwrap());
            }
            prefer_wait(&headers)
        };
        assert_eq!(wait(&["wait=5"]), Some(Duration::from_secs(5)));
        assert_eq!(
            wait(&["respond-async, Wait = 10"]),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            wait(&["handling=strict", "wait=\"2\""]),
            Some(Duration::from_secs(2))
        );
        assert_eq!(wait(&["wait=-1"]), None);
        assert_eq!(wait(&["wait=soon"]), None);
        assert_eq!(wait(&[]), None);
    }
}
