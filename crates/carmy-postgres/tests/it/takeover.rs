//! Takeover (docs/semantics.md §8.3, §12): a new attempt fences the earlier one with one winner,
//! and a late release leaves a taken-over execution alone or hands it back.

use crate::common::*;
use carmy::decision::AuditAction;
use carmy::outcome::ExecutionStatus;
use carmy::store::{Claim, IdempotencyStore, InFlightState, RecordState, Reservation, StoreError};
use serde_json::json;

use carmy_test_support::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_fences_the_earlier_attempt_and_has_one_winner() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;
    let owner = db.store().await;
    let takers = [db.store().await, db.store().await];
    let k = key("alice", "default", "taken");
    let holder = intent("read_orders");

    // A live owner's execution is not taken over; nor one with another fingerprint.
    reserve(&owner, &k, &fp('a'), &holder).await.unwrap();
    let id = &holder.execution_id;
    assert_eq!(
        takers[0]
            .take_over(
                Claim {
                    key: &k,
                    fingerprint: &fp('a')
                },
                id
            )
            .await
            .unwrap(),
        None
    );
    owner.shutdown().await.unwrap();
    assert_eq!(
        takers[0]
            .take_over(
                Claim {
                    key: &k,
                    fingerprint: &fp('b')
                },
                id
            )
            .await
            .unwrap(),
        None
    );

    // Ten concurrent takeovers from two stores: exactly one wins, attempt 2.
    let fingerprint = fp('a');
    let attempts = futures::future::join_all((0..10).map(|n| {
        takers[n % 2].take_over(
            Claim {
                key: &k,
                fingerprint: &fingerprint,
            },
            id,
        )
    }))
    .await;
    let won: Vec<u32> = attempts.into_iter().filter_map(|a| a.unwrap()).collect();
    assert_eq!(won, vec![2]);
    assert_eq!(
        takers[1].lookup(&k).await.unwrap().unwrap().state,
        RecordState::InFlight(InFlightState::Running)
    );
    let audit: Vec<(String, String)> = sqlx::query_as(
        "SELECT action, after->>'attempt' FROM carmy.audit_log WHERE execution_id = $1",
    )
    .bind(id.as_str())
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(audit, vec![("takeover".to_owned(), "2".to_owned())]);

    // The first attempt's outcome, arriving late, is refused; the second attempt's is recorded.
    let late = result(&k, &holder, ExecutionStatus::Completed, order(1));
    let before = raw_row(&pool, &k).await.unwrap();
    assert!(matches!(
        takers[0]
            .complete(
                Claim {
                    key: &k,
                    fingerprint: &fp('a')
                },
                &late.clone().into()
            )
            .await,
        Err(StoreError::NotOwner { .. })
    ));
    assert_eq!(raw_row(&pool, &k).await.unwrap(), before);
    let second = result(&k, &holder, ExecutionStatus::Completed, order(2));
    let recorded = carmy::RecordedResult::new(second.clone()).with_attempt(2);
    takers[0]
        .complete(
            Claim {
                key: &k,
                fingerprint: &fp('a'),
            },
            &recorded,
        )
        .await
        .unwrap();
    assert_eq!(
        takers[1].lookup(&k).await.unwrap().unwrap().state,
        RecordState::Finished(second)
    );
    // A finished execution is never taken over.
    assert_eq!(
        takers[1]
            .take_over(
                Claim {
                    key: &k,
                    fingerprint: &fp('a')
                },
                id
            )
            .await
            .unwrap(),
        None
    );

    for taker in takers {
        taker.shutdown().await.unwrap();
    }
    pool.close().await;
}

/// A release from the first attempt's owner (its tool reported no effect, or its reservation
/// was lost in transit, and the store failed until the link came back) arrives after another
/// replica took the execution over: the taker's running row stays. The taker's own release
/// hands the execution back instead of freeing it (docs/semantics.md §8.3, §12.7).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_leaves_a_taken_over_execution_alone_or_hands_it_back() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;
    let owner = db.store().await;
    let taker = db.store().await;
    let k = key("alice", "default", "released-late");
    let holder = intent("read_orders");
    let fingerprint = fp('a');
    let reserved = reserve(&owner, &k, &fingerprint, &holder).await.unwrap();
    assert_eq!(reserved, Reservation::Reserved);
    let id = &holder.execution_id;
    owner.shutdown().await.unwrap();
    let claim = Claim {
        key: &k,
        fingerprint: &fingerprint,
    };
    assert_eq!(taker.take_over(claim, id).await.unwrap(), Some(2));
    let taken = raw_row(&pool, &k).await.unwrap();
    owner.release(&k, id).await.unwrap();
    assert_eq!(raw_row(&pool, &k).await.as_ref(), Some(&taken));
    assert_eq!(
        taker.lookup(&k).await.unwrap().unwrap().state,
        RecordState::InFlight(InFlightState::Running)
    );
    // The taker's own release (its tool did nothing this time) hands the execution back: the
    // first attempt's effect is still unknown, so it reads interrupted and is taken over next.
    taker.release(&k, id).await.unwrap();
    let handed_back = RawRow {
        owner_instance: None,
        ..taken
    };
    assert_eq!(raw_row(&pool, &k).await, Some(handed_back));
    assert_eq!(
        taker.lookup(&k).await.unwrap().unwrap().state,
        RecordState::InFlight(InFlightState::Interrupted)
    );
    assert_eq!(taker.take_over(claim, id).await.unwrap(), Some(3));
    // The hand-back is audited between the two takeovers, by the taker's instance.
    let trail: Vec<_> = taker
        .audit_trail(id)
        .await
        .unwrap()
        .into_iter()
        .map(|entry| (entry.action, entry.actor, entry.before, entry.after))
        .collect();
    let me = taker.instance_id().to_owned();
    let running =
        |attempt: u32| json!({"state": "running", "owner_instance": me, "attempt": attempt});
    assert_eq!(
        trail,
        vec![
            (
                AuditAction::Takeover,
                me.clone(),
                json!({"state": "interrupted", "owner_instance": owner.instance_id(), "attempt": 1}),
                running(2)
            ),
            (
                AuditAction::HandBack,
                me.clone(),
                running(2),
                json!({"state": "interrupted", "owner_instance": null, "attempt": 2})
            ),
            (
                AuditAction::Takeover,
                me.clone(),
                json!({"state": "interrupted", "owner_instance": null, "attempt": 2}),
                running(3)
            ),
        ]
    );
    taker.shutdown().await.unwrap();
    pool.close().await;
}
