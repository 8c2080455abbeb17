//! Decisions on PostgreSQL (docs/semantics.md §12.1): the store calls the SQL functions
//! `carmy.resolve_execution` and `carmy.release_execution` (migration `V6`), the same ones a
//! DBA calls, so API and SQL share one implementation and one compare-and-set. Also listings,
//! released executions read by id, and audit trails.

use crate::decode::{decode_arguments, decode_key, decode_record};
use crate::failure::{unavailable, Failure};
use crate::pinned::Db;
use crate::sql::{
    AUDIT_TRAIL_SQL, FIND_RELEASED_SQL, LATE_ARRIVAL_SQL, LIST_EXECUTIONS_NEWEST_SQL,
    LIST_EXECUTIONS_SQL, RELEASE_EXECUTION_SQL, RESOLVE_EXECUTION_SQL, TAKE_OVER_SQL,
};
use carmy::decision::{
    AuditAction, AuditEntry, DecisionRefusal, ExecutionQuery, ListOrder, ReleaseRequest, Released,
    Resolution, ResolveRequest,
};
use carmy::fingerprint::Fingerprint;
use carmy::outcome::{ExecutionId, ExecutionResult};
use carmy::store::{
    Decided, ExecutionLookup, IdempotencyKey, InFlightState, RecordState, StoreError, StoredRecord,
};
use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::Row;

/// The refusal a decision function raised (SQLSTATE `CR404`, `CR409`, `CR412`), if any.
fn refusal(error: &sqlx::Error) -> Option<DecisionRefusal> {
    let code = error.as_database_error()?.code()?;
    Some(match code.as_ref() {
        "CR404" => DecisionRefusal::NotFound,
        "CR409" => DecisionRefusal::AlreadyDecided,
        "CR412" => DecisionRefusal::StillRunning,
        _ => return None,
    })
}

/// Runs a decision statement: its one text column, or the refusal it raised.
async fn decide(
    query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
    pool: &Db,
) -> Result<Decided<String>, Failure> {
    match query.fetch_one(pool.executor()).await {
        Ok(row) => Ok(Ok(row.try_get::<String, _>(0)?)),
        Err(error) => match refusal(&error) {
            Some(refused) => Ok(Err(refused)),
            None => Err(error.into()),
        },
    }
}

/// `carmy.resolve_execution` for `request`.
pub(crate) async fn resolve(
    pool: &Db,
    request: &ResolveRequest,
) -> Result<Decided<ExecutionResult>, Failure> {
    let data = serde_json::to_string(&request.data).map_err(|e| unavailable_text(&e))?;
    let error = request
        .error
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| unavailable_text(&e))?;
    let decision = &request.decision;
    let query = sqlx::query(RESOLVE_EXECUTION_SQL)
        .bind(decision.execution_id.as_str())
        .bind(request.status.as_str())
        .bind(data)
        .bind(error)
        .bind(&decision.note)
        .bind(&decision.actor)
        .bind(decision.force)
        .bind(decision.principal.as_deref());
    let outcome = match decide(query, pool).await? {
        Ok(outcome) => outcome,
        Err(refused) => return Ok(Err(refused)),
    };
    let result = ExecutionResult::from_record_json(&outcome).map_err(|e| unavailable_text(&e))?;
    Ok(Ok(result))
}

/// The summary `carmy.release_execution` returns.
#[derive(serde::Deserialize)]
struct ReleasedSummary {
    execution_id: String,
    principal: String,
    session_id: String,
    request_id: String,
    tool: String,
    in_flight_state: String,
    by: String,
    at: DateTime<Utc>,
    note: String,
}

/// `carmy.release_execution` for `request`.
pub(crate) async fn release(
    pool: &Db,
    request: &ReleaseRequest,
) -> Result<Decided<Released>, Failure> {
    let query = sqlx::query(RELEASE_EXECUTION_SQL)
        .bind(request.execution_id.as_str())
        .bind(&request.note)
        .bind(&request.actor)
        .bind(request.force)
        .bind(request.principal.as_deref());
    let summary = match decide(query, pool).await? {
        Ok(summary) => summary,
        Err(refused) => return Ok(Err(refused)),
    };
    let summary: ReleasedSummary =
        serde_json::from_str(&summary).map_err(|e| unavailable_text(&e))?;
    Ok(Ok(Released {
        execution_id: ExecutionId::from_stored(summary.execution_id),
        key: IdempotencyKey::new(summary.principal, summary.session_id, summary.request_id),
        tool: summary.tool,
        state_at_release: in_flight(&summary.in_flight_state)?,
        resolution: Resolution {
            by: summary.by,
            at: summary.at,
            note: summary.note,
        },
    }))
}

fn in_flight(text: &str) -> Result<InFlightState, StoreError> {
    match text {
        "running" => Ok(InFlightState::Running),
        "interrupted" => Ok(InFlightState::Interrupted),
        other => Err(StoreError::Unavailable(format!(
            "unknown in-flight state {other:?}"
        ))),
    }
}

fn unavailable_text(error: &dyn std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("cannot read a decision's answer: {error}"))
}

/// Keeps the outcome of `refused`, a `complete` that arrived after its execution was decided,
/// as a late arrival; the execution that holds the identity now.
pub(crate) async fn late_arrival(
    pool: &Db,
    instance_id: &str,
    key: &IdempotencyKey,
    recorded: &carmy::outcome::RecordedResult,
) -> Result<Option<ExecutionId>, Failure> {
    let result = recorded.result();
    let row = sqlx::query(LATE_ARRIVAL_SQL)
        .bind(&key.principal)
        .bind(&key.session_id)
        .bind(&key.request_id)
        .bind(instance_id)
        .bind(result.execution_id.as_str())
        .bind(result.status.as_str())
        .bind(recorded.record_json())
        .bind(carmy::decision::LATE_ARRIVAL_NOTE)
        .fetch_one(pool.executor())
        .await?;
    let current: Option<String> = row.try_get("current")?;
    Ok(current.map(ExecutionId::from_stored))
}

/// Takes `execution_id` over for `instance_id` ([`TAKE_OVER_SQL`]); the new attempt, or
/// `None` when nothing was taken over.
pub(crate) async fn take_over(
    pool: &Db,
    instance_id: &str,
    key: &IdempotencyKey,
    fingerprint: &carmy::fingerprint::Fingerprint,
    execution_id: &ExecutionId,
) -> Result<Option<u32>, Failure> {
    let row = sqlx::query(TAKE_OVER_SQL)
        .bind(&key.principal)
        .bind(&key.session_id)
        .bind(&key.request_id)
        .bind(execution_id.as_str())
        .bind(&fingerprint.digest)
        .bind(&fingerprint.version)
        .bind(instance_id)
        .fetch_optional(pool.executor())
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let attempt: i32 = row.try_get("attempt")?;
    Ok(Some(u32::try_from(attempt).unwrap_or(u32::MAX)))
}

/// Records matching `query` (released ones excluded).
pub(crate) async fn list(
    pool: &Db,
    query: &ExecutionQuery,
) -> Result<Vec<ExecutionLookup>, Failure> {
    let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
    let sql = match query.order {
        ListOrder::OldestFirst => LIST_EXECUTIONS_SQL,
        ListOrder::NewestFirst => LIST_EXECUTIONS_NEWEST_SQL,
    };
    let rows = sqlx::query(sql)
        .bind(query.principal.as_deref())
        .bind(query.session_id.as_deref())
        .bind(query.request_id.as_deref())
        .bind(query.in_flight.map(InFlightState::as_str))
        .bind(query.tool.as_deref())
        .bind(query.failures_only)
        .bind(limit)
        .bind(query.arguments.as_ref().map(serde_json::Value::to_string))
        .fetch_all(pool.executor())
        .await?;
    rows.iter()
        .map(|row| {
            Ok(ExecutionLookup {
                key: decode_key(row)?,
                record: decode_record(row)?,
                released: None,
                reserved_at: row.try_get("reserved_at").map_err(unavailable)?,
                arguments: decode_arguments(row)?,
            })
        })
        .collect::<Result<_, StoreError>>()
        .map_err(Failure::from)
}

/// A released execution of `principal`, from `carmy.released_executions`.
pub(crate) async fn find_released(
    pool: &Db,
    principal: &str,
    execution_id: &ExecutionId,
) -> Result<Option<ExecutionLookup>, Failure> {
    let row = sqlx::query(FIND_RELEASED_SQL)
        .bind(execution_id.as_str())
        .bind(principal)
        .fetch_optional(pool.executor())
        .await?;
    row.as_ref().map(decode_released).transpose()
}

/// Decodes a row of `carmy.released_executions` with the columns of
/// [`FIND_RELEASED_SQL`](crate::sql::FIND_RELEASED_SQL).
pub(crate) fn decode_released(row: &PgRow) -> Result<ExecutionLookup, Failure> {
    let state: String = row.try_get("in_flight_state")?;
    Ok(ExecutionLookup {
        key: decode_key(row)?,
        record: StoredRecord {
            execution_id: ExecutionId::from_stored(row.try_get::<String, _>("execution_id")?),
            fingerprint: Fingerprint {
                version: row.try_get("fingerprint_version")?,
                digest: row.try_get("fingerprint")?,
            },
            tool: row.try_get("tool")?,
            state: RecordState::InFlight(in_flight(&state)?),
            // History keeps no part digests: a released execution conflicts with nothing.
            parts: None,
        },
        released: Some(Resolution {
            by: row.try_get("released_by")?,
            at: row.try_get("released_at")?,
            note: row.try_get("note")?,
        }),
        reserved_at: None,
        arguments: decode_arguments(row)?,
    })
}

/// The audit rows of `execution_id`, oldest first.
pub(crate) async fn audit_trail(
    pool: &Db,
    execution_id: &ExecutionId,
) -> Result<Vec<AuditEntry>, Failure> {
    let rows = sqlx::query(AUDIT_TRAIL_SQL)
        .bind(execution_id.as_str())
        .fetch_all(pool.executor())
        .await?;
    rows.iter()
        .map(audit_entry)
        .collect::<Result<_, StoreError>>()
        .map_err(Failure::from)
}

fn audit_entry(row: &PgRow) -> Result<AuditEntry, StoreError> {
    let json = |column: &str| -> Result<serde_json::Value, StoreError> {
        let text: Option<String> = row.try_get(column).map_err(unavailable)?;
        text.map_or(Ok(serde_json::Value::Null), |text| {
            serde_json::from_str(&text).map_err(|e| unavailable_text(&e))
        })
    };
    let action: String = row.try_get("action").map_err(unavailable)?;
    Ok(AuditEntry {
        actor: row.try_get("actor").map_err(unavailable)?,
        at: row.try_get("at").map_err(unavailable)?,
        execution_id: ExecutionId::from_stored(
            row.try_get::<String, _>("execution_id")
                .map_err(unavailable)?,
        ),
        action: AuditAction::parse(&action)
            .ok_or_else(|| StoreError::Unavailable(format!("unknown audit action {action:?}")))?,
        before: json("before")?,
        after: json("after")?,
        note: row.try_get("note").map_err(unavailable)?,
    })
}
