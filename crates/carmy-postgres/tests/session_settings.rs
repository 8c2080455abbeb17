//! The defensive session settings of docs/semantics.md §14.1 on a real server: every connection
//! of a store names its job and replica in `application_name` and is bounded by
//! `statement_timeout`; and a DBA holding `SELECT … FOR UPDATE` on every row of
//! `carmy.instances` for a few seconds neither lapses two replicas' leases nor holds up their
//! calls.

mod common;

use carmy::store::{IdempotencyStore, LeaseState};
use carmy_postgres::PostgresStore;
use carmy_test_support::{eventually_eq, TestDb};
use sqlx::Connection;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_names_its_job_and_replica_and_is_bounded() {
    let db = TestDb::migrated().await;
    let mut options = db.options();
    options.statement_timeout = Duration::from_millis(700);
    let store = PostgresStore::connect(options).await.unwrap();
    common::one_call(&store, "named").await;
    let id = store.instance_id().to_owned();
    let observer = db.pool().await;
    eventually_eq(
        Duration::from_secs(10),
        "the store's connections by application_name",
        vec![
            format!("carmy hot {id}"),
            format!("carmy lease {id}"),
            format!("carmy listen {id}"),
            format!("carmy pool {id}"),
        ],
        || {
            let observer = observer.clone();
            async move {
                sqlx::query_scalar::<_, String>(
                    "SELECT DISTINCT application_name FROM pg_stat_activity \
                     WHERE datname = current_database() AND application_name LIKE 'carmy %' \
                     ORDER BY 1",
                )
                .fetch_all(&observer)
                .await
                .unwrap()
            }
        },
    )
    .await;
    let pool = store.pool();
    let shown: (String, String) = sqlx::query_as(
        "SELECT current_setting('statement_timeout'), \
                current_setting('idle_in_transaction_session_timeout')",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(shown, ("700ms".to_owned(), "700ms".to_owned()));
    let error = sqlx::query("SELECT pg_sleep(5)")
        .execute(pool)
        .await
        .unwrap_err();
    assert_eq!(
        error.as_database_error().and_then(|e| e.code()).as_deref(),
        Some("57014"),
        "a statement past statement_timeout is cancelled by the server: {error}"
    );
    store.shutdown().await.unwrap();
}

/// Counts, every 20 ms until `done`, the rows of `carmy.instances` for `ids` whose lease the
/// database reads as lapsed; returns the most seen at once.
async fn watch_lapses(observer: sqlx::PgPool, ids: Vec<String>, done: Arc<AtomicBool>) -> i64 {
    let mut most = 0;
    while !done.load(Ordering::Acquire) {
        let lapsed: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM carmy.instances \
             WHERE instance_id = ANY($1) AND lease_expires_at <= now()",
        )
        .bind(&ids)
        .fetch_one(&observer)
        .await
        .unwrap();
        most = most.max(lapsed);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    most
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dba_lock_on_instances_neither_lapses_the_leases_nor_holds_up_calls() {
    let db = TestDb::migrated().await;
    // A 9 s lease: renewals every 3 s, each waiting at most 750 ms for a row lock. The two
    // replicas start together, so their renewals fall due together.
    let mut options = db.options();
    options.lease_ttl = Duration::from_secs(9);
    let (first, second) = tokio::join!(
        PostgresStore::connect(options.clone()),
        PostgresStore::connect({
            options.instance_id = format!("{}b", options.instance_id);
            options.clone()
        })
    );
    let stores = [first.unwrap(), second.unwrap()];
    let ids: Vec<String> = stores.iter().map(|s| s.instance_id().to_owned()).collect();
    let mut states: Vec<_> = stores.iter().map(|s| s.lease_state().unwrap()).collect();
    for state in &mut states {
        assert_eq!(*state.borrow_and_update(), LeaseState::Held);
    }
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (observer, ids, done) = (db.pool().await, ids.clone(), Arc::clone(&done));
        tokio::spawn(watch_lapses(observer, ids, done))
    };

    // The DBA locks every instance row and keeps the lock until 3.5 s after the first renewal
    // was seen waiting for it (longer than a renewal interval: before the lease's lock_timeout,
    // a renewal sat behind the lock for its whole interval and the next one came after the
    // lease had lapsed). The clock starts at that first sight, not after the second replica's
    // wait and the calls below, so that a slow machine does not stretch the lock towards the
    // leases' expiry (6 s after that renewal) and fail the test for the machine's sake.
    let mut dba = db.connect().await;
    sqlx::raw_sql("BEGIN; SELECT * FROM carmy.instances FOR UPDATE")
        .execute(&mut dba)
        .await
        .unwrap();
    let observer = db.pool().await;
    let mut first_seen_waiting = None;
    for id in &ids {
        let application = format!("carmy lease {id}");
        eventually_eq(
            Duration::from_secs(10),
            "a renewal waiting for the DBA's lock",
            true,
            || {
                let (observer, application) = (observer.clone(), application.clone());
                async move {
                    sqlx::query_scalar::<_, bool>(
                        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity \
                         WHERE application_name = $1 AND wait_event_type = 'Lock')",
                    )
                    .bind(application)
                    .fetch_one(&observer)
                    .await
                    .unwrap()
                }
            },
        )
        .await;
        first_seen_waiting.get_or_insert_with(tokio::time::Instant::now);
    }
    // Calls go on while the lock is held: each finishes before the DBA lets go.
    for (n, store) in stores.iter().enumerate() {
        common::one_call(store, &format!("during-lock-{n}")).await;
    }
    let first_seen_waiting = first_seen_waiting.expect("two replicas were watched");
    tokio::time::sleep_until(first_seen_waiting + Duration::from_millis(3500)).await;
    sqlx::raw_sql("COMMIT").execute(&mut dba).await.unwrap();
    dba.close().await.unwrap();

    // Two more renewal intervals after the lock: the leases held all along, in the
    // database and in each process.
    tokio::time::sleep(Duration::from_secs(6)).await;
    done.store(true, Ordering::Release);
    assert_eq!(
        watcher.await.unwrap(),
        0,
        "no lease read as lapsed by the database"
    );
    for state in &mut states {
        assert!(
            !state.has_changed().unwrap() && *state.borrow() == LeaseState::Held,
            "the process never announced a lapse"
        );
    }
    for store in &stores {
        store.shutdown().await.unwrap();
    }
}
