//! The one error type of the HTTP API, answered as RFC 9457 problem details (docs/semantics.md §5),
//! and the one mapping of the engine's refusals to it. The details' texts (what happened and
//! what to do next) are in `detail`.

mod detail;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use carmy::auth::{AuthError, TokenRefusal};
use carmy::call::CallRejected;
use carmy::engine::Refusal;
use carmy::outcome::ExecutionId;
use carmy::store::InFlightState;
use detail::{
    conflict_detail, not_executed_detail, retry_after_seconds, superseded_detail, uncertain_detail,
    unknown_tool_detail,
};
use serde::Serialize;

/// The media type of every error body (RFC 9457 §3).
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Everything the API can answer with a non-2xx status. Each variant has a fixed HTTP status and
/// machine `code` (docs/semantics.md §3, §5); no variant carries database text or another
/// principal's data.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// 400 `INVALID_REQUEST`: bad JSON, bad identifiers, arguments rejected by the schema.
    #[error("{0}")]
    InvalidRequest(String),
    /// 404 `UNKNOWN_TOOL`: the detail is the engine's text ([`Refusal::UnknownTool`], naming the
    /// closest registered tool, if one is close) and points to `GET /v1/tools`.
    #[error("{}", unknown_tool_detail(.tool, .closest.as_deref()))]
    UnknownTool {
        /// The name the call gave.
        tool: String,
        /// The registered tool closest to it.
        closest: Option<String>,
    },
    /// 401 `UNAUTHORIZED`: missing or unknown API key (docs/semantics.md §6).
    #[error("{}", carmy::auth::AuthError::Unauthorized)]
    Unauthorized,
    /// 401 `UNAUTHORIZED`: an `Authorization` header sent to a server that has no API keys
    /// (docs/semantics.md §6): it cannot be checked, so the call is not run as `anonymous`.
    #[error("{}", carmy::auth::AuthError::NoApiKeys)]
    NoApiKeys,
    /// 401 `UNAUTHORIZED`: an operator key (`CARMY_OPERATOR_KEYS`) on a route that acts as a
    /// principal (docs/semantics.md §6): operators list, show and decide; they are no principal.
    #[error("this is an operator key: it lists and reads executions (GET /v1/executions, GET /v1/executions/{{id}}) and decides them (POST /v1/executions/{{id}}/resolve or /release), but it is not a principal and cannot call tools, cancel an execution or look one up by its request_id as one; send an API key (CARMY_API_KEYS) for that")]
    OperatorKey,
    /// A refused credential on a server that accepts OAuth access tokens (docs/semantics.md
    /// §6.1): 401 `UNAUTHORIZED` (no or an unknown credential, an operator key where a
    /// principal acts), 401 `INVALID_TOKEN`, 403 `INSUFFICIENT_SCOPE`, or 503
    /// `TOKEN_KEYS_UNAVAILABLE`; `WWW-Authenticate` is `challenge`.
    #[error("{}", refused_detail(.refused))]
    Refused {
        /// Why the credential was refused.
        refused: carmy::auth::AuthError,
        /// The `WWW-Authenticate` value ([`carmy::auth::Credentials::challenge`]).
        challenge: String,
    },
    /// 404 `NOT_FOUND`: no such route, or no such execution for this principal.
    #[error("{0}")]
    NotFound(String),
    /// 405 `METHOD_NOT_ALLOWED`.
    #[error("method not allowed on this path")]
    MethodNotAllowed,
    /// 413 `PAYLOAD_TOO_LARGE`: the body exceeds the configured limit (bytes).
    #[error("the request body exceeds the limit of {limit} bytes")]
    PayloadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// 413 `ARGUMENTS_TOO_LARGE`: the arguments, as they would be kept with the execution, are
    /// over the limit of a record (docs/semantics.md §8.5); nothing was reserved.
    #[error("{0}")]
    ArgumentsTooLarge(String),
    /// 408 `REQUEST_TIMEOUT`: the body did not arrive within the body timeout.
    #[error("the request body did not arrive in time")]
    RequestTimeout,
    /// 415 `UNSUPPORTED_MEDIA_TYPE`: the body is not declared `application/json`.
    #[error("the request body must be sent with Content-Type: application/json")]
    UnsupportedMediaType,
    /// 409 `IDEMPOTENCY_CONFLICT`: same identity, different fingerprint; `differs` names the
    /// parts that differ when the record keeps their digests (docs/semantics.md §12.8).
    #[error("{}", conflict_detail(.differs.as_deref()))]
    IdempotencyConflict {
        /// The execution that holds the identity.
        execution_id: ExecutionId,
        /// `tool`, `arguments`, `metadata`: the parts that differ; `None` when unknown.
        differs: Option<Vec<&'static str>>,
    },
    /// 409 `EXECUTION_UNCERTAIN`: same identity and fingerprint, not finished. `Retry-After`
    /// carries `retry_after` (whole seconds) when it is known, for `running`.
    #[error("{}", uncertain_detail(*.state, *.reconciling, *.retry_after))]
    ExecutionUncertain {
        /// The execution that holds the identity.
        execution_id: ExecutionId,
        /// `running` or `interrupted`.
        state: InFlightState,
        /// Its tool's probe is asking the upstream (docs/semantics.md §12.10).
        reconciling: bool,
        /// How long to wait before retrying ([`Refusal::Uncertain`]'s `retry_after`).
        retry_after: Option<std::time::Duration>,
    },
    /// 503 `EXECUTION_UNCERTAIN`: the tool ran but its outcome could not be recorded yet; the
    /// process keeps retrying and a later retry replays it (docs/semantics.md §4).
    #[error("the tool ran but its outcome could not be recorded yet; retry the same call later to get it")]
    RecordingPending {
        /// The execution that ran.
        execution_id: ExecutionId,
    },
    /// 409 `EXECUTION_FINISHED`: a cancel request or a decision (resolve, release) for an
    /// execution that already has an outcome or was released; the record is unchanged (`GET
    /// /v1/executions/{id}` shows it).
    #[error("the execution already has an outcome or was released; nothing was changed (GET /v1/executions/{{execution_id}} shows the record)")]
    ExecutionFinished {
        /// The finished execution.
        execution_id: ExecutionId,
    },
    /// 409 `EXECUTION_RUNNING`: a decision (resolve, release) on an execution whose owner still
    /// holds its lease (docs/semantics.md §12.1); nothing changed.
    #[error("the execution's owner is alive and its tool may still record an outcome; wait for it (GET /v1/executions/{{execution_id}}), or repeat the decision with \"force\": true once reconciliation shows what happened")]
    ExecutionRunning {
        /// The running execution.
        execution_id: ExecutionId,
    },
    /// 409 `EXECUTION_SUPERSEDED`: the tool finished after its execution was decided
    /// (docs/semantics.md §12.1); its outcome is kept in the audit log, not the record.
    #[error("{}", superseded_detail(.current.as_ref()))]
    ExecutionSuperseded {
        /// The execution whose outcome arrived late.
        execution_id: ExecutionId,
        /// The execution that holds the identity now.
        current: Option<ExecutionId>,
    },
    /// 507 `IDEMPOTENCY_CAPACITY`: the in-memory store is full; nothing ran.
    #[error("the idempotency store is full; nothing was run or recorded")]
    Capacity,
    /// 503 `STORE_UNAVAILABLE`: the store failed before the tool ran; nothing ran.
    #[error("the idempotency store is unavailable; nothing was run")]
    StoreUnavailable,
    /// 503 with the tool's own code (e.g. `UPSTREAM_UNAVAILABLE`): the tool reported that its
    /// effect provably did not happen; nothing was recorded and the identity is free again
    /// (docs/semantics.md §4, §10). `Retry-After` carries the tool's pause, in whole seconds.
    /// For an attempt that took an interrupted execution over (`handed_back`), only this
    /// attempt had no effect: the execution reads interrupted again (docs/semantics.md §12.7).
    #[error("{}", not_executed_detail(message, handed_back.as_ref(), *.retry_after))]
    NotExecuted {
        /// The tool's machine code.
        code: String,
        /// The tool's explanation.
        message: String,
        /// The pause the tool asked for.
        retry_after: Option<std::time::Duration>,
        /// The execution this attempt took over and handed back, whose earlier attempt's
        /// effect is unknown; `None` for a first attempt (the identity is free).
        handed_back: Option<ExecutionId>,
    },
    /// 503 `NOT_READY`: `/readyz` failed.
    #[error("{0}")]
    NotReady(String),
    /// 500 `RECORD_DAMAGED`: the identity's record exists but cannot be read back (a damaged
    /// row); the tool did run, nothing ran now (docs/semantics.md §5).
    #[error("the recorded outcome of execution {execution_id} cannot be read back ({problem}); the tool did run, so nothing was run again: an operator must repair the record (see docs/operations.md, \"Inspecting reservations with SQL\")")]
    RecordDamaged {
        /// The execution whose record is damaged.
        execution_id: ExecutionId,
        /// What is wrong.
        problem: String,
    },
    /// 500 `INTERNAL`: a bug. The detail is generic; the cause goes to the log.
    #[error("internal error")]
    Internal,
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Invalid(message) => Self::InvalidRequest(message),
            refusal @ Refusal::ArgumentsTooLarge { .. } => {
                Self::ArgumentsTooLarge(refusal.to_string())
            }
            Refusal::UnknownTool { tool, closest } => Self::UnknownTool { tool, closest },
            Refusal::Conflict {
                execution_id,
                differs,
            } => Self::IdempotencyConflict {
                execution_id,
                differs,
            },
            Refusal::Uncertain {
                execution_id,
                state,
                reconciling,
                retry_after,
            } => Self::ExecutionUncertain {
                execution_id,
                state,
                reconciling,
                retry_after,
            },
            Refusal::RecordingPending { execution_id } => Self::RecordingPending { execution_id },
            Refusal::Finished { execution_id } => Self::ExecutionFinished { execution_id },
            Refusal::StillRunning { execution_id } => Self::ExecutionRunning { execution_id },
            Refusal::Superseded {
                execution_id,
                current,
            } => Self::ExecutionSuperseded {
                execution_id,
                current,
            },
            Refusal::NotFound => Self::NotFound("no such execution".into()),
            Refusal::Capacity => Self::Capacity,
            Refusal::StoreUnavailable => Self::StoreUnavailable,
            Refusal::RecordDamaged {
                execution_id,
                problem,
            } => Self::RecordDamaged {
                execution_id,
                problem,
            },
            Refusal::NotExecuted {
                execution_id,
                handed_back,
                code,
                message,
                retry_after,
                ..
            } => Self::NotExecuted {
                handed_back: handed_back.then_some(execution_id),
                code,
                message,
                retry_after,
            },
            Refusal::Lost { execution_id } => {
                tracing::error!(%execution_id, "an execution's task ended without an outcome");
                Self::Internal
            }
            // `Refusal` is non-exhaustive: one added to carmy later is logged, never guessed at.
            other => {
                tracing::error!(refusal = %other, "the HTTP API got a refusal it does not know");
                Self::Internal
            }
        }
    }
}

impl From<carmy::auth::AuthError> for ApiError {
    fn from(error: carmy::auth::AuthError) -> Self {
        match error {
            carmy::auth::AuthError::Unauthorized => Self::Unauthorized,
            carmy::auth::AuthError::NoApiKeys => Self::NoApiKeys,
            carmy::auth::AuthError::OperatorKey => Self::OperatorKey,
            // Non-exhaustive: a refusal added to carmy later is logged, never guessed at.
            other => {
                tracing::error!(error = %other, "the HTTP API got an authentication error it does not know");
                Self::Internal
            }
        }
    }
}

/// The detail of [`ApiError::Refused`] (a server with tokens): the HTTP API's words for an
/// operator key, keys or tokens for a missing credential, the refusal's own otherwise.
fn refused_detail(refused: &carmy::auth::AuthError) -> String {
    match refused {
        carmy::auth::AuthError::OperatorKey => ApiError::OperatorKey.to_string(),
        carmy::auth::AuthError::Unauthorized => carmy::auth::KEY_OR_TOKEN_REQUIRED.to_owned(),
        other => other.to_string(),
    }
}

impl From<CallRejected> for ApiError {
    fn from(rejected: CallRejected) -> Self {
        Self::InvalidRequest(rejected.into_message())
    }
}

impl ApiError {
    /// The pause sent as `Retry-After`, if any.
    fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Self::NotExecuted { retry_after, .. }
            | Self::ExecutionUncertain { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            Self::UnknownTool { .. } | Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Unauthorized | Self::NoApiKeys | Self::OperatorKey => StatusCode::UNAUTHORIZED,
            Self::Refused { refused, .. } => match refused {
                AuthError::Token(TokenRefusal::MissingScope) => StatusCode::FORBIDDEN,
                AuthError::Token(TokenRefusal::KeysUnavailable) => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::UNAUTHORIZED,
            },
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::PayloadTooLarge { .. } | Self::ArgumentsTooLarge(_) => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            Self::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::IdempotencyConflict { .. }
            | Self::ExecutionUncertain { .. }
            | Self::ExecutionFinished { .. }
            | Self::ExecutionRunning { .. }
            | Self::ExecutionSuperseded { .. } => StatusCode::CONFLICT,
            Self::RecordingPending { .. }
            | Self::StoreUnavailable
            | Self::NotReady(_)
            | Self::NotExecuted { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Capacity => StatusCode::INSUFFICIENT_STORAGE,
            Self::Internal | Self::RecordDamaged { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The machine code (docs/semantics.md §3, §5), e.g. `IDEMPOTENCY_CONFLICT`; for
    /// [`ApiError::NotExecuted`], the tool's own code.
    pub fn code(&self) -> &str {
        match self {
            Self::NotExecuted { code, .. } => code,
            Self::InvalidRequest(_) => "INVALID_REQUEST",
            Self::UnknownTool { .. } => "UNKNOWN_TOOL",
            Self::Unauthorized | Self::NoApiKeys | Self::OperatorKey => "UNAUTHORIZED",
            Self::Refused { refused, .. } => match refused {
                AuthError::Token(TokenRefusal::MissingScope) => "INSUFFICIENT_SCOPE",
                AuthError::Token(TokenRefusal::KeysUnavailable) => "TOKEN_KEYS_UNAVAILABLE",
                AuthError::Token(_) => "INVALID_TOKEN",
                _ => "UNAUTHORIZED",
            },
            Self::NotFound(_) => "NOT_FOUND",
            Self::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            Self::PayloadTooLarge { .. } => "PAYLOAD_TOO_LARGE",
            Self::ArgumentsTooLarge(_) => "ARGUMENTS_TOO_LARGE",
            Self::RequestTimeout => "REQUEST_TIMEOUT",
            Self::UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
            Self::IdempotencyConflict { .. } => "IDEMPOTENCY_CONFLICT",
            Self::ExecutionUncertain { .. } | Self::RecordingPending { .. } => {
                "EXECUTION_UNCERTAIN"
            }
            Self::ExecutionFinished { .. } => "EXECUTION_FINISHED",
            Self::ExecutionRunning { .. } => "EXECUTION_RUNNING",
            Self::ExecutionSuperseded { .. } => "EXECUTION_SUPERSEDED",
            Self::Capacity => "IDEMPOTENCY_CAPACITY",
            Self::StoreUnavailable => "STORE_UNAVAILABLE",
            Self::NotReady(_) => "NOT_READY",
            Self::RecordDamaged { .. } => "RECORD_DAMAGED",
            Self::Internal => "INTERNAL",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Self::InvalidRequest(_) => "Invalid request",
            Self::UnknownTool { .. } => "Unknown tool",
            Self::Unauthorized | Self::NoApiKeys | Self::OperatorKey => "Unauthorized",
            Self::Refused { refused, .. } => match refused {
                AuthError::Token(TokenRefusal::MissingScope) => "Insufficient scope",
                AuthError::Token(TokenRefusal::KeysUnavailable) => "Token keys unavailable",
                AuthError::Token(_) => "Invalid token",
                _ => "Unauthorized",
            },
            Self::NotFound(_) => "Not found",
            Self::MethodNotAllowed => "Method not allowed",
            Self::PayloadTooLarge { .. } => "Payload too large",
            Self::ArgumentsTooLarge(_) => "Arguments too large to keep",
            Self::RequestTimeout => "Request timeout",
            Self::UnsupportedMediaType => "Unsupported media type",
            Self::IdempotencyConflict { .. } => "Idempotency conflict",
            Self::ExecutionUncertain { .. } | Self::RecordingPending { .. } => {
                "Execution uncertain"
            }
            Self::ExecutionFinished { .. } => "Execution finished",
            Self::ExecutionRunning { .. } => "Execution running",
            Self::ExecutionSuperseded { .. } => "Execution superseded",
            Self::Capacity => "Idempotency store full",
            Self::StoreUnavailable => "Store unavailable",
            Self::NotReady(_) => "Not ready",
            Self::NotExecuted { .. } => "Not executed",
            Self::RecordDamaged { .. } => "Record damaged",
            Self::Internal => "Internal error",
        }
    }

    fn execution_id(&self) -> Option<&ExecutionId> {
        match self {
            Self::IdempotencyConflict { execution_id, .. }
            | Self::ExecutionUncertain { execution_id, .. }
            | Self::RecordingPending { execution_id }
            | Self::ExecutionFinished { execution_id }
            | Self::RecordDamaged { execution_id, .. }
            | Self::ExecutionRunning { execution_id }
            | Self::ExecutionSuperseded { execution_id, .. } => Some(execution_id),
            Self::NotExecuted { handed_back, .. } => handed_back.as_ref(),
            _ => None,
        }
    }
}

/// The RFC 9457 body: `type`, `title`, `status`, `detail`, plus the extensions `code`,
/// `execution_id` (where an execution exists) and `state` (for `EXECUTION_UNCERTAIN`, and
/// `interrupted` for a tool's "not executed" answer to a rerun that was handed back,
/// docs/semantics.md §12.7).
/// Its OpenAPI schema is `Problem` (`GET /openapi.json`).
#[derive(Serialize, utoipa::ToSchema)]
#[schema(
    as = Problem,
    description = "An RFC 9457 problem: every answer outside 2xx (docs/semantics.md §5). Branch on `code`, never on the text."
)]
pub(crate) struct ProblemBody<'a> {
    /// `urn:carmy:problem:` and the code in lower case with `-` for `_`.
    #[serde(rename = "type")]
    kind: String,
    title: &'a str,
    /// The HTTP status.
    status: u16,
    /// What happened and what to do next, for people.
    detail: String,
    #[schema(schema_with = crate::openapi::problem_code_schema)]
    code: &'a str,
    /// The caller's execution that holds the identity, where one exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    execution_id: Option<&'a ExecutionId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crate::openapi::in_flight_state_schema)]
    state: Option<&'static str>,
    /// For `EXECUTION_SUPERSEDED`: the execution that holds the identity now.
    #[serde(skip_serializing_if = "Option::is_none")]
    current_execution_id: Option<&'a ExecutionId>,
    /// For `IDEMPOTENCY_CONFLICT`: which parts of the call differ from the recorded call's
    /// (`tool`, `arguments`, `metadata`; never their values). Absent when the record predates
    /// part digests.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crate::openapi::differs_schema)]
    differs: Option<&'a [&'static str]>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let code = self.code();
        let state = match &self {
            Self::ExecutionUncertain { state, .. } => Some(state.as_str()),
            Self::RecordingPending { .. } | Self::ExecutionRunning { .. } => {
                Some(InFlightState::Running.as_str())
            }
            Self::NotExecuted {
                handed_back: Some(_),
                ..
            } => Some(InFlightState::Interrupted.as_str()),
            _ => None,
        };
        let body = ProblemBody {
            kind: format!(
                "urn:carmy:problem:{}",
                code.to_ascii_lowercase().replace('_', "-")
            ),
            title: self.title(),
            status: status.as_u16(),
            detail: self.to_string(),
            code,
            execution_id: self.execution_id(),
            state,
            current_execution_id: match &self {
                Self::ExecutionSuperseded { current, .. } => current.as_ref(),
                _ => None,
            },
            differs: match &self {
                Self::IdempotencyConflict { differs, .. } => differs.as_deref(),
                _ => None,
            },
        };
        let mut text = serde_json::to_string(&body).expect("a problem body always serializes");
        // A body that ends with a newline does not run into the shell prompt after curl.
        text.push('\n');
        let mut response = (status, text).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if matches!(
            self,
            Self::Unauthorized | Self::NoApiKeys | Self::OperatorKey
        ) {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Self::Refused { challenge, .. } = &self {
            if let Ok(value) = HeaderValue::from_str(challenge) {
                headers.insert(header::WWW_AUTHENTICATE, value);
            }
        }
        if let Some(pause) = self.retry_after() {
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from(retry_after_seconds(pause)),
            );
        }
        response
    }
}
