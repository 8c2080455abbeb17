//! A bounded in-process cache of finished records in front of another store.
//!
//! A finished record never changes (docs/semantics.md §4), so a replica may answer replays and
//! conflicts for it without a database round trip, until its retention ends (§12.9): a cached
//! record past its `expires_at` is dropped and the reservation goes to the store. Only finished
//! records are cached: an identity that is vacant, running or interrupted always goes to the
//! store, and the fingerprint is compared on every cached answer exactly as the store would
//! (docs/semantics.md §3). A conflict names the parts that differ (§12.8), so a copy keeps its
//! call's part digests: those of an outcome this replica recorded
//! ([`RecordedResult::parts`]), or those the store named in its first conflict with a copy
//! cached from a replay (which carries none); a copy without them leaves conflicts to the store.
//!
//! An operator who deletes or rewrites a finished row with SQL is seen by every replica at once:
//! the store announces the change ([`IdempotencyStore::record_changes`]; PostgreSQL: a trigger
//! notifies `carmy_changed` with the row's identity) and the engine, from `App::serve` on, hands
//! it to [`IdempotencyStore::drop_cached`], which drops the copy; the next attempt reads the
//! row. When announcements may have been missed (the store's listener reconnected, or this
//! replica fell behind) the whole cache is dropped. A copy read from the store while a change
//! arrives is not kept. A read by id or in a listing that differs from the cached copy drops
//! the copy too. The time to live bounds what is left: a change the store could not announce
//! (a record deleted by `carmy.prune_expired` with a shorter retention than this replica's,
//! docs/semantics.md §12.3).

use crate::decision::ExecutionQuery;
use crate::fingerprint::{Fingerprint, FingerprintParts};
use crate::outcome::{ExecutionId, RecordedResult};
use crate::retention::PruneStep;
use crate::store::{
    Claim, ExecutionIntent, ExecutionLookup, Existing, IdempotencyKey, IdempotencyStore,
    RecordChange, RecordState, Reservation, StoreFuture, StoredRecord,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Records whose stored JSON is larger than this (bytes) are not cached, so the cache's memory
/// stays within `entries × 8 KiB`.
pub const MAX_CACHED_RECORD_BYTES: usize = 8 * 1024;

/// Default number of cached records.
pub const DEFAULT_CACHE_ENTRIES: u64 = 10_000;

/// Default time a cached record is served before the store is asked again.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(60);

struct CachedRecord {
    fingerprint: Fingerprint,
    result: RecordedResult,
    /// The digests of the recorded call's parts, when known; `None` sends a conflict to the
    /// store, which names what differs (docs/semantics.md §12.8).
    parts: Option<FingerprintParts>,
}

/// An [`IdempotencyStore`] that serves finished records from memory and delegates the rest.
pub struct ReplayCache {
    inner: Arc<dyn IdempotencyStore>,
    records: moka::sync::Cache<IdempotencyKey, Arc<CachedRecord>>,
    /// How many changes were heard ([`IdempotencyStore::drop_cached`]): a copy read from the
    /// store before one arrived may be stale and is not kept.
    changes: AtomicU64,
}

impl ReplayCache {
    /// Caches at most `entries` finished records of `inner`, each for at most `ttl`.
    pub fn new(inner: Arc<dyn IdempotencyStore>, entries: u64, ttl: Duration) -> Self {
        Self {
            inner,
            records: moka::sync::Cache::builder()
                .max_capacity(entries)
                .time_to_live(ttl)
                .build(),
            changes: AtomicU64::new(0),
        }
    }

    /// How many records are cached now (approximate while inserts are pending).
    pub fn len(&self) -> u64 {
        self.records.entry_count()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The count of changes heard so far, taken before a read of the store (see
    /// [`ReplayCache::remember`]).
    fn changes_seen(&self) -> u64 {
        self.changes.load(Ordering::SeqCst)
    }

    /// Caches a finished record read or written when [`ReplayCache::changes_seen`] was `seen`.
    /// If a change was heard since, the copy may be older than the change: it is dropped again
    /// (inserted first and checked after, so a change heard in between drops it either way).
    fn remember(
        &self,
        seen: u64,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        result: &RecordedResult,
    ) {
        if result.record_json().len() > MAX_CACHED_RECORD_BYTES {
            return;
        }
        self.records.insert(
            key.clone(),
            Arc::new(CachedRecord {
                fingerprint: fingerprint.clone(),
                result: result.clone(),
                parts: result.parts(),
            }),
        );
        if self.changes_seen() != seen {
            self.records.invalidate(key);
        }
    }

    /// Drops the cached copy of `found`'s identity when the store's row, just read, differs
    /// from it (an operator changed the row): this replica then answers from the store.
    fn drop_if_stale(&self, found: &ExecutionLookup) {
        if found.released.is_some() {
            // A released execution no longer holds its identity: it says nothing of the copy.
            return;
        }
        let stale = self.records.get(&found.key).is_some_and(|cached| {
            cached.fingerprint != found.record.fingerprint
                || found.record.state != RecordState::Finished(cached.result.result().clone())
        });
        if stale {
            tracing::info!(execution_id = %found.record.execution_id, "the store's row differs from the cached copy; dropping the copy");
            self.records.invalidate(&found.key);
        }
    }

    /// The parts the store named in a conflict with `execution_id`, kept with the copy of
    /// `key` when that copy is of the same execution and has none (a copy cached from a
    /// replay), so that the next conflict is answered here. Kept as [`ReplayCache::remember`]
    /// keeps a copy: not when a change was heard since `seen`.
    fn learn_parts(
        &self,
        seen: u64,
        key: &IdempotencyKey,
        execution_id: &ExecutionId,
        parts: FingerprintParts,
    ) {
        let Some(cached) = self.records.get(key) else {
            return;
        };
        if cached.parts.is_some() || &cached.result.result().execution_id != execution_id {
            return;
        }
        self.records.insert(
            key.clone(),
            Arc::new(CachedRecord {
                fingerprint: cached.fingerprint.clone(),
                result: cached.result.clone(),
                parts: Some(parts),
            }),
        );
        if self.changes_seen() != seen {
            self.records.invalidate(key);
        }
    }

    /// The answer to a reservation from a cached record, which is finished: a replay of the
    /// same fingerprint, or a conflict with another when the copy holds its call's part
    /// digests (docs/semantics.md §12.8). `None` leaves the answer to the store: a conflict
    /// with a copy without digests, a record past its retention (dropped here; the store
    /// replaces it), or anything but a finished record (never cached).
    fn cached_reservation(
        &self,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        retention: Option<Duration>,
    ) -> Option<Reservation> {
        let cached = self.records.get(key)?;
        let now = chrono::Utc::now();
        if crate::retention::is_expired(cached.result.result().finished_at, retention, now) {
            self.records.invalidate(key);
            return None;
        }
        // As `Existing::for_record` classifies the record, without copying the outcome: a
        // replay hands on the cached outcome and its stored text (shared, not serialised again).
        if &cached.fingerprint == fingerprint {
            Some(Existing::Replay(cached.result.as_replay()).into())
        } else {
            cached.parts.map(|parts| {
                Existing::Conflict {
                    execution_id: cached.result.result().execution_id.clone(),
                    parts: Some(parts),
                }
                .into()
            })
        }
    }

    fn cached(&self, key: &IdempotencyKey) -> Option<StoredRecord> {
        self.records.get(key).map(|cached| {
            let result = cached.result.result();
            StoredRecord {
                execution_id: result.execution_id.clone(),
                fingerprint: cached.fingerprint.clone(),
                tool: result.tool.clone(),
                state: RecordState::Finished(result.clone()),
                parts: cached.parts,
            }
        })
    }
}

impl IdempotencyStore for ReplayCache {
    // Passed on unchanged: `release`, the decisions, `take_over`, `wait_for_outcome` and late
    // arrivals act only on records without an outcome, which are never cached; the audit trail,
    // readiness (and its warnings), cancel delivery, the lease and shutdown are the inner store's own.
    crate::forward_store!(inner =>
        release, resolve_execution, release_execution, take_over, wait_for_outcome,
        record_late_arrival, audit_trail, check_ready, readiness_warnings, request_cancel, cancel_requests,
        lease_state, record_changes, shutdown, claim_reconciliations, record_probe,
        probe_evidence, attempt_age, operator_view, readings, keeps_client_holds, renew_held, held_owner,
    );

    fn answer_from_memory(
        &self,
        claim: Claim<'_>,
        retention: Option<Duration>,
    ) -> Option<Reservation> {
        self.cached_reservation(claim.key, claim.fingerprint, retention)
    }

    fn reserve<'a>(
        &'a self,
        claim: Claim<'a>,
        intent: &'a ExecutionIntent,
    ) -> StoreFuture<'a, Reservation> {
        Box::pin(async move {
            if let Some(answer) =
                self.cached_reservation(claim.key, claim.fingerprint, intent.retention)
            {
                return Ok(answer);
            }
            let seen = self.changes_seen();
            let reservation = self.inner.reserve(claim, intent).await?;
            match &reservation {
                Reservation::Existing(Existing::Replay(result)) => {
                    self.remember(seen, claim.key, claim.fingerprint, result);
                }
                Reservation::Existing(Existing::Conflict {
                    execution_id,
                    parts: Some(parts),
                }) => self.learn_parts(seen, claim.key, execution_id, *parts),
                _ => {}
            }
            Ok(reservation)
        })
    }

    /// A client-held reservation (docs/semantics.md §16) is answered from the cache like
    /// [`IdempotencyStore::reserve`]: a replay costs the store nothing, and no hold is written.
    fn reserve_held<'a>(
        &'a self,
        claim: Claim<'a>,
        intent: &'a ExecutionIntent,
        hold: &'a crate::held::Hold,
    ) -> StoreFuture<'a, Reservation> {
        Box::pin(async move {
            if let Some(answer) =
                self.cached_reservation(claim.key, claim.fingerprint, intent.retention)
            {
                return Ok(answer);
            }
            let seen = self.changes_seen();
            let reservation = self.inner.reserve_held(claim, intent, hold).await?;
            if let Reservation::Existing(Existing::Replay(result)) = &reservation {
                self.remember(seen, claim.key, claim.fingerprint, result);
            }
            Ok(reservation)
        })
    }

    fn complete<'a>(&'a self, claim: Claim<'a>, result: &'a RecordedResult) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let seen = self.changes_seen();
            self.inner.complete(claim, result).await?;
            self.remember(seen, claim.key, claim.fingerprint, result);
            Ok(())
        })
    }

    fn lookup<'a>(&'a self, key: &'a IdempotencyKey) -> StoreFuture<'a, Option<StoredRecord>> {
        Box::pin(async move {
            if let Some(record) = self.cached(key) {
                return Ok(Some(record));
            }
            self.inner.lookup(key).await
        })
    }

    /// Read from the store; a cached copy that differs from what was read is dropped.
    fn find_execution<'a>(
        &'a self,
        principal: &'a str,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<ExecutionLookup>> {
        Box::pin(async move {
            let found = self.inner.find_execution(principal, execution_id).await?;
            if let Some(found) = &found {
                self.drop_if_stale(found);
            }
            Ok(found)
        })
    }

    /// Read from the store; cached copies that differ from what was read are dropped.
    fn list_executions<'a>(
        &'a self,
        query: &'a ExecutionQuery,
    ) -> StoreFuture<'a, Vec<ExecutionLookup>> {
        Box::pin(async move {
            let found = self.inner.list_executions(query).await?;
            for lookup in &found {
                self.drop_if_stale(lookup);
            }
            Ok(found)
        })
    }

    /// After the step, drops this replica's cached copies past `retention` too. A reservation
    /// never uses a copy past its retention on any replica (it goes to the store, which runs
    /// the call as new); another replica's copy may still answer a `lookup` for at most the
    /// time to live.
    fn prune_expired(&self, retention: Duration, batch: usize) -> StoreFuture<'_, PruneStep> {
        Box::pin(async move {
            let step = self.inner.prune_expired(retention, batch).await?;
            let now = chrono::Utc::now();
            for (key, cached) in &self.records {
                let finished_at = cached.result.result().finished_at;
                if crate::retention::is_expired(finished_at, Some(retention), now) {
                    self.records.invalidate(&*key);
                }
            }
            Ok(step)
        })
    }

    /// Drops the changed identity's copy ([`RecordChange::Unknown`]: every copy), then forwards.
    fn drop_cached(&self, change: &RecordChange) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        match change {
            RecordChange::Changed(key) => self.records.invalidate(key),
            RecordChange::Unknown => self.records.invalidate_all(),
        }
        self.inner.drop_cached(change);
    }
}

#[cfg(test)]
mod tests;
