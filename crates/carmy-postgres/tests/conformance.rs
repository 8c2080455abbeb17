//! The core crate's store conformance suite (`carmy::conformance`), run against
//! `PostgresStore`: every check gets a fresh, migrated database of its own, dropped with the store.

use carmy::outcome::ExecutionId;
use carmy::runtime::{
    CompleteRequest, ExecutionLookup, IdempotencyKey, IdempotencyStore, Reservation,
    ReserveRequest, StoreFuture, StoredRecord,
};
use carmy_postgres::PostgresStore;
use carmy_test_support::TestDb;
use std::sync::Arc;

/// A `PostgresStore` that owns its test database: dropping it drops the database.
struct OwnedStore {
    // Field order matters: the store (and its pool) goes before the database is dropped.
    store: PostgresStore,
    _db: TestDb,
}

impl IdempotencyStore for OwnedStore {
    fn reserve<'a>(&'a self, request: ReserveRequest<'a>) -> StoreFuture<'a, Reservation> {
        self.store.reserve(request)
    }

    fn complete<'a>(&'a self, request: CompleteRequest<'a>) -> StoreFuture<'a, ()> {
        self.store.complete(request)
    }

    fn release<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, ()> {
        self.store.release(key, execution_id)
    }

    fn lookup<'a>(&'a self, key: &'a IdempotencyKey) -> StoreFuture<'a, Option<StoredRecord>> {
        self.store.lookup(key)
    }

    fn find_execution<'a>(
        &'a self,
        principal: &'a str,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, Option<ExecutionLookup>> {
        self.store.find_execution(principal, execution_id)
    }

    fn check_ready(&self) -> StoreFuture<'_, ()> {
        self.store.check_ready()
    }

    carmy_test_support::forward_recovery!(store);

    fn request_cancel<'a>(&'a self, execution_id: &'a ExecutionId) -> StoreFuture<'a, ()> {
        self.store.request_cancel(execution_id)
    }

    fn cancel_requests(&self) -> Option<tokio::sync::broadcast::Receiver<ExecutionId>> {
        self.store.cancel_requests()
    }

    fn record_changes(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<carmy::runtime::RecordChange>> {
        self.store.record_changes()
    }

    fn drop_cached(&self, change: &carmy::runtime::RecordChange) {
        self.store.drop_cached(change);
    }

    fn shutdown(&self) -> StoreFuture<'_, ()> {
        IdempotencyStore::shutdown(&self.store)
    }
}

async fn fresh_store() -> Arc<dyn IdempotencyStore> {
    let db = TestDb::migrated().await;
    let store = db.store().await;
    Arc::new(OwnedStore { store, _db: db })
}

carmy::store_conformance_tests!(fresh_store);

/// The same suite through the replay cache the gateway puts in front of `PostgresStore`.
mod through_the_replay_cache {
    use carmy::cache::ReplayCache;
    use carmy::runtime::IdempotencyStore;
    use std::sync::Arc;
    use std::time::Duration;

    async fn fresh_cached_store() -> Arc<dyn IdempotencyStore> {
        Arc::new(ReplayCache::new(
            super::fresh_store().await,
            100,
            Duration::from_secs(60),
        ))
    }

    carmy::store_conformance_tests!(fresh_cached_store);
}
