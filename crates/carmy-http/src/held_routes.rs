//! Executions held by a client (docs/semantics.md §16): `POST /v1/held` reserves an identity
//! for work the caller runs itself, `POST /v1/held/{id}/renew` extends the holder's lease and
//! `POST /v1/held/{id}/outcome` records what its function returned. Refusals are the API's
//! usual problem documents ([`crate::error`]).

use crate::bodies::ExecutionPath;
use crate::error::ApiError;
use crate::extractors::Principal;
use crate::openapi;
use crate::recovery::{Decision, DecisionProblems};
use crate::routes::{
    call_body, invalid, json_response, request_id, session_id, tool_name, AppState, REPLAYED_HEADER,
};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use carmy::call::{CallRequest, ValidatedCall};
use carmy::engine::{HeldAnswer, HeldOutcome};
use carmy::held::{check_lease, HoldToken};
use carmy::outcome::{ExecutionError, ExecutionStatus};
use chrono::SecondsFormat;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use utoipa::ToSchema;

/// The body of `POST /v1/held`: a call as for `POST /v1/executions` (a `request_id` is
/// required), and the lease the holder asks for.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"tool": "charge_card", "arguments": {"customer": "cus_42", "amount": 500}, "request_id": "charge-7f3", "lease_ms": 30000}))]
pub(crate) struct HoldRequest {
    /// A client-held tool (`GET /v1/tools` lists it with `"held_by_client": true`).
    #[schema(min_length = 1, max_length = 255)]
    #[serde(deserialize_with = "tool_name")]
    tool: String,
    /// The function's arguments; they must satisfy the tool's `input_schema`.
    #[schema(value_type = Object)]
    arguments: Box<RawValue>,
    /// The caller's id for this call, the same on every retry (required here).
    #[serde(default, deserialize_with = "request_id")]
    #[schema(value_type = String, min_length = 1, max_length = 255)]
    request_id: Option<String>,
    /// The session (default `default`), part of the identity.
    #[serde(default, deserialize_with = "session_id")]
    #[schema(value_type = String, min_length = 1, max_length = 255)]
    session_id: Option<String>,
    /// Caller data that is part of the fingerprint: an object, or `null`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    metadata: Option<Box<RawValue>>,
    /// How long each reservation or renewal keeps the holder's lease, in milliseconds (500 to
    /// 600000; default 30000). Renew every third of it.
    #[serde(default)]
    #[schema(minimum = 500, maximum = 600_000)]
    lease_ms: Option<u64>,
}

/// A reservation for the caller: run the function, renew, record (201).
#[derive(Serialize, ToSchema)]
pub(crate) struct HeldBody {
    /// The execution the caller holds.
    #[schema(value_type = String, example = "exec_5f0c9d2e4b7a4c1e9f3a6b8d0c2e4f6a")]
    execution_id: String,
    /// `reserved`.
    state: &'static str,
    /// The fencing token: send it to renew and to record; a record with a token that no
    /// longer holds the execution is refused and kept as a late arrival.
    #[schema(example = "hold_0a1b2c3d4e5f60718293a4b5c6d7e8f9")]
    fencing_token: String,
    /// The lease granted, in milliseconds.
    lease_ms: u64,
    /// Until when the lease is surely live (RFC 3339, UTC).
    lease_expires_at: String,
    /// The tool.
    tool: String,
    /// The request id.
    request_id: String,
    /// The session.
    session_id: String,
    /// Present only when this reservation replaced a released execution (docs/semantics.md
    /// §12.1, "A rerun says so"): `{"execution_id", "ended": "released", "by", "note"}`. The
    /// released execution's effect, if it happened after all, would happen twice.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    rerun_of: Option<Value>,
}

/// The body of a renewal.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RenewBody {
    /// The token `POST /v1/held` gave.
    fencing_token: String,
    /// The new lease in milliseconds (default 30000).
    #[serde(default)]
    lease_ms: Option<u64>,
}

/// A renewed lease.
#[derive(Serialize, ToSchema)]
pub(crate) struct RenewedBody {
    /// The execution.
    execution_id: String,
    /// The lease granted, in milliseconds.
    lease_ms: u64,
    /// Until when the lease is surely live (RFC 3339, UTC).
    lease_expires_at: String,
}

/// The body of `POST /v1/held/{id}/outcome`: what the function returned.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OutcomeBody {
    /// The token `POST /v1/held` gave.
    fencing_token: String,
    /// `completed`, `failed`, `timed_out` or `cancelled`.
    #[schema(pattern = "^(completed|failed|timed_out|cancelled)$")]
    status: String,
    /// The function's value (for `completed`).
    #[serde(default)]
    #[schema(value_type = Object)]
    data: Value,
    /// The function's error (for the other statuses); `effect: "unknown"` when its effect may
    /// have happened.
    #[serde(default)]
    error: Option<ExecutionError>,
}

fn rfc3339(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn token(text: &str) -> Result<HoldToken, ApiError> {
    HoldToken::parse(text).ok_or_else(|| {
        invalid("fencing_token must be the token POST /v1/held answered (hold_ and 32 hex digits)")
    })
}

/// Reserves an identity for work the caller runs itself (docs/semantics.md §16).
#[utoipa::path(
    post,
    path = "/v1/held",
    tag = "held",
    security(("bearer" = [])),
    request_body(content = HoldRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "Reserved for the caller: run the function, renew the lease, record the outcome", body = HeldBody),
        (status = 200, description = "The identity's recorded outcome (`replayed: true`): do not run the function", body = openapi::ExecutionAnswer,
            headers(("Idempotent-Replayed" = bool, description = "`true`"))),
        (status = 400, description = "`INVALID_REQUEST`: bad body, no `request_id`, a tool the gateway runs itself, arguments failing the schema, or a store without client holds", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 401, response = openapi::Unauthorized),
        (status = 404, description = "`UNKNOWN_TOOL`", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 408, description = "`REQUEST_TIMEOUT`: the body did not arrive in time", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`: send `Content-Type: application/json`", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`IDEMPOTENCY_CONFLICT` or `EXECUTION_UNCERTAIN` (`running`: another holder works on it; `interrupted`: its holder stopped renewing, reconcile)", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 503, response = openapi::Unavailable),
    )
)]
pub(crate) async fn hold_execution(
    State(state): State<AppState>,
    Principal(principal): Principal,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = call_body(&state, &headers, body)?;
    let request: HoldRequest = serde_json::from_slice(&body).map_err(invalid)?;
    let lease = check_lease(request.lease_ms).map_err(invalid)?;
    let call = ValidatedCall::parse(
        principal,
        CallRequest {
            tool: &request.tool,
            arguments: request.arguments.get(),
            request_id: request.request_id.as_deref(),
            session_id: request.session_id.as_deref(),
            metadata: request.metadata.as_deref().map(RawValue::get),
        },
    )?;
    let key = call.key();
    match state.engine.hold(call, lease).await? {
        HeldAnswer::Reserved(reserved) => {
            let key = key.expect("a reservation has an identity");
            let body = HeldBody {
                execution_id: reserved.execution_id.as_str().to_owned(),
                state: "reserved",
                fencing_token: reserved.token.as_str().to_owned(),
                lease_ms: u64::try_from(reserved.lease.as_millis()).unwrap_or(u64::MAX),
                lease_expires_at: rfc3339(reserved.lease_expires_at),
                tool: request.tool,
                request_id: key.request_id,
                session_id: key.session_id,
                rerun_of: reserved.rerun_of.as_ref().map(crate::bodies::rerun_of),
            };
            let text = serde_json::to_string(&body).map_err(|_| ApiError::Internal)?;
            Ok(json_response(StatusCode::CREATED, text))
        }
        HeldAnswer::Replay(answer) => {
            let mut response = json_response(
                StatusCode::OK,
                answer.result.to_response_json(true, answer.expires_at),
            );
            response
                .headers_mut()
                .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
            Ok(response)
        }
    }
}

/// Extends the holder's lease while its function runs (docs/semantics.md §16).
#[utoipa::path(
    post,
    path = "/v1/held/{execution_id}/renew",
    tag = "held",
    security(("bearer" = [])),
    params(ExecutionPath),
    request_body(content = RenewBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Renewed", body = RenewedBody),
        (status = 400, description = "`INVALID_REQUEST`", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`EXECUTION_FINISHED`: the holder lost it (it has an outcome, or was decided or released while its lease had lapsed); stop and do not record", body = openapi::Problem, content_type = "application/problem+json"),
        DecisionProblems,
    )
)]
pub(crate) async fn renew_hold(
    State(state): State<AppState>,
    Principal(principal): Principal,
    Decision { execution_id, body }: Decision<RenewBody>,
) -> Result<Response, ApiError> {
    let lease = check_lease(body.lease_ms).map_err(invalid)?;
    let token = token(&body.fencing_token)?;
    let until = state
        .engine
        .renew_hold(&principal, &execution_id, token, lease)
        .await?;
    let body = RenewedBody {
        execution_id: execution_id.as_str().to_owned(),
        lease_ms: u64::try_from(lease.as_millis()).unwrap_or(u64::MAX),
        lease_expires_at: rfc3339(until),
    };
    let text = serde_json::to_string(&body).map_err(|_| ApiError::Internal)?;
    Ok(json_response(StatusCode::OK, text))
}

/// Records what the holder's function returned (docs/semantics.md §16).
#[utoipa::path(
    post,
    path = "/v1/held/{execution_id}/outcome",
    tag = "held",
    security(("bearer" = [])),
    params(ExecutionPath),
    request_body(content = OutcomeBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Recorded (`replayed: false`); every retry of the call now replays it", body = openapi::ExecutionAnswer),
        (status = 400, description = "`INVALID_REQUEST`: bad body, or an outcome that does not fit its status; nothing recorded", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`EXECUTION_SUPERSEDED`: the execution was decided after the holder's lease lapsed; the outcome is kept as a late arrival in the audit log, not the record", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`EXECUTION_UNCERTAIN`: recorded in the background once the store answers (retry the same record) or `STORE_UNAVAILABLE`", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 401, response = openapi::Unauthorized),
        (status = 404, description = "`NOT_FOUND`: no such execution of this principal held with this token", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "`PAYLOAD_TOO_LARGE`", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 415, description = "`UNSUPPORTED_MEDIA_TYPE`", body = openapi::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn record_held(
    State(state): State<AppState>,
    Principal(principal): Principal,
    Decision { execution_id, body }: Decision<OutcomeBody>,
) -> Result<Response, ApiError> {
    let token = token(&body.fencing_token)?;
    let status = ExecutionStatus::parse(&body.status)
        .ok_or_else(|| invalid("status must be one of completed, failed, timed_out, cancelled"))?;
    let outcome = HeldOutcome {
        status,
        data: body.data,
        error: body.error,
    };
    let answer = state
        .engine
        .record_held(&principal, &execution_id, &token, outcome)
        .await?;
    let mut response = json_response(
        StatusCode::OK,
        answer.result.to_response_json(false, answer.expires_at),
    );
    response
        .headers_mut()
        .insert(REPLAYED_HEADER, HeaderValue::from_static("false"));
    Ok(response)
}
