//! Whether the store's tables are distributed (Citus, docs/scale.md) and what the store does
//! differently then: one statement per call, never a batch (docs/semantics.md §15).
//!
//! A batch statement names many identities, so on Citus it would span shards: a multi-shard
//! write, with two-phase commit across workers, tens to hundreds of milliseconds where one
//! identity's statement goes to one shard in one round trip. Plain PostgreSQL keeps its
//! batching as it is.

use crate::pinned::Db;

/// The per-identity tables, distributed by [`DISTRIBUTION_COLUMN`] on Citus and colocated with
/// `carmy.reservations` (docs/scale.md): every unique key of each includes the column, and none
/// has a trigger (the catalog test, `tests/it/catalog.rs`, checks both on plain PostgreSQL).
pub const DISTRIBUTED_TABLES: &[&str] = &[
    "carmy.reservations",
    "carmy.released_executions",
    "carmy.audit_log",
];

/// The tables every node holds a copy of on Citus (reference tables): the leases that the
/// in-flight rule joins and the outcome waiters that the outcome statements read. No trigger
/// either.
pub const REFERENCE_TABLES: &[&str] = &["carmy.instances", "carmy.outcome_waiters"];

/// The column [`DISTRIBUTED_TABLES`] are distributed by: who called (docs/semantics.md §6).
pub const DISTRIBUTION_COLUMN: &str = "principal";

/// Whether Citus's catalog exists in this database. Binds nothing.
pub const CITUS_CATALOG_SQL: &str =
    "SELECT to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL AS citus";

/// Whether `carmy.reservations` is distributed (read only where [`CITUS_CATALOG_SQL`] says the
/// catalog exists). Binds nothing.
pub const RESERVATIONS_DISTRIBUTED_SQL: &str = "SELECT EXISTS (SELECT 1 FROM pg_dist_partition \
     WHERE logicalrelid = to_regclass('carmy.reservations')) AS distributed";

/// Whether `carmy.reservations` is a distributed table of the database behind `db`
/// ([`CITUS_CATALOG_SQL`], then [`RESERVATIONS_DISTRIBUTED_SQL`]), each statement through
/// `db`'s executor (pinned behind a transaction-mode pooler, docs/semantics.md §14.3).
///
/// # Errors
/// The statements' error.
pub async fn distribution(db: &Db) -> Result<bool, sqlx::Error> {
    let citus: bool = sqlx::query_scalar(CITUS_CATALOG_SQL)
        .fetch_one(db.executor())
        .await?;
    if !citus {
        return Ok(false);
    }
    sqlx::query_scalar::<_, bool>(RESERVATIONS_DISTRIBUTED_SQL)
        .fetch_one(db.executor())
        .await
}

/// Whether `carmy.reservations` is a distributed table of this database, read once when the
/// store starts (distribute before the gateways start, docs/scale.md). A database that cannot
/// be read within 2 s (not migrated, not reachable) counts as not distributed, and says so in
/// the log. Through the store's one executor, so that behind a transaction-mode pooler each
/// statement is pinned to one server (docs/semantics.md §14.3) like every other.
pub(crate) async fn reservations_distributed(pool: &Db) -> bool {
    match tokio::time::timeout(std::time::Duration::from_secs(2), distribution(pool)).await {
        Ok(Ok(distributed)) => distributed,
        Err(_) => {
            tracing::warn!(
                "could not tell within 2 s whether carmy.reservations is distributed; batching as on one database"
            );
            false
        }
        Ok(Err(error)) => {
            tracing::warn!(
                %error,
                "could not tell whether carmy.reservations is distributed; batching as on one database"
            );
            false
        }
    }
}
