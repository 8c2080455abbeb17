//! Readiness, availability and options: `check_ready` before and after migrations, an exhausted
//! pool, an unreachable server or database, and options that are refused.

use crate::common::*;
use carmy::store::{IdempotencyStore, Reservation};
use carmy_postgres::{
    latest_migration_version, migrate, ConnectError, OptionsError, PostgresStore,
    PostgresStoreOptions,
};
use sqlx::postgres::PgPoolOptions;
use std::sync::Arc;
use std::time::{Duration, Instant};

use carmy_test_support::{server_url, with_database, TestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_ready_after_migrate_and_not_before() {
    // Unmigrated: the store starts, but is not ready and reserves nothing.
    let db = TestDb::create().await;
    let store = db.store().await;
    let reason = assert_not_ready(store.check_ready().await);
    assert_eq!(
        reason,
        format!(
            "schema carmy is not migrated (found no table carmy.refinery_schema_history, need \
             version {}): run migrations (carmy-gateway migrate, or carmy_postgres::migrate)",
            latest_migration_version()
        )
    );
    assert_unavailable(
        reserve(
            &store,
            &key("alice", "default", "early"),
            &fp('a'),
            &intent("echo"),
        )
        .await,
    );

    // Once migrated it becomes ready, registers its lease and reserves.
    migrate(&db.url).await.unwrap();
    store.check_ready().await.unwrap();
    let pool = db.pool().await;
    let registered: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM carmy.instances WHERE instance_id = $1 AND lease_expires_at > now()",
    )
    .bind(store.instance_id())
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(registered, 1);
    assert_eq!(
        reserve(
            &store,
            &key("alice", "default", "later"),
            &fp('a'),
            &intent("echo")
        )
        .await
        .unwrap(),
        Reservation::Reserved
    );

    // A history behind this build is not ready.
    let latest = latest_migration_version();
    sqlx::query("DELETE FROM carmy.refinery_schema_history WHERE version = $1")
        .bind(latest)
        .execute(&pool)
        .await
        .unwrap();
    // Versions need not be contiguous: the one before is whatever the history holds now.
    let previous: Option<i32> =
        sqlx::query_scalar("SELECT max(version) FROM carmy.refinery_schema_history")
            .fetch_one(&pool)
            .await
            .unwrap();
    let reason = assert_not_ready(store.check_ready().await);
    assert_eq!(
        reason,
        format!(
            "schema carmy is not migrated (found version {}, need {latest}): run migrations \
             (carmy-gateway migrate, or carmy_postgres::migrate)",
            previous.unwrap()
        )
    );
    sqlx::query("DELETE FROM carmy.refinery_schema_history")
        .execute(&pool)
        .await
        .unwrap();
    let reason = assert_not_ready(store.check_ready().await);
    assert_eq!(
        reason,
        format!(
            "schema carmy is not migrated (found none, need {latest}): run migrations \
             (carmy-gateway migrate, or carmy_postgres::migrate)"
        )
    );

    store.shutdown().await.unwrap();
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_exhausted_pool_fails_after_the_acquire_timeout() {
    let db = TestDb::migrated().await;
    let mut options = db.options();
    options.max_connections = 1;
    options.acquire_timeout = Duration::from_millis(300);
    let store = Arc::new(PostgresStore::connect(options).await.unwrap());
    // A lock makes the first reserve hold the only hot-path connection while it waits.
    let locker = db.pool().await;
    let mut lock = locker.begin().await.unwrap();
    sqlx::query("LOCK TABLE carmy.reservations IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    let holder = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            reserve(
                &*store,
                &key("alice", "default", "holder"),
                &fp('a'),
                &intent("echo"),
            )
            .await
        })
    };
    db.until_lock_waiters(1, "the holder queued behind the lock")
        .await;

    let started = Instant::now();
    let outcome = reserve(
        &*store,
        &key("alice", "default", "starved"),
        &fp('a'),
        &intent("echo"),
    )
    .await;
    let waited = started.elapsed();
    assert_unavailable(outcome);
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");

    lock.commit().await.unwrap();
    assert_eq!(holder.await.unwrap().unwrap(), Reservation::Reserved);
    store.check_ready().await.unwrap();
    store.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreachable_server_is_unavailable() {
    let mut options = PostgresStoreOptions::new("postgres://postgres@127.0.0.1:1/postgres");
    options.acquire_timeout = Duration::from_millis(500);
    let started = Instant::now();
    let reason = assert_cannot_connect(PostgresStore::connect(options).await);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        reason.starts_with("cannot connect to PostgreSQL: ")
            && reason.to_lowercase().contains("connection refused"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readiness_tells_an_unreachable_database_from_missing_migrations() {
    // Nothing listens: the pool times out; the reason says why. A short lease: the reserve
    // below first tries to register it, waiting at most half a renewal interval.
    let mut options = PostgresStoreOptions::new("postgres://postgres@127.0.0.1:1/postgres");
    options.lease_ttl = Duration::from_secs(3);
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_millis(300))
        .connect_lazy(&options.database_url)
        .unwrap();
    let store = PostgresStore::from_pool(pool, options).await.unwrap();
    let reason = assert_unavailable(store.check_ready().await);
    assert!(
        reason.starts_with("database unreachable: ")
            && reason.to_lowercase().contains("connection refused"),
        "{reason}"
    );
    let reason = assert_unavailable(
        reserve(
            &store,
            &key("alice", "default", "down"),
            &fp('a'),
            &intent("echo"),
        )
        .await,
    );
    assert!(
        reason.to_lowercase().contains("connection refused"),
        "{reason}"
    );
    drop(store);

    // A missing database: the server's own message.
    let name = format!("carmy_missing_{}", uuid::Uuid::new_v4().simple());
    let options = PostgresStoreOptions::new(with_database(&server_url(), &name).unwrap());
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_millis(300))
        .connect_lazy(&options.database_url)
        .unwrap();
    let store = PostgresStore::from_pool(pool, options).await.unwrap();
    let reason = assert_unavailable(store.check_ready().await);
    assert!(
        reason.starts_with("database unreachable: ")
            && reason.contains(&format!("database \"{name}\" does not exist")),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn invalid_options_are_refused() {
    let db = TestDb::migrated().await;
    let refused = |outcome: Result<PostgresStore, ConnectError>| match outcome {
        Err(ConnectError::Options(error)) => error,
        other => panic!("expected ConnectError::Options, got {other:?}"),
    };
    let mut zero_pool = db.options();
    zero_pool.max_connections = 0;
    let error = refused(PostgresStore::connect(zero_pool).await);
    assert!(matches!(error, OptionsError::MaxConnections), "{error:?}");
    assert_eq!(
        error.to_string(),
        "max_connections is 0; accepted: 1 or more"
    );
    let mut zero_lease = db.options();
    zero_lease.lease_ttl = Duration::ZERO;
    let error = refused(PostgresStore::connect(zero_lease).await);
    assert_eq!(
        error.to_string(),
        "lease_ttl is 0 ms; accepted: 1 ms to 86400000 ms (24 h)"
    );
    let mut endless_lease = db.options();
    endless_lease.lease_ttl = Duration::from_secs(24 * 60 * 60 + 1);
    let error = refused(PostgresStore::connect(endless_lease).await);
    assert!(matches!(error, OptionsError::LeaseTtl(_)), "{error:?}");
    let mut no_id = db.options();
    no_id.instance_id = String::new();
    let error = refused(PostgresStore::connect(no_id).await);
    assert!(matches!(error, OptionsError::InstanceId), "{error:?}");
    // A pool the caller made is checked too.
    let mut no_id = db.options();
    no_id.instance_id = String::new();
    let error = refused(PostgresStore::from_pool(db.pool().await, no_id).await);
    assert_eq!(
        error.to_string(),
        "instance_id is empty; accepted: any non-empty text"
    );
}
