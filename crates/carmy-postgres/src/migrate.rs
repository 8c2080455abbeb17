//! Schema migrations under an advisory lock (docs/semantics.md §8), run by refinery over a sqlx
//! connection.

use refinery::{Migration, SchemaVersion};
use refinery_core::traits::r#async::{AsyncMigrate, AsyncQuery, AsyncTransaction};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection, Executor, Row};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

mod embedded {
    refinery::embed_migrations!("../../migrations");
}

/// The key of the session-level PostgreSQL advisory lock that [`migrate`] holds while it migrates:
/// `0x6361726d796d6967`, the ASCII bytes of `carmymig` read as a big-endian `bigint`.
///
/// Operators can see a migration in progress with
/// `SELECT * FROM pg_locks WHERE locktype = 'advisory' AND classid = 1667330669 AND objid =
/// 2037213543` (the key's high and low 32 bits).
pub const MIGRATION_LOCK_KEY: i64 = 0x6361_726d_796d_6967;

/// The schema-qualified name of refinery's history table: one row per applied migration, with
/// its `version` (`int4`), `name`, `applied_on` (RFC 3339 text) and `checksum` (decimal text).
pub const MIGRATION_TABLE: &str = "carmy.refinery_schema_history";

/// Versions that earlier builds applied and this build no longer embeds: `2`
/// (`V2__example_orders`, the example tools' table `carmy.example_orders`, which the gateway's
/// example tools now create themselves). A database with one of them in its history migrates as
/// any other; every other applied version this build does not embed is refused
/// ([`MigrateError::History`]).
pub const RETIRED_MIGRATIONS: &[i32] = &[2];

/// Why [`migrate`] failed. The texts (`{error}`) carry the cause, including the server's own
/// message (e.g. `database "x" does not exist`) or the system's (e.g. `Connection refused`):
/// for logs, not for callers.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The URL could not be parsed, the server could not be reached, TLS could not be set up as
    /// the URL's `sslmode` demands, or the server refused the session (unknown database or role,
    /// failed authentication).
    #[error("cannot connect to PostgreSQL for migrations: {0}")]
    Connect(#[source] sqlx::Error),
    /// Silencing notices, taking the advisory lock or creating the `carmy` schema failed.
    #[error("cannot prepare migrations: {0}")]
    Prepare(#[source] sqlx::Error),
    /// refinery failed to apply a migration (or found a diverging history); the failed migration's
    /// transaction was rolled back. The text names the migration and the database's message.
    #[error("migration failed: {0}")]
    Migration(#[source] refinery::Error),
    /// The applied history does not fit this build: it holds a version this build does not
    /// embed and that is not [retired](RETIRED_MIGRATIONS) (a newer build migrated the
    /// database?), or it lacks an embedded version older than its newest one. Nothing was
    /// applied.
    #[error("migration history does not fit this build: {0}")]
    History(String),
    /// The schema is behind this build and the connected role may not change it (it does not
    /// own the schema `carmy`: the runtime role of docs/semantics.md §14.2). Nothing was applied.
    #[error("schema carmy is at version {found}, this build needs {need}, and role {role:?} may not change it: run carmy-gateway migrate as the schema's owner")]
    NotPermitted {
        /// The newest applied version, or `none`.
        found: String,
        /// [`latest_migration_version`].
        need: i32,
        /// The connected role.
        role: String,
    },
    /// Releasing the advisory lock failed after a successful migration (the lock is released
    /// anyway when the connection closes, which happens right after).
    #[error("cannot release the migration lock: {0}")]
    Unlock(#[source] sqlx::Error),
}

/// The highest version among the migrations embedded in this build (`migrations/V<n>__*.sql`),
/// e.g. `4`. A database is ready for this build when `max(version)` in [`MIGRATION_TABLE`] is at
/// least this (docs/semantics.md §7 `/readyz`); versions need not be contiguous (see
/// [`RETIRED_MIGRATIONS`]).
pub fn latest_migration_version() -> i32 {
    embedded::migrations::runner()
        .get_migrations()
        .iter()
        .map(Migration::version)
        .max()
        .unwrap_or(0)
}

/// Applies the embedded migrations to the database at `database_url` (docs/semantics.md §8).
///
/// `database_url` is a `postgres://user[:password]@host[:port]/dbname[?params]` URL, used as
/// sqlx parses it: every parameter keeps its meaning, `sslmode` included (`disable`, `prefer` —
/// the default —, `require`, `verify-ca`, `verify-full`, with `sslrootcert` and friends), so the
/// migration connection is encrypted exactly as the store's.
///
/// On one connection: sets `client_min_messages = warning` (no `NOTICE` noise such as "schema
/// already exists"), takes `pg_advisory_lock(`[`MIGRATION_LOCK_KEY`]`)` (waiting, unbounded,
/// while another process migrates), runs `CREATE SCHEMA IF NOT EXISTS carmy`, applies the pending
/// migrations with refinery (each in its own transaction, history in [`MIGRATION_TABLE`]),
/// releases the lock and closes the connection. Several processes may call it at once on the same
/// database, empty or not: one migrates, the others then find nothing to do. Calling it again
/// is a no-op.
///
/// # Errors
/// [`MigrateError`] when the database cannot be reached or TLS cannot be set up
/// ([`MigrateError::Connect`]), a statement fails, or the applied history diverges from the
/// embedded migrations (a changed file, or a missing one other than the
/// [retired](RETIRED_MIGRATIONS) ones). Its text carries the cause.
pub async fn migrate(database_url: &str) -> Result<(), MigrateError> {
    let options: PgConnectOptions = database_url.parse().map_err(MigrateError::Connect)?;
    let connection = PgConnection::connect_with(&options)
        .await
        .map_err(MigrateError::Connect)?;
    let mut connection = MigrationConnection { connection };

    let mut locked = false;
    let result = migrate_locked(&mut connection, &mut locked).await;
    let unlocked = if locked {
        connection
            .connection
            .execute(sqlx::query("SELECT pg_advisory_unlock($1)").bind(MIGRATION_LOCK_KEY))
            .await
            .map(drop)
    } else {
        Ok(())
    };
    // Closing also ends the session, and with it the lock if unlocking failed.
    if let Err(error) = connection.connection.close().await {
        tracing::debug!(%error, "migration connection did not close cleanly");
    }

    result?;
    unlocked.map_err(MigrateError::Unlock)?;
    Ok(())
}

/// Silences notices, takes the lock (setting `locked`) and migrates; the caller releases the lock
/// whatever happens.
async fn migrate_locked(
    connection: &mut MigrationConnection,
    locked: &mut bool,
) -> Result<(), MigrateError> {
    // `Executor` methods (boxed `Send` futures) throughout: the opaque futures of
    // `Query::execute` / `RawSql::execute` trip rustc's higher-ranked `Send` check, and this
    // future must be `Send` (callers spawn it).
    let session = &mut connection.connection;
    session
        .execute(sqlx::raw_sql("SET client_min_messages = warning"))
        .await
        .map_err(MigrateError::Prepare)?;
    session
        .execute(sqlx::query("SELECT pg_advisory_lock($1)").bind(MIGRATION_LOCK_KEY))
        .await
        .map_err(MigrateError::Prepare)?;
    *locked = true;
    if !may_change_schema(session)
        .await
        .map_err(MigrateError::Prepare)?
    {
        return check_without_changing(session).await;
    }
    session
        .execute(sqlx::raw_sql("CREATE SCHEMA IF NOT EXISTS carmy"))
        .await
        .map_err(MigrateError::Prepare)?;
    let applied = applied_versions(session)
        .await
        .map_err(MigrateError::Prepare)?;
    check_history(&applied, &embedded_versions()).map_err(MigrateError::History)?;
    // refinery refuses an applied version without its file unless told not to; the check above
    // allows exactly the retired ones.
    let report = embedded::migrations::runner()
        .set_abort_missing(false)
        .set_migration_table_name(MIGRATION_TABLE)
        .run_async(connection)
        .await
        .map_err(MigrateError::Migration)?;
    for applied in report.applied_migrations() {
        tracing::info!(
            version = applied.version(),
            name = applied.name(),
            "applied migration"
        );
    }
    Ok(())
}

/// Whether the connected role may change the schema `carmy`: it owns it (directly or through a
/// role it belongs to), or, while there is none, may create schemas in the database. A gateway
/// running as the runtime role of docs/semantics.md §14.2 may not.
async fn may_change_schema(session: &mut PgConnection) -> Result<bool, sqlx::Error> {
    session
        .fetch_one(sqlx::raw_sql(
            "SELECT coalesce( \
                 (SELECT pg_has_role(current_user, n.nspowner, 'USAGE') \
                  FROM pg_namespace n WHERE n.nspname = 'carmy'), \
                 has_database_privilege(current_database(), 'CREATE'))",
        ))
        .await?
        .try_get(0)
}

/// For a role that may not change the schema (docs/semantics.md §14.2): `Ok` when the applied
/// history fits this build and is at least at [`latest_migration_version`] (nothing to do),
/// [`MigrateError::NotPermitted`] when it is behind.
async fn check_without_changing(session: &mut PgConnection) -> Result<(), MigrateError> {
    let applied = applied_versions(session)
        .await
        .map_err(MigrateError::Prepare)?;
    check_history(&applied, &embedded_versions()).map_err(MigrateError::History)?;
    let need = latest_migration_version();
    let found = applied.last().copied();
    if found.is_some_and(|found| found >= need) {
        tracing::info!(
            version = found,
            "schema carmy is up to date; this role may not change it, so nothing was migrated"
        );
        return Ok(());
    }
    let role: String = session
        .fetch_one(sqlx::raw_sql("SELECT current_user::text"))
        .await
        .map_err(MigrateError::Prepare)?
        .try_get(0)
        .map_err(MigrateError::Prepare)?;
    Err(MigrateError::NotPermitted {
        found: found.map_or_else(|| "none".to_owned(), |found| found.to_string()),
        need,
        role,
    })
}

/// The versions of the embedded migrations, ascending.
fn embedded_versions() -> Vec<i32> {
    let mut versions: Vec<i32> = embedded::migrations::runner()
        .get_migrations()
        .iter()
        .map(Migration::version)
        .collect();
    versions.sort_unstable();
    versions
}

/// The versions in [`MIGRATION_TABLE`], ascending; none when the table does not exist yet.
async fn applied_versions(session: &mut PgConnection) -> Result<Vec<i32>, sqlx::Error> {
    let exists: bool = session
        .fetch_one(sqlx::query("SELECT to_regclass($1) IS NOT NULL").bind(MIGRATION_TABLE))
        .await?
        .try_get(0)?;
    if !exists {
        return Ok(Vec::new());
    }
    let rows = session
        .fetch_all(sqlx::raw_sql(
            "SELECT version FROM carmy.refinery_schema_history ORDER BY version",
        ))
        .await?;
    rows.iter().map(|row| row.try_get(0)).collect()
}

/// Checks that an applied history (`applied`) fits the `embedded` migrations: every applied
/// version is embedded or [retired](RETIRED_MIGRATIONS), and every embedded version older than
/// the newest applied one is applied (refinery would otherwise skip it). Both ascending.
///
/// # Errors
/// The text of [`MigrateError::History`].
fn check_history(applied: &[i32], embedded: &[i32]) -> Result<(), String> {
    if let Some(unknown) = applied
        .iter()
        .find(|version| !embedded.contains(version) && !RETIRED_MIGRATIONS.contains(version))
    {
        return Err(format!(
            "version {unknown} is applied but not part of this build (a newer build migrated \
             this database?)"
        ));
    }
    let newest = applied.last().copied().unwrap_or(0);
    if let Some(skipped) = embedded
        .iter()
        .find(|version| **version < newest && !applied.contains(version))
    {
        return Err(format!(
            "version {skipped} is not applied but version {newest} is"
        ));
    }
    Ok(())
}

/// refinery's async driver over one sqlx connection: the connection that holds the advisory
/// lock, so the lock and the migrations share one session.
struct MigrationConnection {
    connection: PgConnection,
}

impl AsyncTransaction for MigrationConnection {
    type Error = sqlx::Error;

    /// Runs `queries` (each may hold several statements: the simple query protocol) in one
    /// transaction; a failure rolls it back.
    async fn execute<'a, T: Iterator<Item = &'a str> + Send + 'a>(
        &'a mut self,
        queries: T,
    ) -> Result<usize, Self::Error> {
        let mut transaction = self.connection.begin().await?;
        let mut count = 0;
        for query in queries {
            // `Executor::execute`, not `RawSql::execute`: see `migrate_locked`.
            transaction.execute(sqlx::raw_sql(query)).await?;
            count += 1;
        }
        transaction.commit().await?;
        Ok(count)
    }
}

impl AsyncQuery<Vec<Migration>> for MigrationConnection {
    /// Runs one of refinery's history queries (`SELECT version, name, applied_on, checksum …`)
    /// and reads its rows as applied migrations.
    async fn query<'a>(&'a mut self, query: &'a str) -> Result<Vec<Migration>, Self::Error> {
        let rows = self.connection.fetch_all(sqlx::raw_sql(query)).await?;
        rows.iter().map(applied_migration).collect()
    }
}

impl AsyncMigrate for MigrationConnection {}

/// Reads one row of [`MIGRATION_TABLE`] (`version, name, applied_on, checksum`).
///
/// # Errors
/// [`sqlx::Error::Decode`] when `applied_on` is not RFC 3339 or `checksum` not a `u64` (a row
/// not written by refinery).
fn applied_migration(row: &sqlx::postgres::PgRow) -> Result<Migration, sqlx::Error> {
    let version: SchemaVersion = row.try_get(0)?;
    let name: String = row.try_get(1)?;
    let applied_on: String = row.try_get(2)?;
    let checksum: String = row.try_get(3)?;
    let applied_on = OffsetDateTime::parse(&applied_on, &Rfc3339).map_err(|error| {
        sqlx::Error::Decode(
            format!("{MIGRATION_TABLE} version {version}: applied_on {applied_on:?}: {error}")
                .into(),
        )
    })?;
    let checksum = checksum.parse::<u64>().map_err(|error| {
        sqlx::Error::Decode(
            format!("{MIGRATION_TABLE} version {version}: checksum {checksum:?}: {error}").into(),
        )
    })?;
    Ok(Migration::applied(version, name, applied_on, checksum))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_migrations_skip_only_the_retired_ones() {
        assert_eq!(
            embedded_versions(),
            vec![1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
        );
        assert_eq!(latest_migration_version(), 15);
        assert_eq!(RETIRED_MIGRATIONS, &[2]);
    }

    #[test]
    fn histories_of_earlier_builds_fit() {
        let embedded = [1, 3, 4];
        assert_eq!(check_history(&[], &embedded), Ok(()));
        assert_eq!(check_history(&[1, 2, 3], &embedded), Ok(()));
        assert_eq!(check_history(&[1, 2], &embedded), Ok(()));
        assert_eq!(check_history(&[1, 3, 4], &embedded), Ok(()));
        assert_eq!(
            check_history(&[1, 3, 4, 5], &embedded),
            Err(
                "version 5 is applied but not part of this build (a newer build migrated \
                 this database?)"
                    .to_owned()
            )
        );
        assert_eq!(
            check_history(&[1, 4], &embedded),
            Err("version 3 is not applied but version 4 is".to_owned())
        );
    }

    #[test]
    fn lock_key_is_carmymig() {
        assert_eq!(MIGRATION_LOCK_KEY.to_be_bytes(), *b"carmymig");
        assert_eq!(MIGRATION_LOCK_KEY >> 32, 1_667_330_669);
        assert_eq!(MIGRATION_LOCK_KEY & 0xffff_ffff, 2_037_213_543);
    }

    #[test]
    fn a_bad_url_is_a_connect_error() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let error = runtime
            .block_on(migrate("postgres://h/db?sslmode=sometimes"))
            .unwrap_err();
        assert!(matches!(error, MigrateError::Connect(_)), "{error:?}");
        assert!(error.to_string().contains("\"sometimes\""), "{error}");
    }
}
