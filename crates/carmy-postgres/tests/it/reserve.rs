//! Reservations on PostgreSQL beyond the conformance suite: the rows `reserve` and `complete`
//! leave, conflicts in every finished state with their rows, and one winner among fifty
//! concurrent reserves over two stores (two replicas).

use crate::common::*;
use carmy::fingerprint::Fingerprint;
use carmy::outcome::ExecutionStatus;
use carmy::store::{
    ExecutionIntent, Existing, IdempotencyStore, InFlightState, RecordState, Reservation,
};
use std::sync::Arc;

use carmy_test_support::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reserve_complete_replay() {
    let db = TestDb::migrated().await;
    let store = db.store().await;
    let pool = db.pool().await;
    let k = key("alice", "default", "req-1");
    let first = intent("create_order");

    assert_eq!(store.lookup(&k).await.unwrap(), None);
    assert_eq!(
        reserve(&store, &k, &fp('a'), &first).await.unwrap(),
        Reservation::Reserved
    );
    let record = store.lookup(&k).await.unwrap().unwrap();
    assert_eq!(record.execution_id, first.execution_id);
    assert_eq!(record.fingerprint, fp('a'));
    assert_eq!(record.tool, "create_order");
    assert_eq!(record.state, RecordState::InFlight(InFlightState::Running));
    assert_eq!(
        raw_row(&pool, &k).await.unwrap(),
        RawRow {
            state: "running".to_owned(),
            execution_id: first.execution_id.to_string(),
            outcome: None,
            error_code: None,
            owner_instance: Some(store.instance_id().to_owned()),
            finished: false,
        }
    );

    // A retry while it runs is uncertain and names the running execution.
    assert_eq!(
        reserve(&store, &k, &fp('a'), &intent("create_order"))
            .await
            .unwrap(),
        Reservation::Existing(Existing::Uncertain {
            execution_id: first.execution_id.clone(),
            state: InFlightState::Running,
        })
    );

    let done = result(&k, &first, ExecutionStatus::Completed, order(1));
    complete(&store, &k, &fp('a'), &done.clone().into())
        .await
        .unwrap();
    assert_eq!(
        raw_row(&pool, &k).await.unwrap(),
        RawRow {
            state: "completed".to_owned(),
            execution_id: first.execution_id.to_string(),
            outcome: Some(done.to_record_json()),
            error_code: None,
            owner_instance: Some(store.instance_id().to_owned()),
            finished: true,
        }
    );

    // Every later attempt replays, from this store and from another one.
    let retry = intent("create_order");
    assert_eq!(
        reserve(&store, &k, &fp('a'), &retry).await.unwrap(),
        Reservation::Existing(Existing::Replay(done.clone().into()))
    );
    let other = db.store().await;
    assert_eq!(
        reserve(&other, &k, &fp('a'), &retry).await.unwrap(),
        Reservation::Existing(Existing::Replay(done.clone().into()))
    );
    assert_eq!(
        other.lookup(&k).await.unwrap().unwrap().state,
        RecordState::Finished(done.clone())
    );
    // Retries never created rows of their own.
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM carmy.reservations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 1);

    store.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_different_fingerprint_conflicts_in_every_state() {
    let db = TestDb::migrated().await;
    let store = db.store().await;

    // Running.
    let k = key("alice", "default", "running");
    let holder = intent("create_order");
    assert_eq!(
        reserve(&store, &k, &fp('a'), &holder).await.unwrap(),
        Reservation::Reserved
    );
    for other in [
        fp('b'),
        Fingerprint {
            version: "v2".to_owned(),
            digest: fp('a').digest,
        },
    ] {
        assert_eq!(
            reserve(&store, &k, &other, &intent("create_order"))
                .await
                .unwrap(),
            Reservation::Existing(Existing::Conflict {
                execution_id: holder.execution_id.clone(),
                parts: None,
            })
        );
    }

    // Each finished state: conflict for a different fingerprint, replay for the same one.
    for status in [
        ExecutionStatus::Completed,
        ExecutionStatus::Failed,
        ExecutionStatus::TimedOut,
        ExecutionStatus::Cancelled,
    ] {
        let k = key("alice", "default", status.as_str());
        let holder = intent("create_order");
        assert_eq!(
            reserve(&store, &k, &fp('a'), &holder).await.unwrap(),
            Reservation::Reserved
        );
        let outcome = result(&k, &holder, status, order(7));
        complete(&store, &k, &fp('a'), &outcome.clone().into())
            .await
            .unwrap();
        assert_eq!(
            reserve(&store, &k, &fp('b'), &intent("create_order"))
                .await
                .unwrap(),
            Reservation::Existing(Existing::Conflict {
                execution_id: holder.execution_id.clone(),
                parts: None,
            }),
            "{status:?}"
        );
        assert_eq!(
            reserve(&store, &k, &fp('a'), &intent("create_order"))
                .await
                .unwrap(),
            Reservation::Existing(Existing::Replay(outcome.clone().into())),
            "{status:?}"
        );
        let pool = db.pool().await;
        let row = raw_row(&pool, &k).await.unwrap();
        assert_eq!(row.state, status.as_str());
        assert_eq!(
            row.error_code.as_deref(),
            outcome.error.as_ref().map(|e| e.code.as_str())
        );
        pool.close().await;
    }
    store.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_reserves_across_two_stores_reserve_once() {
    let db = TestDb::migrated().await;
    let stores = [Arc::new(db.store().await), Arc::new(db.store().await)];
    assert_ne!(stores[0].instance_id(), stores[1].instance_id());
    let k = key("alice", "default", "contended");
    let start = Arc::new(tokio::sync::Barrier::new(50));

    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let store = Arc::clone(&stores[i % 2]);
            let start = Arc::clone(&start);
            let k = k.clone();
            tokio::spawn(async move {
                let attempt = intent("create_order");
                start.wait().await;
                let reservation = reserve(&*store, &k, &fp('a'), &attempt).await.unwrap();
                if reservation == Reservation::Reserved {
                    // The winner completes at once, so the others see it running or finished.
                    let done = result(&k, &attempt, ExecutionStatus::Completed, order(42));
                    complete(&*store, &k, &fp('a'), &done.clone().into())
                        .await
                        .unwrap();
                }
                (attempt, reservation)
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }

    let winners: Vec<&ExecutionIntent> = outcomes
        .iter()
        .filter(|(_, r)| *r == Reservation::Reserved)
        .map(|(attempt, _)| attempt)
        .collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    let winner = winners[0].clone();
    let done = result(&k, &winner, ExecutionStatus::Completed, order(42));
    let mut uncertain = 0;
    let mut replayed = 0;
    for (_, reservation) in &outcomes {
        match reservation {
            Reservation::Reserved => {}
            Reservation::Existing(Existing::Uncertain {
                execution_id,
                state,
            }) => {
                assert_eq!(execution_id, &winner.execution_id);
                assert_eq!(*state, InFlightState::Running);
                uncertain += 1;
            }
            Reservation::Existing(Existing::Replay(replay)) => {
                assert_eq!(replay.result(), &done);
                replayed += 1;
            }
            Reservation::Existing(Existing::Conflict { .. }) | Reservation::Replaced(_) => {
                panic!("unexpected answer: {outcomes:?}")
            }
        }
    }
    assert_eq!(uncertain + replayed, 49);

    let pool = db.pool().await;
    let row = raw_row(&pool, &k).await.unwrap();
    assert_eq!(row.execution_id, winner.execution_id.to_string());
    assert_eq!(row.outcome, Some(done.to_record_json()));
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM carmy.reservations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 1);
    pool.close().await;
    for store in &stores {
        store.shutdown().await.unwrap();
    }
}

/// A rerun says so (docs/semantics.md §12.1): after a release, the next reservation of each
/// identity names the released execution, thirty reservations at once (the store groups
/// concurrent ones into batches, so both the single-row and the batch statement may answer),
/// and the released row kept the arguments.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reservations_after_a_release_name_it() {
    let db = TestDb::migrated().await;
    let store = Arc::new(db.store().await);
    let pool = db.pool().await;
    let keys: Vec<_> = (0..30)
        .map(|n| key("alice", "default", &format!("rerun-{n}")))
        .collect();
    let mut released = Vec::new();
    for k in &keys {
        let first = ExecutionIntent {
            arguments: Some(r#"{"customer":"cus_42"}"#.to_owned()),
            ..intent("create_order")
        };
        assert_eq!(
            reserve(&*store, k, &fp('a'), &first).await.unwrap(),
            Reservation::Reserved
        );
        sqlx::query("SELECT carmy.release_execution($1, 'no order found', 'dba', true)")
            .bind(first.execution_id.as_str())
            .execute(&pool)
            .await
            .unwrap();
        released.push(first.execution_id);
    }
    let kept: Vec<Option<String>> =
        sqlx::query_scalar("SELECT arguments FROM carmy.released_executions")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(kept, vec![Some(r#"{"customer":"cus_42"}"#.to_owned()); 30]);
    let tasks: Vec<_> = keys
        .iter()
        .cloned()
        .map(|k| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let next = intent("create_order");
                reserve(&*store, &k, &fp('a'), &next).await.unwrap()
            })
        })
        .collect();
    for (task, execution_id) in tasks.into_iter().zip(released) {
        assert_eq!(
            task.await.unwrap(),
            Reservation::Replaced(carmy::store::Replaced {
                execution_id,
                ended: carmy::store::ReplacedEnd::Released {
                    by: "dba".into(),
                    note: "no order found".into(),
                },
            })
        );
    }
}
