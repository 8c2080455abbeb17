//! The core crate's store conformance suite (`carmy::conformance`), run against
//! `PostgresStore`: every check gets a fresh, migrated database of its own, dropped with the store.

use carmy::store::{IdempotencyStore, StoreFuture};
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
    carmy::forward_store!(store =>
        reserve, complete, release, lookup, find_execution, check_ready, resolve_execution,
        release_execution, list_executions, audit_trail, record_late_arrival, take_over,
        wait_for_outcome, prune_expired, lease_state, request_cancel, cancel_requests,
        record_changes, drop_cached,
    );

    /// `PostgresStore` has an inherent `shutdown` of its own; this is the trait's.
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
    use carmy::store::IdempotencyStore;
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
