//! What `complete` reads back when its update matched nothing: a retry after a lost
//! acknowledgement is `Ok`, anything else is not the owner's to record (docs/semantics.md §4).

use crate::failure::Failure;
use crate::pinned::Db;
use crate::sql::COMPLETE_RECHECK_SQL;
use carmy::outcome::ExecutionResult;
use carmy::outcome::RecordedResult;
use carmy::store::{IdempotencyKey, StoreError};
use sqlx::Row;

/// Whether the row of `key` already holds exactly this outcome (`outcome`, the record's text)
/// of this execution. Otherwise this execution does not hold the reservation.
pub(crate) async fn already_recorded(
    pool: &Db,
    key: &IdempotencyKey,
    result: &ExecutionResult,
    outcome: &str,
) -> Result<bool, Failure> {
    let row = sqlx::query(COMPLETE_RECHECK_SQL)
        .bind(&key.principal)
        .bind(&key.session_id)
        .bind(&key.request_id)
        .fetch_optional(pool.executor())
        .await?;
    let Some(row) = row else {
        return Ok(false);
    };
    let execution_id: String = row.try_get("execution_id")?;
    let state: String = row.try_get("state")?;
    let stored: Option<String> = row.try_get("outcome")?;
    Ok(execution_id == result.execution_id.as_str()
        && state != "running"
        && stored.as_deref() == Some(outcome))
}

/// After `complete`'s update matched `updated` rows: `Ok` when it matched one, or when the
/// row already holds exactly this outcome (a retry after a lost acknowledgement); otherwise
/// [`StoreError::NotOwner`] (another execution holds the identity, or it was decided).
pub(crate) async fn after_update(
    pool: &Db,
    key: &IdempotencyKey,
    recorded: &RecordedResult,
    updated: u64,
) -> Result<(), Failure> {
    let result = recorded.result();
    if updated == 1 || already_recorded(pool, key, result, recorded.record_json()).await? {
        return Ok(());
    }
    Err(StoreError::NotOwner {
        execution_id: result.execution_id.clone(),
    }
    .into())
}
