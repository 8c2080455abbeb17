//! Forwarding for wrapper stores: a store that changes a few [`IdempotencyStore`] methods (a
//! cache, a counter, a fault injector) names the ones it passes on unchanged, and
//! [`forward_store!`](crate::forward_store) writes them, so every signature is written once,
//! here, beside the trait (docs/semantics.md §8).
//!
//! Cancel delivery, the lease state, shutdown and the other signals have no default body in the
//! trait: a wrapper that neither writes nor names one does not compile (E0046), so they cannot be
//! dropped by accident. A method with a default (readings, the operator's view, the answer from
//! memory) falls back to it when not named: a wrapper around a cache names
//! `answer_from_memory`, or its calls all go to `reserve`.
//!
//! [`IdempotencyStore`]: super::IdempotencyStore

/// Expands, inside an `impl IdempotencyStore for Wrapper` block, to the named
/// [`IdempotencyStore`](crate::store::IdempotencyStore) methods, each passing its arguments
/// unchanged to the field `$inner` (any value whose methods include the trait's: a store, a
/// `Box` or an `Arc` of one) and returning its future as it is.
///
/// `forward_store!(inner => check_ready, shutdown)`; `$inner` may be a tuple index
/// (`forward_store!(0 => …)`). Every method of the trait can be named; a name that is not one
/// is a compile error ("no rules expected the token"). The call is `self.$inner.method(…)`, so
/// a method of the same name on the field's own type wins over the trait's: `PostgresStore`'s
/// inherent `async fn shutdown` does not return a `StoreFuture`, so naming `shutdown` for it
/// fails to compile; forward that one by hand with `IdempotencyStore::shutdown(&self.store)`.
///
/// ```
/// use carmy::store::{Claim, ExecutionIntent, IdempotencyStore, Reservation, StoreFuture};
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// /// Counts reservations and passes everything on.
/// struct Counting(Box<dyn IdempotencyStore>, AtomicU64);
///
/// impl IdempotencyStore for Counting {
///     fn reserve<'a>(
///         &'a self,
///         claim: Claim<'a>,
///         intent: &'a ExecutionIntent,
///     ) -> StoreFuture<'a, Reservation> {
///         self.1.fetch_add(1, Ordering::Relaxed);
///         self.0.reserve(claim, intent)
///     }
///
///     carmy::forward_store!(0 =>
///         complete, release, lookup, find_execution, wait_for_outcome, record_late_arrival,
///         take_over, resolve_execution, release_execution, list_executions, audit_trail,
///         request_cancel, cancel_requests, lease_state, record_changes, drop_cached,
///         check_ready, prune_expired, shutdown,
///     );
/// }
/// ```
#[macro_export]
macro_rules! forward_store {
    ($inner:tt => $($method:ident),+ $(,)?) => {
        $( $crate::forward_store!(@one $inner $method); )+
    };
    (@one $inner:tt reserve) => {
        fn reserve<'a>(
            &'a self,
            claim: $crate::store::Claim<'a>,
            intent: &'a $crate::store::ExecutionIntent,
        ) -> $crate::store::StoreFuture<'a, $crate::store::Reservation> {
            self.$inner.reserve(claim, intent)
        }
    };
    (@one $inner:tt answer_from_memory) => {
        fn answer_from_memory(
            &self,
            claim: $crate::store::Claim<'_>,
            retention: ::core::option::Option<::std::time::Duration>,
        ) -> ::core::option::Option<$crate::store::Reservation> {
            self.$inner.answer_from_memory(claim, retention)
        }
    };
    (@one $inner:tt complete) => {
        fn complete<'a>(
            &'a self,
            claim: $crate::store::Claim<'a>,
            result: &'a $crate::outcome::RecordedResult,
        ) -> $crate::store::StoreFuture<'a, ()> {
            self.$inner.complete(claim, result)
        }
    };
    (@one $inner:tt release) => {
        fn release<'a>(
            &'a self,
            key: &'a $crate::store::IdempotencyKey,
            execution_id: &'a $crate::outcome::ExecutionId,
        ) -> $crate::store::StoreFuture<'a, ()> {
            self.$inner.release(key, execution_id)
        }
    };
    (@one $inner:tt lookup) => {
        fn lookup<'a>(
            &'a self,
            key: &'a $crate::store::IdempotencyKey,
        ) -> $crate::store::StoreFuture<'a, Option<$crate::store::StoredRecord>> {
            self.$inner.lookup(key)
        }
    };
    (@one $inner:tt find_execution) => {
        fn find_execution<'a>(
            &'a self,
            principal: &'a str,
            execution_id: &'a $crate::outcome::ExecutionId,
        ) -> $crate::store::StoreFuture<'a, Option<$crate::store::ExecutionLookup>> {
            self.$inner.find_execution(principal, execution_id)
        }
    };
    (@one $inner:tt wait_for_outcome) => {
        fn wait_for_outcome<'a>(
            &'a self,
            request: $crate::store::WaitRequest<'a>,
        ) -> $crate::store::StoreFuture<'a, Option<$crate::store::StoredRecord>> {
            self.$inner.wait_for_outcome(request)
        }
    };
    (@one $inner:tt record_late_arrival) => {
        fn record_late_arrival<'a>(
            &'a self,
            claim: $crate::store::Claim<'a>,
            result: &'a $crate::outcome::RecordedResult,
        ) -> $crate::store::StoreFuture<'a, Option<$crate::outcome::ExecutionId>> {
            self.$inner.record_late_arrival(claim, result)
        }
    };
    (@one $inner:tt take_over) => {
        fn take_over<'a>(
            &'a self,
            claim: $crate::store::Claim<'a>,
            execution_id: &'a $crate::outcome::ExecutionId,
        ) -> $crate::store::StoreFuture<'a, Option<u32>> {
            self.$inner.take_over(claim, execution_id)
        }
    };
    (@one $inner:tt resolve_execution) => {
        fn resolve_execution<'a>(
            &'a self,
            request: &'a $crate::decision::ResolveRequest,
        ) -> $crate::store::StoreFuture<
            'a,
            $crate::store::Decided<$crate::outcome::ExecutionResult>,
        > {
            self.$inner.resolve_execution(request)
        }
    };
    (@one $inner:tt release_execution) => {
        fn release_execution<'a>(
            &'a self,
            request: &'a $crate::decision::ReleaseRequest,
        ) -> $crate::store::StoreFuture<
            'a,
            $crate::store::Decided<$crate::decision::Released>,
        > {
            self.$inner.release_execution(request)
        }
    };
    (@one $inner:tt list_executions) => {
        fn list_executions<'a>(
            &'a self,
            query: &'a $crate::decision::ExecutionQuery,
        ) -> $crate::store::StoreFuture<'a, Vec<$crate::store::ExecutionLookup>> {
            self.$inner.list_executions(query)
        }
    };
    (@one $inner:tt audit_trail) => {
        fn audit_trail<'a>(
            &'a self,
            execution_id: &'a $crate::outcome::ExecutionId,
        ) -> $crate::store::StoreFuture<'a, Vec<$crate::decision::AuditEntry>> {
            self.$inner.audit_trail(execution_id)
        }
    };
    (@one $inner:tt readings) => {
        fn readings(&self) -> $crate::store::StoreFuture<'_, $crate::store::StoreReadings> {
            self.$inner.readings()
        }
    };
    (@one $inner:tt keeps_client_holds) => {
        fn keeps_client_holds(&self) -> bool {
            self.$inner.keeps_client_holds()
        }
    };
    (@one $inner:tt reserve_held) => {
        fn reserve_held<'a>(
            &'a self,
            claim: $crate::store::Claim<'a>,
            intent: &'a $crate::store::ExecutionIntent,
            hold: &'a $crate::held::Hold,
        ) -> $crate::store::StoreFuture<'a, $crate::store::Reservation> {
            self.$inner.reserve_held(claim, intent, hold)
        }
    };
    (@one $inner:tt renew_held) => {
        fn renew_held<'a>(
            &'a self,
            execution_id: &'a $crate::outcome::ExecutionId,
            hold: &'a $crate::held::Hold,
        ) -> $crate::store::StoreFuture<'a, bool> {
            self.$inner.renew_held(execution_id, hold)
        }
    };
    (@one $inner:tt held_owner) => {
        fn held_owner<'a>(
            &'a self,
            execution_id: &'a $crate::outcome::ExecutionId,
        ) -> $crate::store::StoreFuture<'a, Option<$crate::held::HeldOwner>> {
            self.$inner.held_owner(execution_id)
        }
    };
    (@one $inner:tt operator_view) => {
        fn operator_view<'a>(
            &'a self,
            execution_id: &'a $crate::outcome::ExecutionId,
        ) -> $crate::store::StoreFuture<'a, Option<$crate::decision::OperatorView>> {
            self.$inner.operator_view(execution_id)
        }
    };
    (@one $inner:tt claim_reconciliations) => {
        fn claim_reconciliations<'a>(
            &'a self,
            claim: &'a $crate::reconcile::ReconcileClaim,
        ) -> $crate::store::StoreFuture<'a, Vec<$crate::reconcile::ReconcileTarget>> {
            self.$inner.claim_reconciliations(claim)
        }
    };
    (@one $inner:tt record_probe) => {
        fn record_probe<'a>(
            &'a self,
            record: &'a $crate::reconcile::ProbeRecord,
        ) -> $crate::store::StoreFuture<'a, ()> {
            self.$inner.record_probe(record)
        }
    };
    (@one $inner:tt attempt_age) => {
        fn attempt_age<'a>(
            &'a self,
            execution_id: &'a $crate::outcome::ExecutionId,
        ) -> $crate::store::StoreFuture<'a, Option<std::time::Duration>> {
            self.$inner.attempt_age(execution_id)
        }
    };
    (@one $inner:tt probe_evidence) => {
        fn probe_evidence<'a>(
            &'a self,
            execution_id: &'a $crate::outcome::ExecutionId,
        ) -> $crate::store::StoreFuture<'a, Option<$crate::reconcile::Evidence>> {
            self.$inner.probe_evidence(execution_id)
        }
    };
    (@one $inner:tt request_cancel) => {
        fn request_cancel<'a>(
            &'a self,
            execution_id: &'a $crate::outcome::ExecutionId,
        ) -> $crate::store::StoreFuture<'a, ()> {
            self.$inner.request_cancel(execution_id)
        }
    };
    (@one $inner:tt cancel_requests) => {
        fn cancel_requests(&self) -> Option<$crate::store::CancelRequests> {
            self.$inner.cancel_requests()
        }
    };
    (@one $inner:tt lease_state) => {
        fn lease_state(&self) -> Option<$crate::store::LeaseWatch> {
            self.$inner.lease_state()
        }
    };
    (@one $inner:tt record_changes) => {
        fn record_changes(&self) -> Option<$crate::store::RecordChanges> {
            self.$inner.record_changes()
        }
    };
    (@one $inner:tt drop_cached) => {
        fn drop_cached(&self, change: &$crate::store::RecordChange) {
            self.$inner.drop_cached(change)
        }
    };
    (@one $inner:tt check_ready) => {
        fn check_ready(&self) -> $crate::store::StoreFuture<'_, ()> {
            self.$inner.check_ready()
        }
    };
    (@one $inner:tt readiness_warnings) => {
        fn readiness_warnings(&self) -> $crate::store::StoreFuture<'_, Vec<String>> {
            self.$inner.readiness_warnings()
        }
    };
    (@one $inner:tt prune_expired) => {
        fn prune_expired(
            &self,
            retention: ::std::time::Duration,
            batch: usize,
        ) -> $crate::store::StoreFuture<'_, $crate::retention::PruneStep> {
            self.$inner.prune_expired(retention, batch)
        }
    };
    (@one $inner:tt shutdown) => {
        fn shutdown(&self) -> $crate::store::StoreFuture<'_, ()> {
            self.$inner.shutdown()
        }
    };
}
