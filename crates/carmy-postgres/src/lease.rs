//! This process's lease in `carmy.instances` (docs/semantics.md §4): registered at start, renewed
//! every `lease_ttl / 3` by a background task, ended at shutdown. A running reservation whose
//! owner's lease lapsed reads as interrupted (`carmy.in_flight_state`).
//!
//! The lease has a connection of its own ([`lease_pool`]), never one of the pool that tools,
//! reads and cancels use: a pool exhausted by database-bound tools must not starve the renewal
//! and make a live replica's executions read `interrupted` (docs/semantics.md §12.2).
//!
//! [`Lease::watch_lapse`] announces when the lease no longer surely holds
//! ([`LeaseState::Lapsed`], so the engine stops the tools it runs) and [`Lease::renew`] when it
//! holds again ([`LeaseState::Held`]).

use crate::diagnosis::Diagnosis;
use crate::failure::Failure;
use crate::session::lease_lock_timeout;
use crate::sql::{END_LEASE_SQL, LEASE_SQL};
use carmy::store::{LeaseState, StoreError};
use sqlx::postgres::{PgConnectOptions, PgPool};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The lease of one process in `carmy.instances`.
#[derive(Debug)]
pub(crate) struct Lease {
    pool: PgPool,
    /// Explains the renewer's failures in its log lines.
    diagnosis: Arc<Diagnosis>,
    instance_id: String,
    hostname: Option<String>,
    pid: Option<i32>,
    ttl_millis: i64,
    /// Whether the instance row has been written at least once.
    registered: AtomicBool,
    /// Until when the lease surely holds, by this process's clock: the moment the last
    /// successful renewal was sent, plus the TTL (the database set a later expiry).
    held_until: std::sync::Mutex<Option<Instant>>,
    /// [`LeaseState::Held`] after a renewal, [`LeaseState::Lapsed`] once `held_until` passed.
    state: watch::Sender<LeaseState>,
    /// Renewals of the background task that failed (`carmy_lease_renewal_failures_total`).
    failures: AtomicU64,
}

impl Lease {
    /// The lease of `instance_id` lasting `ttl_millis`, not registered yet; the host name and
    /// process id are read for operators.
    pub(crate) fn new(
        pool: PgPool,
        diagnosis: Arc<Diagnosis>,
        instance_id: String,
        ttl_millis: i64,
    ) -> Self {
        Self {
            pool,
            diagnosis,
            instance_id,
            hostname: read_hostname(),
            pid: i32::try_from(std::process::id()).ok(),
            ttl_millis,
            registered: AtomicBool::new(false),
            held_until: std::sync::Mutex::new(None),
            state: watch::Sender::new(LeaseState::Lapsed),
            failures: AtomicU64::new(0),
        }
    }

    /// How many renewals of the background task ([`Lease::run`]) failed since the start.
    pub(crate) fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Whether the instance row has been written at least once.
    pub(crate) fn registered(&self) -> bool {
        self.registered.load(Ordering::Acquire)
    }

    /// Sets `lease_expires_at = now() + ttl` (inserting the row if it is missing).
    ///
    /// The statement gets one renewal interval to answer; past it the connection is closed
    /// rather than handed back, so a link that went silent in the middle of a renewal cannot
    /// hold the lease's only connection until TCP gives up, and the next renewal opens a new
    /// one (docs/semantics.md §12.2).
    ///
    /// # Errors
    /// The statement's error; [`sqlx::Error::Io`] (`TimedOut`) when it got no answer in time.
    pub(crate) async fn renew(&self) -> Result<(), sqlx::Error> {
        let sent = Instant::now();
        let ttl = Duration::from_millis(u64::try_from(self.ttl_millis).unwrap_or(0));
        let mut connection = self.pool.acquire().await?;
        let statement = sqlx::query(LEASE_SQL)
            .bind(&self.instance_id)
            .bind(self.hostname.as_deref())
            .bind(self.pid)
            .bind(self.ttl_millis)
            .execute(&mut *connection);
        let Ok(answered) = tokio::time::timeout(renewal_interval(ttl), statement).await else {
            connection.close_on_drop();
            return Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the lease renewal got no answer within {} ms; its connection is closed",
                    renewal_interval(ttl).as_millis()
                ),
            )));
        };
        answered?;
        self.registered.store(true, Ordering::Release);
        *self
            .held_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(sent + ttl);
        self.state.send_if_modified(|state| {
            std::mem::replace(state, LeaseState::Held) != LeaseState::Held
        });
        Ok(())
    }

    /// Until when the lease surely holds; `None` before the first renewal.
    fn held_until(&self) -> Option<Instant> {
        *self
            .held_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the lease surely holds now (see `held_until`).
    pub(crate) fn holds(&self) -> bool {
        self.held_until()
            .is_some_and(|until| Instant::now() < until)
    }

    /// The lease's state as it changes (`IdempotencyStore::lease_state`).
    pub(crate) fn state(&self) -> watch::Receiver<LeaseState> {
        self.state.subscribe()
    }

    /// Announces [`LeaseState::Lapsed`] as soon as `held_until` passes without a renewal, and
    /// waits for the next successful renewal ([`Lease::renew`] announces
    /// [`LeaseState::Held`]), until `stopped` turns true. A task of its own beside
    /// [`Lease::run`], so a renewal that hangs (a cut link) does not delay the announcement.
    pub(crate) async fn watch_lapse(self: Arc<Self>, mut stopped: watch::Receiver<bool>) {
        let mut state = self.state();
        loop {
            let until = self.held_until();
            let next = async {
                if let Some(until) = until.filter(|until| Instant::now() < *until) {
                    tokio::time::sleep_until(until.into()).await;
                    return;
                }
                // Never held yet (nothing runs under it) or lapsed: wait for a renewal.
                if until.is_some() {
                    self.announce_lapse();
                }
                // The sender lives in `self`: the wait ends only with a renewal.
                let _ = state.wait_for(|now| *now == LeaseState::Held).await;
            };
            tokio::select! {
                () = next => {}
                _ = stopped.wait_for(|stop| *stop) => return,
            }
        }
    }

    /// Announces [`LeaseState::Lapsed`] (once per lapse) with a warning, unless a renewal
    /// landed meanwhile: checked inside the state's update, and [`Lease::renew`] moves
    /// `held_until` before it announces [`LeaseState::Held`], so a renewal racing with this
    /// either is seen here or announces `Held` after it.
    fn announce_lapse(&self) {
        let announced = self.state.send_if_modified(|state| {
            !self.holds() && std::mem::replace(state, LeaseState::Lapsed) != LeaseState::Lapsed
        });
        if announced {
            tracing::warn!(
                instance_id = %self.instance_id,
                "this replica's lease lapsed: its running tools are asked to stop and new calls are refused until a renewal succeeds"
            );
        }
    }

    /// The step before a reservation (docs/semantics.md §12.2): when the lease no longer surely
    /// holds (renewals failed, e.g. the replica is cut off from the database), renews it first,
    /// waiting at most one renewal interval. A replica without a lease never reserves: the other
    /// replicas already read its executions as interrupted.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the lease cannot be renewed in time.
    pub(crate) async fn ensure_held(&self) -> Result<(), Failure> {
        if self.holds() {
            return Ok(());
        }
        let ttl = Duration::from_millis(u64::try_from(self.ttl_millis).unwrap_or(0));
        // The lease pool gives up on a connection after half an interval (`lease_pool`), so a
        // database that cannot be reached is reported with its cause, and the diagnosis runs
        // outside this deadline; only a renewal that hangs after connecting runs into it.
        let renewed = tokio::time::timeout(renewal_interval(ttl), self.renew()).await;
        match renewed {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(StoreError::Unavailable(format!(
                "this replica's lease lapsed and cannot be renewed: {}",
                self.diagnosis.explain(error).await
            ))
            .into()),
            Err(_elapsed) => Err(StoreError::Unavailable(
                "this replica's lease lapsed and its renewal did not finish in time".to_owned(),
            )
            .into()),
        }
    }

    /// Registers the lease when it is not yet: the step before a reservation, so that none is
    /// ever made without a lease row (others would read it as interrupted).
    pub(crate) async fn ensure_registered(&self) -> Result<(), sqlx::Error> {
        if self.registered() {
            return Ok(());
        }
        self.renew().await
    }

    /// Ends the lease now (`lease_expires_at = now()`).
    pub(crate) async fn end(&self) -> Result<(), sqlx::Error> {
        sqlx::query(END_LEASE_SQL)
            .bind(&self.instance_id)
            .execute(&self.pool)
            .await
            .map(drop)
    }

    /// Renews every `interval` until `stopped` turns true (or its sender is gone). A renewal in
    /// progress is never cut short, so a stop never races with a half-sent renewal.
    ///
    /// A renewal that gave up waiting for a row lock on its `carmy.instances` row (its
    /// connection's `lock_timeout`, a quarter interval: someone else's `SELECT … FOR UPDATE`) is
    /// retried after an eighth of the interval, not a whole one, so the lease holds through a
    /// lock released before it would lapse (docs/semantics.md §14.1).
    pub(crate) async fn run(
        self: Arc<Self>,
        interval: Duration,
        mut stopped: watch::Receiver<bool>,
    ) {
        let mut wait = interval;
        loop {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                changed = stopped.wait_for(|stop| *stop) => {
                    let _ = changed;
                    return;
                }
            }
            wait = interval;
            if let Err(error) = self.renew().await {
                self.failures.fetch_add(1, Ordering::Relaxed);
                if waited_for_a_lock(&error) {
                    wait = (lease_lock_timeout(interval) / 2).max(Duration::from_millis(1));
                    tracing::warn!(
                        instance_id = %self.instance_id,
                        retry_in_ms = wait.as_millis(),
                        "lease renewal gave up waiting for a row lock on carmy.instances held by another session (see pg_locks; e.g. a SELECT … FOR UPDATE): retrying soon"
                    );
                    continue;
                }
                let error = self.diagnosis.explain(error).await;
                tracing::warn!(%error, instance_id = %self.instance_id, "lease renewal failed");
            }
        }
    }
}

/// A pool of one connection for the lease alone, opened with `connect` (the store's connect
/// options with the lease's session settings, docs/semantics.md §14.1). It
/// waits for that connection at most half a renewal interval (a sixth of `ttl`), so a renewal
/// that cannot connect fails, with its cause, in time for the next one instead of letting the
/// lease lapse silently, and before the deadline of [`Lease::ensure_held`].
pub(crate) fn lease_pool(connect: PgConnectOptions, ttl: Duration) -> PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(lease_acquire_timeout(ttl))
        .connect_lazy_with(connect)
}

/// How long a renewal waits for the lease's connection ([`lease_pool`]): half a renewal
/// interval, at least 1 ms.
pub(crate) fn lease_acquire_timeout(ttl: Duration) -> Duration {
    (renewal_interval(ttl) / 2).max(Duration::from_millis(1))
}

/// The renewal interval for a lease of `ttl`: a third of it, at least 1 ms.
pub(crate) fn renewal_interval(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(1))
}

/// Whether `error` is PostgreSQL's `lock_not_available` (SQLSTATE 55P03): the statement gave
/// up waiting for a lock after its `lock_timeout`.
fn waited_for_a_lock(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|error| error.code())
        .is_some_and(|code| code == "55P03")
}

/// The machine's host name, for operators reading `carmy.instances`; `None` when unknown.
fn read_hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
}
