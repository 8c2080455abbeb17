//! Retention on PostgreSQL (docs/semantics.md §12.9): one pruning step is one call of the SQL
//! function `carmy.prune_expired` (migration `V9`, [`crate::sql::PRUNE_SQL`]), which takes a
//! transaction-level advisory lock ([`crate::sql::PRUNE_LOCK_KEY`]) so that one replica prunes at
//! a time, and deletes at most a batch of each kind with `DELETE … WHERE ctid = ANY(ARRAY(SELECT
//! … LIMIT n FOR UPDATE SKIP LOCKED))`. The same function serves DBAs.

use crate::failure::Failure;
use crate::pinned::Db;
use crate::sql::PRUNE_SQL;
use carmy::retention::{PruneStep, Pruned};
use sqlx::Row;
use std::time::Duration;

/// `duration` in whole milliseconds for a `bigint` bind, saturating.
pub(crate) fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// One pruning step: [`PruneStep::Busy`] when another session holds the lock.
pub(crate) async fn step(
    pool: &Db,
    retention: Duration,
    batch: usize,
) -> Result<PruneStep, Failure> {
    let batch = i32::try_from(batch.max(1)).unwrap_or(i32::MAX);
    // The step commits synchronously (the server's `synchronous_commit`). `off` for the step's
    // own transaction alone would be safe (a step lost in a crash only means its rows are
    // deleted again by the next one) but was measured no better: its WAL still has to reach
    // the disk, then in the flush of the next call's commit (bench/results/2026-12-02-readme-notes.md).
    let row = sqlx::query(PRUNE_SQL)
        .bind(millis(retention))
        .bind(batch)
        .fetch_one(pool.executor())
        .await?;
    if !row.try_get::<bool, _>("locked")? {
        return Ok(PruneStep::Busy);
    }
    let count = |column: &str| -> Result<u64, sqlx::Error> {
        Ok(u64::try_from(row.try_get::<i64, _>(column)?).unwrap_or(0))
    };
    Ok(PruneStep::Pruned(Pruned {
        records: count("records")?,
        released: count("released")?,
        audit: count("audit")?,
        instances: count("instances")?,
    }))
}
