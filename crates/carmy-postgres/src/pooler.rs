//! What lies between Carmy and PostgreSQL (docs/semantics.md §14.3): [`check_path`] tells a
//! transaction-mode pooler (PgBouncer `pool_mode = transaction`), under which Carmy's sessions
//! do not hold, from a direct connection or a session-mode pooler, and whether the session
//! settings of §14.1 reached the server.

use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, Executor, PgConnection, Row};

/// What [`check_path`] found wrong with the path to the database.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// Two client connections open at once were served by the same server process: a pooler
    /// multiplexes them (PgBouncer in transaction or statement mode). Carmy's prepared
    /// statements, `LISTEN`, lease session and migration lock do not hold there; the store
    /// works through it only with a session URL and pinned statements (`crate::Pinning`).
    #[error("two of Carmy's connections were served by the same PostgreSQL process (pid {0}): a pooler in transaction mode (e.g. PgBouncer pool_mode = transaction) is in between, under which Carmy's prepared statements, LISTEN, lease and migration lock break; give the session-bound connections a direct or session-mode URL (CARMY_DATABASE_SESSION_URL, PostgresStoreOptions::session_url and transaction_pooler), use pool_mode = session, or connect directly (docs/operations.md, Connection poolers)")]
    TransactionPooler(i32),
    /// The probe could not run (the cause follows).
    #[error("cannot check the connection path: {0}")]
    Probe(#[from] sqlx::Error),
}

/// Opens two connections with `connect` at once and asks each for its server process: the same
/// process for both means a transaction-mode pooler ([`PathError::TransactionPooler`]). Returns
/// the `statement_timeout` the server reports for the session, so that the caller can tell
/// whether the session settings arrived (a pooler that ignores the `options` startup parameter
/// drops them).
///
/// # Errors
/// [`PathError`].
pub async fn check_path(connect: &PgConnectOptions) -> Result<String, PathError> {
    // Simple-protocol statements only: under a transaction-mode pooler, sqlx's prepared
    // statements would fail before the probe could say why.
    let mut first = PgConnection::connect_with(connect).await?;
    let mut second = PgConnection::connect_with(connect).await?;
    let probe = "SELECT pg_backend_pid(), current_setting('statement_timeout')";
    let one = first.fetch_one(sqlx::raw_sql(probe)).await?;
    let two = second.fetch_one(sqlx::raw_sql(probe)).await?;
    let (pid_one, pid_two): (i32, i32) = (one.try_get(0)?, two.try_get(0)?);
    let statement_timeout: String = one.try_get(1)?;
    let _ = first.close().await;
    let _ = second.close().await;
    if pid_one == pid_two {
        return Err(PathError::TransactionPooler(pid_one));
    }
    Ok(statement_timeout)
}

/// What PgBouncer says when it refuses a startup parameter a client sends (sqlx sends
/// `extra_float_digits`, and `options` for the session settings of docs/semantics.md §14.1).
const REFUSED_STARTUP_PARAMETER: &str = "unsupported startup parameter";

/// The advice for a connection error that is a pooler refusing a startup parameter (PgBouncer
/// without `ignore_startup_parameters`): `None` for any other error.
pub fn startup_parameter_advice(error: &str) -> Option<String> {
    error.contains(REFUSED_STARTUP_PARAMETER).then(|| {
        format!(
            "{error}: a pooler (PgBouncer) refuses a startup parameter Carmy's driver sends; add `ignore_startup_parameters = extra_float_digits, options` to the [pgbouncer] section of pgbouncer.ini and reload it (deploy/pgbouncer.ini; docs/operations.md, Connection poolers)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_startup_parameter_names_the_pgbouncer_setting() {
        let advice = startup_parameter_advice(
            "error returned from database: unsupported startup parameter: options",
        )
        .unwrap();
        assert!(advice.contains("ignore_startup_parameters = extra_float_digits, options"));
        assert!(advice
            .starts_with("error returned from database: unsupported startup parameter: options: "));
        assert_eq!(startup_parameter_advice("connection refused"), None);
    }
}
