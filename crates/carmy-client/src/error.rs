//! [`Error`]: every way a request can end without the answer asked for, typed by what the caller
//! should do next (docs/semantics.md §3, §5, §12).

use crate::wire::Problem;

/// Why an exchange with the gateway produced no HTTP answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransportKind {
    /// No connection could be made (refused, DNS, TLS handshake).
    Connect,
    /// No complete answer within the attempt's timeout.
    Timeout,
    /// The connection failed after the request started: reset, or closed before the answer
    /// or its body was complete.
    Interrupted,
    /// The request could not be built or sent at all (e.g. an invalid header value); retrying
    /// cannot help.
    Request,
}

impl TransportKind {
    /// Whether the request may have reached the gateway, so that a retry with the same
    /// request_id is the way to learn its outcome.
    pub fn is_retryable(self) -> bool {
        !matches!(self, Self::Request)
    }
}

/// A failed exchange: its [`TransportKind`] and the underlying error's text (with its causes).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct TransportError {
    /// What failed.
    pub kind: TransportKind,
    /// The error and its sources, joined with `: `.
    pub message: String,
}

impl TransportError {
    /// Classifies a `reqwest` error.
    pub(crate) fn from_reqwest(error: &reqwest::Error) -> Self {
        let kind = if error.is_builder() || error.is_redirect() {
            TransportKind::Request
        } else if error.is_timeout() {
            TransportKind::Timeout
        } else if error.is_connect() {
            TransportKind::Connect
        } else {
            TransportKind::Interrupted
        };
        let mut message = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Self { kind, message }
    }
}

/// The last failure before retries ran out: see [`Error::Unavailable`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// A problem answer that is retried (503, 502/504 from a proxy, ...).
    Problem(Box<Problem>),
    /// No answer at all.
    Transport(TransportError),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Problem(problem) => write!(
                f,
                "{} {}: {}",
                problem.status,
                problem.code.as_deref().unwrap_or("(no code)"),
                problem.detail
            ),
            Self::Transport(error) => error.fmt(f),
        }
    }
}

/// Every error of this client. The variants say what to do next:
///
/// - never retry with the same request_id: [`Conflict`](Self::Conflict),
///   [`InvalidRequest`](Self::InvalidRequest), [`UnknownTool`](Self::UnknownTool);
/// - reconcile before anything else: [`Interrupted`](Self::Interrupted) (the tool may or may
///   not have had its effect; never re-run automatically, docs/semantics.md §4);
/// - retry the same [`Call`](crate::Call) later: [`StillRunning`](Self::StillRunning),
///   [`Unavailable`](Self::Unavailable), [`Capacity`](Self::Capacity);
/// - fix the setup: [`Unauthorized`](Self::Unauthorized), [`Config`](Self::Config).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// 409 `IDEMPOTENCY_CONFLICT`: the request_id was already used for a different call.
    /// `differs` names the parts that differ (`tool`, `arguments`, `metadata`) when the gateway
    /// says. Never retried.
    #[error("request_id already used for a different call (execution {execution_id}; differs: {differs:?})")]
    Conflict {
        /// The execution that holds the identity.
        execution_id: String,
        /// The differing parts; empty when the gateway does not say.
        differs: Vec<String>,
    },
    /// 409 `EXECUTION_UNCERTAIN` with state `interrupted`: the process running the tool died
    /// and its outcome is unknown. Never retried: find out whether the effect happened, then
    /// resolve or release the execution (docs/semantics.md §12.1).
    #[error("execution {execution_id} was interrupted; its outcome is unknown")]
    Interrupted {
        /// The interrupted execution.
        execution_id: String,
    },
    /// A duplicate of the call was still running when the retry budget ran out (409
    /// `EXECUTION_UNCERTAIN` with state `running`). Execute the same call later to get its
    /// outcome.
    #[error("execution {execution_id} is still running")]
    StillRunning {
        /// The running execution.
        execution_id: String,
    },
    /// 507 `IDEMPOTENCY_CAPACITY`: the gateway's in-memory store is full; nothing ran.
    #[error("the gateway's idempotency store is full; nothing ran")]
    Capacity,
    /// 401 `UNAUTHORIZED`: missing or unknown API key.
    #[error("unauthorized: check the API key")]
    Unauthorized,
    /// 400 `INVALID_REQUEST`: the call was rejected before anything was reserved.
    #[error("invalid request: {detail}")]
    InvalidRequest {
        /// The gateway's explanation.
        detail: String,
    },
    /// 404 `UNKNOWN_TOOL`: the gateway has no such tool; nothing was reserved.
    #[error("unknown tool: {detail}")]
    UnknownTool {
        /// The gateway's explanation.
        detail: String,
    },
    /// 404 `NOT_FOUND`: no such execution for this principal (or no such route).
    #[error("not found: {detail}")]
    NotFound {
        /// The gateway's explanation.
        detail: String,
    },
    /// Retries ran out (attempts or deadline) on answers that may still turn into an outcome:
    /// transport failures, 503, 502/504. Whether the tool ran is unknown: execute the same call
    /// later to learn it.
    #[error("gateway unavailable after {attempts} attempt(s); last: {last}")]
    Unavailable {
        /// Requests sent.
        attempts: u32,
        /// The last failure.
        last: Failure,
    },
    /// Any other problem answer (e.g. 413, 415, 500), returned as the gateway sent it.
    #[error("{} {}: {}", .0.status, .0.code.as_deref().unwrap_or("(no code)"), .0.detail)]
    Problem(Box<Problem>),
    /// A transport failure that retrying cannot fix (the request could not be built or sent).
    #[error("transport: {0}")]
    Transport(TransportError),
    /// An answer this client cannot read (not the documented shape).
    #[error("unexpected answer: {0}")]
    Protocol(String),
    /// The client was configured wrongly (e.g. a base URL that does not parse).
    #[error("configuration: {0}")]
    Config(String),
}

impl Error {
    /// The error for a problem answer that is not retried (docs/semantics.md §3, §5).
    pub(crate) fn from_problem(problem: Problem) -> Self {
        let execution_id = || problem.execution_id.clone().unwrap_or_default();
        match (problem.status, problem.code.as_deref()) {
            (409, Some("IDEMPOTENCY_CONFLICT")) => Self::Conflict {
                execution_id: execution_id(),
                differs: problem.differs.clone(),
            },
            (409, Some("EXECUTION_UNCERTAIN")) => match problem.state {
                Some(crate::InFlightState::Running) => Self::StillRunning {
                    execution_id: execution_id(),
                },
                _ => Self::Interrupted {
                    execution_id: execution_id(),
                },
            },
            (507, _) => Self::Capacity,
            (401, _) => Self::Unauthorized,
            (400, Some("INVALID_REQUEST")) => Self::InvalidRequest {
                detail: problem.detail,
            },
            (404, Some("UNKNOWN_TOOL")) => Self::UnknownTool {
                detail: problem.detail,
            },
            (404, Some("NOT_FOUND")) => Self::NotFound {
                detail: problem.detail,
            },
            _ => Self::Problem(Box::new(problem)),
        }
    }

    /// The execution this error concerns, where the gateway named one.
    pub fn execution_id(&self) -> Option<&str> {
        match self {
            Self::Conflict { execution_id, .. }
            | Self::Interrupted { execution_id }
            | Self::StillRunning { execution_id } => Some(execution_id),
            Self::Unavailable {
                last: Failure::Problem(problem),
                ..
            }
            | Self::Problem(problem) => problem.execution_id.as_deref(),
            _ => None,
        }
    }
}
