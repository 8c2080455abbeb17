//! Conformance checks of retention (docs/semantics.md §12.9): a finished record past its retention
//! no longer holds its identity (the next reservation runs as new) and is pruned; running and
//! interrupted records never are. Each check uses a retention of [`SHORT`] and waits it out.

use super::{complete, fp, intent, key, reserve, result_for};
use crate::outcome::ExecutionStatus;
use crate::retention::{PruneStep, Pruned};
use crate::store::{
    ExecutionIntent, Existing, IdempotencyKey, IdempotencyStore, InFlightState, RecordState,
    Reservation, StoreError,
};
use chrono::{SubsecRound, Utc};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// The retention the checks use.
pub const SHORT: Duration = Duration::from_millis(300);

/// Sleeps until records finished before the call are past [`SHORT`].
async fn outlive_retention() {
    tokio::time::sleep(SHORT + Duration::from_millis(200)).await;
}

fn short_intent() -> ExecutionIntent {
    ExecutionIntent {
        retention: Some(SHORT),
        ..intent()
    }
}

/// Reserves and completes `k` with `arguments`, finished now; returns the recorded outcome.
async fn finished(
    store: &dyn IdempotencyStore,
    k: &IdempotencyKey,
    arguments: &serde_json::Value,
) -> crate::ExecutionResult {
    let f = fp(arguments);
    let attempt = short_intent();
    assert_eq!(reserve(store, k, &f, &attempt).await, Reservation::Reserved);
    let mut recorded = result_for(&attempt, k, ExecutionStatus::Completed, json!({"n": 1}));
    recorded.started_at = Utc::now().trunc_subsecs(3);
    recorded.finished_at = recorded.started_at;
    complete(store, k, &f, &recorded.clone().into())
        .await
        .expect("complete");
    recorded
}

/// Before its retention a finished record replays; after it, the same call (or another one
/// under the same identity) is reserved as new, the old execution is gone and can no longer
/// complete, a retention of `None` keeps it forever, and a running record never expires.
pub async fn expired_records_run_as_new(store: Arc<dyn IdempotencyStore>) {
    let args = json!({"a": 1});
    let f = fp(&args);
    let k = key("p", "s", "expiring");
    let recorded = finished(&*store, &k, &args).await;
    assert_eq!(
        reserve(&*store, &k, &f, &short_intent()).await,
        Reservation::Existing(Existing::Replay(recorded.clone().into())),
        "a record replays until its retention ends"
    );
    let other = key("p", "s", "expiring-other-call");
    finished(&*store, &other, &args).await;
    let running = key("p", "s", "running");
    assert_eq!(
        reserve(&*store, &running, &f, &short_intent()).await,
        Reservation::Reserved
    );
    outlive_retention().await;

    let forever = ExecutionIntent {
        retention: None,
        ..intent()
    };
    assert_eq!(
        reserve(&*store, &k, &f, &forever).await,
        Reservation::Existing(Existing::Replay(recorded.clone().into())),
        "without a retention a record is kept forever"
    );
    let second = short_intent();
    assert_eq!(
        reserve(&*store, &k, &f, &second).await,
        Reservation::Reserved,
        "a request_id reused after its record expired runs as new"
    );
    let now = store.lookup(&k).await.expect("lookup").expect("held");
    assert_eq!(now.execution_id, second.execution_id);
    assert_eq!(now.state, RecordState::InFlight(InFlightState::Running));
    let gone = store
        .find_execution("p", &recorded.execution_id)
        .await
        .expect("find");
    assert_eq!(gone, None, "the expired execution is gone");
    let late = complete(&*store, &k, &f, &recorded.clone().into()).await;
    assert!(
        matches!(late, Err(StoreError::NotOwner { .. })),
        "the expired execution cannot complete the new one: {late:?}"
    );
    assert_eq!(
        reserve(&*store, &other, &fp(&json!({"a": 2})), &short_intent()).await,
        Reservation::Reserved,
        "a different call under an expired identity is new, not a conflict"
    );
    assert!(
        matches!(
            reserve(&*store, &running, &f, &short_intent()).await,
            Reservation::Existing(Existing::Uncertain { .. })
        ),
        "a running record never expires"
    );
}

/// Finishes each of `expiring` with `args`, reserves a running record beside them, and waits
/// until the finished ones are past the short retention; the running record's key.
async fn expired_beside_a_running_one(
    store: &dyn IdempotencyStore,
    expiring: &[IdempotencyKey],
    args: &serde_json::Value,
) -> IdempotencyKey {
    for k in expiring {
        finished(store, k, args).await;
    }
    let running = key("p", "s", "running");
    assert_eq!(
        reserve(store, &running, &fp(args), &short_intent()).await,
        Reservation::Reserved
    );
    outlive_retention().await;
    running
}

/// Each of `pruned` is gone, and `running` is still in flight.
async fn assert_pruned_beside_running<'k>(
    store: &dyn IdempotencyStore,
    pruned: impl IntoIterator<Item = &'k IdempotencyKey>,
    running: &IdempotencyKey,
) {
    for k in pruned {
        assert_eq!(store.lookup(k).await.expect("lookup"), None, "{k:?} pruned");
    }
    let state = store
        .lookup(running)
        .await
        .expect("lookup")
        .map(|r| r.state);
    assert!(
        matches!(state, Some(RecordState::InFlight(_))),
        "the running record stays: {state:?}"
    );
}

/// The retention of [`pruning_removes_only_expired_records`]'s steps: long enough that a record
/// finished just before them stays within it through three steps, also where a step takes a
/// few hundred milliseconds (a store distributed over several servers, docs/scale.md).
const STEPS_RETENTION: Duration = Duration::from_millis(1500);

/// Pruning deletes exactly the finished records past the retention, at most a batch per step,
/// and never a running one or one still within its retention.
pub async fn pruning_removes_only_expired_records(store: Arc<dyn IdempotencyStore>) {
    let args = json!({"a": 1});
    let expiring: Vec<IdempotencyKey> =
        (0..3).map(|i| key("p", "s", &format!("old-{i}"))).collect();
    let running = expired_beside_a_running_one(&*store, &expiring, &args).await;
    // The old records are past the steps' retention too.
    tokio::time::sleep(STEPS_RETENTION - SHORT).await;
    let fresh = key("p", "s", "fresh");
    finished(&*store, &fresh, &args).await;

    let step = |batch| {
        let store = Arc::clone(&store);
        async move {
            store
                .prune_expired(STEPS_RETENTION, batch)
                .await
                .expect("prune")
        }
    };
    let records = |records| {
        PruneStep::Pruned(Pruned {
            records,
            ..Pruned::default()
        })
    };
    assert_eq!(step(2).await, records(2), "a step deletes at most a batch");
    assert_eq!(step(2).await, records(1));
    assert_eq!(step(2).await, records(0));
    assert_pruned_beside_running(&*store, &expiring, &running).await;
    assert!(matches!(
        store.lookup(&fresh).await.expect("lookup").map(|r| r.state),
        Some(RecordState::Finished(_))
    ));
}

/// The pruner ([`crate::retention::run_pruner`]) deletes a backlog of several full batches in
/// one pass (steps with a pause between them, never waiting for the next interval), counts
/// every record it pruned, and leaves a running record alone.
pub async fn the_pruner_deletes_a_backlog_in_one_pass(store: Arc<dyn IdempotencyStore>) {
    use crate::retention::run_pruner;
    // Small batches, so that a backlog of several is quick to write on every store.
    const BATCH: usize = 50;
    let args = json!({"a": 1});
    let backlog = 2 * BATCH + 7;
    let expiring: Vec<IdempotencyKey> = (0..backlog)
        .map(|i| key("p", "s", &format!("backlog-{i}")))
        .collect();
    let running = expired_beside_a_running_one(&*store, &expiring, &args).await;

    let metrics = crate::metrics::Metrics::default();
    let stop = tokio_util::sync::CancellationToken::new();
    let pruner = tokio::spawn(run_pruner(
        Arc::clone(&store),
        SHORT,
        // One pass only: the next one would start in an hour.
        Duration::from_secs(3600),
        BATCH,
        metrics.clone(),
        stop.clone(),
    ));
    let counted = format!("carmy_prunes_total {backlog}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !metrics.encode().lines().any(|line| line == counted) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pruner did not prune {backlog} records in one pass within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    pruner.await.expect("the pruner stops when cancelled");
    let sample = [&expiring[0], &expiring[backlog / 2], &expiring[backlog - 1]];
    assert_pruned_beside_running(&*store, sample, &running).await;
}
