//! The waiters of `carmy.outcome_waiters`, for waiting on a running execution's outcome across
//! replicas (docs/semantics.md §12.6): the waiting call registers, waits with
//! [`carmy::wait::until_decided`] on the store's listener, and unregisters; the replica that
//! records the outcome sees that someone waits (the statement returns `awaited`) and announces
//! it on [`RECORDED_CHANNEL`] from its own connection ([`announce_recorded`]; on Citus, the
//! coordinator's, migration `V14`).

use crate::cancel::RECORDED_CHANNEL;
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
        .execute(pool.executor())
        .await?;
    Ok(waiter)
}

/// Unregisters `waiter`; a failure is only logged (a stale row costs one extra notification
/// and is removed within the hour).
pub(crate) async fn unregister(pool: &Db, execution_id: &ExecutionId, waiter: &str) {
    let removed = sqlx::query(UNREGISTER_WAITER_SQL)
        .bind(execution_id.as_str())
        .bind(waiter)
        .execute(pool.executor())
        .await;
    if let Err(error) = removed {
        tracing::warn!(%execution_id, %error, "could not unregister an outcome waiter");
    }
}

/// Notifies [`RECORDED_CHANNEL`] once per execution id. Binds: `$1` the channel, `$2` the
/// execution ids (`text[]`).
pub const ANNOUNCE_RECORDED_SQL: &str = "SELECT pg_notify($1, e) FROM unnest($2::text[]) AS e";

/// Announces the outcomes of `execution_ids`, recorded and committed, to the replicas that wait
/// for them ([`ANNOUNCE_RECORDED_SQL`]). A failure is only logged: a waiter also reads the
/// record every [`carmy::wait::POLL_EVERY`], so it learns the outcome at most that much later.
pub(crate) async fn announce_recorded<'e, E>(executor: E, execution_ids: Vec<String>)
where
    E: sqlx::PgExecutor<'e>,
{
    if execution_ids.is_empty() {
        return;
    }
    let sent = sqlx::query(ANNOUNCE_RECORDED_SQL)
        .bind(RECORDED_CHANNEL)
        .bind(&execution_ids)
        .execute(executor)
        .await;
    if let Err(error) = sent {
        tracing::warn!(?execution_ids, %error, "could not announce recorded outcomes to their waiters");
    }
}
