//! The idempotency store abstraction: identities, reservations and the object-safe store trait
//! (docs/semantics.md §2, §3, §8).
//!
//! A store is used as `Arc<dyn IdempotencyStore>`. The engine calls [`IdempotencyStore::reserve`]
//! before a tool runs and [`IdempotencyStore::complete`] after it finished; every answer to a later
//! attempt with the same identity comes from what the store recorded.
//!
//! The trait is here; what it keeps and answers is in `record` and why it fails in `error`,
//! both re-exported so every type is named `carmy::store::…`.

mod error;
mod forward;
mod readings;
mod record;

use crate::decision::{
    AuditEntry, DecisionRefusal, ExecutionQuery, ReleaseRequest, Released, ResolveRequest,
};
use crate::outcome::{ExecutionId, ExecutionResult, RecordedResult};
use std::future::Future;
use std::pin::Pin;

pub use crate::fingerprint::FINGERPRINT_VERSION;
pub use error::StoreError;
pub use readings::{InterruptedTool, StoreReadings};
pub use record::{
    Claim, ExecutionIntent, ExecutionLookup, Existing, IdempotencyKey, InFlightState, LeaseState,
    RecordChange, RecordState, Replaced, ReplacedEnd, Reservation, StoredRecord, WaitRequest,
    DEFAULT_SESSION,
};

/// The boxed future every store method returns; `'a` borrows the store and the arguments.
///
/// A method that needs more than two values takes them as one request struct: an identity
/// with its fingerprint travels as one [`Claim`], waiting as one [`WaitRequest`].
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The answer of a decision: what it recorded, or why it changed nothing.
pub type Decided<T> = Result<T, DecisionRefusal>;

/// Where a store delivers cancel requests ([`IdempotencyStore::cancel_requests`]): the id of
/// each execution some replica asked to stop (docs/semantics.md §6).
pub type CancelRequests = tokio::sync::broadcast::Receiver<ExecutionId>;

/// How a store reports its lease ([`IdempotencyStore::lease_state`], docs/semantics.md §12.2).
pub type LeaseWatch = tokio::sync::watch::Receiver<LeaseState>;

/// Where a store announces records changed behind its back
/// ([`IdempotencyStore::record_changes`], docs/semantics.md §12.3).
pub type RecordChanges = tokio::sync::broadcast::Receiver<RecordChange>;

/// A durable (or process-local) record of reservations and outcomes (docs/semantics.md §8).
///
/// Object-safe: the engine holds an `Arc<dyn IdempotencyStore>`. The methods come in four
/// groups, in this order:
/// - hot path, on every call: [`reserve`](Self::reserve), [`complete`](Self::complete),
///   [`release`](Self::release), [`lookup`](Self::lookup),
///   [`find_execution`](Self::find_execution), [`wait_for_outcome`](Self::wait_for_outcome);
/// - recovery of executions without an outcome (docs/semantics.md §12): late arrivals,
///   takeovers, operators' decisions and listings, the audit trail, reconciliation probes;
/// - signals between a shared store's processes: cancel requests, the lease, records changed
///   behind this process's back, and dropping what is cached of them;
/// - lifecycle: readiness (and its warnings), pruning, shutdown.
///
/// Every method that reaches the store returns a [`StoreFuture`]. Implementations must:
/// - compare the fingerprint on every path of `reserve` (fresh insert, existing row, lost race);
/// - make the reservation durable before `reserve` returns [`Reservation::Reserved`];
/// - make the outcome durable before `complete` returns `Ok`, and complete only the execution that
///   holds the reservation (a repeated `complete` with the same outcome is `Ok`);
/// - never evict or expire a record that may stand for a committed effect, except a finished
///   record past its retention (docs/semantics.md §12.9): `reserve` replaces it
///   ([`ExecutionIntent::retention`]) and [`IdempotencyStore::prune_expired`] deletes it; never a
///   running or interrupted one;
/// - hold no transaction or connection between `reserve` and `complete`.
///
/// Cancel delivery, the lease state, changes made behind the store's back and shutdown have no
/// default bodies, so a wrapper store cannot drop them by accident; one that forwards only the
/// record methods does not compile:
///
/// ```compile_fail
/// use carmy::store::IdempotencyStore;
///
/// struct Forgetful(Box<dyn IdempotencyStore>);
///
/// impl IdempotencyStore for Forgetful {
///     carmy::forward_store!(0 =>
///         reserve, complete, release, lookup, find_execution, wait_for_outcome,
///         record_late_arrival, take_over, resolve_execution, release_execution,
///         list_executions, audit_trail, check_ready, prune_expired,
///     );
///     // request_cancel, cancel_requests, lease_state, record_changes, drop_cached and shutdown
///     // not forwarded: error E0046.
/// }
/// ```
///
/// The same wrapper that names them too compiles (see [`forward_store!`](crate::forward_store)).
pub trait IdempotencyStore: Send + Sync + 'static {
    // Hot path, on every call: reserve an identity, record its outcome, free an unused
    // reservation, read a record back (by identity or by execution id), wait for one still
    // running.
    /// Atomically compares `claim.fingerprint` and reserves a vacant `claim.key` for `intent`,
    /// or answers from the record that holds it (docs/semantics.md §3).
    ///
    /// # Errors
    /// [`StoreError::Capacity`] when a bounded store is full and the identity is new (an existing
    /// identity is always answered); [`StoreError::Unavailable`] when the store fails.
    fn reserve<'a>(
        &'a self,
        claim: Claim<'a>,
        intent: &'a ExecutionIntent,
    ) -> StoreFuture<'a, Reservation>;

    /// The answer [`IdempotencyStore::reserve`] would give `claim` when it can be given from
    /// this process's memory, without the store (docs/semantics.md §3, "Replay cache"): a
    /// replay of a finished record with the same fingerprint, or a conflict with one of
    /// another, the record's retention (`retention`, as [`ExecutionIntent::retention`]) not
    /// passed. `None` (the default, and for anything not held in memory): ask `reserve`.
    ///
    /// The engine asks this before it checks the call against its tool or mints an intent, as
    /// `reserve` answers an existing record before any such check (an honest retry gets its
    /// record even when the tool is gone or its schema changed).
    fn answer_from_memory(
        &self,
        claim: Claim<'_>,
        retention: Option<std::time::Duration>,
    ) -> Option<Reservation> {
        let _ = (claim, retention);
        None
    }

    /// Durably records `result` as the outcome of the execution that holds `claim.key`
    /// (reserved with `claim.fingerprint`), before returning (docs/semantics.md §4).
    /// The outcome comes with its stored text ([`RecordedResult::record_json`]); a store keeps
    /// that text rather than serialising the outcome again.
    ///
    /// # Errors
    /// [`StoreError::NotOwner`] when `result.execution_id` does not hold the identity or
    /// the identity already holds a different outcome; [`StoreError::Unavailable`] when the store
    /// fails (the caller retries: a retry after a lost acknowledgement is `Ok`).
    fn complete<'a>(&'a self, claim: Claim<'a>, result: &'a RecordedResult) -> StoreFuture<'a, ()>;

    /// Frees a reservation that `execution_id` made but never used (its tool did not start, or
    /// reported that nothing happened): removes the identity's record only if it is still
    /// running and held by `execution_id` under this process. An execution this process took
    /// over ([`IdempotencyStore::take_over`]) is handed back instead, reading interrupted again:
    /// an earlier attempt's effect is still unknown (docs/semantics.md §8.3, §12.7). `Ok` when
    /// there is nothing to free. Used after [`StoreError::Indeterminate`] from `reserve` and
    /// after a tool's `NotExecuted`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] or [`StoreError::Indeterminate`] when the store fails (the
    /// engine retries).
    fn release<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, ()>;

    /// Reads an identity's record without reserving anything; `None` when vacant.
    ///
    /// Used so that an honest retry still gets its record when a later gate (an unknown tool, a
    /// changed schema) would reject the call (docs/semantics.md §3).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the store fails.
    fn lookup<'a>(&'a self, key: &'a IdempotencyKey) -> StoreFuture<'a, Option<StoredRecord>>;

    /// Finds an execution by id, only among `principal`'s records (docs/semantics.md §6, §7).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the store fails.
    fn find_execution<'a>(
        &'a self,
        principal: &'a str,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<ExecutionLookup>>;

    /// Waits until the request's `execution_id`, which holds `key` without an outcome, gets one
    /// (recorded by its tool on any replica, or decided) or no longer holds the identity
    /// (released), at most `timeout`; returns `key`'s record as last read (`None` when vacant).
    /// Woken by the store's notifications (PostgreSQL: `LISTEN`/`NOTIFY` across replicas), and
    /// reading the record at least every second ([`crate::wait::until_decided`] is the loop to
    /// use). For `Prefer: wait=N` (docs/semantics.md §12.6).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the store fails.
    fn wait_for_outcome<'a>(
        &'a self,
        request: WaitRequest<'a>,
    ) -> StoreFuture<'a, Option<StoredRecord>>;

    // Recovery of executions without an outcome (docs/semantics.md §12): late arrivals,
    // takeovers, operators' decisions and listings, the audit trail, reconciliation probes.
    /// Keeps the outcome of an owner that finished after its execution was decided (resolved,
    /// released, taken over) as a late arrival: an audit row
    /// ([`AuditAction::LateArrival`](crate::decision::AuditAction), actor = the owner) holding
    /// the outcome, never the record (docs/semantics.md §12.1: the effect may have happened
    /// twice). Returns the execution that holds `claim.key` now (`None` when vacant). Called
    /// after `complete` answered [`StoreError::NotOwner`], with what it refused.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the store fails (the engine retries).
    fn record_late_arrival<'a>(
        &'a self,
        claim: Claim<'a>,
        result: &'a RecordedResult,
    ) -> StoreFuture<'a, Option<ExecutionId>>;

    /// Takes over an interrupted execution of a tool whose policy is
    /// [`OnInterrupted::Rerun`](crate::tool::OnInterrupted) (docs/semantics.md §12.7), in one
    /// compare-and-set step: only if `execution_id` still holds `claim.key` with
    /// `claim.fingerprint`, has no outcome, and its owner's lease lapsed, this process becomes its
    /// owner, its attempt is incremented and an audit row
    /// ([`AuditAction::Takeover`](crate::decision::AuditAction)) is written. Of any number of
    /// concurrent takeovers at most one wins. The winner runs the tool again as `execution_id`
    /// and records with [`RecordedResult::with_attempt`]; `complete` refuses the earlier
    /// attempt's outcome ([`StoreError::NotOwner`], kept as a late arrival).
    ///
    /// Returns the new attempt number (2 for the first takeover), or `None` when nothing
    /// changed: another attempt took it over, it finished or was decided, or its owner holds a
    /// lease again. A process-local store never has an interrupted execution and answers
    /// `None`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the store fails, or this process holds no lease.
    fn take_over<'a>(
        &'a self,
        claim: Claim<'a>,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<u32>>;

    /// Records the outcome that reconciliation found for an execution without one
    /// (docs/semantics.md §12.1), in one compare-and-set step with its audit row
    /// ([`AuditAction::Resolve`](crate::decision::AuditAction)): of any number of concurrent
    /// decisions on one execution exactly one wins. The recorded outcome carries
    /// `resolution: {by, at, note}` and replays like any other.
    ///
    /// The request is already checked ([`crate::decision::check_outcome`],
    /// [`crate::decision::check_note`]).
    ///
    /// # Errors
    /// `Ok(Err(`[`DecisionRefusal`]`))` when nothing changed: not found (or another principal's
    /// when `request.principal` is set), already decided (finished, resolved or released), or
    /// still running without `force`. [`StoreError::Unavailable`] when the store fails.
    fn resolve_execution<'a>(
        &'a self,
        request: &'a ResolveRequest,
    ) -> StoreFuture<'a, Decided<ExecutionResult>>;

    /// Frees the identity of an execution without an outcome, so the next attempt runs the
    /// tool (docs/semantics.md §12.1): in one compare-and-set step the record moves to history
    /// (kept, never deleted without trace; [`IdempotencyStore::find_execution`] still finds
    /// it, with [`ExecutionLookup::released`]) and an audit row
    /// ([`AuditAction::Release`](crate::decision::AuditAction)) is written.
    ///
    /// # Errors
    /// As [`IdempotencyStore::resolve_execution`].
    fn release_execution<'a>(
        &'a self,
        request: &'a ReleaseRequest,
    ) -> StoreFuture<'a, Decided<Released>>;

    /// Lists records matching `query`, oldest reservation first, at most `query.limit`
    /// (docs/semantics.md §12.4: operators list the uncertain executions across principals).
    /// Released executions are not listed.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the store fails.
    fn list_executions<'a>(
        &'a self,
        query: &'a ExecutionQuery,
    ) -> StoreFuture<'a, Vec<ExecutionLookup>>;

    /// The audit rows of one execution, oldest first (docs/semantics.md §12.1).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the store fails.
    fn audit_trail<'a>(&'a self, execution_id: &'a ExecutionId)
        -> StoreFuture<'a, Vec<AuditEntry>>;

    /// One execution of any principal by id, held or released, with its owner and lease where
    /// the store keeps them (the operator console, docs/semantics.md §12); `None` when there is
    /// no such execution. The default finds none. A wrapper must forward it.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the store fails.
    fn operator_view<'a>(
        &'a self,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<crate::decision::OperatorView>> {
        let _ = execution_id;
        Box::pin(async { Ok(None) })
    }

    /// Claims interrupted executions of `claim.tools` due for a reconciliation probe
    /// (docs/semantics.md §12.10), one replica at a time: each returned execution
    /// is held for `claim.hold` (no other replica gets it meanwhile) and its attempt counted.
    /// Never an execution with an outcome or a live owner. A process-local store never has an
    /// interrupted execution: the default answers none. A wrapper must forward it.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the store fails.
    fn claim_reconciliations<'a>(
        &'a self,
        claim: &'a crate::reconcile::ReconcileClaim,
    ) -> StoreFuture<'a, Vec<crate::reconcile::ReconcileTarget>> {
        let _ = claim;
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Keeps a probe's answer on the execution's record as evidence and sets when it is due
    /// again (docs/semantics.md §12.10); nothing when the execution no longer
    /// holds a record without an outcome. The default keeps nothing. A wrapper must forward it.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the store fails.
    fn record_probe<'a>(
        &'a self,
        record: &'a crate::reconcile::ProbeRecord,
    ) -> StoreFuture<'a, ()> {
        let _ = record;
        Box::pin(async { Ok(()) })
    }

    /// How long ago, by the store's clock, the attempt that now holds `execution_id` started:
    /// its reservation, or its last takeover (docs/semantics.md §12.7). The reconciliation
    /// rule of docs/semantics.md §12.10 needs it: an upstream's "absent" proves that an
    /// interrupted attempt did nothing only once that attempt's deadline has passed. `None`
    /// when the execution holds no record without an outcome, or the store keeps no start
    /// times; the engine then takes "absent" for no proof. The default knows none (a
    /// process-local store never has an interrupted execution). A wrapper must forward it.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the store fails.
    fn attempt_age<'a>(
        &'a self,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<std::time::Duration>> {
        let _ = execution_id;
        Box::pin(async { Ok(None) })
    }

    /// The last probe's evidence kept for `execution_id` (`None` when never probed). The
    /// default has none. A wrapper must forward it.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the store fails.
    fn probe_evidence<'a>(
        &'a self,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<serde_json::Value>> {
        let _ = execution_id;
        Box::pin(async { Ok(None) })
    }

    // Executions held by a client (docs/semantics.md §16). The defaults keep none: the engine
    // refuses client-held calls on such a store. A wrapper must forward all four.
    /// Whether this store keeps executions held by a client (a lease per holder, shared by
    /// every replica). The default says no.
    fn keeps_client_holds(&self) -> bool {
        false
    }

    /// [`IdempotencyStore::reserve`] for work a client runs itself: the same compare and
    /// answers, but a new reservation is owned by `hold.token`, whose own lease (live for
    /// `hold.lease` by the store's clock) is written durably with it. Nothing of the hold is
    /// kept live when the identity was already held.
    ///
    /// # Errors
    /// As [`IdempotencyStore::reserve`]; [`StoreError::Unavailable`] from the default.
    fn reserve_held<'a>(
        &'a self,
        claim: Claim<'a>,
        intent: &'a ExecutionIntent,
        hold: &'a crate::held::Hold,
    ) -> StoreFuture<'a, Reservation> {
        let _ = (claim, intent, hold);
        Box::pin(async { Err(no_client_holds()) })
    }

    /// Extends `hold`'s lease to `hold.lease` from now (the store's clock), only while
    /// `execution_id` is still running under `hold.token` (not finished, decided, released).
    /// `Ok(false)` when it no longer is: the holder lost it. A lease that lapsed without a
    /// decision meanwhile is renewed (the execution reads running again).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the store fails.
    fn renew_held<'a>(
        &'a self,
        execution_id: &'a ExecutionId,
        hold: &'a crate::held::Hold,
    ) -> StoreFuture<'a, bool> {
        let _ = (execution_id, hold);
        Box::pin(async { Err(no_client_holds()) })
    }

    /// Who holds or held `execution_id` (its current reservation, or its released copy), so a
    /// holder's token can be compared with it before its outcome is recorded; `None` when there
    /// is no such execution.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the store fails.
    fn held_owner<'a>(
        &'a self,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<crate::held::HeldOwner>> {
        let _ = execution_id;
        Box::pin(async { Err(no_client_holds()) })
    }

    // Signals between the processes of a shared store: cancel requests, this process's lease,
    // records changed behind its back. None has a default body: a wrapper must pass each on.
    /// Asks the process that runs `execution_id` to cancel it (`POST
    /// /v1/executions/{execution_id}/cancel` landing on another replica). Delivery is best
    /// effort; the caller watches the record for the outcome. A process-local store runs every
    /// execution in this process and answers `Ok(())` at once; a wrapper forwards it.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the request could not be published.
    fn request_cancel<'a>(&'a self, execution_id: &'a ExecutionId) -> StoreFuture<'a, ()>;

    /// The cancel requests other processes publish with [`IdempotencyStore::request_cancel`];
    /// the engine cancels those it runs. `None` for a process-local store; a wrapper forwards it.
    fn cancel_requests(&self) -> Option<CancelRequests>;

    /// This process's lease as it changes (docs/semantics.md §12.2): [`LeaseState::Lapsed`] once
    /// renewals failed past the moment it surely held, [`LeaseState::Held`] again after a
    /// renewal succeeded. On a lapse the engine asks the tools it runs to stop (recorded
    /// `cancelled`, effect unknown), since the other replicas already report them interrupted.
    /// `None` for a store without leases (process-local); a wrapper forwards it.
    fn lease_state(&self) -> Option<LeaseWatch>;

    /// Finished records updated or deleted behind this process's back (docs/semantics.md §8.4,
    /// §12.3: an operator's SQL, or another process replacing an expired record), as the store
    /// hears of them: [`RecordChange::Changed`] per identity, [`RecordChange::Unknown`] when
    /// announcements may have been missed. The engine hands each to
    /// [`IdempotencyStore::drop_cached`] from `App::serve` on. `None` for a store nothing else
    /// changes (process-local: every change goes through it); a wrapper forwards it.
    fn record_changes(&self) -> Option<RecordChanges>;

    /// Drops what this store (or a wrapper) caches of `change`'s records, so that the next
    /// reservation or lookup reads the store. A store that caches nothing does nothing; a
    /// wrapper drops its own copies and forwards it.
    fn drop_cached(&self, change: &RecordChange);

    // Lifecycle: readiness and its warnings, retention's pruning, the end of this process's
    // hold on the store.
    /// Checks that the store is reachable and ready (for `GET /readyz`).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] with the reason.
    fn check_ready(&self) -> StoreFuture<'_, ()>;

    /// What a ready store warns about without refusing calls, one sentence each, shown in
    /// `/readyz` as `warnings` (e.g. PostgreSQL's: the primary has standbys but its commits do
    /// not wait for a synchronous one, docs/semantics.md §14). Asked after
    /// [`IdempotencyStore::check_ready`] succeeded. Default: none; a wrapper store forwards it.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the check itself failed (`/readyz` then shows no
    /// warnings and logs the cause).
    fn readiness_warnings(&self) -> StoreFuture<'_, Vec<String>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// What the operator's alerts read at each scrape of `GET /metrics` (docs/semantics.md
    /// §13): the interrupted executions per tool, across replicas, and this process's failed
    /// lease renewals. Default: none (a process-local store has no interrupted executions and
    /// no lease); a wrapper store forwards it.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the store fails (the gauges are then left out).
    fn readings(&self) -> StoreFuture<'_, StoreReadings> {
        Box::pin(async { Ok(StoreReadings::default()) })
    }

    /// One pruning step of retention (docs/semantics.md §12.9; [`crate::retention`]): deletes at
    /// most `batch` rows of each kind that outlived `retention`: finished records whose
    /// [`expires_at`](crate::retention::expires_at) passed, released executions and audit rows
    /// older than `retention` (audit rows only once their execution holds no record), stopped
    /// instances. Never a running or interrupted record. A shared store lets one replica prune
    /// at a time: [`PruneStep::Busy`](crate::retention::PruneStep) when another one does.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the store fails (nothing or part of a step was done;
    /// the next step continues).
    fn prune_expired(
        &self,
        retention: std::time::Duration,
        batch: usize,
    ) -> StoreFuture<'_, crate::retention::PruneStep>;

    /// Ends what the store holds for this process (a lease, listeners), after the engine
    /// drained: executions this process still held read as interrupted at once instead of
    /// after the lease lapses. Called once by `App::serve`; nothing is called after it.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the store could not be told (the lease then lapses on
    /// its own).
    fn shutdown(&self) -> StoreFuture<'_, ()>;
}

/// What a store without client holds answers ([`IdempotencyStore::reserve_held`]).
fn no_client_holds() -> StoreError {
    StoreError::Unavailable("this store keeps no executions held by a client".to_owned())
}
