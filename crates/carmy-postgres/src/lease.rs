//! This process's lease in `carmy.instances` (docs/semantics.md §4): registered at start, renewed
//! every `lease_ttl / 3` by a background task, ended at shutdown. A running reservation whose
//! owner's lease lapsed reads as interrupted (`carmy.in_flight_state`).
//!
//! The lease has a connection of its own ([`lease_pool`]), never one of the pool that tools,
//! reads and cancels use: a pool exhausted by database-bound tools must not starve the renewal
//! and make a live replica's executions read `interrupted` (docs/semantics.md §12).

use crate::diagnosis::Diagnosis;
use crate::sql::{END_LEASE_SQL, LEASE_SQL};
use sqlx::postgres::PgPool;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
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
        }
    }

    /// Whether the instance row has been written at least once.
    pub(crate) fn registered(&self) -> bool {
        self.registered.load(Ordering::Acquire)
    }

    /// Sets `lease_expires_at = now() + ttl` (inserting the row if it is missing).
    pub(crate) async fn renew(&self) -> Result<(), sqlx::Error> {
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
    pub(crate) async fn run(
        self: Arc<Self>,
        interval: Duration,
        mut stopped: watch::Receiver<bool>,
    ) {
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

/// A pool of one connection for the lease alone, with the settings of `pool`'s connections. It
/// waits for that connection at most one renewal interval (a third of `ttl`), so a renewal that
/// cannot connect fails in time for the next one instead of letting the lease lapse silently.
pub(crate) fn lease_pool(pool: &PgPool, ttl: Duration) -> PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(renewal_interval(ttl))
        .connect_lazy_with((*pool.connect_options()).clone())
}

/// The renewal interval for a lease of `ttl`: a third of it, at least 1 ms.
pub(crate) fn renewal_interval(ttl: Duration) -> Duration {
    (ttl / 3).max(Duration::from_millis(1))
}

/// The machine's host name, for operators reading `carmy.instances`; `None` when unknown.
fn read_hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
}
