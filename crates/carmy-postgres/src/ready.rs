//! Readiness of a store (docs/semantics.md §7 `/readyz`): the schema is migrated far enough for
//! this build and the instance's lease is registered.

use crate::diagnosis::Diagnosis;
use crate::failure::ReadFailure;
use crate::lease::Lease;
use crate::migrate::latest_migration_version;
use crate::pinned::Db;
use crate::sql::READY_SQL;
use carmy::store::StoreError;

/// `Ok` when `max(version)` in [`crate::MIGRATION_TABLE`] is at least
/// [`latest_migration_version`] and the lease row is written (registering it now if needed);
/// [`StoreError::NotReady`] when the schema is behind (`schema carmy is not migrated (…): run
/// migrations …`); otherwise [`StoreError::Unavailable`] with the reason (see
/// [`PostgresStore`](crate::PostgresStore)).
pub(crate) async fn check_ready(
    pool: &Db,
    lease: &Lease,
    diagnosis: &Diagnosis,
) -> Result<(), StoreError> {
    check_schema(pool, diagnosis).await?;
    if let Err(error) = lease.ensure_registered().await {
        return Err(StoreError::Unavailable(format!(
            "cannot register the instance lease: {}",
            diagnosis.explain(error).await
        )));
    }
    Ok(())
}

/// The schema half of [`check_ready`]: `Ok` when `max(version)` in [`crate::MIGRATION_TABLE`]
/// is at least [`latest_migration_version`]; errors as there.
pub(crate) async fn check_schema(pool: &Db, diagnosis: &Diagnosis) -> Result<(), StoreError> {
    let needed = latest_migration_version();
    let applied: Option<i32> = match sqlx::query_scalar(READY_SQL)
        .fetch_one(pool.executor())
        .await
    {
        Ok(applied) => applied,
        Err(error) => return Err(history_unreadable(diagnosis, error, needed).await),
    };
    match applied {
        Some(version) if version >= needed => {}
        Some(version) => {
            return Err(not_migrated(&format!(
                "found version {version}, need {needed}"
            )))
        }
        None => return Err(not_migrated(&format!("found none, need {needed}"))),
    }
    Ok(())
}

/// [`StoreError::NotReady`]: the schema is behind this build, with what was found and what to do.
fn not_migrated(found: &str) -> StoreError {
    StoreError::NotReady(format!(
        "schema carmy is not migrated ({found}): run migrations (carmy-gateway migrate, or carmy_postgres::migrate)"
    ))
}

/// Why [`READY_SQL`] failed, as `check_ready` reports it (see [`ReadFailure`]).
async fn history_unreadable(diagnosis: &Diagnosis, error: sqlx::Error, needed: i32) -> StoreError {
    StoreError::Unavailable(match ReadFailure::of(&error) {
        ReadFailure::NoTable => {
            return not_migrated(&format!(
                "found no table {}, need version {needed}",
                crate::MIGRATION_TABLE
            ))
        }
        ReadFailure::Unreachable => {
            format!("database unreachable: {}", diagnosis.explain(error).await)
        }
        ReadFailure::Refused => format!("cannot read {}: {error}", crate::MIGRATION_TABLE),
    })
}
