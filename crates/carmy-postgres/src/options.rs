//! The store's settings ([`PostgresStoreOptions`]), their defaults and accepted ranges
//! ([`OptionsError`]), and the pool settings shared with the gateway ([`pool_options`]).

use crate::session::{Job, Session};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use std::time::Duration;

/// A pooled connection idle for at least this long is pinged before it is handed out.
pub const PING_IF_IDLE_FOR: Duration = Duration::from_secs(10);

/// Default pool size of [`PostgresStoreOptions::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
/// Default of [`PostgresStoreOptions::acquire_timeout`]: 5 seconds.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default of [`PostgresStoreOptions::lease_ttl`]: 9 seconds, renewed every 3 s, so that a
/// dead replica's executions read `interrupted` at most 9 s after it died (docs/semantics.md
/// §12.2; about a third of a lease write per second per replica, docs/operations.md).
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(9);
pub use crate::session::DEFAULT_STATEMENT_TIMEOUT;
/// Default of [`PostgresStoreOptions::batch_max_rows`]: 64 calls per statement.
pub const DEFAULT_BATCH_MAX_ROWS: usize = 64;
/// The largest accepted [`PostgresStoreOptions::batch_max_rows`]: 1000.
pub const MAX_BATCH_MAX_ROWS: usize = 1000;
/// The shortest accepted [`PostgresStoreOptions::lease_ttl`]: 1 millisecond.
pub const MIN_LEASE_TTL: Duration = Duration::from_millis(1);
/// The longest accepted [`PostgresStoreOptions::lease_ttl`]: 24 hours.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The shortest [`PostgresStoreOptions::lease_ttl`] that leaves room for a renewal: 3 ms. A
/// shorter lease lapses before a renewal that waited its whole acquire timeout could land
/// ([`OptionsError::LeaseTooShort`]).
pub const MIN_RENEWABLE_LEASE_TTL: Duration = Duration::from_millis(3);

/// Whether a connection idle for `idle_for` must be pinged before use: when it sat idle for at
/// least [`PING_IF_IDLE_FOR`]. The one rule of both pools (sqlx's and the hot path's).
pub(crate) fn needs_ping(idle_for: Duration) -> bool {
    idle_for >= PING_IF_IDLE_FOR
}

/// Pool settings for a store (or a gateway that shares its pool): at most `max_connections`,
/// waiting at most `acquire_timeout` for one.
///
/// A connection is checked with a ping before use only when it sat idle for
/// [`PING_IF_IDLE_FOR`] (10 s), not on every acquire (sqlx's default), so a call does not wait
/// for a ping; connections left broken by a database restart are still found and replaced before
/// use once the pool went quiet, and a connection that fails in use is discarded by sqlx. (sqlx
/// also pings every connection it takes back, which is why the store runs `reserve` and
/// `complete` on connections of its own; this pool serves everything else.)
pub fn pool_options(max_connections: u32, acquire_timeout: Duration) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
        .test_before_acquire(false)
        .before_acquire(|connection, metadata| {
            Box::pin(async move {
                if needs_ping(metadata.idle_for) {
                    sqlx::Connection::ping(connection).await?;
                }
                Ok(true)
            })
        })
}

/// A setting of [`PostgresStoreOptions`] outside its accepted range. The text names the setting,
/// the value given and what is accepted.
#[derive(Debug, thiserror::Error)]
pub enum OptionsError {
    /// `database_url` is not a PostgreSQL URL sqlx can read (e.g. an unknown `sslmode`).
    #[error(
        "database_url is invalid ({0}); accepted: postgres://user[:password]@host[:port]/dbname[?params]"
    )]
    DatabaseUrl(String),
    /// `session_url` is not a PostgreSQL URL sqlx can read.
    #[error(
        "session_url (CARMY_DATABASE_SESSION_URL) is invalid ({0}); accepted: postgres://user[:password]@host[:port]/dbname[?params]"
    )]
    SessionUrl(String),
    /// `transaction_pooler` is set without `session_url`.
    #[error("transaction_pooler is set without session_url: the lease and the LISTEN connection need a session of their own (set CARMY_DATABASE_SESSION_URL to a direct or session-mode URL)")]
    SessionUrlMissing,
    /// `max_connections` is 0.
    #[error("max_connections is 0; accepted: 1 or more")]
    MaxConnections,
    /// `lease_ttl` is shorter than [`MIN_LEASE_TTL`] or longer than [`MAX_LEASE_TTL`].
    #[error(
        "lease_ttl is {} ms; accepted: 1 ms to 86400000 ms (24 h)",
        .0.as_millis()
    )]
    LeaseTtl(Duration),
    /// `lease_ttl` does not exceed the renewal interval plus the lease connection's acquire
    /// timeout (both derived from it, each at least 1 ms; docs/semantics.md §12.2): a renewal
    /// that has to wait for its connection would land after the lease lapsed.
    #[error(
        "lease_ttl is {} ms, too short to be renewed in time: the renewal interval ({} ms, a third of lease_ttl, at least 1 ms) plus the lease connection's acquire timeout ({} ms, half the interval, at least 1 ms) must be shorter than lease_ttl; accepted: {} ms or more",
        .lease_ttl.as_millis(),
        .renewal_interval.as_millis(),
        .acquire_timeout.as_millis(),
        MIN_RENEWABLE_LEASE_TTL.as_millis()
    )]
    LeaseTooShort {
        /// The lease given.
        lease_ttl: Duration,
        /// Its renewal interval.
        renewal_interval: Duration,
        /// The lease connection's acquire timeout.
        acquire_timeout: Duration,
    },
    /// `instance_id` is empty.
    #[error("instance_id is empty; accepted: any non-empty text")]
    InstanceId,
    /// `batch_max_rows` is 0 or above [`MAX_BATCH_MAX_ROWS`].
    #[error("batch_max_rows is {0}; accepted: 1 (no batching) to 1000")]
    BatchMaxRows(usize),
}

/// Why [`PostgresStore::connect`](crate::PostgresStore::connect) or
/// [`PostgresStore::from_pool`](crate::PostgresStore::from_pool) returned no store.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// A setting is out of its accepted range: the text names it, e.g. `invalid store options:
    /// lease_ttl is 0 ms; accepted: 1 ms to 86400000 ms (24 h)`.
    #[error("invalid store options: {0}")]
    Options(#[from] OptionsError),
    /// No session could be opened within `acquire_timeout`. The text carries the cause, e.g.
    /// `cannot connect to PostgreSQL: database "x" does not exist`, `… Connection refused …`, or
    /// a TLS failure.
    #[error("{0}")]
    Unavailable(String),
}

/// Settings of a [`PostgresStore`](crate::PostgresStore).
#[derive(Clone, Debug)]
pub struct PostgresStoreOptions {
    /// `postgres://user[:password]@host[:port]/dbname[?params]`, as sqlx understands it.
    /// `sslmode` selects TLS (rustls): `disable`, `prefer` (the default: TLS when the server
    /// offers it), `require` (TLS or fail; the certificate is not checked), `verify-ca` /
    /// `verify-full` (the certificate must chain to `sslrootcert` or a webpki root; `verify-full`
    /// also checks the host name). Ignored by
    /// [`PostgresStore::from_pool`](crate::PostgresStore::from_pool).
    pub database_url: String,
    /// Pool size: at most this many connections at once; at least 1. Default
    /// [`DEFAULT_MAX_CONNECTIONS`] (10). Ignored by
    /// [`PostgresStore::from_pool`](crate::PostgresStore::from_pool) (which takes the given
    /// pool's size). The store opens as many again, on demand, for `reserve` and `complete`
    /// (connections that sqlx's pool would ping on every return), so a process uses up to twice
    /// this many.
    pub max_connections: u32,
    /// The longest wait for a pooled connection (or a new one) before a call fails with
    /// `StoreError::Unavailable`; bounds every store call when the pool is exhausted or the
    /// server is unreachable. Default [`DEFAULT_ACQUIRE_TIMEOUT`] (5 s). Ignored by
    /// [`PostgresStore::from_pool`](crate::PostgresStore::from_pool) (the pool's own setting
    /// applies).
    pub acquire_timeout: Duration,
    /// How long this process's lease lasts without renewal (docs/semantics.md §4): the store renews
    /// it every `lease_ttl / 3`; once it lapses, the running reservations this process owns read as
    /// interrupted. Between [`MIN_LEASE_TTL`] (1 ms) and [`MAX_LEASE_TTL`] (24 h); default
    /// [`DEFAULT_LEASE_TTL`] (9 s).
    pub lease_ttl: Duration,
    /// This process's id in `carmy.instances` and `carmy.reservations.owner_instance`; non-empty.
    /// Default: a fresh `inst_` followed by 32 lowercase hex digits (a random UUID).
    pub instance_id: String,
    /// Group commit (docs/semantics.md §8): the most `reserve` calls (and, separately, the most
    /// `complete` calls) that share one statement and one commit. A batch is whatever queued
    /// while the previous batch of its kind was in flight, never waited for: an idle store runs
    /// each call at once with its single-row statement. Also capped at about 1 MiB of outcomes
    /// per `complete` batch. `1` turns batching off (every call its own statement, as before
    /// batching). From 1 to [`MAX_BATCH_MAX_ROWS`] (1000); default [`DEFAULT_BATCH_MAX_ROWS`]
    /// (64).
    pub batch_max_rows: usize,
    /// `statement_timeout` and `idle_in_transaction_session_timeout` of the store's connections
    /// (docs/semantics.md §14.1): a statement of Carmy's that runs longer, or a transaction left
    /// idle longer, is ended by the server, so neither can hold a connection or its locks
    /// without bound. [`Duration::ZERO`] leaves the server's (or the role's) settings alone. The
    /// lease's connection has its own, shorter bounds (its renewal interval, and a quarter of it
    /// as `lock_timeout`). Default [`DEFAULT_STATEMENT_TIMEOUT`] (30 s).
    pub statement_timeout: Duration,
    /// A URL for the session-bound connections (docs/semantics.md §14.3): the lease's and the
    /// `LISTEN` connection's (migrations take it from the caller). `None`: `database_url`. Set it
    /// when `database_url` reaches the database through a transaction-mode pooler (then also set
    /// [`PostgresStoreOptions::transaction_pooler`]); it must connect directly or through a
    /// session-mode pooler. Same syntax as `database_url`.
    pub session_url: Option<String>,
    /// `database_url` goes through a transaction-mode pooler (PgBouncer `pool_mode =
    /// transaction`, found by [`crate::check_path`]): every statement of the pool and the hot
    /// path runs pinned (`BEGIN` with `SET LOCAL` timeouts, an unnamed statement, `COMMIT`;
    /// [`crate::Pinning`]), which costs two round trips more per statement. Needs
    /// [`PostgresStoreOptions::session_url`]. Default `false`.
    pub transaction_pooler: bool,
    /// Readiness (docs/semantics.md §14): when the primary has standbys and its commits do not
    /// wait for a synchronous one, `check_ready` fails (`true`) or reports a warning (`false`,
    /// the default; [`crate::PostgresStore::readiness_warnings`]).
    pub require_sync_replica: bool,
}

/// Options with defaults for the database at this URL ([`PostgresStoreOptions::new`]), so that
/// `PostgresStore::connect(url)` works.
impl From<&str> for PostgresStoreOptions {
    fn from(database_url: &str) -> Self {
        Self::new(database_url)
    }
}

/// As `From<&str>`.
impl From<String> for PostgresStoreOptions {
    fn from(database_url: String) -> Self {
        Self::new(database_url)
    }
}

/// As `From<&str>`.
impl From<&String> for PostgresStoreOptions {
    fn from(database_url: &String) -> Self {
        Self::new(database_url.as_str())
    }
}

impl PostgresStoreOptions {
    /// Options for `database_url` with every default: 10 connections, 5 s acquire timeout,
    /// 9 s lease, a fresh random instance id, batches of up to 64 calls, 30 s statement
    /// timeout.
    pub fn new(database_url: impl Into<String>) -> Self {
        Self {
            database_url: database_url.into(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
            lease_ttl: DEFAULT_LEASE_TTL,
            instance_id: format!("inst_{}", uuid::Uuid::new_v4().simple()),
            batch_max_rows: DEFAULT_BATCH_MAX_ROWS,
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
            session_url: None,
            transaction_pooler: false,
            require_sync_replica: false,
        }
    }

    /// The connect options of a pool to give [`PostgresStore::from_pool`](crate::PostgresStore::from_pool):
    /// `database_url` with the session settings of docs/semantics.md §14.1 (`statement_timeout`,
    /// `idle_in_transaction_session_timeout`, `application_name` = `carmy pool <instance_id>`).
    ///
    /// # Errors
    /// [`OptionsError::DatabaseUrl`] or [`OptionsError::MaxConnections`].
    pub fn session_connect_options(&self) -> Result<PgConnectOptions, OptionsError> {
        Ok(self.session().apply(&self.connect_options()?, Job::Pool))
    }

    /// The connect options of the session-bound connections (lease, `LISTEN`):
    /// [`PostgresStoreOptions::session_url`] when set, else `pool` (the pool's own).
    ///
    /// # Errors
    /// [`OptionsError::SessionUrl`] when `session_url` cannot be read.
    pub(crate) fn session_bound(
        &self,
        pool: &PgConnectOptions,
    ) -> Result<PgConnectOptions, OptionsError> {
        match &self.session_url {
            None => Ok(pool.clone()),
            Some(url) => url
                .parse()
                .map_err(|error: sqlx::Error| OptionsError::SessionUrl(error.to_string())),
        }
    }

    /// How the pool's and the hot path's statements run ([`PostgresStoreOptions::transaction_pooler`]).
    pub(crate) fn pinning(&self) -> crate::pinned::Pinning {
        if self.transaction_pooler {
            crate::pinned::Pinning::transaction_pooler(self.statement_timeout)
        } else {
            crate::pinned::Pinning::direct()
        }
    }

    /// The session settings of this store's connections.
    pub(crate) fn session(&self) -> Session {
        Session {
            instance_id: self.instance_id.clone(),
            statement_timeout: self.statement_timeout,
            renewal_interval: crate::lease::renewal_interval(self.lease_ttl),
        }
    }

    /// Checks the settings that apply to a pool the store opens itself (`database_url`,
    /// `max_connections`) and returns the parsed connect options.
    ///
    /// # Errors
    /// [`OptionsError::DatabaseUrl`] or [`OptionsError::MaxConnections`].
    pub(crate) fn connect_options(&self) -> Result<PgConnectOptions, OptionsError> {
        if self.max_connections == 0 {
            return Err(OptionsError::MaxConnections);
        }
        self.database_url
            .parse()
            .map_err(|error: sqlx::Error| OptionsError::DatabaseUrl(error.to_string()))
    }

    /// Checks the settings every store uses (`lease_ttl`, also against its renewal,
    /// `instance_id`, `batch_max_rows`) and returns the lease TTL in milliseconds.
    ///
    /// # Errors
    /// [`OptionsError::LeaseTtl`], [`OptionsError::LeaseTooShort`],
    /// [`OptionsError::InstanceId`] or [`OptionsError::BatchMaxRows`].
    pub(crate) fn lease_ttl_millis(&self) -> Result<i64, OptionsError> {
        if !(1..=MAX_BATCH_MAX_ROWS).contains(&self.batch_max_rows) {
            return Err(OptionsError::BatchMaxRows(self.batch_max_rows));
        }
        if !(MIN_LEASE_TTL..=MAX_LEASE_TTL).contains(&self.lease_ttl) {
            return Err(OptionsError::LeaseTtl(self.lease_ttl));
        }
        let renewal_interval = crate::lease::renewal_interval(self.lease_ttl);
        let acquire_timeout = crate::lease::lease_acquire_timeout(self.lease_ttl);
        if renewal_interval + acquire_timeout >= self.lease_ttl {
            return Err(OptionsError::LeaseTooShort {
                lease_ttl: self.lease_ttl,
                renewal_interval,
                acquire_timeout,
            });
        }
        if self.instance_id.is_empty() {
            return Err(OptionsError::InstanceId);
        }
        if self.transaction_pooler && self.session_url.is_none() {
            return Err(OptionsError::SessionUrlMissing);
        }
        // At most 86,400,000: always fits.
        Ok(i64::try_from(self.lease_ttl.as_millis()).unwrap_or(i64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_options() {
        let options = PostgresStoreOptions::new("postgres://h/db");
        assert_eq!(options.database_url, "postgres://h/db");
        assert_eq!(options.max_connections, 10);
        assert_eq!(options.acquire_timeout, Duration::from_secs(5));
        assert_eq!(options.lease_ttl, Duration::from_secs(9));
        assert_eq!(options.batch_max_rows, 64);
        let hex = options.instance_id.strip_prefix("inst_").unwrap();
        assert_eq!(hex.len(), 32);
        assert!(hex
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(
            options.instance_id,
            PostgresStoreOptions::new("postgres://h/db").instance_id
        );
    }

    #[test]
    fn bad_settings_are_named_with_their_range() {
        let mut options = PostgresStoreOptions::new("postgres://h/db");
        options.lease_ttl = Duration::from_secs(24 * 60 * 60 + 1);
        assert_eq!(
            options.lease_ttl_millis().unwrap_err().to_string(),
            "lease_ttl is 86401000 ms; accepted: 1 ms to 86400000 ms (24 h)"
        );
        options.lease_ttl = MAX_LEASE_TTL;
        assert_eq!(options.lease_ttl_millis().unwrap(), 86_400_000);
        options.lease_ttl = Duration::from_micros(999);
        assert!(matches!(
            options.lease_ttl_millis(),
            Err(OptionsError::LeaseTtl(_))
        ));
        options.lease_ttl = MIN_RENEWABLE_LEASE_TTL;
        assert_eq!(options.lease_ttl_millis().unwrap(), 3);
        for rows in [0, 1001] {
            options.batch_max_rows = rows;
            assert_eq!(
                options.lease_ttl_millis().unwrap_err().to_string(),
                format!("batch_max_rows is {rows}; accepted: 1 (no batching) to 1000")
            );
        }
        options.batch_max_rows = 1000;
        assert_eq!(options.lease_ttl_millis().unwrap(), 3);
        options.batch_max_rows = 1;
        options.instance_id.clear();
        assert!(matches!(
            options.lease_ttl_millis(),
            Err(OptionsError::InstanceId)
        ));

        options.max_connections = 0;
        assert_eq!(
            options.connect_options().unwrap_err().to_string(),
            "max_connections is 0; accepted: 1 or more"
        );
        options.max_connections = 1;
        options.database_url = "postgres://h/db?sslmode=sometimes".to_owned();
        let error = options.connect_options().unwrap_err();
        assert!(
            error.to_string().starts_with("database_url is invalid (")
                && error.to_string().contains("sometimes"),
            "{error}"
        );
    }

    #[test]
    fn a_lease_too_short_for_its_renewal_is_refused_naming_both_settings() {
        let mut options = PostgresStoreOptions::new("postgres://h/db");
        for millis in [1, 2] {
            options.lease_ttl = Duration::from_millis(millis);
            assert_eq!(
                options.lease_ttl_millis().unwrap_err().to_string(),
                format!("lease_ttl is {millis} ms, too short to be renewed in time: the renewal interval (1 ms, a third of lease_ttl, at least 1 ms) plus the lease connection's acquire timeout (1 ms, half the interval, at least 1 ms) must be shorter than lease_ttl; accepted: 3 ms or more")
            );
        }
        // The smallest accepted lease, and the default, leave room for a renewal.
        for ttl in [MIN_RENEWABLE_LEASE_TTL, DEFAULT_LEASE_TTL, MAX_LEASE_TTL] {
            options.lease_ttl = ttl;
            assert!(options.lease_ttl_millis().is_ok(), "{ttl:?}");
            let renewal =
                crate::lease::renewal_interval(ttl) + crate::lease::lease_acquire_timeout(ttl);
            assert!(renewal < ttl, "{ttl:?}");
        }
        options.lease_ttl = DEFAULT_LEASE_TTL;
        assert_eq!(
            crate::lease::renewal_interval(options.lease_ttl),
            Duration::from_secs(3)
        );
        assert_eq!(
            crate::lease::lease_acquire_timeout(options.lease_ttl),
            Duration::from_millis(1500)
        );
    }

    #[test]
    fn only_idle_connections_are_pinged() {
        assert!(!needs_ping(Duration::ZERO));
        assert!(!needs_ping(PING_IF_IDLE_FOR - Duration::from_millis(1)));
        assert!(needs_ping(PING_IF_IDLE_FOR));
    }
}
