//! Leases (docs/semantics.md §12): a lapsed lease, a shutdown or a missing instance row reads as
//! interrupted, and a replica that cannot renew its lease refuses to reserve until it holds one
//! again.

use crate::common::*;
use carmy::store::{
    Existing, IdempotencyStore, InFlightState, RecordState, Reservation, StoreError,
};
use carmy_postgres::PostgresStore;
use sqlx::Row;
use std::time::Duration;

use carmy_test_support::{eventually_eq, TestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lapsed_lease_reads_as_interrupted() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;
    let observer = db.store().await;

    // An owner with a 1.5 s lease (renewed every 0.5 s) keeps it alive while it runs.
    let mut options = db.options();
    options.lease_ttl = Duration::from_millis(1500);
    let owner = PostgresStore::connect(options).await.unwrap();
    let k = key("alice", "default", "lapsing");
    let holder = intent("create_order");
    assert_eq!(
        reserve(&owner, &k, &fp('a'), &holder).await.unwrap(),
        Reservation::Reserved
    );
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let running = Reservation::Existing(Existing::Uncertain {
        execution_id: holder.execution_id.clone(),
        state: InFlightState::Running,
    });
    assert_eq!(
        reserve(&observer, &k, &fp('a'), &intent("create_order"))
            .await
            .unwrap(),
        running
    );
    let view: Vec<(String, String)> =
        sqlx::query("SELECT execution_id, in_flight_state FROM carmy.uncertain_executions")
            .fetch_all(&pool)
            .await
            .unwrap()
            .into_iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
    assert_eq!(
        view,
        vec![(holder.execution_id.to_string(), "running".to_owned())]
    );

    // The owner dies (its renewer stops with it): once the lease lapses the execution is
    // interrupted, for the same fingerprint; a different one still conflicts.
    drop(owner);
    eventually_eq(
        Duration::from_secs(10),
        "the owner's lease to lapse",
        RecordState::InFlight(InFlightState::Interrupted),
        || async { observer.lookup(&k).await.unwrap().unwrap().state },
    )
    .await;
    let interrupted = Reservation::Existing(Existing::Uncertain {
        execution_id: holder.execution_id.clone(),
        state: InFlightState::Interrupted,
    });
    assert_eq!(
        reserve(&observer, &k, &fp('a'), &intent("create_order"))
            .await
            .unwrap(),
        interrupted
    );
    assert_eq!(
        observer.lookup(&k).await.unwrap().unwrap().state,
        RecordState::InFlight(InFlightState::Interrupted)
    );
    assert_eq!(
        reserve(&observer, &k, &fp('b'), &intent("create_order"))
            .await
            .unwrap(),
        Reservation::Existing(Existing::Conflict {
            execution_id: holder.execution_id.clone(),
            parts: None,
        })
    );
    let row: (String, String, bool) = sqlx::query(
        "SELECT execution_id, in_flight_state, age > interval '2 seconds' \
         FROM carmy.uncertain_executions",
    )
    .fetch_one(&pool)
    .await
    .map(|row| (row.get(0), row.get(1), row.get(2)))
    .unwrap();
    assert_eq!(
        row,
        (
            holder.execution_id.to_string(),
            "interrupted".to_owned(),
            true
        )
    );
    // Nothing was re-run or re-reserved.
    assert_eq!(raw_row(&pool, &k).await.unwrap().state, "running");

    observer.shutdown().await.unwrap();
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_or_a_missing_instance_row_reads_as_interrupted() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;
    let observer = db.store().await;

    // A clean shutdown ends the lease at once.
    let owner = db.store().await;
    let k = key("alice", "default", "shut-down");
    let holder = intent("sleep");
    assert_eq!(
        reserve(&owner, &k, &fp('a'), &holder).await.unwrap(),
        Reservation::Reserved
    );
    owner.shutdown().await.unwrap();
    owner.shutdown().await.unwrap();
    assert_eq!(
        reserve(&observer, &k, &fp('a'), &intent("sleep"))
            .await
            .unwrap(),
        Reservation::Existing(Existing::Uncertain {
            execution_id: holder.execution_id.clone(),
            state: InFlightState::Interrupted,
        })
    );

    // An expired lease, set by SQL on a live instance.
    let live = db.store().await;
    let k2 = key("alice", "default", "expired");
    let holder2 = intent("sleep");
    assert_eq!(
        reserve(&live, &k2, &fp('a'), &holder2).await.unwrap(),
        Reservation::Reserved
    );
    assert_eq!(
        observer.lookup(&k2).await.unwrap().unwrap().state,
        RecordState::InFlight(InFlightState::Running)
    );
    sqlx::query("DELETE FROM carmy.instances WHERE instance_id = $1")
        .bind(live.instance_id())
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(
        observer.lookup(&k2).await.unwrap().unwrap().state,
        RecordState::InFlight(InFlightState::Interrupted)
    );

    live.shutdown().await.unwrap();
    observer.shutdown().await.unwrap();
    pool.close().await;
}

/// A replica that cannot renew its lease (here: the test holds its instance row locked, as a
/// cut-off connection would fail the renewal) refuses to reserve once its lease may have lapsed
/// (docs/semantics.md §12.2), and reserves again once it holds a lease again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_without_a_lease_refuses_to_reserve_until_it_holds_one_again() {
    let db = TestDb::migrated().await;
    let mut options = db.options();
    options.lease_ttl = Duration::from_millis(900);
    let store = PostgresStore::connect(options).await.unwrap();
    let before = key("p", "s", "before");
    let reserved = reserve(&store, &before, &fp('a'), &intent("echo")).await;
    assert_eq!(reserved.unwrap(), Reservation::Reserved);

    let mut locker = db.connect().await;
    sqlx::query("BEGIN").execute(&mut locker).await.unwrap();
    sqlx::query("SELECT 1 FROM carmy.instances WHERE instance_id = $1 FOR UPDATE")
        .bind(store.instance_id())
        .execute(&mut locker)
        .await
        .unwrap();
    let n = std::sync::atomic::AtomicUsize::new(0);
    eventually_eq(
        Duration::from_secs(10),
        "reserve refused without a lease",
        true,
        || async {
            let attempt = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let key = key("p", "s", &format!("cut-{attempt}"));
            match reserve(&store, &key, &fp('a'), &intent("echo")).await {
                Err(StoreError::Unavailable(reason)) => reason.contains("lease"),
                _ => false,
            }
        },
    )
    .await;
    sqlx::query("ROLLBACK").execute(&mut locker).await.unwrap();
    eventually_eq(
        Duration::from_secs(10),
        "reserve with a lease again",
        true,
        || async {
            let attempt = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let key = key("p", "s", &format!("back-{attempt}"));
            matches!(
                reserve(&store, &key, &fp('a'), &intent("echo")).await,
                Ok(Reservation::Reserved)
            )
        },
    )
    .await;
    store.shutdown().await.unwrap();
}
