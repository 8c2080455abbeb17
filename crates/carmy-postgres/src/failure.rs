//! How the store classifies database errors: the lost-in-transit rule ([`lost_in_transit`]),
//! SQLSTATE classes for readiness ([`ReadFailure`]), and [`Failure`], the error of the store's
//! `*_impl` methods before it becomes a `StoreError`.

use carmy::store::StoreError;

/// Whether `error` lost a statement in transit: the connection failed (I/O), the protocol broke
/// or sqlx's connection worker died while the statement was on its way or its answer was. The
/// statement may then have been applied (autocommit) or not: a store call ends
/// `StoreError::Indeterminate`, and the connection is discarded, never reused.
pub(crate) fn lost_in_transit(error: &sqlx::Error) -> bool {
    matches!(
        error,
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed
    )
}

/// Maps a database error to [`StoreError::Unavailable`] with its text (for logs only), without
/// diagnosing a pool timeout: for decoding a row that was already read.
pub(crate) fn unavailable(error: sqlx::Error) -> StoreError {
    StoreError::Unavailable(error.to_string())
}

/// Why a `*_impl` method of [`PostgresStore`](crate::PostgresStore) failed, before
/// `PostgresStore::finish` turns it into a [`StoreError`].
#[derive(Debug)]
pub(crate) enum Failure {
    /// A statement failed or no connection could be had: [`StoreError::Indeterminate`] when it
    /// was [`lost_in_transit`], else [`StoreError::Unavailable`], with the cause.
    Database(sqlx::Error),
    /// Already decided (not owner, damaged row, …).
    Store(StoreError),
}

impl From<sqlx::Error> for Failure {
    fn from(error: sqlx::Error) -> Self {
        Self::Database(error)
    }
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        Self::Store(error)
    }
}

/// Turns the outcome of a store statement into the store's: a database error becomes
/// [`StoreError::Indeterminate`] when the statement was [`lost_in_transit`] (it may have been
/// applied), else [`StoreError::Unavailable`], with its cause (`Diagnosis::explain`). The one
/// rule of [`PostgresStore`](crate::PostgresStore) and [`Operator`](crate::Operator).
pub(crate) async fn settle<T>(
    diagnosis: &crate::diagnosis::Diagnosis,
    outcome: Result<T, Failure>,
) -> Result<T, StoreError> {
    match outcome {
        Ok(value) => Ok(value),
        Err(Failure::Store(error)) => Err(error),
        Err(Failure::Database(error)) => {
            let indeterminate = lost_in_transit(&error);
            let text = diagnosis.explain(error).await;
            Err(if indeterminate {
                StoreError::Indeterminate(text)
            } else {
                StoreError::Unavailable(text)
            })
        }
    }
}

/// How reading the migration history failed, for `IdempotencyStore::check_ready`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReadFailure {
    /// The schema or the history table does not exist: nothing was migrated.
    NoTable,
    /// No session: the server is down or unreachable, TLS failed, the database or role is
    /// missing, authentication failed, the server is starting, shutting down or full.
    Unreachable,
    /// The server answered with another error (e.g. permission denied).
    Refused,
}

impl ReadFailure {
    /// Classifies an error of [`READY_SQL`](crate::sql::READY_SQL) by SQLSTATE: `42P01`
    /// undefined table and `3F000` invalid schema name are [`ReadFailure::NoTable`]; the classes
    /// `08` (connection), `28` (authorization), `3D` (catalog name), `53` (resources), `57`
    /// (operator intervention) and any error without SQLSTATE (I/O, TLS, pool timeout) are
    /// [`ReadFailure::Unreachable`].
    pub(crate) fn of(error: &sqlx::Error) -> Self {
        let Some(code) = error.as_database_error().and_then(|error| error.code()) else {
            return Self::Unreachable;
        };
        match code.as_ref() {
            "42P01" | "3F000" => Self::NoTable,
            code if ["08", "28", "3D", "53", "57"]
                .iter()
                .any(|class| code.starts_with(class)) =>
            {
                Self::Unreachable
            }
            _ => Self::Refused,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transit_failures_are_lost_in_transit() {
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(lost_in_transit(&io));
        assert!(lost_in_transit(&sqlx::Error::Protocol("bad".to_owned())));
        assert!(lost_in_transit(&sqlx::Error::WorkerCrashed));
        assert!(!lost_in_transit(&sqlx::Error::PoolTimedOut));
        assert!(!lost_in_transit(&sqlx::Error::RowNotFound));
        assert_eq!(ReadFailure::of(&io), ReadFailure::Unreachable);
    }
}
