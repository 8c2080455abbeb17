//! The store conformance suite against `InMemoryIdempotencyStore`, plus its capacity rules.

use carmy::fingerprint::fingerprint;
use carmy::memory::InMemoryIdempotencyStore;
use carmy::store::{
    Claim, ExecutionIntent, Existing, IdempotencyKey, IdempotencyStore, Reservation, StoreError,
};
use carmy::ExecutionId;
use serde_json::json;
use std::sync::Arc;

async fn fresh_store() -> Arc<dyn IdempotencyStore> {
    Arc::new(InMemoryIdempotencyStore::default())
}

carmy::store_conformance_tests!(fresh_store);

#[tokio::test]
async fn full_store_refuses_new_identities_only_and_never_evicts() {
    let store = InMemoryIdempotencyStore::new(2);
    let f = fingerprint("echo", &json!({}), None).unwrap();
    let intent = || ExecutionIntent {
        execution_id: ExecutionId::generate(),
        tool: "echo".into(),
        parts: None,
        retention: None,
        arguments: None,
    };
    let a = IdempotencyKey::new("p", "s", "a");
    let b = IdempotencyKey::new("p", "s", "b");
    let c = IdempotencyKey::new("p", "s", "c");
    assert_eq!(
        store
            .reserve(
                Claim {
                    key: &a,
                    fingerprint: &f
                },
                &intent()
            )
            .await
            .unwrap(),
        Reservation::Reserved
    );
    assert_eq!(
        store
            .reserve(
                Claim {
                    key: &b,
                    fingerprint: &f
                },
                &intent()
            )
            .await
            .unwrap(),
        Reservation::Reserved
    );
    assert!(matches!(
        store
            .reserve(
                Claim {
                    key: &c,
                    fingerprint: &f
                },
                &intent()
            )
            .await,
        Err(StoreError::Capacity)
    ));
    assert!(matches!(
        store
            .reserve(
                Claim {
                    key: &a,
                    fingerprint: &f
                },
                &intent()
            )
            .await
            .unwrap(),
        Reservation::Existing(Existing::Uncertain { .. })
    ));
    assert_eq!(store.len(), 2);
    assert_eq!(store.capacity(), 2);
}

/// The conformance suite again, through the replay cache.
mod through_the_replay_cache {
    use carmy::cache::ReplayCache;
    use carmy::memory::InMemoryIdempotencyStore;
    use carmy::store::IdempotencyStore;
    use std::sync::Arc;
    use std::time::Duration;

    async fn fresh_store() -> Arc<dyn IdempotencyStore> {
        Arc::new(ReplayCache::new(
            Arc::new(InMemoryIdempotencyStore::default()),
            100,
            Duration::from_secs(60),
        ))
    }

    carmy::store_conformance_tests!(fresh_store);
}

/// A store that counts the reservations that reach it.
struct Counting {
    inner: InMemoryIdempotencyStore,
    reserves: std::sync::atomic::AtomicUsize,
}

impl IdempotencyStore for Counting {
    fn reserve<'a>(
        &'a self,
        claim: Claim<'a>,
        intent: &'a ExecutionIntent,
    ) -> carmy::store::StoreFuture<'a, Reservation> {
        self.reserves
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.reserve(claim, intent)
    }
    carmy::forward_store!(inner =>
        complete, release, lookup, find_execution, check_ready, resolve_execution,
        release_execution, list_executions, audit_trail, record_late_arrival, take_over,
        wait_for_outcome, prune_expired, request_cancel, cancel_requests, lease_state,
        record_changes, drop_cached, shutdown, answer_from_memory,
    );
}

#[tokio::test]
async fn the_replay_cache_serves_finished_records_only_and_keeps_conflicts() {
    use carmy::cache::ReplayCache;
    use carmy::{ExecutionResult, ExecutionStatus};
    use std::sync::atomic::Ordering;
    let counting = Arc::new(Counting {
        inner: InMemoryIdempotencyStore::default(),
        reserves: 0.into(),
    });
    let cache = ReplayCache::new(counting.clone(), 100, std::time::Duration::from_secs(60));
    let key = IdempotencyKey::new("p", "s", "cached");
    let f = fingerprint("echo", &json!({"a": 1}), None).unwrap();
    let other = fingerprint("echo", &json!({"a": 2}), None).unwrap();
    let intent = ExecutionIntent {
        execution_id: ExecutionId::generate(),
        tool: "echo".into(),
        parts: None,
        retention: None,
        arguments: None,
    };
    let fresh = || ExecutionIntent {
        execution_id: ExecutionId::generate(),
        tool: "echo".into(),
        parts: None,
        retention: None,
        arguments: None,
    };
    assert_eq!(
        cache
            .reserve(
                Claim {
                    key: &key,
                    fingerprint: &f
                },
                &intent
            )
            .await
            .unwrap(),
        Reservation::Reserved
    );
    // running: not cached, every attempt reaches the store
    assert!(matches!(
        cache
            .reserve(
                Claim {
                    key: &key,
                    fingerprint: &f
                },
                &fresh()
            )
            .await
            .unwrap(),
        Reservation::Existing(Existing::Uncertain { .. })
    ));
    assert!(matches!(
        cache
            .reserve(
                Claim {
                    key: &key,
                    fingerprint: &f
                },
                &fresh()
            )
            .await
            .unwrap(),
        Reservation::Existing(Existing::Uncertain { .. })
    ));
    assert_eq!(counting.reserves.load(Ordering::SeqCst), 3);
    let now = chrono::Utc::now();
    let result = ExecutionResult {
        execution_id: intent.execution_id.clone(),
        status: ExecutionStatus::Completed,
        data: json!({"a": 1}),
        error: None,
        tool: "echo".into(),
        request_id: Some("cached".into()),
        session_id: "s".into(),
        started_at: now,
        finished_at: now,
        resolution: None,
    };
    cache
        .complete(
            Claim {
                key: &key,
                fingerprint: &f,
            },
            &result.clone().into(),
        )
        .await
        .unwrap();
    for _ in 0..5 {
        assert_eq!(
            cache
                .reserve(
                    Claim {
                        key: &key,
                        fingerprint: &f
                    },
                    &fresh()
                )
                .await
                .unwrap(),
            Reservation::Existing(Existing::Replay(result.clone().into()))
        );
        assert_eq!(
            cache
                .reserve(
                    Claim {
                        key: &key,
                        fingerprint: &other
                    },
                    &fresh()
                )
                .await
                .unwrap(),
            Reservation::Existing(Existing::Conflict {
                execution_id: intent.execution_id.clone(),
                parts: None,
            })
        );
    }
    // Replays came from the cache; each conflict asked the store, whose row names the parts
    // that differ (docs/semantics.md §12.8).
    assert_eq!(
        counting.reserves.load(Ordering::SeqCst),
        3 + 5,
        "finished answers came from the cache, conflicts from the store"
    );
    // another principal's identical request_id is not served from this entry
    let stranger = IdempotencyKey::new("q", "s", "cached");
    assert_eq!(
        cache
            .reserve(
                Claim {
                    key: &stranger,
                    fingerprint: &f
                },
                &fresh()
            )
            .await
            .unwrap(),
        Reservation::Reserved
    );
    assert_eq!(counting.reserves.load(Ordering::SeqCst), 3 + 5 + 1);
}
