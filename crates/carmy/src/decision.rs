//! Operators' and owners' decisions on uncertain executions, and the audit trail they leave
//! (docs/semantics.md §12.1): the types every store takes and returns for
//! [`IdempotencyStore::resolve`](crate::store::IdempotencyStore::resolve),
//! [`IdempotencyStore::release`](crate::store::IdempotencyStore::release),
//! [`IdempotencyStore::list_executions`](crate::store::IdempotencyStore::list_executions) and
//! [`IdempotencyStore::audit_trail`](crate::store::IdempotencyStore::audit_trail).
//!
//! A decision is taken at most once per execution: the store compares and sets in one step, so
//! of any number of concurrent decisions exactly one wins and the others get
//! [`DecisionRefusal::AlreadyDecided`].

use crate::outcome::{ExecutionError, ExecutionId, ExecutionStatus};
use crate::store::{IdempotencyKey, InFlightState};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

/// The note of every late-arrival audit row (docs/semantics.md §12.1).
pub const LATE_ARRIVAL_NOTE: &str = "the owner's outcome arrived after the execution was decided; it was not recorded, and the effect may have happened twice";

/// Longest accepted decision note, in bytes of UTF-8.
pub const MAX_NOTE_BYTES: usize = 4096;

/// Who took a decision and why, as a resolved record replays it (`resolution: {by, at, note}`)
/// and as `GET /v1/executions/{id}` shows a released execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Resolution {
    /// The actor: the owning principal's name, `operator:<name>` for an operator key, or what
    /// a DBA passed to the SQL function.
    pub by: String,
    /// When the decision was recorded (store clock), UTC, RFC 3339 with milliseconds.
    #[serde(serialize_with = "rfc3339_millis")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub at: DateTime<Utc>,
    /// The required explanation (what reconciliation found).
    pub note: String,
}

fn rfc3339_millis<S: Serializer>(at: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&at.to_rfc3339_opts(SecondsFormat::Millis, true))
}

/// What every decision states: which execution, on whose behalf, who decides, why, and
/// whether it may act on a running one (docs/semantics.md §12.1). A release needs nothing more
/// ([`ReleaseRequest`]); a resolution adds the outcome ([`ResolveRequest`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The execution decided on.
    pub execution_id: ExecutionId,
    /// `None` lets the decision act on any principal's execution (an operator); `Some` limits
    /// it to that principal's (the owner): another principal's execution is
    /// [`DecisionRefusal::NotFound`].
    pub principal: Option<String>,
    /// Why (required, non-empty, at most [`MAX_NOTE_BYTES`]).
    pub note: String,
    /// Who decides (recorded as `resolution.by` and in the audit log).
    pub actor: String,
    /// Also decide on an execution whose owner still holds its lease (`running`).
    pub force: bool,
}

/// A request to record the outcome that reconciliation found for an uncertain execution.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolveRequest {
    /// Which execution, who, why.
    pub decision: Decision,
    /// The outcome's status.
    pub status: ExecutionStatus,
    /// The outcome's `data` (`null` unless `status` is `completed`).
    pub data: Value,
    /// The outcome's `error`: `None` exactly when `status` is `completed`.
    pub error: Option<ExecutionError>,
}

/// A request to free an uncertain execution's identity so that the next attempt runs the tool:
/// a [`Decision`] and nothing more.
pub type ReleaseRequest = Decision;

/// A released execution as history keeps it: its identity is free again, the trace stays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Released {
    /// The execution that was released.
    pub execution_id: ExecutionId,
    /// The identity it held (free now).
    pub key: IdempotencyKey,
    /// The tool it named.
    pub tool: String,
    /// Whether its owner was alive when it was released (`running` only with `force`).
    pub state_at_release: InFlightState,
    /// Who, when, why.
    pub resolution: Resolution,
}

/// Why a decision changed nothing (docs/semantics.md §12.1).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecisionRefusal {
    /// No such execution (for this principal, when one was given).
    #[error("no such execution")]
    NotFound,
    /// The execution already has an outcome (recorded by its tool or by an earlier decision)
    /// or was released: `409 EXECUTION_FINISHED`; nothing changed.
    #[error("the execution was already decided")]
    AlreadyDecided,
    /// The execution's owner still holds its lease and `force` was not set; nothing changed.
    #[error("the execution is still running")]
    StillRunning,
}

/// What an audit row records (docs/semantics.md §12.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AuditAction {
    /// An outcome was recorded by a decision.
    Resolve,
    /// An identity was freed by a decision.
    Release,
    /// A cancel request (kept for rows written by later builds and by DBAs).
    Cancel,
    /// An attempt took over an interrupted execution (kept for rows written by later builds).
    Takeover,
    /// An owner's outcome arrived after a decision (kept for rows written by later builds).
    LateArrival,
    /// A taken-over attempt whose tool did nothing handed the execution back: it reads
    /// interrupted again.
    HandBack,
}

impl AuditAction {
    /// The text stored in `carmy.audit_log.action`, e.g. `resolve`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Resolve => "resolve",
            Self::Release => "release",
            Self::Cancel => "cancel",
            Self::Takeover => "takeover",
            Self::LateArrival => "late_arrival",
            Self::HandBack => "hand_back",
        }
    }

    /// Parses the stored text; `None` for an action this build does not know.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "resolve" => Self::Resolve,
            "release" => Self::Release,
            "cancel" => Self::Cancel,
            "takeover" => Self::Takeover,
            "late_arrival" => Self::LateArrival,
            "hand_back" => Self::HandBack,
            _ => return None,
        })
    }
}

/// One audit row: who did what to which execution, when, with the state before and after.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditEntry {
    /// Who acted.
    pub actor: String,
    /// When (store clock).
    pub at: DateTime<Utc>,
    /// The execution acted on.
    pub execution_id: ExecutionId,
    /// What was done.
    pub action: AuditAction,
    /// The state before, e.g. `{"state": "running", "in_flight_state": "interrupted"}`.
    pub before: Value,
    /// The state after, e.g. `{"state": "completed", "outcome": {…}}` or
    /// `{"state": "released"}`.
    pub after: Value,
    /// The decision's note.
    pub note: Option<String>,
}

/// The process that owns (or owned) an execution and its lease, as the operator console shows
/// it (docs/semantics.md §12). Every member is `None` when the store does not know it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerLease {
    /// The owning process's instance id (PostgreSQL: `carmy.reservations.owner_instance`).
    pub instance: Option<String>,
    /// Its host, as it registered.
    pub hostname: Option<String>,
    /// Its process id there.
    pub pid: Option<i32>,
    /// Until when its lease holds (store clock); in the past for a stopped or cut-off owner.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// When the identity was reserved (store clock).
    pub reserved_at: Option<DateTime<Utc>>,
}

/// One execution of any principal as an operator reads it by id
/// ([`IdempotencyStore::operator_view`](crate::store::IdempotencyStore::operator_view)): the
/// record (held or released) and, where the store keeps one, its owner.
#[derive(Clone, Debug, PartialEq)]
pub struct OperatorView {
    /// Its identity, record and (when released) who released it.
    pub lookup: crate::store::ExecutionLookup,
    /// Its owner and lease; `None` for a store without leases (in memory: this process).
    pub owner: Option<OwnerLease>,
}

/// Which records [`IdempotencyStore::list_executions`](crate::store::IdempotencyStore) returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecutionQuery {
    /// Only this principal's records; `None` for every principal (operators).
    pub principal: Option<String>,
    /// Only unfinished records in this state; `None` for any state.
    pub in_flight: Option<InFlightState>,
    /// Only this session's records.
    pub session_id: Option<String>,
    /// Only records with this request_id.
    pub request_id: Option<String>,
    /// Only records of this tool.
    pub tool: Option<String>,
    /// Only finished records whose status is not `completed` (`failed`, `timed_out`,
    /// `cancelled`); with `in_flight` set as well, nothing matches.
    pub failures_only: bool,
    /// Only records whose kept arguments contain this JSON value, as PostgreSQL's jsonb `@>`
    /// says (docs/semantics.md §8.5: an object's members match recursively, an array's elements
    /// each match some element); made by [`crate::arguments::search_value`]. Records that kept
    /// no arguments never match.
    pub arguments: Option<serde_json::Value>,
    /// Which reservations come first: the oldest (the default, as `GET /v1/executions` lists)
    /// or the newest (the operator console). `limit` keeps the first ones in this order.
    pub order: ListOrder,
    /// At most this many, in `order`.
    pub limit: usize,
}

/// The order of [`ExecutionQuery`]'s answer, by reservation time; a store breaks ties the same
/// way in both, so that one order is exactly the other reversed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ListOrder {
    /// Oldest reservation first.
    #[default]
    OldestFirst,
    /// Newest reservation first.
    NewestFirst,
}

/// Checks a decision's note: non-empty after trimming, at most [`MAX_NOTE_BYTES`], no U+0000.
///
/// # Errors
/// A sentence saying what to fix.
pub fn check_note(note: &str) -> Result<(), String> {
    if note.trim().is_empty() {
        return Err("note is required: say what reconciliation found (e.g. \"order 17 exists; created by this call\")".into());
    }
    if note.len() > MAX_NOTE_BYTES {
        return Err(format!("note is longer than {MAX_NOTE_BYTES} bytes"));
    }
    if note.contains('\0') {
        return Err("note must not contain U+0000".into());
    }
    Ok(())
}

/// Checks that a resolution's `data` and `error` fit its `status` (docs/semantics.md §12.1):
/// [`check_outcome_shape`], and no string may hold U+0000 (a decision is written into `jsonb`
/// audit rows, which cannot keep it, and both stores answer alike; rule 6).
///
/// # Errors
/// A sentence saying what to fix.
pub fn check_outcome(
    status: ExecutionStatus,
    data: &Value,
    error: Option<&ExecutionError>,
) -> Result<(), String> {
    check_outcome_shape(status, data, error)?;
    let error_text = error.map_or_else(String::new, |error| {
        format!("{}{}", error.code, error.message)
    });
    if holds_nul(data) || error_text.contains('\0') {
        return Err("data and error must not contain U+0000".into());
    }
    Ok(())
}

/// Checks that an outcome's `data` and `error` fit its `status`: `completed` takes `data` and
/// no `error`; every other status takes an `error` with a non-empty `code` and `data` `null`.
/// A holder's outcome (docs/semantics.md §16) is checked with this alone: it is recorded as
/// text, like a tool's, so U+0000 is kept.
///
/// # Errors
/// A sentence saying what to fix.
pub fn check_outcome_shape(
    status: ExecutionStatus,
    data: &Value,
    error: Option<&ExecutionError>,
) -> Result<(), String> {
    match (status, error) {
        (ExecutionStatus::Completed, Some(_)) => {
            return Err("status completed takes data and no error".into())
        }
        (ExecutionStatus::Completed, None) => {}
        (_, None) => {
            return Err(format!(
                "status {} needs an error {{\"code\": …, \"message\": …}}",
                status.as_str()
            ))
        }
        (_, Some(error)) if error.code.trim().is_empty() => {
            return Err("error.code must not be empty".into())
        }
        (_, Some(_)) if !data.is_null() => {
            return Err(format!(
                "status {} records data null; put what you know in error.message",
                status.as_str()
            ))
        }
        (_, Some(_)) => {}
    }
    Ok(())
}

fn holds_nul(value: &Value) -> bool {
    match value {
        Value::String(text) => text.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(members) => members
            .iter()
            .any(|(name, value)| name.contains('\0') || holds_nul(value)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn error() -> ExecutionError {
        ExecutionError {
            code: "ORDER_MISSING".into(),
            message: "no order found".into(),
            effect: None,
            details: None,
        }
    }

    #[test]
    fn outcomes_must_fit_their_status() {
        let completed = ExecutionStatus::Completed;
        let failed = ExecutionStatus::Failed;
        assert!(check_outcome(completed, &json!({"order_id": 1}), None).is_ok());
        assert!(check_outcome(completed, &Value::Null, Some(&error())).is_err());
        assert!(check_outcome(failed, &Value::Null, None).is_err());
        assert!(check_outcome(failed, &json!(1), Some(&error())).is_err());
        assert!(check_outcome(failed, &Value::Null, Some(&error())).is_ok());
        assert!(check_outcome(completed, &json!({"a": ["\u{0}"]}), None).is_err());
        assert!(check_outcome_shape(completed, &json!({"a": ["\u{0}"]}), None).is_ok());
        assert!(check_outcome_shape(failed, &json!(1), Some(&error())).is_err());
    }

    #[test]
    fn notes_are_required() {
        assert!(check_note(" ").is_err());
        assert!(check_note(&"x".repeat(MAX_NOTE_BYTES + 1)).is_err());
        assert!(check_note("order 17 exists").is_ok());
    }
}
