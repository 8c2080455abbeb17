//! Retention of finished records (docs/semantics.md §12.9): how long a finished record holds its
//! identity, when it expires, and the background task that prunes what expired.
//!
//! - A finished record *expires* at `finished_at + retention` (its own `finished_at`, the one
//!   every answer shows): [`expires_at`]. Every finished record states it as `expires_at`
//!   (`null` when the retention is [`None`]: kept forever, `CARMY_RETENTION=0`).
//! - From then on it no longer holds its identity: a reservation that meets it replaces it and
//!   runs as new ([`crate::store::ExecutionIntent::retention`]), and [`run_pruner`] deletes it in
//!   batches ([`IdempotencyStore::prune_expired`]).
//! - Running and interrupted records never expire: their outcome is unknown (§4).
//! - History goes with the same retention, counted from its own time: released executions from
//!   their release, audit rows (late arrivals included) from when they were written, but never
//!   while their execution still holds a record; stopped instances once their lease lapsed more
//!   than the retention ago and they own no running record.

use crate::metrics::Metrics;
use crate::store::IdempotencyStore;
use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The default retention (`CARMY_RETENTION`): 7 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Rows one pruning step deletes at most, per kind (records, released executions, audit rows,
/// instances): small enough that a step holds its locks for milliseconds.
pub const DEFAULT_PRUNE_BATCH: usize = 1000;

/// How often a replica looks for expired records (`CARMY_PRUNE_INTERVAL_MS`).
pub const DEFAULT_PRUNE_INTERVAL: Duration = Duration::from_secs(60);

/// The shortest pause between two full pruning steps, so that pruning a large backlog leaves
/// the database to the calls in between.
pub const PRUNE_PAUSE: Duration = Duration::from_millis(20);

/// The pause after a full pruning step is at least this many times as long as the step took:
/// a backlog is pruned with the database busy at most a fifth of the time, so the calls beside
/// it keep their latency (docs/semantics.md §12.9).
pub const PRUNE_PACE: u32 = 4;

/// When a record finished at `finished_at` expires under `retention` (`None`: never). Saturates
/// far in the future instead of overflowing.
pub fn expires_at(
    finished_at: DateTime<Utc>,
    retention: Option<Duration>,
) -> Option<DateTime<Utc>> {
    let retention = chrono::Duration::from_std(retention?).unwrap_or(chrono::Duration::MAX);
    Some(
        finished_at
            .checked_add_signed(retention)
            .unwrap_or(DateTime::<Utc>::MAX_UTC),
    )
}

/// Whether a record finished at `finished_at` has expired at `now` under `retention`: `now` is
/// at or after [`expires_at`].
pub fn is_expired(
    finished_at: DateTime<Utc>,
    retention: Option<Duration>,
    now: DateTime<Utc>,
) -> bool {
    expires_at(finished_at, retention).is_some_and(|expires| now >= expires)
}

/// What one pruning step deleted, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Expired finished records (`carmy.reservations`).
    pub records: u64,
    /// Released executions older than the retention (`carmy.released_executions`).
    pub released: u64,
    /// Audit rows older than the retention whose execution holds no record (`carmy.audit_log`).
    pub audit: u64,
    /// Stopped instances: lease lapsed more than the retention ago, no running record
    /// (`carmy.instances`).
    pub instances: u64,
}

impl Pruned {
    /// Whether some kind filled its batch of `batch` rows (more may be left to prune).
    pub fn filled(&self, batch: usize) -> bool {
        let batch = u64::try_from(batch).unwrap_or(u64::MAX);
        [self.records, self.released, self.audit, self.instances]
            .iter()
            .any(|&count| count >= batch)
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: Pruned) {
        self.records += other.records;
        self.released += other.released;
        self.audit += other.audit;
        self.instances += other.instances;
    }
}

/// The answer of one pruning step ([`IdempotencyStore::prune_expired`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PruneStep {
    /// This process pruned, holding the pruning lock for the step.
    Pruned(Pruned),
    /// Another replica holds the pruning lock (it prunes now): nothing was done.
    Busy,
}

/// Prunes `store` every `interval` until `stop` is cancelled: one pass is steps of at most
/// `batch` rows per kind, each followed by a pause of [`PRUNE_PACE`] times its own length (at
/// least [`PRUNE_PAUSE`]), until a step deletes less than a full batch or
/// another replica holds the lock. Counts pruned records in `carmy_prunes_total`; a failing
/// step is logged and retried at the next interval. The first pass starts at once.
pub async fn run_pruner(
    store: Arc<dyn IdempotencyStore>,
    retention: Duration,
    interval: Duration,
    batch: usize,
    metrics: Metrics,
    stop: CancellationToken,
) {
    loop {
        let mut pass = Pruned::default();
        loop {
            let started = std::time::Instant::now();
            let step = tokio::select! {
                () = stop.cancelled() => return,
                step = store.prune_expired(retention, batch) => step,
            };
            let pause = (started.elapsed() * PRUNE_PACE).max(PRUNE_PAUSE);
            match step {
                Ok(PruneStep::Pruned(pruned)) => {
                    metrics.records_pruned(pruned.records);
                    pass.add(pruned);
                    if !pruned.filled(batch) {
                        break;
                    }
                }
                Ok(PruneStep::Busy) => {
                    tracing::debug!("another replica prunes; skipping this pass");
                    break;
                }
                Err(error) => {
                    tracing::warn!(%error, "pruning expired records failed; retrying at the next interval");
                    break;
                }
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
        if pass != Pruned::default() {
            tracing::info!(
                records = pass.records,
                released = pass.released,
                audit = pass.audit,
                instances = pass.instances,
                "pruned what outlived the retention"
            );
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn expiry_is_finished_at_plus_retention() {
        let finished = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        let week = Some(DEFAULT_RETENTION);
        let expires = Utc.with_ymd_and_hms(2026, 1, 9, 3, 4, 5).unwrap();
        assert_eq!(expires_at(finished, week), Some(expires));
        assert_eq!(expires_at(finished, None), None);
        assert!(!is_expired(
            finished,
            week,
            expires - chrono::Duration::milliseconds(1)
        ));
        assert!(is_expired(finished, week, expires));
        assert!(!is_expired(finished, None, DateTime::<Utc>::MAX_UTC));
        assert_eq!(
            expires_at(finished, Some(Duration::MAX)),
            Some(DateTime::<Utc>::MAX_UTC)
        );
    }

    #[test]
    fn a_step_is_full_when_one_kind_filled_its_batch() {
        let step = Pruned {
            records: 3,
            ..Pruned::default()
        };
        assert!(step.filled(3));
        assert!(!step.filled(4));
        assert!(!Pruned::default().filled(1));
    }
}
