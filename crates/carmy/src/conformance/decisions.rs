//! Conformance checks of decisions (docs/semantics.md §12.1): resolve, release, listing and the
//! audit trail, the same on every store.
//!
//! The checks decide with `force`, because a fresh store's own reservations belong to a live
//! owner (a process-local store has no other kind); the interrupted case is covered by each
//! store's own tests.

use super::{complete, fp, intent, key, reserve, result_for};
use crate::decision::{
    AuditAction, Decision, DecisionRefusal, ExecutionQuery, ListOrder, ReleaseRequest,
    ResolveRequest,
};
use crate::outcome::{ExecutionId, ExecutionStatus};
use crate::store::{
    Claim, ExecutionIntent, Existing, IdempotencyStore, InFlightState, RecordState, Reservation,
    StoreError, WaitRequest,
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

fn release_request(execution_id: &ExecutionId, force: bool) -> ReleaseRequest {
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
        Reservation::Existing(Existing::Replay(resolved.clone())),
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
    let owner = intent();
    assert_eq!(
        reserve(&*store, &k, &f, &owner).await,
        Reservation::Reserved
    );
    let id = &owner.execution_id;
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
    assert_eq!(store.find_execution("bob", id).await.unwrap(), None);

    let again = store.release_execution(&release_request(id, true)).await;
    assert_eq!(again.unwrap(), Err(DecisionRefusal::AlreadyDecided));
    let resolve = store.resolve_execution(&resolve_request(id, true)).await;
    assert_eq!(resolve.unwrap(), Err(DecisionRefusal::AlreadyDecided));

    let next = intent();
    assert_eq!(reserve(&*store, &k, &f, &next).await, Reservation::Reserved);
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

/// The execution ids of a listing, sorted (a listing's order between executions reserved in
/// the same millisecond is not defined).
fn ids(found: Vec<crate::store::ExecutionLookup>) -> Vec<ExecutionId> {
    sorted(found.into_iter().map(|lookup| lookup.record.execution_id))
}

fn sorted(ids: impl IntoIterator<Item = ExecutionId>) -> Vec<ExecutionId> {
    let mut ids: Vec<ExecutionId> = ids.into_iter().collect();
    ids.sort();
    ids
}

/// Reserves alice's `s/one` and `t/two` and bob's `s/one` (left running) and bob's `s/done`
/// (completed), in this order; returns their intents.
async fn four_to_list(store: &dyn IdempotencyStore) -> [ExecutionIntent; 4] {
    let f = fp(&json!({}));
    let intents = [intent(), intent(), intent(), intent()];
    let keys = [
        key("alice", "s", "one"),
        key("alice", "t", "two"),
        key("bob", "s", "one"),
        key("bob", "s", "done"),
    ];
    for (k, i) in keys.iter().zip(&intents) {
        assert_eq!(reserve(store, k, &f, i).await, Reservation::Reserved);
    }
    let finished = result_for(&intents[3], &keys[3], ExecutionStatus::Completed, json!(1));
    complete(store, &keys[3], &f, &finished.into())
        .await
        .unwrap();
    intents
}

/// Listing filters by principal, session, request id and in-flight state, oldest first, up to
/// the limit; released executions are not listed.
pub async fn listing_filters_and_scopes(store: Arc<dyn IdempotencyStore>) {
    let [a1, a2, b1, done] = four_to_list(&*store).await;
    let alice = key("alice", "s", "one");
    let query = |principal: Option<&str>, request_id: Option<&str>| ExecutionQuery {
        principal: principal.map(str::to_owned),
        in_flight: Some(InFlightState::Running),
        session_id: None,
        request_id: request_id.map(str::to_owned),
        limit: 10,
        ..ExecutionQuery::default()
    };
    let all = ids(store.list_executions(&query(None, None)).await.unwrap());
    let expected = [&a1, &a2, &b1].map(|intent| intent.execution_id.clone());
    assert_eq!(
        all,
        sorted(expected),
        "every principal's running executions"
    );
    let alices = ids(store
        .list_executions(&query(Some("alice"), None))
        .await
        .unwrap());
    let expected = [&a1, &a2].map(|intent| intent.execution_id.clone());
    assert_eq!(alices, sorted(expected));
    let found = store
        .list_executions(&query(Some("alice"), Some("one")))
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].key, alice);
    let limited = ExecutionQuery {
        limit: 1,
        ..query(None, None)
    };
    assert_eq!(store.list_executions(&limited).await.unwrap().len(), 1);
    let any_state = ExecutionQuery {
        in_flight: None,
        ..query(Some("bob"), Some("done"))
    };
    assert_eq!(
        ids(store.list_executions(&any_state).await.unwrap()),
        vec![done.execution_id]
    );
    let interrupted = ExecutionQuery {
        in_flight: Some(InFlightState::Interrupted),
        ..query(None, None)
    };
    assert!(store
        .list_executions(&interrupted)
        .await
        .unwrap()
        .is_empty());

    store
        .release_execution(&release_request(&a1.execution_id, true))
        .await
        .unwrap()
        .unwrap();
    let after = ids(store
        .list_executions(&query(Some("alice"), None))
        .await
        .unwrap());
    assert_eq!(after, vec![a2.execution_id]);
}

/// Listing filters by tool and by failure (finished, status not `completed`) in the store, so
/// that the limit counts only matching records, and lists newest first on request: exactly the
/// oldest-first order reversed, the limit keeping the newest.
pub async fn listing_filters_by_tool_and_failure_in_either_order(store: Arc<dyn IdempotencyStore>) {
    let f = fp(&json!({}));
    let waiting = || ExecutionIntent {
        tool: "wait".into(),
        ..intent()
    };
    // Reserved in this order, each at a later instant; the statuses they end with (None: left
    // running).
    let planned = [
        (
            key("alice", "s", "ok"),
            intent(),
            Some(ExecutionStatus::Completed),
        ),
        (
            key("alice", "s", "bad"),
            intent(),
            Some(ExecutionStatus::Failed),
        ),
        (
            key("bob", "s", "slow"),
            waiting(),
            Some(ExecutionStatus::TimedOut),
        ),
        (key("bob", "s", "run"), waiting(), None),
        (
            key("alice", "s", "gone"),
            intent(),
            Some(ExecutionStatus::Cancelled),
        ),
    ];
    for (k, i, status) in &planned {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        assert_eq!(reserve(&*store, k, &f, i).await, Reservation::Reserved);
        if let Some(status) = status {
            let data = if *status == ExecutionStatus::Completed {
                json!(1)
            } else {
                json!(null)
            };
            let finished = result_for(i, k, *status, data);
            complete(&*store, k, &f, &finished.into()).await.unwrap();
        }
    }
    let id = |n: usize| planned[n].1.execution_id.clone();
    let list = |query: ExecutionQuery| {
        let store = Arc::clone(&store);
        async move {
            store
                .list_executions(&query)
                .await
                .unwrap()
                .into_iter()
                .map(|lookup| lookup.record.execution_id)
                .collect::<Vec<_>>()
        }
    };
    let newest = |query: ExecutionQuery| ExecutionQuery {
        order: ListOrder::NewestFirst,
        ..query
    };
    let failures = ExecutionQuery {
        failures_only: true,
        limit: 10,
        ..ExecutionQuery::default()
    };
    assert_eq!(
        list(failures.clone()).await,
        vec![id(1), id(2), id(4)],
        "failures: failed, timed_out and cancelled, not completed nor running, oldest first"
    );
    assert_eq!(
        list(newest(failures.clone())).await,
        vec![id(4), id(2), id(1)],
        "failures newest first"
    );
    assert_eq!(
        list(newest(ExecutionQuery {
            limit: 1,
            ..failures.clone()
        }))
        .await,
        vec![id(4)],
        "the limit keeps the newest failure"
    );
    assert_eq!(
        list(newest(ExecutionQuery {
            principal: Some("alice".into()),
            ..failures.clone()
        }))
        .await,
        vec![id(4), id(1)],
        "alice's failures"
    );
    assert_eq!(
        list(ExecutionQuery {
            tool: Some("wait".into()),
            ..failures.clone()
        })
        .await,
        vec![id(2)],
        "the failures of tool wait"
    );
    assert!(
        list(ExecutionQuery {
            in_flight: Some(InFlightState::Running),
            ..failures.clone()
        })
        .await
        .is_empty(),
        "a running record is no failure"
    );
    let by_tool = ExecutionQuery {
        tool: Some("wait".into()),
        limit: 10,
        ..ExecutionQuery::default()
    };
    assert_eq!(list(by_tool.clone()).await, vec![id(2), id(3)], "tool wait");
    assert_eq!(
        list(newest(by_tool.clone())).await,
        vec![id(3), id(2)],
        "tool wait, newest first"
    );
    assert_eq!(
        list(ExecutionQuery {
            in_flight: Some(InFlightState::Running),
            ..by_tool
        })
        .await,
        vec![id(3)],
        "tool wait, running"
    );
    assert!(
        list(ExecutionQuery {
            tool: Some("nope".into()),
            limit: 10,
            ..ExecutionQuery::default()
        })
        .await
        .is_empty(),
        "no record of tool nope"
    );
    let everything = ExecutionQuery {
        limit: 10,
        ..ExecutionQuery::default()
    };
    let oldest_first = list(everything.clone()).await;
    assert_eq!(
        oldest_first,
        (0..5).map(id).collect::<Vec<_>>(),
        "oldest first"
    );
    let mut reversed = oldest_first;
    reversed.reverse();
    assert_eq!(
        list(newest(everything.clone())).await,
        reversed,
        "newest first"
    );
    assert_eq!(
        list(newest(ExecutionQuery {
            limit: 2,
            ..everything.clone()
        }))
        .await,
        vec![id(4), id(3)],
        "the limit keeps the newest"
    );
    assert_eq!(
        list(ExecutionQuery {
            limit: 2,
            ..everything
        })
        .await,
        vec![id(0), id(1)],
        "oldest first, the limit keeps the oldest"
    );
}

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
    assert_eq!(reserve(&*store, &k, &f, &next).await, Reservation::Reserved);
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
