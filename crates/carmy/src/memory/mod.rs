//! The process-local, bounded store (docs/semantics.md §8), with decisions and their audit
//! trail kept in memory too (`decide`, docs/semantics.md §12.1) and retention (`prune`: a finished
//! record past its retention is replaced by the next reservation of its identity and pruned).

mod decide;
mod prune;

use crate::decision::{AuditEntry, ExecutionQuery, ReleaseRequest, Released, ResolveRequest};
use crate::outcome::{ExecutionId, RecordedResult};
use crate::retention::PruneStep;
use crate::store::Decided;
use crate::store::{Claim, WaitRequest};
use crate::store::{
    ExecutionIntent, ExecutionLookup, Existing, IdempotencyKey, IdempotencyStore, InFlightState,
    RecordState, Reservation, StoreError, StoreFuture, StoredRecord,
};
use crate::ExecutionResult;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The default number of entries (docs/semantics.md §8, `CARMY_MEMORY_CAPACITY`).
pub const DEFAULT_MEMORY_CAPACITY: usize = 10_000;

/// How many outcome notifications a slow waiter may fall behind (it then reads the record).
const RECORDED_BACKLOG: usize = 1024;

/// A process-local store holding at most `capacity` identities.
///
/// When full it fails closed: a new identity gets [`StoreError::Capacity`] (`IDEMPOTENCY_CAPACITY`,
/// 507) while every existing identity is still answered. It never evicts a record before its
/// retention: any entry may stand for a committed effect. A finished record past its retention
/// (docs/semantics.md §12.9) is replaced by the next reservation of its identity (in the same
/// slot) and removed by [`IdempotencyStore::prune_expired`], which frees its slot. Entries live
/// at most as long as the process; use `PostgresStore` for durability.
pub struct InMemoryIdempotencyStore {
    capacity: usize,
    inner: Mutex<Inner>,
    /// The ids of executions that just got an outcome or were released, for waiters.
    recorded: tokio::sync::broadcast::Sender<ExecutionId>,
}

/// At most this many identities' room is taken when a store is made (the rest as they come):
/// a store of the default capacity never grows its tables while it fills, and a very large
/// capacity does not cost its memory up front.
const PRESIZED_ENTRIES: usize = 16_384;

#[derive(Default)]
struct Inner {
    /// Each held identity, its key shared with `by_execution` (one copy of its text).
    by_key: HashMap<Arc<IdempotencyKey>, Held>,
    by_execution: HashMap<ExecutionId, Arc<IdempotencyKey>>,
    /// Released executions: history, not counted against the capacity.
    released: HashMap<ExecutionId, ExecutionLookup>,
    /// The last released execution of each identity not reserved again since: the next
    /// reservation names it ([`Reservation::Replaced`], docs/semantics.md §12.1).
    last_released: HashMap<IdempotencyKey, ExecutionId>,
    /// Every decision's audit row, oldest first.
    audit: Vec<AuditEntry>,
}

/// A held identity's record with the store's own times of it, in one entry so that a reservation
/// and an outcome each touch one table entry for them.
struct Held {
    /// The record as reserved; its `state` stays in flight, the outcome is `outcome`.
    record: StoredRecord,
    /// The recorded outcome, kept as the engine handed it (shared, not copied); `None` while in
    /// flight.
    outcome: Option<RecordedResult>,
    /// When the execution was reserved (a resolution's `started_at`).
    reserved_at: DateTime<Utc>,
    /// When its outcome was recorded (store clock), from which its retention counts, as
    /// PostgreSQL counts it from the row's `finished_at`. Never earlier than the record's own
    /// `finished_at`, which the engine fixes before it records. `None` while in flight.
    recorded_at: Option<DateTime<Utc>>,
    /// The call's arguments as kept (docs/semantics.md §8.5).
    arguments: Option<String>,
}

impl Held {
    /// The record as a store answers it: finished with its outcome once recorded.
    fn record(&self) -> StoredRecord {
        let mut record = self.record.clone();
        if let Some(outcome) = &self.outcome {
            record.state = RecordState::Finished(outcome.result().clone());
        }
        record
    }

    /// Its in-flight state; `None` once finished.
    fn in_flight(&self) -> Option<InFlightState> {
        match (&self.outcome, &self.record.state) {
            (None, RecordState::InFlight(state)) => Some(*state),
            _ => None,
        }
    }
}

impl Inner {
    /// The released execution a new reservation of `key` replaces, forgotten once named.
    fn replaced(&mut self, key: &IdempotencyKey) -> Option<crate::store::Replaced> {
        let execution_id = self.last_released.remove(key)?;
        let resolution = self.released.get(&execution_id)?.released.clone()?;
        Some(crate::store::Replaced {
            execution_id,
            ended: crate::store::ReplacedEnd::Released {
                by: resolution.by,
                note: resolution.note,
            },
        })
    }
}

impl Default for InMemoryIdempotencyStore {
    fn default() -> Self {
        Self::new(DEFAULT_MEMORY_CAPACITY)
    }
}

impl InMemoryIdempotencyStore {
    /// A store holding at most `capacity` identities (0 refuses every new identity).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            inner: Mutex::new(Inner {
                by_key: HashMap::with_capacity(capacity.min(PRESIZED_ENTRIES)),
                by_execution: HashMap::with_capacity(capacity.min(PRESIZED_ENTRIES)),
                ..Inner::default()
            }),
            recorded: tokio::sync::broadcast::channel(RECORDED_BACKLOG).0,
        }
    }

    /// The configured capacity, in entries.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many identities are held (running and finished).
    pub fn len(&self) -> usize {
        self.lock().by_key.len()
    }

    /// True when no identity is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every critical section leaves the maps consistent, so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn reserve_now(
        &self,
        Claim { key, fingerprint }: Claim<'_>,
        intent: &ExecutionIntent,
    ) -> Result<Reservation, StoreError> {
        let mut inner = self.lock();
        if let Some(held) = inner.by_key.get(key) {
            if !held.expired(intent.retention, decide::now_millis()) {
                return Ok(Existing::for_record(held.record(), fingerprint).into());
            }
            // Past its retention: the identity is vacant again, and this reservation takes the
            // expired record's slot (docs/semantics.md §12.9).
            let expired = held.record.execution_id.clone();
            inner.forget(key, &expired);
        } else if inner.by_key.len() >= self.capacity {
            return Err(StoreError::Capacity);
        }
        let record = StoredRecord {
            execution_id: intent.execution_id.clone(),
            fingerprint: fingerprint.clone(),
            tool: intent.tool.clone(),
            state: RecordState::InFlight(InFlightState::Running),
            parts: intent.parts,
        };
        let held = Held {
            record,
            outcome: None,
            reserved_at: decide::now_millis(),
            recorded_at: None,
            arguments: intent.arguments.clone(),
        };
        let replaced = inner.replaced(key);
        let key = Arc::new(key.clone());
        inner.by_key.insert(Arc::clone(&key), held);
        inner.by_execution.insert(intent.execution_id.clone(), key);
        Ok(replaced.map_or(Reservation::Reserved, Reservation::Replaced))
    }

    fn complete_now(
        &self,
        Claim { key, fingerprint }: Claim<'_>,
        recorded: &RecordedResult,
    ) -> Result<(), StoreError> {
        let result = recorded.result();
        let mut inner = self.lock();
        let not_owner = || StoreError::NotOwner {
            execution_id: result.execution_id.clone(),
        };
        let held = inner.by_key.get_mut(key).ok_or_else(not_owner)?;
        // No execution here is ever taken over (`take_over`), so only first attempts record.
        if held.record.execution_id != result.execution_id
            || &held.record.fingerprint != fingerprint
            || recorded.attempt() != 1
        {
            return Err(not_owner());
        }
        match &held.outcome {
            None => {
                held.outcome = Some(recorded.clone());
                held.recorded_at = Some(decide::now_millis());
                // No waiter is fine.
                let _ = self.recorded.send(result.execution_id.clone());
                Ok(())
            }
            Some(outcome) if outcome.result() == result => Ok(()),
            Some(_) => Err(not_owner()),
        }
    }
}

impl IdempotencyStore for InMemoryIdempotencyStore {
    fn reserve<'a>(
        &'a self,
        claim: Claim<'a>,
        intent: &'a ExecutionIntent,
    ) -> StoreFuture<'a, Reservation> {
        Box::pin(std::future::ready(self.reserve_now(claim, intent)))
    }

    fn complete<'a>(&'a self, claim: Claim<'a>, result: &'a RecordedResult) -> StoreFuture<'a, ()> {
        Box::pin(std::future::ready(self.complete_now(claim, result)))
    }

    fn release<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, ()> {
        let mut inner = self.lock();
        let unused = inner.by_key.get(key).is_some_and(|held| {
            held.record.execution_id == *execution_id && held.in_flight().is_some()
        });
        if unused {
            inner.forget(key, execution_id);
        }
        drop(inner);
        Box::pin(async { Ok(()) })
    }

    fn lookup<'a>(&'a self, key: &'a IdempotencyKey) -> StoreFuture<'a, Option<StoredRecord>> {
        let answer = self.lock().by_key.get(key).map(Held::record);
        Box::pin(async move { Ok(answer) })
    }

    fn find_execution<'a>(
        &'a self,
        principal: &'a str,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<ExecutionLookup>> {
        let answer = self.lock().find(Some(principal), execution_id);
        Box::pin(async move { Ok(answer) })
    }

    fn check_ready(&self) -> StoreFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }

    fn operator_view<'a>(
        &'a self,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<crate::decision::OperatorView>> {
        // Every execution's owner is this process, which holds no lease row.
        let answer =
            self.lock()
                .find(None, execution_id)
                .map(|lookup| crate::decision::OperatorView {
                    lookup,
                    owner: None,
                });
        Box::pin(async move { Ok(answer) })
    }

    fn resolve_execution<'a>(
        &'a self,
        request: &'a ResolveRequest,
    ) -> StoreFuture<'a, Decided<ExecutionResult>> {
        let answer = self.lock().resolve(request);
        if answer.is_ok() {
            let _ = self.recorded.send(request.decision.execution_id.clone());
        }
        Box::pin(async move { Ok(answer) })
    }

    fn release_execution<'a>(
        &'a self,
        request: &'a ReleaseRequest,
    ) -> StoreFuture<'a, Decided<Released>> {
        let answer = self.lock().release(request);
        if answer.is_ok() {
            let _ = self.recorded.send(request.execution_id.clone());
        }
        Box::pin(async move { Ok(answer) })
    }

    fn list_executions<'a>(
        &'a self,
        query: &'a ExecutionQuery,
    ) -> StoreFuture<'a, Vec<ExecutionLookup>> {
        let answer = self.lock().list(query);
        Box::pin(async move { Ok(answer) })
    }

    fn audit_trail<'a>(
        &'a self,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Vec<AuditEntry>> {
        let answer = self.lock().audit_of(execution_id);
        Box::pin(async move { Ok(answer) })
    }

    fn record_late_arrival<'a>(
        &'a self,
        claim: Claim<'a>,
        result: &'a RecordedResult,
    ) -> StoreFuture<'a, Option<ExecutionId>> {
        let answer = self.lock().late_arrival(claim.key, result);
        Box::pin(async move { Ok(answer) })
    }

    fn wait_for_outcome<'a>(
        &'a self,
        request: WaitRequest<'a>,
    ) -> StoreFuture<'a, Option<StoredRecord>> {
        let recorded = Some(self.recorded.subscribe());
        Box::pin(crate::wait::until_decided(
            self,
            recorded,
            request.key,
            request.execution_id,
            request.timeout,
        ))
    }

    /// One step under the store's lock; never [`PruneStep::Busy`] (nobody else prunes).
    fn prune_expired(
        &self,
        retention: std::time::Duration,
        batch: usize,
    ) -> StoreFuture<'_, PruneStep> {
        let pruned = self.lock().prune(retention, batch, decide::now_millis());
        Box::pin(async move { Ok(PruneStep::Pruned(pruned)) })
    }

    /// Every execution runs in this process: nothing to publish.
    /// Every execution here runs in this process, whose lease never lapses: none is ever
    /// interrupted, so none is taken over.
    fn take_over<'a>(
        &'a self,
        _claim: Claim<'a>,
        _execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<u32>> {
        Box::pin(async { Ok(None) })
    }

    fn request_cancel<'a>(&'a self, _execution_id: &'a ExecutionId) -> StoreFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }

    fn cancel_requests(&self) -> Option<tokio::sync::broadcast::Receiver<ExecutionId>> {
        None
    }

    /// No lease: every execution runs in this process.
    fn lease_state(&self) -> Option<tokio::sync::watch::Receiver<crate::store::LeaseState>> {
        None
    }

    /// Nothing changes behind this store's back: every change to its records goes through it.
    fn record_changes(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<crate::store::RecordChange>> {
        None
    }

    /// Nothing is cached here: the records are the store.
    fn drop_cached(&self, _change: &crate::store::RecordChange) {}

    /// Nothing is held outside this process.
    fn shutdown(&self) -> StoreFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }
}
