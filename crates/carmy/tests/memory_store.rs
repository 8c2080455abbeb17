//! The store conformance suite against `InMemoryIdempotencyStore`, plus its capacity rules.

use carmy::fingerprint::fingerprint;
use carmy::memory::InMemoryIdempotencyStore;
use carmy::runtime::{ExecutionIntent, IdempotencyKey, IdempotencyStore, Reservation, StoreError};
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
    };
    let a = IdempotencyKey::new("p", "s", "a");
    let b = IdempotencyKey::new("p", "s", "b");
    let c = IdempotencyKey::new("p", "s", "c");
    assert_eq!(
        store.reserve(&a, &f, &intent()).await.unwrap(),
        Reservation::Reserved
    );
    assert_eq!(
        store.reserve(&b, &f, &intent()).await.unwrap(),
        Reservation::Reserved
    );
    assert!(matches!(
        store.reserve(&c, &f, &intent()).await,
        Err(StoreError::Capacity)
    ));
    assert!(matches!(
        store.reserve(&a, &f, &intent()).await.unwrap(),
        Reservation::Uncertain { .. }
    ));
    assert_eq!(store.len(), 2);
    assert_eq!(store.capacity(), 2);
}
