//! The [`IdempotencyStore`] implementation of [`PostgresStore`]: each method runs its `*_impl`
//! (or a module's function) and turns the outcome into the trait's error with
//! `PostgresStore::finish`.

use super::PostgresStore;
use crate::cancel::{release_unused, request_cancel};
use crate::decide;
use crate::reconcile;
use crate::waiters;
use carmy::decision::{AuditEntry, ExecutionQuery, ReleaseRequest, Released, ResolveRequest};
use carmy::outcome::{ExecutionId, ExecutionResult, RecordedResult};
use carmy::reconcile::{Evidence, ProbeRecord, ReconcileClaim, ReconcileTarget};
use carmy::retention::PruneStep;
use carmy::store::{
    Claim, Decided, ExecutionIntent, ExecutionLookup, IdempotencyKey, IdempotencyStore, LeaseState,
    RecordChange, Reservation, StoreFuture, StoredRecord, WaitRequest,
};
use carmy::wait::until_decided;
use tokio::sync::{broadcast, watch};

/// Decisions call the DBAs' SQL functions ([`crate::decide`]); a late arrival is an audit row
/// with this process's instance id as the actor; a waiter registers in `carmy.outcome_waiters`
/// and waits on the listener ([`crate::waiters`]).
impl IdempotencyStore for PostgresStore {
    /// One autocommitted `DELETE` of the row, only while it is `running`, held by
    /// `execution_id` and owned by this process (not after another replica took it over).
    fn release<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.finish(release_unused(&self.pool, &self.instance_id, key, execution_id).await)
                .await
        })
    }

    fn reserve<'a>(
        &'a self,
        claim: Claim<'a>,
        intent: &'a ExecutionIntent,
    ) -> StoreFuture<'a, Reservation> {
        let reserved = self.reserve_impl(claim, intent);
        Box::pin(async move { self.finish(reserved.await).await })
    }

    fn complete<'a>(&'a self, claim: Claim<'a>, result: &'a RecordedResult) -> StoreFuture<'a, ()> {
        let completed = self.complete_impl(claim, result);
        Box::pin(async move { self.finish(completed.await).await })
    }

    fn keeps_client_holds(&self) -> bool {
        true
    }

    fn reserve_held<'a>(
        &'a self,
        claim: Claim<'a>,
        intent: &'a ExecutionIntent,
        hold: &'a carmy::held::Hold,
    ) -> StoreFuture<'a, Reservation> {
        Box::pin(async move {
            self.finish(self.reserve_held_impl(claim, intent, hold).await)
                .await
        })
    }

    fn renew_held<'a>(
        &'a self,
        execution_id: &'a ExecutionId,
        hold: &'a carmy::held::Hold,
    ) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            self.finish(self.renew_held_impl(execution_id, hold).await)
                .await
        })
    }

    fn held_owner<'a>(
        &'a self,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<carmy::held::HeldOwner>> {
        Box::pin(async move { self.finish(self.held_owner_impl(execution_id).await).await })
    }

    fn lookup<'a>(&'a self, key: &'a IdempotencyKey) -> StoreFuture<'a, Option<StoredRecord>> {
        Box::pin(async move { self.finish(self.lookup_impl(key).await).await })
    }

    fn find_execution<'a>(
        &'a self,
        principal: &'a str,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<ExecutionLookup>> {
        let found = self.find_execution_impl(principal, execution_id);
        Box::pin(async move { self.finish(found.await).await })
    }

    fn claim_reconciliations<'a>(
        &'a self,
        claim: &'a ReconcileClaim,
    ) -> StoreFuture<'a, Vec<ReconcileTarget>> {
        Box::pin(async move { self.finish(reconcile::claim(&self.pool, claim).await).await })
    }

    fn record_probe<'a>(&'a self, record: &'a ProbeRecord) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.finish(reconcile::record(&self.pool, record).await)
                .await
        })
    }

    fn attempt_age<'a>(
        &'a self,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<std::time::Duration>> {
        Box::pin(async move {
            self.finish(reconcile::attempt_age(&self.pool, execution_id).await)
                .await
        })
    }

    fn probe_evidence<'a>(
        &'a self,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<Evidence>> {
        Box::pin(async move {
            self.finish(reconcile::evidence(&self.pool, execution_id).await)
                .await
        })
    }

    /// The interrupted executions per tool ([`crate::readings`]) and the lease's failed
    /// renewals.
    fn readings(&self) -> StoreFuture<'_, carmy::store::StoreReadings> {
        Box::pin(async move {
            let interrupted = self
                .finish(crate::readings::interrupted(&self.pool).await)
                .await?;
            Ok(carmy::store::StoreReadings {
                interrupted,
                lease_renewal_failures: self.lease.failures(),
            })
        })
    }

    fn operator_view<'a>(
        &'a self,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<carmy::decision::OperatorView>> {
        Box::pin(async move {
            let found = crate::operator::show_detail(&self.pool, execution_id).await;
            self.finish(found)
                .await
                .map(|found| found.map(crate::ExecutionDetail::into_view))
        })
    }

    fn check_ready(&self) -> StoreFuture<'_, ()> {
        Box::pin(self.check_ready_impl())
    }

    fn readiness_warnings(&self) -> StoreFuture<'_, Vec<String>> {
        Box::pin(self.readiness_warnings_impl())
    }

    fn resolve_execution<'a>(
        &'a self,
        request: &'a ResolveRequest,
    ) -> StoreFuture<'a, Decided<ExecutionResult>> {
        Box::pin(async move {
            self.finish(decide::resolve(&self.pool, request).await)
                .await
        })
    }

    fn release_execution<'a>(
        &'a self,
        request: &'a ReleaseRequest,
    ) -> StoreFuture<'a, Decided<Released>> {
        Box::pin(async move {
            self.finish(decide::release(&self.pool, request).await)
                .await
        })
    }

    /// One statement ([`crate::sql::TAKE_OVER_SQL`]), after making sure this process holds its
    /// lease (a taker without one would itself read as interrupted at once).
    fn take_over<'a>(
        &'a self,
        claim: Claim<'a>,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<u32>> {
        Box::pin(async move {
            let taken = match self.lease.ensure_held().await {
                Ok(()) => {
                    decide::take_over(
                        &self.pool,
                        &self.instance_id,
                        claim.key,
                        claim.fingerprint,
                        execution_id,
                    )
                    .await
                }
                Err(failure) => Err(failure),
            };
            self.finish(taken).await
        })
    }

    fn record_late_arrival<'a>(
        &'a self,
        claim: Claim<'a>,
        result: &'a RecordedResult,
    ) -> StoreFuture<'a, Option<ExecutionId>> {
        Box::pin(async move {
            let kept = decide::late_arrival(&self.pool, &self.instance_id, claim.key, result).await;
            self.finish(kept).await
        })
    }

    fn wait_for_outcome<'a>(
        &'a self,
        request: WaitRequest<'a>,
    ) -> StoreFuture<'a, Option<StoredRecord>> {
        Box::pin(async move {
            let recorded = Some(self.recorded.subscribe());
            let waiter = self
                .finish(waiters::register(&self.pool, request.execution_id).await)
                .await?;
            let record = until_decided(
                self,
                recorded,
                request.key,
                request.execution_id,
                request.timeout,
            )
            .await;
            waiters::unregister(&self.pool, request.execution_id, &waiter).await;
            record
        })
    }

    fn list_executions<'a>(
        &'a self,
        query: &'a ExecutionQuery,
    ) -> StoreFuture<'a, Vec<ExecutionLookup>> {
        Box::pin(async move { self.finish(decide::list(&self.pool, query).await).await })
    }

    fn audit_trail<'a>(
        &'a self,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Vec<AuditEntry>> {
        Box::pin(async move {
            self.finish(decide::audit_trail(&self.pool, execution_id).await)
                .await
        })
    }

    /// `NOTIFY carmy_cancel, '<execution_id>'`: every replica hears it; the one running the
    /// execution cancels it.
    fn request_cancel<'a>(&'a self, execution_id: &'a ExecutionId) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            self.finish(request_cancel(&self.pool, execution_id).await)
                .await
        })
    }

    fn cancel_requests(&self) -> Option<broadcast::Receiver<ExecutionId>> {
        Some(self.cancels.subscribe())
    }

    /// The lease's state ([`crate::lease`]): lapsed once renewals failed past the moment it
    /// surely held, held again after a renewal.
    fn lease_state(&self) -> Option<watch::Receiver<LeaseState>> {
        Some(self.lease.state())
    }

    /// Finished records updated or deleted by others (an operator's SQL; a trigger notifies
    /// [`crate::cancel::CHANGED_CHANNEL`], migration `V11`), and [`RecordChange::Unknown`]
    /// each time the listener starts a session (announcements may have been missed).
    fn record_changes(&self) -> Option<broadcast::Receiver<RecordChange>> {
        Some(self.changes.subscribe())
    }

    /// Nothing is cached here: every read goes to the database.
    fn drop_cached(&self, _change: &RecordChange) {}

    /// One call of `carmy.prune_expired` ([`crate::sql::PRUNE_SQL`]) under its advisory lock.
    fn prune_expired(
        &self,
        retention: std::time::Duration,
        batch: usize,
    ) -> StoreFuture<'_, PruneStep> {
        Box::pin(async move {
            self.finish(crate::prune::step(&self.pool, retention, batch).await)
                .await
        })
    }

    /// [`PostgresStore::shutdown`]: stops the renewer and the cancel listener, ends the lease.
    fn shutdown(&self) -> StoreFuture<'_, ()> {
        Box::pin(PostgresStore::shutdown(self))
    }
}
