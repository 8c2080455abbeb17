//! [`PostgresStore`]: the durable [`IdempotencyStore`](carmy::store::IdempotencyStore) shared by all gateway replicas
//! (docs/semantics.md §8). The statements are in [`crate::sql`], the settings in
//! [`crate::options`], the lease in `lease`, cancel delivery in `cancel`, error classes in
//! `failure`, row decoding in `decode` and the hot-path connections in `hot`. Here: the store,
//! its construction, lookups, readiness and shutdown; `reserve` and `complete` (batched or
//! alone) in `store/hot_path.rs`, the trait's methods in `store/idempotency.rs`.

use crate::batch::{Batcher, Limits};
use crate::cancel::{listen_for_cancels, Heard, CANCEL_BACKLOG};
use crate::combined::HotBatch;
use crate::decide;
use crate::decode::{decode_arguments, decode_key, decode_record};
use crate::diagnosis::{explain_connect, Diagnosis};
use crate::failure::{settle, Failure};
use crate::grouped::Hot;
use crate::hot::{hot_pool, HotManager};
use crate::lease::{lease_pool, renewal_interval, Lease};
use crate::options::{pool_options, ConnectError, PostgresStoreOptions};
use crate::pinned::Db;
use crate::ready::check_ready;
use crate::session::Job;
use crate::sharding::reservations_distributed;
use crate::sql::{FIND_EXECUTION_SQL, LOOKUP_SQL};
use carmy::outcome::ExecutionId;
use carmy::store::{ExecutionLookup, IdempotencyKey, StoreError, StoredRecord};
use sqlx::postgres::PgPool;
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

mod held;
mod hot_path;
mod idempotency;

/// Batches in flight at once (see `batch`; each carries `reserve` and `complete` calls alike,
/// `combined`): while they run, the next batch forms.
const BATCHES_IN_FLIGHT: usize = 2;

/// How often `reserve` retries when the row it conflicted with vanished before it was read, or an
/// expired row it met was replaced by a concurrent reservation first.
const RESERVE_ATTEMPTS: usize = 3;

/// The PostgreSQL [`IdempotencyStore`](carmy::store::IdempotencyStore) (docs/semantics.md §8): reservations and outcomes in
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
/// ready: [`IdempotencyStore::check_ready`](carmy::store::IdempotencyStore::check_ready) is `Ok` only when `max(version)` in
/// `carmy.refinery_schema_history` is at least [`crate::latest_migration_version`] and the
/// instance row is written. A schema behind this build is [`StoreError::NotReady`]: `schema
/// carmy is not migrated (found version N, need M): run migrations (…)` (or `found none`, or
/// `found no table carmy.refinery_schema_history`), shown by `/readyz`. Otherwise it is
/// [`StoreError::Unavailable`] with the reason: `database unreachable: <cause>` (nothing
/// listening, TLS failure, unknown database or role, …), `cannot read
/// carmy.refinery_schema_history: <error>` (e.g. a permission), or `cannot register the
/// instance lease: <cause>`.
///
/// Every [`StoreError::Unavailable`] text carries its cause; a pool timeout is explained by one
/// direct connection attempt (at most one per second, see `diagnosis`), e.g. `pool timed out
/// while waiting for an open connection: cannot connect to PostgreSQL: … Connection refused`.
///
/// A background task renews the lease every `lease_ttl / 3` until [`PostgresStore::shutdown`]
/// or drop; create the store inside a Tokio runtime. Share it as `Arc<PostgresStore>` (or
/// `Arc<dyn IdempotencyStore>`).
#[derive(Debug)]
pub struct PostgresStore {
    /// The shared pool, pinned behind a transaction-mode pooler (`pinned`).
    pool: Db,
    instance_id: String,
    /// Readiness fails, rather than warns, on asynchronous standbys (docs/semantics.md §14).
    require_sync_replica: bool,
    lease: Arc<Lease>,
    diagnosis: Arc<Diagnosis>,
    stop: watch::Sender<bool>,
    renewer: Mutex<Option<JoinHandle<()>>>,
    cancels: broadcast::Sender<ExecutionId>,
    /// Executions whose outcome was recorded or decided, heard by the listener (for waiters).
    recorded: broadcast::Sender<ExecutionId>,
    /// Finished records changed behind this process's back, heard by the listener (for replay
    /// caches).
    changes: broadcast::Sender<carmy::store::RecordChange>,
    /// Connections for `reserve` and `complete` (see [`crate::hot`]).
    hot: bb8::Pool<HotManager>,
    /// Group commit of `reserve` and `complete` together (`batch`, `combined`); `None` when
    /// `batch_max_rows` is 1.
    batches: Option<Batcher<HotBatch>>,
}

impl PostgresStore {
    /// Opens a pool per `options` (a [`PostgresStoreOptions`], or just a URL: `&str` or
    /// `String`, with every other setting at its default), registers this instance in
    /// `carmy.instances` with `lease_expires_at = now() + lease_ttl` and starts the lease
    /// renewer. Run [`crate::migrate`] first.
    ///
    /// When the instance row cannot be written (typically: the schema is not migrated yet), the
    /// store is still returned: [`IdempotencyStore::check_ready`](carmy::store::IdempotencyStore::check_ready) then reports why, the renewer
    /// keeps trying, and `reserve` registers the instance before it reserves anything (failing
    /// with [`StoreError::Unavailable`] while it cannot), so no reservation is ever made without a
    /// lease.
    ///
    /// # Errors
    /// [`ConnectError::Options`] when a setting is out of range (zero `max_connections`, a lease
    /// outside 1 ms ..= 24 h, an empty instance id, an unreadable URL), naming it;
    /// [`ConnectError::Unavailable`] when no session can be opened within `acquire_timeout`: the
    /// text then carries the cause, e.g. `database "x" does not exist`, `Connection refused`, or
    /// a TLS failure (a server without TLS under `sslmode=require`, an untrusted certificate
    /// under `verify-ca` / `verify-full`).
    pub async fn connect(options: impl Into<PostgresStoreOptions>) -> Result<Self, ConnectError> {
        let options = options.into();
        options.lease_ttl_millis()?;
        let connect = options.session_connect_options()?;
        let pool = pool_options(options.max_connections, options.acquire_timeout)
            .connect_with(connect.clone())
            .await;
        let pool = match pool {
            Ok(pool) => pool,
            Err(error) => {
                // The pool retries a refused connection until the timeout and then hides why.
                let cause = explain_connect(error, &connect, options.acquire_timeout).await;
                return Err(ConnectError::Unavailable(format!(
                    "cannot connect to PostgreSQL: {cause}"
                )));
            }
        };
        Self::from_pool(pool, options).await
    }

    /// Uses an existing pool (its size and acquire timeout apply; `database_url`,
    /// `max_connections` and `acquire_timeout` of `options` are ignored), registers this instance
    /// and starts the lease renewer and the cancel listener, as [`PostgresStore::connect`] (a
    /// registration that fails is retried, as there). Call it inside a Tokio runtime.
    ///
    /// # Errors
    /// [`ConnectError::Options`] when `lease_ttl` is not between 1 ms and 24 h, `instance_id`
    /// is empty, `session_url` cannot be read, or `transaction_pooler` is set without it.
    ///
    /// The lease and the `LISTEN` connection use `session_url` when set; the pool's and the hot
    /// path's statements run pinned when `transaction_pooler` is set (docs/semantics.md §14.3).
    pub async fn from_pool(
        pool: PgPool,
        options: PostgresStoreOptions,
    ) -> Result<Self, ConnectError> {
        let ttl_millis = options.lease_ttl_millis()?;
        let diagnosis = Arc::new(Diagnosis::new(pool.clone()));
        // Each connection's job and bounds (docs/semantics.md §14.1), also on a pool made
        // without them.
        let session = options.session();
        let connect = (*pool.connect_options()).clone();
        // The lease and the listener need sessions of their own (docs/semantics.md §14.3).
        let session_bound = options.session_bound(&connect)?;
        let pinning = options.pinning();
        let lease = Arc::new(Lease::new(
            lease_pool(session.apply(&session_bound, Job::Lease), options.lease_ttl),
            Arc::clone(&diagnosis),
            options.instance_id.clone(),
            ttl_millis,
        ));
        if let Err(error) = lease.renew().await {
            let error = diagnosis.explain(error).await;
            tracing::warn!(
                %error,
                instance_id = %options.instance_id,
                "cannot register the instance lease yet (schema not migrated?); will retry"
            );
        }
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(Arc::clone(&lease).watch_lapse(stopped.clone()));
        let renewer =
            tokio::spawn(Arc::clone(&lease).run(renewal_interval(options.lease_ttl), stopped));
        let hot = hot_pool(
            session.apply(&connect, Job::Hot),
            pinning.clone(),
            pool.options().get_max_connections(),
            pool.options().get_acquire_timeout(),
        );
        // On Citus every call runs its own statement: a batch would span shards (`sharding`).
        let distributed = options.batch_max_rows > 1
            && reservations_distributed(&Db::new(pool.clone(), pinning.clone())).await;
        if distributed {
            tracing::info!(
                "carmy.reservations is distributed (Citus): group commit is off, every call \
                 runs its own single-shard statement"
            );
        }
        let batches = (options.batch_max_rows > 1 && !distributed).then(|| {
            let hot = Hot {
                pool: hot.clone(),
                instance_id: options.instance_id.clone(),
                diagnosis: Arc::clone(&diagnosis),
            };
            let limits = Limits {
                max_rows: options.batch_max_rows,
                in_flight: BATCHES_IN_FLIGHT,
                queue_timeout: pool.options().get_acquire_timeout(),
            };
            Batcher::start(HotBatch(hot), limits)
        });
        let (cancels, _) = broadcast::channel(CANCEL_BACKLOG);
        let (recorded, _) = broadcast::channel(CANCEL_BACKLOG);
        let (changes, _) = broadcast::channel(CANCEL_BACKLOG);
        let heard = Heard {
            cancels: cancels.clone(),
            recorded: recorded.clone(),
            changes: changes.clone(),
        };
        tokio::spawn(listen_for_cancels(
            session.apply(&session_bound, Job::Listen),
            heard,
            stop.subscribe(),
        ));
        Ok(Self {
            pool: Db::new(pool, pinning),
            require_sync_replica: options.require_sync_replica,
            instance_id: options.instance_id,
            lease,
            diagnosis,
            stop,
            renewer: Mutex::new(Some(renewer)),
            cancels,
            recorded,
            changes,
            hot,
            batches,
        })
    }

    /// This process's id in `carmy.instances` (e.g. `inst_3f…`), its reservations' owner.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// The pool, for other queries of the database. Behind a transaction-mode pooler its
    /// statements need [`PostgresStore::db`] instead.
    pub fn pool(&self) -> &PgPool {
        self.pool.pool()
    }

    /// The pool as an executor that works behind a transaction-mode pooler too
    /// (docs/semantics.md §14.3; e.g. the example tools' orders).
    pub fn db(&self) -> &Db {
        &self.pool
    }

    /// Stops the lease renewer (waiting for a renewal in progress to finish) and ends the lease
    /// now (`lease_expires_at = now()`), so reservations this process still holds read as
    /// interrupted at once (docs/semantics.md §4). Call it after the drain period, when no
    /// execution of this process will complete any more. Later calls of the store still work but
    /// are not covered by a lease. Calling it twice is harmless.
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
        let ended = self.lease.end().await.map_err(Failure::from);
        self.finish(ended).await
    }

    async fn lookup_impl(&self, key: &IdempotencyKey) -> Result<Option<StoredRecord>, Failure> {
        let row = sqlx::query(LOOKUP_SQL)
            .bind(&key.principal)
            .bind(&key.session_id)
            .bind(&key.request_id)
            .fetch_optional(self.pool.executor())
            .await?;
        Ok(row.as_ref().map(decode_record).transpose()?)
    }

    /// The held execution, else the released one (`carmy.released_executions`).
    async fn find_execution_impl(
        &self,
        principal: &str,
        execution_id: &ExecutionId,
    ) -> Result<Option<ExecutionLookup>, Failure> {
        let row = sqlx::query(FIND_EXECUTION_SQL)
            .bind(execution_id.as_str())
            .bind(principal)
            .fetch_optional(self.pool.executor())
            .await?;
        let Some(row) = row else {
            return decide::find_released(&self.pool, principal, execution_id).await;
        };
        Ok(Some(ExecutionLookup {
            key: decode_key(&row)?,
            record: decode_record(&row)?,
            released: None,
            reserved_at: None,
            arguments: decode_arguments(&row)?,
        }))
    }

    /// Whether this store can serve calls (see [`crate::ready`]).
    ///
    /// With `require_sync_replica`, also [`StoreError::NotReady`] while the primary has
    /// standbys and its commits do not wait for a synchronous one (docs/semantics.md §14).
    async fn check_ready_impl(&self) -> Result<(), StoreError> {
        check_ready(&self.pool, &self.lease, &self.diagnosis).await?;
        if self.require_sync_replica {
            if let Some(warning) = self.replication_warning().await? {
                return Err(StoreError::NotReady(format!(
                    "{warning} (not ready: CARMY_REQUIRE_SYNC_REPLICA=true)"
                )));
            }
        }
        Ok(())
    }

    /// The warning of [`crate::check_replication`] for this store's primary, if any.
    async fn replication_warning(&self) -> Result<Option<String>, StoreError> {
        match crate::replication::check_replication(self.pool.executor()).await {
            Ok(found) => Ok(found.warning()),
            Err(error) => Err(StoreError::Unavailable(format!(
                "cannot read the replication settings: {}",
                self.diagnosis.explain(error).await
            ))),
        }
    }

    /// What `/readyz` shows as warnings: the replication warning (docs/semantics.md §14), unless
    /// `require_sync_replica` made it a refusal already.
    async fn readiness_warnings_impl(&self) -> Result<Vec<String>, StoreError> {
        if self.require_sync_replica {
            return Ok(Vec::new());
        }
        Ok(self.replication_warning().await?.into_iter().collect())
    }

    /// Turns the outcome of a `*_impl` method into the trait's: a database error becomes
    /// [`StoreError::Indeterminate`] when the statement was lost in transit (it may have been
    /// applied), else [`StoreError::Unavailable`], with its cause ([`Diagnosis::explain`]).
    async fn finish<T>(&self, outcome: Result<T, Failure>) -> Result<T, StoreError> {
        settle(&self.diagnosis, outcome).await
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
