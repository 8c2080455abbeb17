//! Defensive session settings of every connection Carmy opens for a store (docs/semantics.md
//! §14.1): `statement_timeout` and `idle_in_transaction_session_timeout`, so that no statement
//! and no half-finished transaction of Carmy's can hold a connection (and its locks) without
//! bound; `lock_timeout` on the lease's connection, so that a renewal queued behind someone
//! else's row lock (a DBA's `SELECT … FOR UPDATE` on `carmy.instances`) gives up soon and is
//! retried instead of sitting out its whole renewal interval; and an `application_name` that
//! names the connection's job and the replica (`carmy lease inst_…`), so a DBA reading
//! `pg_stat_activity` or `pg_locks` sees whose session it is.
//!
//! The settings travel in the startup packet's `options` parameter (`-c name=value`), so they
//! hold from the first statement on, and nothing is `SET` on a session a pooler could hand to
//! someone else. A pooler that does not forward `options` (PgBouncer before 1.20 must be told to
//! ignore it) drops them: set them on the role instead (`ALTER ROLE … SET`, docs/operations.md).

use sqlx::postgres::PgConnectOptions;
use std::time::Duration;

/// Default of [`PostgresStoreOptions::statement_timeout`](crate::PostgresStoreOptions): 30 s.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// The job of a connection, named in its `application_name`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Job {
    /// The shared pool (reads, cancels, decisions, pruning, the example order book).
    Pool,
    /// The hot path's connections (`reserve`, `complete`).
    Hot,
    /// The lease's one connection.
    Lease,
    /// The `LISTEN` connection.
    Listen,
}

impl Job {
    /// The word for this job in `application_name`.
    fn word(self) -> &'static str {
        match self {
            Self::Pool => "pool",
            Self::Hot => "hot",
            Self::Lease => "lease",
            Self::Listen => "listen",
        }
    }
}

/// The session settings of one store's connections.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    /// This replica's id, named in `application_name`.
    pub instance_id: String,
    /// `statement_timeout` and `idle_in_transaction_session_timeout` of every connection;
    /// [`Duration::ZERO`] leaves the server's (or role's) settings alone.
    pub statement_timeout: Duration,
    /// The lease's renewal interval: the lease connection's `statement_timeout`, and four times
    /// its `lock_timeout`.
    pub renewal_interval: Duration,
}

impl Session {
    /// `connect` with the settings of a connection doing `job`: `application_name` is
    /// `<prefix> <job> <instance_id>` (the prefix is the URL's own `application_name`, else
    /// `carmy`; at most 63 bytes, PostgreSQL's limit), and the timeouts as the module says.
    pub(crate) fn apply(&self, connect: &PgConnectOptions, job: Job) -> PgConnectOptions {
        let prefix = connect.get_application_name().unwrap_or("carmy");
        let prefix = prefix
            .split_once(' ')
            .map_or(prefix, |(first, _)| first)
            .to_owned();
        let name = truncate(&format!("{prefix} {} {}", job.word(), self.instance_id));
        let mut settings: Vec<(&str, u128)> = Vec::new();
        if job == Job::Lease {
            let interval = self.renewal_interval.max(Duration::from_millis(1));
            settings.push(("statement_timeout", interval.as_millis()));
            settings.push(("lock_timeout", lease_lock_timeout(interval).as_millis()));
            settings.push(("idle_in_transaction_session_timeout", interval.as_millis()));
        } else if !self.statement_timeout.is_zero() {
            let millis = self.statement_timeout.as_millis().max(1);
            settings.push(("statement_timeout", millis));
            settings.push(("idle_in_transaction_session_timeout", millis));
        }
        let named = connect.clone().application_name(&name);
        if settings.is_empty() {
            // No empty `options` startup parameter.
            return named;
        }
        named.options(settings)
    }
}

/// The lease connection's `lock_timeout` for a renewal interval: a quarter of it, at least
/// 1 ms (0 would mean no limit).
pub(crate) fn lease_lock_timeout(renewal_interval: Duration) -> Duration {
    (renewal_interval / 4).max(Duration::from_millis(1))
}

/// `name` cut to at most 63 bytes on a character boundary (PostgreSQL truncates longer
/// `application_name`s itself, with a notice).
fn truncate(name: &str) -> String {
    let mut end = name.len().min(63);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(statement_timeout: Duration) -> Session {
        Session {
            instance_id: "inst_0123".to_owned(),
            statement_timeout,
            renewal_interval: Duration::from_secs(10),
        }
    }

    #[test]
    fn each_job_is_named_and_bounded() {
        let base: PgConnectOptions = "postgres://h/db".parse().unwrap();
        let pool = session(Duration::from_secs(30)).apply(&base, Job::Pool);
        assert_eq!(pool.get_application_name(), Some("carmy pool inst_0123"));
        assert_eq!(
            pool.get_options(),
            Some("-c statement_timeout=30000 -c idle_in_transaction_session_timeout=30000")
        );
        let lease = session(Duration::from_secs(30)).apply(&base, Job::Lease);
        assert_eq!(lease.get_application_name(), Some("carmy lease inst_0123"));
        assert_eq!(
            lease.get_options(),
            Some("-c statement_timeout=10000 -c lock_timeout=2500 -c idle_in_transaction_session_timeout=10000")
        );
        let off = session(Duration::ZERO).apply(&base, Job::Hot);
        assert_eq!(off.get_application_name(), Some("carmy hot inst_0123"));
        assert_eq!(off.get_options(), None);
    }

    #[test]
    fn the_urls_application_name_is_the_prefix_and_names_are_cut_to_63_bytes() {
        let base: PgConnectOptions = "postgres://h/db?application_name=billing".parse().unwrap();
        let named = session(Duration::ZERO).apply(&base, Job::Listen);
        assert_eq!(
            named.get_application_name(),
            Some("billing listen inst_0123")
        );
        // Applying again (a store made from a pool that has the settings) keeps one prefix.
        let again = session(Duration::ZERO).apply(&named, Job::Hot);
        assert_eq!(again.get_application_name(), Some("billing hot inst_0123"));
        let mut long = session(Duration::ZERO);
        long.instance_id = "é".repeat(40);
        let cut = long.apply(&base, Job::Pool);
        let name = cut.get_application_name().unwrap();
        assert!(
            name.len() <= 63 && name.starts_with("billing pool é"),
            "{name}"
        );
    }
}
