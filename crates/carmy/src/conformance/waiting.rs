//! Conformance check of waiting for a running execution's outcome (docs/semantics.md §12.6),
//! the same on every store.

use super::{complete, fp, intent, key, reserve, result_for};
use crate::outcome::ExecutionStatus;
use crate::store::{IdempotencyStore, InFlightState, RecordState, Reservation, WaitRequest};
use serde_json::json;
use std::sync::Arc;

/// `wait_for_outcome` returns the recorded outcome soon after another task records it, and
/// the running record when the timeout passes first.
pub async fn waiting_ends_when_the_outcome_is_recorded(store: Arc<dyn IdempotencyStore>) {
    use std::time::{Duration, Instant};
    let k = key("p", "s", "wait");
    let f = fp(&json!({}));
    let owner = intent();
    assert_eq!(
        reserve(&*store, &k, &f, &owner).await,
        Reservation::Reserved
    );
    let started = Instant::now();
    let still = store
        .wait_for_outcome(WaitRequest {
            key: &k,
            execution_id: &owner.execution_id,
            timeout: Duration::from_millis(200),
        })
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(
        still.map(|record| record.state),
        Some(RecordState::InFlight(InFlightState::Running))
    );
    let waiter = {
        let (store, k, id) = (Arc::clone(&store), k.clone(), owner.execution_id.clone());
        tokio::spawn(async move {
            store
                .wait_for_outcome(WaitRequest {
                    key: &k,
                    execution_id: &id,
                    timeout: Duration::from_secs(20),
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let recorded = result_for(
        &owner,
        &k,
        ExecutionStatus::Completed,
        json!({"done": true}),
    );
    let started = Instant::now();
    complete(&*store, &k, &f, &recorded.clone().into())
        .await
        .unwrap();
    let seen = waiter.await.unwrap().unwrap();
    assert_eq!(
        seen.map(|record| record.state),
        Some(RecordState::Finished(recorded))
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "woken by the outcome, not by the timeout"
    );
}
