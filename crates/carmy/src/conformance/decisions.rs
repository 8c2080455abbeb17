//! Conformance checks of decisions (docs/semantics.md §12.1): resolve, release, listing and the
//! audit trail, the same on every store.
//!
//! The checks decide with `force`, because a fresh store's own reservations belong to a live
//! owner (a process-local store has no other kind); the interrupted case is covered by each
//! store's own tests.

use super::{complete, fp, intent, key, reserve, result_for};
use crate::decision::{AuditAction, Decision, DecisionRefusal, ReleaseRequest, ResolveRequest};
use crate::outcome::{ExecutionId, ExecutionStatus};
use crate::store::{
    Claim, Existing, IdempotencyStore, InFlightState, RecordState, Reservation, StoreError,
};
use serde_json::json;
use std::sync::Arc;

fn resolve_request(execution_id: &ExecutionId, force: bool) -> ResolveRequest {
    ResolveRequest {
        decision: Decision {
            execution_id: execution_id.clone(),
            principal: None,
            note: "order 17 exists".into(),
            actor: "operator:ops".into(),
            force,
        },
        status: ExecutionStatus::Completed,
        data: json!({"order_id": 17, "big": 123_456_789_012_345_678_u64}),
        error: None,
    }
}

pub(super) fn release_request(execution_id: &ExecutionId, force: bool) -> ReleaseRequest {
    Decision {
        execution_id: execution_id.clone(),
        principal: None,
        note: "no order found".into(),
        actor: "alice".into(),
        force,
    }
}

/// A running execution is resolved only with `force`; the resolution is recorded once, with
/// `resolution: {by, at, note}`, replays like any outcome, writes one audit row, and neither a
/// second decision nor the owner's late `complete` changes it.
pub async fn resolve_records_once_and_replays(store: Arc<dyn IdempotencyStore>) {
    let k = key("p", "s", "resolve");
    let f = fp(&json!({"sku": "A"}));
    let owner = intent();
    assert_eq!(
        reserve(&*store, &k, &f, &owner).await,
        Reservation::Reserved
    );
    let id = &owner.execution_id;
    let unforced = store.resolve_execution(&resolve_request(id, false)).await;
    assert_eq!(unforced.unwrap(), Err(DecisionRefusal::StillRunning));
    assert!(store.audit_trail(id).await.unwrap().is_empty());

    let resolved = store
        .resolve_execution(&resolve_request(id, true))
        .await
        .unwrap()
        .expect("the forced resolve wins");
    assert_eq!(&resolved.execution_id, id);
    assert_eq!(resolved.status, ExecutionStatus::Completed);
    assert_eq!(
        resolved.data,
        json!({"order_id": 17, "big": 123_456_789_012_345_678_u64})
    );
    assert_eq!(resolved.request_id.as_deref(), Some("resolve"));
    assert_eq!(resolved.session_id, "s");
    assert_eq!(resolved.tool, "echo");
    let resolution = resolved.resolution.clone().expect("a resolution");
    assert_eq!(resolution.by, "operator:ops");
    assert_eq!(resolution.note, "order 17 exists");

    assert_eq!(
        reserve(&*store, &k, &f, &intent()).await,
        Reservation::Existing(Existing::Replay(resolved.clone().into())),
        "the resolved record replays"
    );
    let again = store.resolve_execution(&resolve_request(id, true)).await;
    assert_eq!(again.unwrap(), Err(DecisionRefusal::AlreadyDecided));
    let release = store.release_execution(&release_request(id, true)).await;
    assert_eq!(release.unwrap(), Err(DecisionRefusal::AlreadyDecided));

    let late = result_for(
        &owner,
        &k,
        ExecutionStatus::Completed,
        json!({"order_id": 18}),
    );
    assert!(matches!(
        complete(&*store, &k, &f, &late.into()).await,
        Err(StoreError::NotOwner { .. })
    ));
    assert_eq!(
        store.lookup(&k).await.unwrap().map(|record| record.state),
        Some(RecordState::Finished(resolved)),
        "nothing overwrote the resolution"
    );
    let trail = store.audit_trail(id).await.unwrap();
    assert_eq!(trail.len(), 1, "one audit row: {trail:?}");
    assert_eq!(trail[0].action, AuditAction::Resolve);
    assert_eq!(trail[0].actor, "operator:ops");
    assert_eq!(trail[0].note.as_deref(), Some("order 17 exists"));
    assert_eq!(trail[0].before["state"], "running");
    assert_eq!(trail[0].after["state"], "completed");
}

/// A release frees the identity (the next attempt reserves anew), keeps the execution findable
/// as released, writes one audit row, and is not repeated.
pub async fn release_frees_the_identity_and_keeps_history(store: Arc<dyn IdempotencyStore>) {
    let k = key("alice", "s", "release");
    let f = fp(&json!({}));
    // The kept arguments (docs/semantics.md §8.5) survive exactly, `\u0000` and big numbers too.
    let kept = r#"{"customer":"cus_42","n":9007199254740993,"z":"a\u0000b"}"#;
    let owner = crate::store::ExecutionIntent {
        arguments: Some(kept.to_owned()),
        ..intent()
    };
    assert_eq!(
        reserve(&*store, &k, &f, &owner).await,
        Reservation::Reserved
    );
    let id = &owner.execution_id;
    let held = store.find_execution("alice", id).await.unwrap().unwrap();
    assert_eq!(
        held.arguments.as_deref(),
        Some(kept),
        "the held record's arguments"
    );
    let unforced = store.release_execution(&release_request(id, false)).await;
    assert_eq!(unforced.unwrap(), Err(DecisionRefusal::StillRunning));

    let released = store
        .release_execution(&release_request(id, true))
        .await
        .unwrap()
        .expect("the forced release wins");
    assert_eq!(&released.execution_id, id);
    assert_eq!(released.key, k);
    assert_eq!(released.tool, "echo");
    assert_eq!(released.state_at_release, InFlightState::Running);
    assert_eq!(released.resolution.by, "alice");
    assert_eq!(released.resolution.note, "no order found");

    assert_eq!(
        store.lookup(&k).await.unwrap(),
        None,
        "the identity is free"
    );
    let found = store
        .find_execution("alice", id)
        .await
        .unwrap()
        .expect("a released execution stays in history");
    assert_eq!(found.released, Some(released.resolution.clone()));
    assert_eq!(found.key, k);
    assert_eq!(
        found.arguments.as_deref(),
        Some(kept),
        "released history keeps them"
    );
    assert_eq!(store.find_execution("bob", id).await.unwrap(), None);

    let again = store.release_execution(&release_request(id, true)).await;
    assert_eq!(again.unwrap(), Err(DecisionRefusal::AlreadyDecided));
    let resolve = store.resolve_execution(&resolve_request(id, true)).await;
    assert_eq!(resolve.unwrap(), Err(DecisionRefusal::AlreadyDecided));

    // The next reservation names the released execution (docs/semantics.md §12.1, "A rerun
    // says so").
    let next = intent();
    assert_eq!(
        reserve(&*store, &k, &f, &next).await,
        Reservation::Replaced(crate::store::Replaced {
            execution_id: id.clone(),
            ended: crate::store::ReplacedEnd::Released {
                by: "alice".into(),
                note: "no order found".into(),
            },
        })
    );
    let late = result_for(&owner, &k, ExecutionStatus::Completed, json!(1));
    assert!(matches!(
        complete(&*store, &k, &f, &late.into()).await,
        Err(StoreError::NotOwner { .. })
    ));
    let trail = store.audit_trail(id).await.unwrap();
    assert_eq!(trail.len(), 1, "{trail:?}");
    assert_eq!(trail[0].action, AuditAction::Release);
    assert_eq!(trail[0].after["state"], "released");
    assert!(store
        .audit_trail(&next.execution_id)
        .await
        .unwrap()
        .is_empty());
}

/// A decision limited to a principal does not see another principal's execution; unknown
/// executions are not found.
pub async fn decisions_are_scoped_to_the_principal(store: Arc<dyn IdempotencyStore>) {
    let k = key("alice", "s", "scoped");
    let owner = intent();
    assert_eq!(
        reserve(&*store, &k, &fp(&json!({})), &owner).await,
        Reservation::Reserved
    );
    let mut as_bob = resolve_request(&owner.execution_id, true);
    as_bob.decision.principal = Some("bob".into());
    assert_eq!(
        store.resolve_execution(&as_bob).await.unwrap(),
        Err(DecisionRefusal::NotFound)
    );
    let mut release_as_bob = release_request(&owner.execution_id, true);
    release_as_bob.principal = Some("bob".into());
    assert_eq!(
        store.release_execution(&release_as_bob).await.unwrap(),
        Err(DecisionRefusal::NotFound)
    );
    let unknown = resolve_request(&ExecutionId::generate(), true);
    assert_eq!(
        store.resolve_execution(&unknown).await.unwrap(),
        Err(DecisionRefusal::NotFound)
    );
    let mut as_alice = resolve_request(&owner.execution_id, true);
    as_alice.decision.principal = Some("alice".into());
    assert!(store.resolve_execution(&as_alice).await.unwrap().is_ok());
}

/// 20 concurrent decisions (half resolve, half release) on one execution: exactly one wins,
/// every other is `AlreadyDecided`, and there is one audit row.
pub async fn concurrent_decisions_have_one_winner(store: Arc<dyn IdempotencyStore>) {
    let k = key("p", "s", "race");
    let owner = intent();
    assert_eq!(
        reserve(&*store, &k, &fp(&json!({})), &owner).await,
        Reservation::Reserved
    );
    let barrier = Arc::new(tokio::sync::Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|n| {
            let (store, barrier, id) = (
                Arc::clone(&store),
                Arc::clone(&barrier),
                owner.execution_id.clone(),
            );
            tokio::spawn(async move {
                barrier.wait().await;
                if n % 2 == 0 {
                    store
                        .resolve_execution(&resolve_request(&id, true))
                        .await
                        .unwrap()
                        .map(drop)
                } else {
                    store
                        .release_execution(&release_request(&id, true))
                        .await
                        .unwrap()
                        .map(drop)
                }
            })
        })
        .collect();
    let mut won = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(()) => won += 1,
            Err(refusal) => assert_eq!(refusal, DecisionRefusal::AlreadyDecided),
        }
    }
    assert_eq!(won, 1, "exactly one decision wins");
    let trail = store.audit_trail(&owner.execution_id).await.unwrap();
    assert_eq!(trail.len(), 1, "one audit row: {trail:?}");
}

/// An owner's outcome that arrives after a release and a new attempt is kept as a late-arrival
/// audit row naming the current holder, and never touches the record.
pub async fn late_arrivals_are_kept_beside_the_record(store: Arc<dyn IdempotencyStore>) {
    let k = key("p", "s", "late");
    let f = fp(&json!({}));
    let (owner, next) = (intent(), intent());
    assert_eq!(
        reserve(&*store, &k, &f, &owner).await,
        Reservation::Reserved
    );
    let release = release_request(&owner.execution_id, true);
    store.release_execution(&release).await.unwrap().unwrap();
    assert!(matches!(
        reserve(&*store, &k, &f, &next).await,
        Reservation::Replaced(crate::store::Replaced { execution_id, .. })
            if execution_id == owner.execution_id
    ));
    let late = result_for(
        &owner,
        &k,
        ExecutionStatus::Completed,
        json!({"order_id": 2}),
    );
    let late = crate::RecordedResult::new(late);
    assert!(matches!(
        complete(&*store, &k, &f, &late).await,
        Err(StoreError::NotOwner { .. })
    ));
    let refused = Claim {
        key: &k,
        fingerprint: &f,
    };
    let current = store.record_late_arrival(refused, &late).await.unwrap();
    assert_eq!(current, Some(next.execution_id.clone()));
    let trail = store.audit_trail(&owner.execution_id).await.unwrap();
    let actions: Vec<AuditAction> = trail.iter().map(|entry| entry.action).collect();
    assert_eq!(
        actions,
        vec![AuditAction::Release, AuditAction::LateArrival]
    );
    assert_eq!(trail[1].after["state"], "completed");
    assert_eq!(trail[1].after["outcome"]["data"], json!({"order_id": 2}));
    assert_eq!(
        trail[1].before["current_execution_id"],
        json!(next.execution_id)
    );
    assert_eq!(
        store
            .lookup(&k)
            .await
            .unwrap()
            .map(|record| record.execution_id),
        Some(next.execution_id),
        "the record is the new attempt's"
    );
}
