//! Store wrappers in tests change a few `IdempotencyStore` methods and forward the rest. The
//! recovery methods (docs/semantics.md §12) are forwarded by every wrapper alike, so they are
//! written once here.

/// Expands, inside an `impl IdempotencyStore for Wrapper` block, to the nine recovery methods
/// (`resolve_execution`, `release_execution`, `list_executions`, `take_over`,
/// `wait_for_outcome`, `record_late_arrival`, `audit_trail`, `lease_state`, `prune_expired`),
/// each forwarded unchanged to the field `$inner` (any `IdempotencyStore`). Example:
/// `carmy_test_support::forward_recovery!(inner);`. A wrapper that reports a lease of its own
/// writes `forward_recovery!(@except_lease_state inner);` and its own `lease_state`.
#[macro_export]
macro_rules! forward_recovery {
    ($inner:ident) => {
        $crate::forward_recovery!(@except_lease_state $inner);

        fn lease_state(
            &self,
        ) -> Option<::tokio::sync::watch::Receiver<::carmy::runtime::LeaseState>> {
            self.$inner.lease_state()
        }
    };
    (@except_lease_state $inner:ident) => {
        fn resolve_execution<'a>(
            &'a self,
            request: &'a ::carmy::decision::ResolveRequest,
        ) -> ::carmy::runtime::StoreFuture<'a, ::carmy::runtime::Decided<::carmy::ExecutionResult>>
        {
            self.$inner.resolve_execution(request)
        }

        fn release_execution<'a>(
            &'a self,
            request: &'a ::carmy::decision::ReleaseRequest,
        ) -> ::carmy::runtime::StoreFuture<
            'a,
            ::carmy::runtime::Decided<::carmy::decision::Released>,
        > {
            self.$inner.release_execution(request)
        }

        fn list_executions<'a>(
            &'a self,
            query: &'a ::carmy::decision::ExecutionQuery,
        ) -> ::carmy::runtime::StoreFuture<'a, Vec<::carmy::runtime::ExecutionLookup>> {
            self.$inner.list_executions(query)
        }

        fn take_over<'a>(&'a self, request: ::carmy::runtime::TakeOverRequest<'a>) -> ::carmy::runtime::StoreFuture<'a, Option<u32>> {
            self.$inner.take_over(request)
        }

        fn wait_for_outcome<'a>(&'a self, request: ::carmy::runtime::WaitRequest<'a>) -> ::carmy::runtime::StoreFuture<'a, Option<::carmy::runtime::StoredRecord>> {
            self.$inner.wait_for_outcome(request)
        }

        fn record_late_arrival<'a>(
            &'a self,
            refused: ::carmy::runtime::CompleteRequest<'a>,
        ) -> ::carmy::runtime::StoreFuture<'a, Option<::carmy::ExecutionId>> {
            self.$inner.record_late_arrival(refused)
        }

        fn audit_trail<'a>(
            &'a self,
            execution_id: &'a ::carmy::ExecutionId,
        ) -> ::carmy::runtime::StoreFuture<'a, Vec<::carmy::decision::AuditEntry>> {
            self.$inner.audit_trail(execution_id)
        }

        fn prune_expired(
            &self,
            retention: ::std::time::Duration,
            batch: usize,
        ) -> ::carmy::runtime::StoreFuture<'_, ::carmy::retention::PruneStep> {
            self.$inner.prune_expired(retention, batch)
        }
    };
}

/// Expands, inside an `impl IdempotencyStore for Wrapper` block, to the seven methods that
/// wrappers in tests forward unchanged besides the recovery ones (`find_execution`,
/// `check_ready`, `request_cancel`, `cancel_requests`, `record_changes`, `drop_cached`,
/// `shutdown`), each to the field `$inner`.
/// Example: `carmy_test_support::forward_plumbing!(inner);`.
#[macro_export]
macro_rules! forward_plumbing {
    ($inner:ident) => {
        fn find_execution<'a>(
            &'a self,
            principal: &'a str,
            execution_id: &'a ::carmy::ExecutionId,
        ) -> ::carmy::runtime::StoreFuture<'a, Option<::carmy::runtime::ExecutionLookup>> {
            self.$inner.find_execution(principal, execution_id)
        }

        fn check_ready(&self) -> ::carmy::runtime::StoreFuture<'_, ()> {
            self.$inner.check_ready()
        }

        fn request_cancel<'a>(
            &'a self,
            execution_id: &'a ::carmy::ExecutionId,
        ) -> ::carmy::runtime::StoreFuture<'a, ()> {
            self.$inner.request_cancel(execution_id)
        }

        fn cancel_requests(
            &self,
        ) -> Option<::tokio::sync::broadcast::Receiver<::carmy::ExecutionId>> {
            self.$inner.cancel_requests()
        }

        fn record_changes(
            &self,
        ) -> Option<::tokio::sync::broadcast::Receiver<::carmy::runtime::RecordChange>> {
            self.$inner.record_changes()
        }

        fn drop_cached(&self, change: &::carmy::runtime::RecordChange) {
            self.$inner.drop_cached(change);
        }

        fn shutdown(&self) -> ::carmy::runtime::StoreFuture<'_, ()> {
            self.$inner.shutdown()
        }
    };
}
