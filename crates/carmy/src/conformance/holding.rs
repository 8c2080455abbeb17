//! Who holds an identity (docs/semantics.md §3, §8): of concurrent reserves exactly one wins,
//! and `release` frees only a reservation its execution never used.

use super::{complete, fp, intent, key, reserve, result_for};
use crate::outcome::{ExecutionId, ExecutionStatus};
use crate::store::{Existing, IdempotencyStore, Reservation};
use serde_json::json;
use std::sync::Arc;

/// 50 concurrent reserves of one identity on a multi-thread runtime: exactly one `Reserved`;
/// every other answer names the winner's execution.
pub async fn concurrent_reserves_have_one_winner(store: Arc<dyn IdempotencyStore>) {
    let k = key("p", "s", "r9");
    let f = fp(&json!({"sku": "A"}));
    let barrier = Arc::new(tokio::sync::Barrier::new(50));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (store, k, f, barrier) =
                (Arc::clone(&store), k.clone(), f.clone(), barrier.clone());
            tokio::spawn(async move {
                let attempt = intent();
                barrier.wait().await;
                let answer = reserve(&*store, &k, &f, &attempt).await;
                (attempt.execution_id, answer)
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut losers = Vec::new();
    for task in tasks {
        let (execution_id, answer) = task.await.unwrap();
        match answer {
            Reservation::Reserved => winners.push(execution_id),
            Reservation::Existing(Existing::Uncertain { execution_id, .. }) => {
                losers.push(execution_id);
            }
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one reservation wins");
    assert_eq!(losers.len(), 49);
    assert!(losers.iter().all(|id| *id == winners[0]));
}

/// `release` removes a running reservation of the named execution, and nothing else: not another
/// execution's, not a finished record, not a vacant identity.
pub async fn release_frees_only_an_unused_reservation(store: Arc<dyn IdempotencyStore>) {
    let k = key("p", "s", "r-release");
    let f = fp(&json!({}));
    let unused = intent();
    assert_eq!(
        reserve(&*store, &k, &f, &unused).await,
        Reservation::Reserved
    );
    store
        .release(&k, &ExecutionId::generate())
        .await
        .expect("release of a stranger is a no-op");
    assert!(matches!(
        reserve(&*store, &k, &f, &intent()).await,
        Reservation::Existing(Existing::Uncertain { .. })
    ));
    store
        .release(&k, &unused.execution_id)
        .await
        .expect("release");
    assert_eq!(store.lookup(&k).await.unwrap(), None);
    assert_eq!(
        store
            .find_execution("p", &unused.execution_id)
            .await
            .unwrap(),
        None
    );
    let next = intent();
    assert_eq!(
        reserve(&*store, &k, &f, &next).await,
        Reservation::Reserved,
        "the identity is free again"
    );
    let recorded = result_for(&next, &k, ExecutionStatus::Completed, json!(1));
    complete(&*store, &k, &f, &recorded.clone().into())
        .await
        .expect("complete");
    store
        .release(&k, &next.execution_id)
        .await
        .expect("release of a finished record is a no-op");
    assert_eq!(
        reserve(&*store, &k, &f, &intent()).await,
        Reservation::Existing(Existing::Replay(recorded.into()))
    );
    store
        .release(&key("p", "s", "r-vacant"), &ExecutionId::generate())
        .await
        .expect("release of a vacant identity is a no-op");
}
