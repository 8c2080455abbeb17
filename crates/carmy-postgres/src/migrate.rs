//! Schema migrations under an advisory lock (contract §8).

use tokio_postgres::NoTls;

mod embedded {
    refinery::embed_migrations!("../../migrations");
}

/// The key of the session-level PostgreSQL advisory lock that [`migrate`] holds while it migrates:
/// `0x6361726d796d6967`, the ASCII bytes of `carmymig` read as a big-endian `bigint`.
///
/// Operators can see a migration in progress with
/// `SELECT * FROM pg_locks WHERE locktype = 'advisory' AND classid = 1667330669 AND objid = 2037213543`
/// (the key's high and low 32 bits).
pub const MIGRATION_LOCK_KEY: i64 = 0x6361_726d_796d_6967;

/// The schema-qualified name of refinery's history table: one row per applied migration, with
/// its `version` (`int4`), `name`, `applied_on` and `checksum`.
pub const MIGRATION_TABLE: &str = "carmy.refinery_schema_history";

/// Query parameters of a database URL that [`migrate`] keeps: those that tokio-postgres
/// understands and that do not concern TLS (the migration connection never uses TLS).
const KEPT_URL_PARAMETERS: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "user",
    "password",
    "dbname",
    "options",
    "application_name",
    "connect_timeout",
];

/// Why [`migrate`] failed. The texts may contain database messages: for logs, not for callers.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The URL could not be parsed or the server could not be reached.
    #[error("cannot connect to PostgreSQL for migrations: {0}")]
    Connect(#[source] tokio_postgres::Error),
    /// Taking the advisory lock or creating the `carmy` schema failed.
    #[error("cannot prepare migrations: {0}")]
    Prepare(#[source] tokio_postgres::Error),
    /// refinery failed to apply a migration (or found a diverging history); the failed migration's
    /// transaction was rolled back.
    #[error("migration failed: {0}")]
    Migration(#[source] refinery::Error),
    /// Releasing the advisory lock failed after a successful migration (the lock is released
    /// anyway when the connection closes, which happens right after).
    #[error("cannot release the migration lock: {0}")]
    Unlock(#[source] tokio_postgres::Error),
}

/// The highest version among the migrations embedded in this build (`migrations/V<n>__*.sql`),
/// e.g. `2`. A database is ready for this build when `max(version)` in [`MIGRATION_TABLE`] is at
/// least this (contract §7 `/readyz`).
pub fn latest_migration_version() -> i32 {
    embedded::migrations::runner()
        .get_migrations()
        .iter()
        .map(refinery::Migration::version)
        .max()
        .unwrap_or(0)
}

/// Applies the embedded migrations to the database at `database_url` (contract §8).
///
/// `database_url` is a `postgres://user[:password]@host[:port]/dbname[?params]` URL. Query
/// parameters other than `host`, `hostaddr`, `port`, `user`, `password`, `dbname`, `options`,
/// `application_name` and `connect_timeout` are dropped first (in particular `sslmode`: this
/// connection never uses TLS, and refinery-style parsers reject most `sslmode` values).
///
/// On one connection: takes `pg_advisory_lock(`[`MIGRATION_LOCK_KEY`]`)` (waiting, unbounded,
/// while another process migrates), runs `CREATE SCHEMA IF NOT EXISTS carmy`, applies the pending
/// migrations with refinery (each in its own transaction, history in [`MIGRATION_TABLE`]),
/// releases the lock and closes the connection. Several processes may call it at once on the same
/// database, empty or not: one migrates, the others then find nothing to do. Calling it again
/// is a no-op.
///
/// # Errors
/// [`MigrateError`] when the database cannot be reached, a statement fails, or the applied
/// history diverges from the embedded migrations (a changed or missing file).
pub async fn migrate(database_url: &str) -> Result<(), MigrateError> {
    let url = strip_query_parameters(database_url);
    let (mut client, connection) = tokio_postgres::connect(&url, NoTls)
        .await
        .map_err(MigrateError::Connect)?;
    let driver = tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(%error, "migration connection ended with an error");
        }
    });

    let result = migrate_locked(&mut client).await;
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_KEY])
        .await;
    drop(client);
    // The connection task ends once the client is gone; its errors were logged.
    let _ = driver.await;

    result?;
    unlocked.map_err(MigrateError::Unlock)?;
    Ok(())
}

/// Takes the lock and migrates; the caller releases the lock whatever happens.
async fn migrate_locked(client: &mut tokio_postgres::Client) -> Result<(), MigrateError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_KEY])
        .await
        .map_err(MigrateError::Prepare)?;
    client
        .batch_execute("CREATE SCHEMA IF NOT EXISTS carmy")
        .await
        .map_err(MigrateError::Prepare)?;
    let report = embedded::migrations::runner()
        .set_migration_table_name(MIGRATION_TABLE)
        .run_async(client)
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

/// Drops every query parameter of `url` that is not in [`KEPT_URL_PARAMETERS`].
fn strip_query_parameters(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let name = pair.split_once('=').map_or(*pair, |(name, _)| name);
            KEPT_URL_PARAMETERS.contains(&name)
        })
        .collect();
    if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_string_is_stripped_except_connection_parameters() {
        assert_eq!(
            strip_query_parameters("postgres://u@h:5432/db?sslmode=prefer"),
            "postgres://u@h:5432/db"
        );
        assert_eq!(
            strip_query_parameters("postgres://u@h/db?sslmode=verify-full&host=/run/pg&x=1"),
            "postgres://u@h/db?host=/run/pg"
        );
        assert_eq!(
            strip_query_parameters("postgres://u@h/db"),
            "postgres://u@h/db"
        );
    }

    #[test]
    fn embedded_migrations_are_numbered_from_one() {
        let runner = embedded::migrations::runner();
        let mut versions: Vec<i32> = runner
            .get_migrations()
            .iter()
            .map(refinery::Migration::version)
            .collect();
        versions.sort_unstable();
        assert_eq!(versions, vec![1, 2]);
        assert_eq!(latest_migration_version(), 2);
    }

    #[test]
    fn lock_key_is_carmymig() {
        assert_eq!(MIGRATION_LOCK_KEY.to_be_bytes(), *b"carmymig");
        assert_eq!(MIGRATION_LOCK_KEY >> 32, 1_667_330_669);
        assert_eq!(MIGRATION_LOCK_KEY & 0xffff_ffff, 2_037_213_543);
    }
}
