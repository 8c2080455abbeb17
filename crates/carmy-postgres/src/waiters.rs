//! The waiters of `carmy.outcome_waiters`, for waiting on a running execution's outcome across
//! replicas (docs/semantics.md §12.6): the waiting call registers (so the trigger of migration
//! `V7` notifies [`RECORDED_CHANNEL`](crate::cancel::RECORDED_CHANNEL) when the outcome is
//! recorded), waits with [`carmy::wait::until_decided`] on the store's listener, and
//! unregisters.

use crate::failure::Failure;
use crate::pinned::Db;
use carmy::outcome::ExecutionId;

/// Registers a waiter (and drops waiters older than an hour, left by replicas that died while
/// waiting). Binds: `$1` execution id, `$2` waiter id.
pub const REGISTER_WAITER_SQL: &str = "WITH stale AS ( \
         DELETE FROM carmy.outcome_waiters WHERE since < now() - interval '1 hour' \
     ) \
     INSERT INTO carmy.outcome_waiters (execution_id, waiter) VALUES ($1, $2) \
     ON CONFLICT DO NOTHING";

/// Unregisters a waiter. Binds: `$1` execution id, `$2` waiter id.
pub const UNREGISTER_WAITER_SQL: &str =
    "DELETE FROM carmy.outcome_waiters WHERE execution_id = $1 AND waiter = $2";

/// Registers a new waiter for `execution_id`; returns its id.
pub(crate) async fn register(pool: &Db, execution_id: &ExecutionId) -> Result<String, Failure> {
    let waiter = uuid::Uuid::new_v4().simple().to_string();
    sqlx::query(REGISTER_WAITER_SQL)
        .bind(execution_id.as_str())
        .bind(&waiter)
        .execute(pool)
        .await?;
    Ok(waiter)
}

/// Unregisters `waiter`; a failure is only logged (a stale row costs one extra notification
/// and is removed within the hour).
pub(crate) async fn unregister(pool: &Db, execution_id: &ExecutionId, waiter: &str) {
    let removed = sqlx::query(UNREGISTER_WAITER_SQL)
        .bind(execution_id.as_str())
        .bind(waiter)
        .execute(pool)
        .await;
    if let Err(error) = removed {
        tracing::warn!(%execution_id, %error, "could not unregister an outcome waiter");
    }
}
