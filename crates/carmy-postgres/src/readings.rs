//! The store's readings for the operator's alerts (`IdempotencyStore::readings`,
//! docs/semantics.md §13): interrupted executions per tool, read with the in-flight rule of
//! docs/semantics.md §4 and the database clock.

use crate::failure::Failure;
use crate::pinned::Db;
use carmy::store::InterruptedTool;
use sqlx::Row;
use std::time::Duration;

/// Interrupted executions per tool: how many, how many the reconciler will not probe again
/// (`reconcile_due_at` is `infinity` once its attempts are used up, `crate::reconcile`), and
/// the age of the oldest in milliseconds since its reservation. No binds.
pub const INTERRUPTED_BY_TOOL_SQL: &str = concat!(
    "SELECT r.tool, count(*) AS interrupted, \
            count(*) FILTER (WHERE r.reconcile_due_at = 'infinity'::timestamptz) AS used_up, \
            greatest(0, floor(extract(epoch FROM now() - min(r.created_at)) * 1000))::bigint \
                AS oldest_ms \
     FROM carmy.reservations r \
     WHERE r.state = 'running' AND ",
    owner_lapsed!("r"),
    " GROUP BY r.tool ORDER BY r.tool"
);

/// [`INTERRUPTED_BY_TOOL_SQL`].
pub(crate) async fn interrupted(pool: &Db) -> Result<Vec<InterruptedTool>, Failure> {
    let rows = sqlx::query(INTERRUPTED_BY_TOOL_SQL)
        .fetch_all(pool.executor())
        .await?;
    rows.iter()
        .map(|row| {
            let count: i64 = row.try_get("interrupted")?;
            let used_up: i64 = row.try_get("used_up")?;
            let oldest: i64 = row.try_get("oldest_ms")?;
            Ok(InterruptedTool {
                tool: row.try_get("tool")?,
                count: u64::try_from(count).unwrap_or(0),
                probes_used_up: u64::try_from(used_up).unwrap_or(0),
                oldest_age: Duration::from_millis(u64::try_from(oldest).unwrap_or(0)),
            })
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(Failure::from)
}
