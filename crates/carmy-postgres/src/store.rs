//! [`PostgresStore`]: the durable [`IdempotencyStore`] shared by all gateway replicas
//! (contract §8).

use crate::hot::{hot_pool, run_error, HotManager};
use crate::migrate::latest_migration_version;
use carmy::fingerprint::Fingerprint;
use carmy::outcome::{ExecutionId, ExecutionResult, ExecutionStatus, RecordedResult};
use carmy::runtime::{
    ExecutionIntent, ExecutionLookup, Existing, IdempotencyKey, IdempotencyStore, InFlightState,
    RecordState, Reservation, StoreError, StoreFuture, StoredRecord,
};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection, Row};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

/// The `LISTEN`/`NOTIFY` channel on which cancel requests travel between replicas; the payload
/// is the execution id.
pub const CANCEL_CHANNEL: &str = "carmy_cancel";

/// A pooled connection idle for at least this long is pinged before it is handed out.
pub const PING_IF_IDLE_FOR: Duration = Duration::from_secs(10);

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
                if metadata.idle_for >= PING_IF_IDLE_FOR {
                    sqlx::Connection::ping(connection).await?;
                }
                Ok(true)
            })
        })
}

/// Default pool size of [`PostgresStoreOptions::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
/// Default of [`PostgresStoreOptions::acquire_timeout`]: 5 seconds.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default of [`PostgresStoreOptions::lease_ttl`]: 30 seconds.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// The longest accepted [`PostgresStoreOptions::lease_ttl`], in milliseconds (24 h).
const MAX_LEASE_TTL_MILLIS: i64 = 24 * 60 * 60 * 1000;

/// How often `reserve` retries when the row it conflicted with vanished before it could be read
/// (an operator deleted it in between).
const RESERVE_ATTEMPTS: usize = 3;

/// The columns every record-reading statement returns, from `carmy.reservations r`.
///
/// `in_flight_state` is computed with the database clock: `running` while the owner instance has
/// a live lease, `interrupted` when it has no row or its lease lapsed, `NULL` for a finished row.
macro_rules! record_columns {
    () => {
        "r.execution_id, r.tool, r.fingerprint, r.fingerprint_version, r.state, r.outcome, \
         CASE \
             WHEN r.state <> 'running' THEN NULL \
             WHEN EXISTS (SELECT 1 FROM carmy.instances i \
                          WHERE i.instance_id = r.owner_instance \
                            AND i.lease_expires_at > now()) THEN 'running' \
             ELSE 'interrupted' \
         END AS in_flight_state"
    };
}

/// The happy path of `reserve`, one statement: insert a running row, or read the existing one.
///
/// Binds: `$1` principal, `$2` session_id, `$3` request_id, `$4` tool, `$5` fingerprint digest,
/// `$6` fingerprint version, `$7` execution_id, `$8` owner instance. Returns one row with
/// `inserted = true` (the other columns `NULL`), one row with `inserted = false` describing the
/// existing reservation, or no row when the conflicting row was committed by a concurrent
/// transaction after this statement's snapshot was taken (READ COMMITTED).
const RESERVE_SQL: &str = concat!(
    "WITH ins AS ( \
         INSERT INTO carmy.reservations \
             (principal, session_id, request_id, tool, fingerprint, fingerprint_version, \
              state, execution_id, owner_instance, started_at) \
         VALUES ($1, $2, $3, $4, $5, $6, 'running', $7, $8, now()) \
         ON CONFLICT (principal, session_id, request_id) DO NOTHING \
         RETURNING execution_id \
     ) \
     SELECT true AS inserted, NULL::text AS execution_id, NULL::text AS tool, \
            NULL::text AS fingerprint, NULL::text AS fingerprint_version, NULL::text AS state, \
            NULL::text AS outcome, NULL::text AS in_flight_state \
     FROM ins \
     UNION ALL \
     SELECT false AS inserted, ",
    record_columns!(),
    " FROM carmy.reservations r \
     WHERE r.principal = $1 AND r.session_id = $2 AND r.request_id = $3 \
       AND NOT EXISTS (SELECT 1 FROM ins)"
);

/// Reads one identity's record. Binds: `$1` principal, `$2` session_id, `$3` request_id.
const LOOKUP_SQL: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM carmy.reservations r \
     WHERE r.principal = $1 AND r.session_id = $2 AND r.request_id = $3"
);

/// Reads one execution of one principal. Binds: `$1` execution_id, `$2` principal.
const FIND_EXECUTION_SQL: &str = concat!(
    "SELECT r.principal, r.session_id, r.request_id, ",
    record_columns!(),
    " FROM carmy.reservations r \
     WHERE r.execution_id = $1 AND r.principal = $2"
);

/// Records an outcome, only for the execution holding a running reservation.
///
/// Binds: `$1` principal, `$2` session_id, `$3` request_id, `$4` execution_id, `$5` fingerprint
/// digest, `$6` fingerprint version, `$7` state, `$8` outcome text, `$9` error code.
const COMPLETE_SQL: &str = "UPDATE carmy.reservations \
     SET state = $7, outcome = $8, error_code = $9, finished_at = now() \
     WHERE principal = $1 AND session_id = $2 AND request_id = $3 \
       AND execution_id = $4 AND fingerprint = $5 AND fingerprint_version = $6 \
       AND state = 'running'";

/// What `complete` reads back when its update matched nothing. Binds as [`LOOKUP_SQL`].
const COMPLETE_RECHECK_SQL: &str = "SELECT execution_id, state, outcome FROM carmy.reservations \
     WHERE principal = $1 AND session_id = $2 AND request_id = $3";

/// The highest applied migration; `NULL` when none. Reads [`crate::MIGRATION_TABLE`].
const READY_SQL: &str = "SELECT max(version) FROM carmy.refinery_schema_history";

/// How long a diagnosis of a pool timeout (see [`Diagnosis`]) is reused before a new probe.
const DIAGNOSIS_REUSE: Duration = Duration::from_secs(1);

/// The longest a diagnosis probe waits for a direct connection (less when the acquire timeout is
/// shorter).
const MAX_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Registers or renews this process's lease. Binds: `$1` instance id, `$2` hostname, `$3` pid,
/// `$4` lease TTL in milliseconds.
const LEASE_SQL: &str =
    "INSERT INTO carmy.instances (instance_id, hostname, pid, lease_expires_at) \
     VALUES ($1, $2, $3, now() + $4::bigint * interval '1 millisecond') \
     ON CONFLICT (instance_id) DO UPDATE \
     SET lease_expires_at = EXCLUDED.lease_expires_at, \
         hostname = EXCLUDED.hostname, pid = EXCLUDED.pid";

/// Ends this process's lease now. Binds: `$1` instance id.
const RELEASE_SQL: &str =
    "UPDATE carmy.instances SET lease_expires_at = now() WHERE instance_id = $1";

/// Settings of a [`PostgresStore`].
#[derive(Clone, Debug)]
pub struct PostgresStoreOptions {
    /// `postgres://user[:password]@host[:port]/dbname[?params]`, as sqlx understands it.
    /// `sslmode` selects TLS (rustls): `disable`, `prefer` (the default: TLS when the server
    /// offers it), `require` (TLS or fail; the certificate is not checked), `verify-ca` /
    /// `verify-full` (the certificate must chain to `sslrootcert` or a webpki root; `verify-full`
    /// also checks the host name). Ignored by [`PostgresStore::from_pool`].
    pub database_url: String,
    /// Pool size: at most this many connections at once. Default
    /// [`DEFAULT_MAX_CONNECTIONS`] (10). Ignored by [`PostgresStore::from_pool`] (which takes the
    /// given pool's size). The store opens as many again, on demand, for `reserve` and
    /// `complete` (connections that sqlx's pool would ping on every return), so a process uses up
    /// to twice this many.
    pub max_connections: u32,
    /// The longest wait for a pooled connection (or a new one) before a call fails with
    /// [`StoreError::Unavailable`]; bounds every store call when the pool is exhausted or the
    /// server is unreachable. Default [`DEFAULT_ACQUIRE_TIMEOUT`] (5 s). Ignored by
    /// [`PostgresStore::from_pool`] (the pool's own setting applies).
    pub acquire_timeout: Duration,
    /// How long this process's lease lasts without renewal (contract §4): the store renews it
    /// every `lease_ttl / 3`; once it lapses, the running reservations this process owns read as
    /// [`InFlightState::Interrupted`]. Between 1 ms and 24 h; default [`DEFAULT_LEASE_TTL`]
    /// (30 s).
    pub lease_ttl: Duration,
    /// This process's id in `carmy.instances` and `carmy.reservations.owner_instance`; non-empty.
    /// Default: a fresh `inst_` followed by 32 lowercase hex digits (a random UUID).
    pub instance_id: String,
}

impl PostgresStoreOptions {
    /// Options for `database_url` with every default: 10 connections, 5 s acquire timeout,
    /// 30 s lease, a fresh random instance id.
    pub fn new(database_url: impl Into<String>) -> Self {
        Self {
            database_url: database_url.into(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
            lease_ttl: DEFAULT_LEASE_TTL,
            instance_id: format!("inst_{}", uuid::Uuid::new_v4().simple()),
        }
    }
}

/// The PostgreSQL [`IdempotencyStore`] (contract §8): reservations and outcomes in
/// `carmy.reservations`, this process's lease in `carmy.instances`.
///
/// - `reserve` is one `INSERT … ON CONFLICT DO NOTHING` statement that also reads the existing
///   row, followed by a plain `SELECT` only when it lost a race to a concurrent insert; the
///   fingerprint is compared on every path ([`Existing::for_record`]).
/// - `complete` is one autocommitted `UPDATE` that matches only the running reservation of the
///   same execution; it is durable when it returns.
/// - No transaction or connection is held between calls: each statement borrows a pooled
///   connection for its own duration.
/// - Lease times come from the database clock (`now()`), never the process clock.
///
/// Migrate the schema with [`crate::migrate`]. A store created before that starts but is not
/// ready: [`IdempotencyStore::check_ready`] is `Ok` only when `max(version)` in
/// `carmy.refinery_schema_history` is at least [`crate::latest_migration_version`] and the
/// instance row is written; otherwise it is [`StoreError::Unavailable`] with the reason:
/// `database unreachable: <cause>` (nothing listening, TLS failure, unknown database or role, …),
/// `migrations not applied (found version N, need M)` (or `found none`, or `found no table
/// carmy.refinery_schema_history`), `cannot read carmy.refinery_schema_history: <error>` (e.g. a
/// permission), or `cannot register the instance lease: <cause>`.
///
/// Every [`StoreError::Unavailable`] text carries its cause. When the pool times out waiting
/// for a new connection, the store makes one direct connection attempt (at most one per second,
/// bounded by the acquire timeout and 2 s) to tell why, e.g. `pool timed out while waiting for
/// an open connection: cannot connect to PostgreSQL: error communicating with database:
/// Connection refused (os error 111)`, or that all pooled connections were busy.
///
/// A background task renews the lease every `lease_ttl / 3` until [`PostgresStore::shutdown`]
/// or drop; create the store inside a Tokio runtime. Share it as `Arc<PostgresStore>` (or
/// `Arc<dyn IdempotencyStore>`).
#[derive(Debug)]
pub struct PostgresStore {
    pool: PgPool,
    instance_id: String,
    lease: Arc<Lease>,
    diagnosis: Arc<Diagnosis>,
    stop: watch::Sender<bool>,
    renewer: Mutex<Option<JoinHandle<()>>>,
    cancels: broadcast::Sender<ExecutionId>,
    /// Connections for `reserve` and `complete` (see [`crate::hot`]).
    hot: bb8::Pool<HotManager>,
}

impl PostgresStore {
    /// Opens a pool per `options`, registers this instance in `carmy.instances` with
    /// `lease_expires_at = now() + lease_ttl` and starts the lease renewer.
    ///
    /// When the instance row cannot be written (typically: the schema is not migrated yet), the
    /// store is still returned: [`IdempotencyStore::check_ready`] then reports why, the renewer
    /// keeps trying, and `reserve` registers the instance before it reserves anything (failing
    /// with [`StoreError::Unavailable`] while it cannot), so no reservation is ever made without a
    /// lease.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the options are invalid (zero `max_connections`, a lease
    /// outside 1 ms ..= 24 h, an empty instance id), or no session can be opened within
    /// `acquire_timeout`: the text then carries the cause, e.g. `database "x" does not exist`,
    /// `Connection refused`, or a TLS failure (a server without TLS under `sslmode=require`, an
    /// untrusted certificate under `verify-ca` / `verify-full`).
    pub async fn connect(options: PostgresStoreOptions) -> Result<Self, StoreError> {
        if options.max_connections == 0 {
            return Err(StoreError::Unavailable(
                "max_connections must be at least 1".to_owned(),
            ));
        }
        let connect: PgConnectOptions = options
            .database_url
            .parse()
            .map_err(|error| StoreError::Unavailable(format!("invalid database URL: {error}")))?;
        let pool = match pool_options(options.max_connections, options.acquire_timeout)
            .connect_with(connect.clone())
            .await
        {
            Ok(pool) => pool,
            Err(error) => {
                let cause = match error {
                    // The pool retries a refused connection until the timeout and then hides
                    // why; one direct attempt tells.
                    error @ sqlx::Error::PoolTimedOut => {
                        probe(&connect, probe_timeout(options.acquire_timeout))
                            .await
                            .unwrap_or_else(|| error.to_string())
                    }
                    error => error.to_string(),
                };
                return Err(StoreError::Unavailable(format!(
                    "cannot connect to PostgreSQL: {cause}"
                )));
            }
        };
        Self::from_pool(pool, options).await
    }

    /// Uses an existing pool (its size and acquire timeout apply; `database_url`,
    /// `max_connections` and `acquire_timeout` of `options` are ignored), registers this instance
    /// and starts the lease renewer, as [`PostgresStore::connect`] (a registration that fails is
    /// retried, as there).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when `lease_ttl` is not between 1 ms and 24 h or
    /// `instance_id` is empty.
    pub async fn from_pool(
        pool: PgPool,
        options: PostgresStoreOptions,
    ) -> Result<Self, StoreError> {
        let ttl_millis = i64::try_from(options.lease_ttl.as_millis()).unwrap_or(i64::MAX);
        if !(1..=MAX_LEASE_TTL_MILLIS).contains(&ttl_millis) {
            return Err(StoreError::Unavailable(
                "lease_ttl must be between 1 ms and 24 h".to_owned(),
            ));
        }
        if options.instance_id.is_empty() {
            return Err(StoreError::Unavailable(
                "instance_id must not be empty".to_owned(),
            ));
        }
        let diagnosis = Arc::new(Diagnosis {
            pool: pool.clone(),
            last: tokio::sync::Mutex::new(None),
        });
        let lease = Arc::new(Lease {
            pool: pool.clone(),
            diagnosis: Arc::clone(&diagnosis),
            instance_id: options.instance_id.clone(),
            hostname: read_hostname(),
            pid: i32::try_from(std::process::id()).ok(),
            ttl_millis,
            registered: AtomicBool::new(false),
        });
        if let Err(error) = lease.renew().await {
            let error = diagnosis.explain(error).await;
            tracing::warn!(
                %error,
                instance_id = %options.instance_id,
                "cannot register the instance lease yet (schema not migrated?); will retry"
            );
        }
        let (stop, stopped) = watch::channel(false);
        let interval = (options.lease_ttl / 3).max(Duration::from_millis(1));
        let renewer = tokio::spawn(Arc::clone(&lease).run(interval, stopped));
        let hot = hot_pool(
            (*pool.connect_options()).clone(),
            pool.options().get_max_connections(),
            pool.options().get_acquire_timeout(),
            PING_IF_IDLE_FOR,
        );
        let (cancels, _) = broadcast::channel(256);
        tokio::spawn(listen_for_cancels(
            (*pool.connect_options()).clone(),
            cancels.clone(),
            stop.subscribe(),
        ));
        Ok(Self {
            pool,
            instance_id: options.instance_id,
            lease,
            diagnosis,
            stop,
            renewer: Mutex::new(Some(renewer)),
            cancels,
            hot,
        })
    }

    /// This process's id in `carmy.instances` (e.g. `inst_3f…`), written as `owner_instance` on
    /// every reservation this store makes.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// The connection pool, for queries of the same database outside the reservation protocol
    /// (e.g. the gateway's example tools on `carmy.example_orders`).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Stops the lease renewer (waiting for a renewal in progress to finish) and ends the lease
    /// now (`lease_expires_at = now()`), so reservations this process still holds read as
    /// [`InFlightState::Interrupted`] at once (contract §4). Call it after the drain period, when
    /// no execution of this process will complete any more. Later calls of the store still work
    /// but are not covered by a lease. Calling it twice is harmless.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the lease could not be ended (it then lapses by itself
    /// within `lease_ttl`).
    pub async fn shutdown(&self) -> Result<(), StoreError> {
        self.stop.send_replace(true);
        let renewer = self
            .renewer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(renewer) = renewer {
            if let Err(error) = renewer.await {
                tracing::warn!(%error, "lease renewer ended abnormally");
            }
        }
        let released = sqlx::query(RELEASE_SQL)
            .bind(&self.instance_id)
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(Failure::from);
        self.finish(released).await
    }

    async fn reserve_impl(
        &self,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        intent: &ExecutionIntent,
    ) -> Result<Reservation, Failure> {
        if !self.lease.registered.load(Ordering::Acquire) {
            // Never reserve without a lease row: others would read the reservation as
            // interrupted.
            self.lease.renew().await?;
        }
        for _ in 0..RESERVE_ATTEMPTS {
            let query = sqlx::query(RESERVE_SQL)
                .bind(&key.principal)
                .bind(&key.session_id)
                .bind(&key.request_id)
                .bind(&intent.tool)
                .bind(&fingerprint.digest)
                .bind(&fingerprint.version)
                .bind(intent.execution_id.as_str())
                .bind(&self.instance_id);
            let row = {
                let mut hot = self.hot.get().await.map_err(run_error)?;
                let row = query.fetch_optional(&mut hot.connection).await;
                hot.used(&row);
                row?
            };
            let existing = match row {
                Some(row) => {
                    if row.try_get::<bool, _>("inserted")? {
                        return Ok(Reservation::Reserved);
                    }
                    Some(decode_record(&row)?)
                }
                None => {
                    // The conflicting row was committed after this statement's snapshot: a new
                    // statement sees it.
                    tracing::debug!("reservation lost a race; reading the winner's row");
                    self.lookup_impl(key).await?
                }
            };
            if let Some(record) = existing {
                return Ok(Existing::for_record(record, fingerprint).into());
            }
            // The row existed when the insert conflicted but is gone now (deleted by an
            // operator): try again from the insert.
            tracing::warn!("conflicting reservation vanished before it could be read; retrying");
        }
        Err(StoreError::Unavailable(
            "reservation conflicted with a row that kept vanishing".to_owned(),
        )
        .into())
    }

    async fn complete_impl(
        &self,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        recorded: &RecordedResult,
    ) -> Result<(), Failure> {
        let outcome = recorded.record_json();
        let result = recorded.result();
        let error_code = result.error.as_ref().map(|error| error.code.as_str());
        let query = sqlx::query(COMPLETE_SQL)
            .bind(&key.principal)
            .bind(&key.session_id)
            .bind(&key.request_id)
            .bind(result.execution_id.as_str())
            .bind(&fingerprint.digest)
            .bind(&fingerprint.version)
            .bind(result.status.as_str())
            .bind(outcome)
            .bind(error_code);
        let updated = {
            let mut hot = self.hot.get().await.map_err(run_error)?;
            let done = query.execute(&mut hot.connection).await;
            hot.used(&done);
            done?.rows_affected()
        };
        if updated == 1 {
            return Ok(());
        }
        // Nothing matched: either a retry after a lost acknowledgement (the row already holds
        // exactly this outcome), or this execution does not hold the reservation.
        let row = sqlx::query(COMPLETE_RECHECK_SQL)
            .bind(&key.principal)
            .bind(&key.session_id)
            .bind(&key.request_id)
            .fetch_optional(&self.pool)
            .await?;
        if let Some(row) = row {
            let execution_id: String = row.try_get("execution_id")?;
            let state: String = row.try_get("state")?;
            let stored: Option<String> = row.try_get("outcome")?;
            if execution_id == result.execution_id.as_str()
                && state != "running"
                && stored.as_deref() == Some(outcome)
            {
                return Ok(());
            }
        }
        Err(StoreError::NotOwner {
            execution_id: result.execution_id.clone(),
        }
        .into())
    }

    async fn lookup_impl(&self, key: &IdempotencyKey) -> Result<Option<StoredRecord>, Failure> {
        let row = sqlx::query(LOOKUP_SQL)
            .bind(&key.principal)
            .bind(&key.session_id)
            .bind(&key.request_id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(decode_record).transpose()?)
    }

    async fn find_execution_impl(
        &self,
        principal: &str,
        execution_id: &ExecutionId,
    ) -> Result<Option<ExecutionLookup>, Failure> {
        let row = sqlx::query(FIND_EXECUTION_SQL)
            .bind(execution_id.as_str())
            .bind(principal)
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let key = IdempotencyKey::new(
            row.try_get::<String, _>("principal")?,
            row.try_get::<String, _>("session_id")?,
            row.try_get::<String, _>("request_id")?,
        );
        Ok(Some(ExecutionLookup {
            key,
            record: decode_record(&row)?,
        }))
    }

    async fn check_ready_impl(&self) -> Result<(), StoreError> {
        let needed = latest_migration_version();
        let applied: Option<i32> = match sqlx::query_scalar(READY_SQL).fetch_one(&self.pool).await {
            Ok(applied) => applied,
            Err(error) => {
                return Err(StoreError::Unavailable(match ReadFailure::of(&error) {
                    ReadFailure::NoTable => format!(
                        "migrations not applied (found no table {}, need version {needed})",
                        crate::MIGRATION_TABLE
                    ),
                    ReadFailure::Unreachable => {
                        format!(
                            "database unreachable: {}",
                            self.diagnosis.explain(error).await
                        )
                    }
                    ReadFailure::Refused => {
                        format!("cannot read {}: {error}", crate::MIGRATION_TABLE)
                    }
                }))
            }
        };
        match applied {
            Some(version) if version >= needed => {}
            Some(version) => {
                return Err(StoreError::Unavailable(format!(
                    "migrations not applied (found version {version}, need {needed})"
                )))
            }
            None => {
                return Err(StoreError::Unavailable(format!(
                    "migrations not applied (found none, need {needed})"
                )))
            }
        }
        if !self.lease.registered.load(Ordering::Acquire) {
            if let Err(error) = self.lease.renew().await {
                return Err(StoreError::Unavailable(format!(
                    "cannot register the instance lease: {}",
                    self.diagnosis.explain(error).await
                )));
            }
        }
        Ok(())
    }

    /// Turns the outcome of a `*_impl` method into the trait's: a database error becomes
    /// [`StoreError::Unavailable`] with its cause ([`Diagnosis::explain`]).
    async fn finish<T>(&self, outcome: Result<T, Failure>) -> Result<T, StoreError> {
        match outcome {
            Ok(value) => Ok(value),
            Err(Failure::Store(error)) => Err(error),
            Err(Failure::Database(error)) => {
                // Lost in transit: the statement may have been applied (autocommit) or not.
                let indeterminate = matches!(
                    error,
                    sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed
                );
                let text = self.diagnosis.explain(error).await;
                Err(if indeterminate {
                    StoreError::Indeterminate(text)
                } else {
                    StoreError::Unavailable(text)
                })
            }
        }
    }
}

impl Drop for PostgresStore {
    /// Stops the lease renewer (at once, or after a renewal in progress) without ending the
    /// lease: it lapses within `lease_ttl`, as when the process dies. Use
    /// [`PostgresStore::shutdown`] to end it at once.
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

/// Deletes a running reservation held by one execution (see [`IdempotencyStore::release`]).
/// Binds: `$1` principal, `$2` session id, `$3` request id, `$4` execution id.
const RELEASE_RESERVATION_SQL: &str = "DELETE FROM carmy.reservations \
     WHERE principal = $1 AND session_id = $2 AND request_id = $3 \
       AND execution_id = $4 AND state = 'running'";

impl IdempotencyStore for PostgresStore {
    /// One autocommitted `DELETE` of the row, only while it is `running` and held by
    /// `execution_id`.
    fn release<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let deleted = sqlx::query(RELEASE_RESERVATION_SQL)
                .bind(&key.principal)
                .bind(&key.session_id)
                .bind(&key.request_id)
                .bind(execution_id.as_str())
                .execute(&self.pool)
                .await
                .map(|done| done.rows_affected())
                .map_err(Failure::from);
            let deleted = self.finish(deleted).await?;
            if deleted > 0 {
                tracing::info!(%execution_id, "freed a reservation whose tool never ran");
            }
            Ok(())
        })
    }

    fn reserve<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: &'a Fingerprint,
        intent: &'a ExecutionIntent,
    ) -> StoreFuture<'a, Reservation> {
        Box::pin(async move {
            self.finish(self.reserve_impl(key, fingerprint, intent).await)
                .await
        })
    }

    fn complete<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fingerprint: &'a Fingerprint,
        result: &'a RecordedResult,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.finish(self.complete_impl(key, fingerprint, result).await)
                .await
        })
    }

    fn lookup<'a>(&'a self, key: &'a IdempotencyKey) -> StoreFuture<'a, Option<StoredRecord>> {
        Box::pin(async move { self.finish(self.lookup_impl(key).await).await })
    }

    fn find_execution<'a>(
        &'a self,
        principal: &'a str,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<ExecutionLookup>> {
        Box::pin(async move {
            self.finish(self.find_execution_impl(principal, execution_id).await)
                .await
        })
    }

    fn check_ready(&self) -> StoreFuture<'_, ()> {
        Box::pin(self.check_ready_impl())
    }

    /// `NOTIFY carmy_cancel, '<execution_id>'`: every replica hears it; the one running the
    /// execution cancels it.
    fn request_cancel<'a>(&'a self, execution_id: &'a ExecutionId) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let notified = sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CANCEL_CHANNEL)
                .bind(execution_id.as_str())
                .execute(&self.pool)
                .await
                .map(drop)
                .map_err(Failure::from);
            self.finish(notified).await
        })
    }

    fn cancel_requests(&self) -> Option<broadcast::Receiver<ExecutionId>> {
        Some(self.cancels.subscribe())
    }

    /// [`PostgresStore::shutdown`]: stops the renewer and the cancel listener, ends the lease.
    fn shutdown(&self) -> StoreFuture<'_, ()> {
        Box::pin(PostgresStore::shutdown(self))
    }
}

/// Listens on [`CANCEL_CHANNEL`] over a dedicated connection (not one of the pool's), forwarding
/// each payload to `cancels`, until `stopped` turns true. Reconnects after a failure; requests
/// sent while disconnected are lost (cancellation is best effort; the requester watches the
/// record).
async fn listen_for_cancels(
    connect: sqlx::postgres::PgConnectOptions,
    cancels: broadcast::Sender<ExecutionId>,
    mut stopped: watch::Receiver<bool>,
) {
    let listen = async {
        loop {
            let Err(error) = forward_cancels(&connect, &cancels).await;
            tracing::warn!(%error, "cancel listener failed; reconnecting");
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    tokio::select! {
        () = listen => {}
        _ = stopped.wait_for(|stop| *stop) => {}
    }
}

/// The lease of one process in `carmy.instances`.
#[derive(Debug)]
struct Lease {
    pool: PgPool,
    /// Explains the renewer's failures in its log lines.
    diagnosis: Arc<Diagnosis>,
    instance_id: String,
    hostname: Option<String>,
    pid: Option<i32>,
    ttl_millis: i64,
    /// Whether the instance row has been written at least once.
    registered: AtomicBool,
}

impl Lease {
    /// Sets `lease_expires_at = now() + ttl` (inserting the row if it is missing).
    async fn renew(&self) -> Result<(), sqlx::Error> {
        sqlx::query(LEASE_SQL)
            .bind(&self.instance_id)
            .bind(self.hostname.as_deref())
            .bind(self.pid)
            .bind(self.ttl_millis)
            .execute(&self.pool)
            .await?;
        self.registered.store(true, Ordering::Release);
        Ok(())
    }

    /// Renews every `interval` until `stopped` turns true (or its sender is gone). A renewal in
    /// progress is never cut short, so a stop never races with a half-sent renewal.
    async fn run(self: Arc<Self>, interval: Duration, mut stopped: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                changed = stopped.wait_for(|stop| *stop) => {
                    let _ = changed;
                    return;
                }
            }
            if let Err(error) = self.renew().await {
                let error = self.diagnosis.explain(error).await;
                tracing::warn!(%error, instance_id = %self.instance_id, "lease renewal failed");
            }
        }
    }
}

/// One listening session: returns only with the error that ended it.
async fn forward_cancels(
    connect: &sqlx::postgres::PgConnectOptions,
    cancels: &broadcast::Sender<ExecutionId>,
) -> Result<std::convert::Infallible, sqlx::Error> {
    let connection = PgPoolOptions::new()
        .max_connections(1)
        .connect_lazy_with(connect.clone());
    let mut listener = PgListener::connect_with(&connection).await?;
    listener.listen(CANCEL_CHANNEL).await?;
    loop {
        let notification = listener.recv().await?;
        // No receiver is fine: then nothing runs here that could be cancelled.
        let _ = cancels.send(ExecutionId::from_stored(notification.payload()));
    }
}

/// Decodes the [`record_columns!`] of a row into a record.
///
/// # Errors
/// [`StoreError::Unavailable`] for a damaged row: an unknown state, an outcome that is not a
/// record, or an outcome whose status or execution id disagrees with its columns.
fn decode_record(row: &PgRow) -> Result<StoredRecord, StoreError> {
    let execution_id: String = row.try_get("execution_id").map_err(unavailable)?;
    let tool: String = row.try_get("tool").map_err(unavailable)?;
    let digest: String = row.try_get("fingerprint").map_err(unavailable)?;
    let version: String = row.try_get("fingerprint_version").map_err(unavailable)?;
    let state: String = row.try_get("state").map_err(unavailable)?;
    let outcome: Option<String> = row.try_get("outcome").map_err(unavailable)?;
    let in_flight: Option<String> = row.try_get("in_flight_state").map_err(unavailable)?;
    let damaged = |why: &str| {
        StoreError::Unavailable(format!("damaged reservation row {execution_id}: {why}"))
    };

    let state = if state == "running" {
        RecordState::InFlight(match in_flight.as_deref() {
            Some("running") => InFlightState::Running,
            Some("interrupted") => InFlightState::Interrupted,
            _ => return Err(damaged("no in-flight state")),
        })
    } else {
        let status = ExecutionStatus::parse(&state)
            .ok_or_else(|| damaged(&format!("unknown state {state:?}")))?;
        let text = outcome.ok_or_else(|| damaged("finished without an outcome"))?;
        let result = ExecutionResult::from_record_json(&text)
            .map_err(|error| damaged(&format!("outcome is not a record: {error}")))?;
        if result.status != status {
            return Err(damaged("outcome status differs from the state column"));
        }
        if result.execution_id.as_str() != execution_id {
            return Err(damaged("outcome execution_id differs from the column"));
        }
        RecordState::Finished(result)
    };
    Ok(StoredRecord {
        execution_id: ExecutionId::from_stored(execution_id),
        fingerprint: Fingerprint { version, digest },
        tool,
        state,
    })
}

/// Maps a database error to [`StoreError::Unavailable`] with its text (for logs only), without
/// diagnosing a pool timeout: for decoding a row that was already read.
fn unavailable(error: sqlx::Error) -> StoreError {
    StoreError::Unavailable(error.to_string())
}

/// Why a `*_impl` method of [`PostgresStore`] failed, before [`PostgresStore::finish`] turns it
/// into a [`StoreError`].
#[derive(Debug)]
enum Failure {
    /// A statement failed or no connection could be had: [`StoreError::Unavailable`] with the
    /// cause.
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

/// How reading the migration history failed, for [`IdempotencyStore::check_ready`].
#[derive(Debug, PartialEq, Eq)]
enum ReadFailure {
    /// The schema or the history table does not exist: nothing was migrated.
    NoTable,
    /// No session: the server is down or unreachable, TLS failed, the database or role is
    /// missing, authentication failed, the server is starting, shutting down or full.
    Unreachable,
    /// The server answered with another error (e.g. permission denied).
    Refused,
}

impl ReadFailure {
    /// Classifies an error of [`READY_SQL`] by SQLSTATE: `42P01` undefined table and `3F000`
    /// invalid schema name are [`ReadFailure::NoTable`]; the classes `08` (connection), `28`
    /// (authorization), `3D` (catalog name), `53` (resources), `57` (operator intervention) and
    /// any error without SQLSTATE (I/O, TLS, pool timeout) are [`ReadFailure::Unreachable`].
    fn of(error: &sqlx::Error) -> Self {
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

/// Finds out why the pool timed out: sqlx retries refused connections until the acquire timeout
/// and then reports only `PoolTimedOut`, hiding the cause ("Connection refused", "too many
/// clients", …).
#[derive(Debug)]
struct Diagnosis {
    pool: PgPool,
    /// The last probe's explanation and when it was made: reused for [`DIAGNOSIS_REUSE`], so
    /// that many failing calls cause one probe. Held during a probe (single flight).
    last: tokio::sync::Mutex<Option<(Instant, String)>>,
}

impl Diagnosis {
    /// The text of `error` for logs, with the cause of a pool timeout appended: the result of
    /// one direct connection attempt ([`probe`]) made with the pool's connect options, e.g.
    /// `pool timed out while waiting for an open connection: cannot connect to PostgreSQL: error
    /// communicating with database: Connection refused (os error 111)`.
    async fn explain(&self, error: sqlx::Error) -> String {
        if !matches!(error, sqlx::Error::PoolTimedOut) {
            return error.to_string();
        }
        let mut last = self.last.lock().await;
        if let Some((at, cause)) = last.as_ref() {
            if at.elapsed() < DIAGNOSIS_REUSE {
                return format!("{error}: {cause}");
            }
        }
        let options = self.pool.options();
        let cause = match probe(
            &self.pool.connect_options(),
            probe_timeout(options.get_acquire_timeout()),
        )
        .await
        {
            Some(cause) => format!("cannot connect to PostgreSQL: {cause}"),
            None => format!(
                "a direct connection succeeded, so all {} pooled connections were busy",
                options.get_max_connections()
            ),
        };
        let text = format!("{error}: {cause}");
        *last = Some((Instant::now(), cause));
        text
    }
}

/// How long a probe may wait: the acquire timeout, at most [`MAX_PROBE_TIMEOUT`].
fn probe_timeout(acquire_timeout: Duration) -> Duration {
    acquire_timeout.min(MAX_PROBE_TIMEOUT)
}

/// Opens (and closes) one connection with `options`, outside any pool: `None` when it works,
/// otherwise why not (the error's text, or that no answer came within `timeout`).
async fn probe(options: &PgConnectOptions, timeout: Duration) -> Option<String> {
    match tokio::time::timeout(timeout, PgConnection::connect_with(options)).await {
        Ok(Ok(connection)) => {
            if let Err(error) = connection.close().await {
                tracing::debug!(%error, "probe connection did not close cleanly");
            }
            None
        }
        Ok(Err(error)) => Some(error.to_string()),
        Err(_) => Some(format!("no answer within {} ms", timeout.as_millis())),
    }
}

/// The machine's host name, for operators reading `carmy.instances`; `None` when unknown.
fn read_hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_query_reads_the_migration_table() {
        assert!(READY_SQL.ends_with(&format!("FROM {}", crate::MIGRATION_TABLE)));
    }

    #[test]
    fn default_options() {
        let options = PostgresStoreOptions::new("postgres://h/db");
        assert_eq!(options.database_url, "postgres://h/db");
        assert_eq!(options.max_connections, 10);
        assert_eq!(options.acquire_timeout, Duration::from_secs(5));
        assert_eq!(options.lease_ttl, Duration::from_secs(30));
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
}
