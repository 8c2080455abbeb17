//! What the engine answers, in the domain's terms: every front (HTTP, MCP) maps these to its own
//! shape. Store failures become answers here and nowhere else.

use crate::call::ValidatedCall;
use crate::metrics::CallOutcome;
use crate::outcome::{ExecutionId, ExecutionResult, RecordedResult};
use crate::store::{Existing, InFlightState, StoreError};

/// A call's outcome: recorded (or, without `request_id`, just run), whether it was replayed
/// from the record, and when the record expires. Complete: a front needs nothing else from the
/// engine to answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The outcome, with its stored text.
    pub result: RecordedResult,
    /// True when the tool did not run for this call.
    pub replayed: bool,
    /// When the record stops holding its identity (docs/semantics.md §4, §12.9): its
    /// `finished_at` plus the retention; `None` when records are kept forever, and for a call
    /// without a request id (it holds no identity). Every front states it as `expires_at`.
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
    /// For a new execution that replaced a released one, or an attempt that took an
    /// interrupted one over: that execution and how it ended (docs/semantics.md §12.1, "A
    /// rerun says so"). `None` for a first run and for every replay.
    pub rerun_of: Option<crate::store::Replaced>,
}

/// The answer to a cancel request that found a running execution.
#[derive(Clone, Debug, PartialEq)]
// One answer per cancel request, moved once: boxing the record would buy nothing.
#[allow(clippy::large_enum_variant)]
#[non_exhaustive]
pub enum CancelAnswer {
    /// The execution finished (normally `cancelled`; a tool that returned first keeps its
    /// outcome): the recorded outcome.
    Finished(ExecutionResult),
    /// Cancellation was requested but no outcome was recorded within
    /// [`EngineConfig::cancel_wait`](super::EngineConfig::cancel_wait).
    Pending(ExecutionId),
}

/// Why the engine gives no outcome (docs/semantics.md §3, §5). No variant carries store text or
/// another principal's data.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The call broke a rule (identifiers, JSON, the tool's schema); nothing was reserved.
    #[error("{0}")]
    Invalid(String),
    /// No tool has this name; nothing was reserved. The text names the closest registered tool,
    /// the same on every front (docs/semantics.md §5).
    #[error("no tool named {tool:?}{}", did_you_mean(.closest.as_deref()))]
    UnknownTool {
        /// The name the call gave.
        tool: String,
        /// The registered tool whose name is closest, if one is close enough to be a likely
        /// typo: a case-insensitive match, or a Damerau-Levenshtein distance of at most a third
        /// of the longer name (at least 1).
        closest: Option<String>,
    },
    /// Same identity, different fingerprint.
    #[error("request_id was already used for a different call")]
    Conflict {
        /// The execution that holds the identity.
        execution_id: ExecutionId,
        /// Which parts of the call differ from the recorded call's (`tool`, `arguments`,
        /// `metadata`, docs/semantics.md §12.8); `None` when the record has no part digests.
        differs: Option<Vec<&'static str>>,
    },
    /// Same identity and fingerprint, not finished (or, for a cancel, interrupted).
    #[error("execution {execution_id} is {}", state.as_str())]
    Uncertain {
        /// The execution that holds the identity.
        execution_id: ExecutionId,
        /// `running` or `interrupted`.
        state: InFlightState,
        /// The tool's probe is asking its upstream (docs/semantics.md §12.10):
        /// the answer may be known soon.
        reconciling: bool,
        /// For a call that met its execution `running`: how long to wait before retrying, the
        /// tool's deadline capped at a few seconds (HTTP: `Retry-After`); `None` otherwise.
        retry_after: Option<std::time::Duration>,
    },
    /// The tool ran but its outcome is not recorded yet; the engine keeps trying and a later
    /// retry replays it (docs/semantics.md §4).
    #[error("execution {execution_id} ran; its outcome is not recorded yet")]
    RecordingPending {
        /// The execution that ran.
        execution_id: ExecutionId,
    },
    /// A cancel request, or a decision (resolve or release, docs/semantics.md §12.1), for an
    /// execution that already has an outcome or was released; nothing changed (HTTP: 409
    /// `EXECUTION_FINISHED`).
    #[error("execution {execution_id} already finished")]
    Finished {
        /// The finished execution.
        execution_id: ExecutionId,
    },
    /// A decision (resolve or release, docs/semantics.md §12.1) on an execution whose owner still
    /// holds its lease: the tool may still be running and may still record its own outcome.
    /// Nothing changed. Fronts tell the caller to wait for the outcome, or to repeat the
    /// decision with `force` once reconciliation shows what happened (HTTP: 409
    /// `EXECUTION_RUNNING`).
    #[error("execution {execution_id} is still running on a live replica")]
    StillRunning {
        /// The running execution.
        execution_id: ExecutionId,
    },
    /// The tool finished after its execution had been decided (resolved, released, taken
    /// over): its outcome was not recorded but kept as a late arrival in the audit log (the
    /// effect may have happened twice; docs/semantics.md §12.1). Fronts name the execution that
    /// holds the identity now, never "retry to get it" (HTTP: 409 `EXECUTION_SUPERSEDED`).
    #[error("execution {execution_id} was superseded before its outcome arrived")]
    Superseded {
        /// The execution whose outcome arrived late.
        execution_id: ExecutionId,
        /// The execution that holds the identity now (`None` when the identity is vacant):
        /// the same id when the execution was resolved.
        current: Option<ExecutionId>,
    },
    /// The arguments, as they would be kept with the execution (canonical JSON after
    /// redaction, docs/semantics.md §8.5), are longer than the limit of a recorded result
    /// (`CARMY_MAX_RESULT_BYTES`); nothing was reserved (HTTP: 413 `ARGUMENTS_TOO_LARGE`).
    #[error("the arguments take {bytes} bytes as kept with the execution, over the {limit} a record may keep (CARMY_MAX_RESULT_BYTES); send smaller arguments (e.g. a reference to a document rather than the document), hide the large part with the tool's redact_arguments, or keep no arguments (CARMY_KEEP_ARGUMENTS=none)")]
    ArgumentsTooLarge {
        /// Bytes of the kept text.
        bytes: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// No such execution for this principal.
    #[error("no such execution")]
    NotFound,
    /// A bounded store is full and the identity is new; nothing ran.
    #[error("the idempotency store is full")]
    Capacity,
    /// The store failed; nothing ran (or, for reads, nothing was read).
    #[error("the idempotency store is unavailable")]
    StoreUnavailable,
    /// The tool reported that its effect provably did not happen
    /// ([`ToolErrorKind::NotExecuted`](crate::tool::ToolErrorKind)): nothing was recorded and
    /// the reservation was released, so the same call may be retried (docs/semantics.md §4).
    /// For an attempt that took an interrupted execution over, only this attempt had no
    /// effect: the execution is handed back (`handed_back`), interrupted again, because the
    /// earlier attempt's effect is still unknown (docs/semantics.md §12.7).
    #[error("{code}: {message}")]
    NotExecuted {
        /// The execution that was started and released (or handed back).
        execution_id: ExecutionId,
        /// This attempt took the execution over: an earlier attempt's effect is unknown, and
        /// the execution reads interrupted again rather than free.
        handed_back: bool,
        /// The tool's machine code, e.g. `UPSTREAM_UNAVAILABLE`.
        code: String,
        /// The tool's explanation.
        message: String,
        /// The pause the tool asked for before a retry.
        retry_after: Option<std::time::Duration>,
    },
    /// The identity's (or the execution's) record exists but cannot be read back
    /// ([`StoreError::RecordDamaged`]): the tool ran, nothing was run now, and nothing will be
    /// until an operator repairs the row. Fronts answer it as an internal error of the record,
    /// never as "nothing was run" (HTTP: 500 `RECORD_DAMAGED`, docs/semantics.md §5); it does
    /// not make the store unready. Counted in `carmy_records_damaged_total`.
    #[error("the record of execution {execution_id} is damaged: {problem}")]
    RecordDamaged {
        /// The execution whose record is damaged.
        execution_id: ExecutionId,
        /// What is wrong, safe to show to the record's principal.
        problem: String,
    },
    /// A call without `request_id` whose task ended without an outcome (the runtime is
    /// shutting down); nothing was recorded.
    #[error("the execution ended without an outcome")]
    Lost {
        /// The execution that was started.
        execution_id: ExecutionId,
    },
}

impl From<StoreError> for Refusal {
    /// The one place store failures become answers; the store's text goes to the log only.
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Capacity => Self::Capacity,
            StoreError::RecordDamaged {
                execution_id,
                problem,
            } => {
                tracing::error!(%execution_id, %problem, "a recorded outcome cannot be read back; repair the row");
                Self::RecordDamaged {
                    execution_id,
                    problem,
                }
            }
            StoreError::Unavailable(reason)
            | StoreError::Indeterminate(reason)
            | StoreError::NotReady(reason) => {
                tracing::warn!(%reason, "idempotency store unavailable");
                Self::StoreUnavailable
            }
            StoreError::NotOwner { execution_id } => {
                tracing::error!(%execution_id, "store answered NotOwner outside complete");
                Self::StoreUnavailable
            }
        }
    }
}

/// ` (did you mean "name"?)` for a closest tool, else nothing.
fn did_you_mean(closest: Option<&str>) -> String {
    closest.map_or_else(String::new, |name| format!(" (did you mean {name:?}?)"))
}

/// Answers `call` from its identity's existing record; the call's part digests are computed
/// only for a conflict, which names what differs (docs/semantics.md §12.8).
pub(crate) fn from_existing(existing: Existing, call: &ValidatedCall) -> Result<Answer, Refusal> {
    match existing {
        Existing::Replay(result) => Ok(Answer {
            rerun_of: None,
            result,
            replayed: true,
            expires_at: None,
        }),
        Existing::Conflict {
            execution_id,
            parts: recorded,
        } => Err(Refusal::Conflict {
            execution_id,
            differs: recorded.map(|recorded| recorded.differs(&call.parts())),
        }),
        Existing::Uncertain {
            execution_id,
            state,
        } => Err(Refusal::Uncertain {
            execution_id,
            state,
            reconciling: false,
            retry_after: None,
        }),
    }
}

/// How `answer` counts in `carmy_calls_total` (docs/semantics.md §13).
pub(crate) fn call_outcome(answer: &Result<Answer, Refusal>) -> CallOutcome {
    match answer {
        Ok(Answer {
            replayed: false, ..
        }) => CallOutcome::New,
        Ok(Answer { replayed: true, .. }) => CallOutcome::Replay,
        Err(refusal) => match refusal {
            // `Finished` and `NotFound` answer cancels and reads, never a call; listed for
            // completeness.
            Refusal::Invalid(_)
            | Refusal::ArgumentsTooLarge { .. }
            | Refusal::UnknownTool { .. }
            | Refusal::NotFound
            | Refusal::Finished { .. } => CallOutcome::Rejected,
            Refusal::Conflict { .. } => CallOutcome::Conflict,
            Refusal::Uncertain {
                state: InFlightState::Running,
                ..
            } => CallOutcome::UncertainRunning,
            Refusal::Uncertain {
                state: InFlightState::Interrupted,
                ..
            } => CallOutcome::UncertainInterrupted,
            Refusal::RecordingPending { .. } => CallOutcome::RecordingPending,
            Refusal::Capacity => CallOutcome::Capacity,
            Refusal::StoreUnavailable => CallOutcome::Unavailable,
            Refusal::NotExecuted { .. } => CallOutcome::NotExecuted,
            Refusal::Lost { .. } => CallOutcome::Lost,
            Refusal::RecordDamaged { .. } => CallOutcome::RecordDamaged,
            Refusal::Superseded { .. } => CallOutcome::Superseded,
            // Answers decisions, never a call.
            Refusal::StillRunning { .. } => CallOutcome::Rejected,
        },
    }
}

/// The execution an answer names, if any (for the `carmy.call` span).
pub(crate) fn execution_id_of(answer: &Result<Answer, Refusal>) -> Option<&ExecutionId> {
    match answer {
        Ok(answer) => Some(&answer.result.result().execution_id),
        Err(
            Refusal::Conflict { execution_id, .. }
            | Refusal::Uncertain { execution_id, .. }
            | Refusal::RecordingPending { execution_id }
            | Refusal::Finished { execution_id }
            | Refusal::NotExecuted { execution_id, .. }
            | Refusal::Lost { execution_id },
        ) => Some(execution_id),
        Err(_) => None,
    }
}
