//! Reconciliation's store side (docs/semantics.md §12.10): how long ago the attempt that holds
//! an interrupted execution started (an upstream's "absent" proves nothing before that
//! attempt's deadline), counted from its last takeover; and a probe asked too early that gives
//! its claimed attempt back.

use crate::common::*;
use carmy::outcome::ExecutionStatus;
use carmy::reconcile::{ProbeRecord, ReconcileClaim};
use carmy::store::{Claim, IdempotencyStore};
use carmy_test_support::TestDb;
use serde_json::json;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconcile_attempt_age_counts_from_the_reservation_or_the_last_takeover() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;
    let owner = db.store().await;
    let taker = db.store().await;
    let k = key("alice", "default", "aged");
    let holder = intent("pay");
    let fingerprint = fp('a');
    reserve(&owner, &k, &fingerprint, &holder).await.unwrap();
    let id = &holder.execution_id;

    // Reserved an hour ago (as the database stamped it).
    sqlx::query(
        "UPDATE carmy.reservations SET started_at = now() - interval '1 hour', \
                created_at = now() - interval '1 hour' WHERE execution_id = $1",
    )
    .bind(id.as_str())
    .execute(&pool)
    .await
    .unwrap();
    let age = taker.attempt_age(id).await.unwrap().unwrap();
    assert!(
        age >= Duration::from_secs(3599) && age < Duration::from_secs(3660),
        "{age:?}"
    );

    // Taken over now: the attempt that holds it is a few milliseconds old, though the
    // reservation's start stays an hour ago.
    owner.shutdown().await.unwrap();
    let claim = Claim {
        key: &k,
        fingerprint: &fingerprint,
    };
    assert_eq!(taker.take_over(claim, id).await.unwrap(), Some(2));
    let age = taker.attempt_age(id).await.unwrap().unwrap();
    assert!(age < Duration::from_secs(60), "{age:?}");

    // With an outcome there is no attempt to wait for; an unknown execution has none either.
    let done = result(&k, &holder, ExecutionStatus::Completed, order(1));
    let recorded = carmy::RecordedResult::new(done).with_attempt(2);
    complete(&taker, &k, &fingerprint, &recorded).await.unwrap();
    assert_eq!(taker.attempt_age(id).await.unwrap(), None);
    let unknown = carmy::outcome::ExecutionId::generate();
    assert_eq!(taker.attempt_age(&unknown).await.unwrap(), None);

    taker.shutdown().await.unwrap();
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconcile_a_probe_asked_too_early_gives_its_attempt_back() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;
    let owner = db.store().await;
    let prober = db.store().await;
    let k = key("alice", "default", "early");
    let holder = intent("pay");
    reserve(&owner, &k, &fp('a'), &holder).await.unwrap();
    let id = &holder.execution_id;
    owner.shutdown().await.unwrap();

    let claim = ReconcileClaim {
        tools: vec!["pay".to_owned()],
        limit: 1,
        hold: Duration::from_secs(10),
        max_attempts: 1,
        execution_id: None,
        principal: None,
    };
    let attempts = || async {
        sqlx::query_scalar::<_, i32>(
            "SELECT reconcile_attempts FROM carmy.reservations WHERE execution_id = $1",
        )
        .bind(id.as_str())
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let claimed = prober.claim_reconciliations(&claim).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(attempts().await, 1);

    // Too early: given back, and due again at once here (the deadline passed, say).
    let record = ProbeRecord {
        execution_id: id.clone(),
        evidence: json!({"answer": "absent"}),
        retry_in: Some(Duration::ZERO),
        refund_attempt: true,
    };
    prober.record_probe(&record).await.unwrap();
    assert_eq!(attempts().await, 0);
    // So the only attempt allowed is still there to be claimed.
    let claimed = prober.claim_reconciliations(&claim).await.unwrap();
    assert_eq!(claimed.len(), 1, "the refunded attempt is claimed again");
    let record = ProbeRecord {
        refund_attempt: false,
        retry_in: Some(Duration::ZERO),
        ..record
    };
    prober.record_probe(&record).await.unwrap();
    assert_eq!(attempts().await, 1);
    assert!(prober
        .claim_reconciliations(&claim)
        .await
        .unwrap()
        .is_empty());

    prober.shutdown().await.unwrap();
    pool.close().await;
}
