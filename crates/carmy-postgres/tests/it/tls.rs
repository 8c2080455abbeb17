//! TLS (`sslmode`): `require` encrypts migrations and the store and fails without TLS, `disable`
//! stays in plain text, `verify-full` checks the certificate and the host name.

use crate::common::*;
use carmy::outcome::ExecutionStatus;
use carmy::store::{IdempotencyStore, RecordState, Reservation};
use carmy_postgres::{migrate, MigrateError, PostgresStore, PostgresStoreOptions};
use sqlx::PgPool;
use std::time::Duration;

use carmy_test_support::cluster::UNCERTIFIED_ADDRESS;
use carmy_test_support::{with_database, Cluster, TestDb};

/// `url` with the query parameter `sslmode=<mode>` added.
fn with_sslmode(url: &str, mode: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}sslmode={mode}")
}

/// Whether the session of a pooled connection of `pool` uses TLS.
async fn uses_tls(pool: &PgPool) -> bool {
    sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// A TLS cluster (`ssl = on`, a certificate for `localhost` and 127.0.0.1 made by a CA made
/// now) and a database of its own on it (plain even on a Citus run: the cluster has no Citus).
async fn tls_cluster() -> (Cluster, TestDb) {
    let cluster = Cluster::start_with_tls();
    let db = TestDb::create_plain_on(&cluster.url()).await;
    (cluster, db)
}

/// Store options for `url` that give up after 500 ms.
fn quick_options(url: &str) -> PostgresStoreOptions {
    let mut options = PostgresStoreOptions::new(url);
    options.acquire_timeout = Duration::from_millis(500);
    options
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sslmode_require_encrypts_migrations_and_the_store() {
    let (_cluster, db) = tls_cluster().await;
    let url = with_sslmode(&db.url, "require");
    migrate(&url).await.unwrap();
    let mut options = db.options();
    options.database_url = url;
    let store = PostgresStore::connect(options).await.unwrap();
    assert!(uses_tls(store.pool()).await);
    store.check_ready().await.unwrap();
    let key = key("alice", "default", "over-tls");
    let intent = intent("echo");
    assert_eq!(
        reserve(&store, &key, &fp('a'), &intent).await.unwrap(),
        Reservation::Reserved
    );
    complete(
        &store,
        &key,
        &fp('a'),
        &result(&key, &intent, ExecutionStatus::Completed, order(7)).into(),
    )
    .await
    .unwrap();
    assert!(matches!(
        store.lookup(&key).await.unwrap().unwrap().state,
        RecordState::Finished(_)
    ));
    store.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sslmode_require_fails_on_a_server_without_tls() {
    // Never a silent downgrade: on a server with `ssl = off`, `require` fails.
    let cluster = Cluster::start();
    let db = TestDb::create_plain_on(&cluster.url()).await;
    let url = with_sslmode(&db.url, "require");
    let error = migrate(&url).await.unwrap_err();
    assert!(matches!(error, MigrateError::Connect(_)), "{error:?}");
    let reason = assert_cannot_connect(PostgresStore::connect(quick_options(&url)).await);
    assert!(
        reason.starts_with("cannot connect to PostgreSQL: "),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sslmode_disable_stays_in_plain_text() {
    // The server offers TLS; `disable` does not take it.
    let (_cluster, db) = tls_cluster().await;
    let url = with_sslmode(&db.url, "disable");
    migrate(&url).await.unwrap();
    let mut options = db.options();
    options.database_url = url;
    let store = PostgresStore::connect(options).await.unwrap();
    assert!(!uses_tls(store.pool()).await);
    store.check_ready().await.unwrap();
    assert_eq!(
        reserve(
            &store,
            &key("alice", "default", "plain"),
            &fp('a'),
            &intent("echo")
        )
        .await
        .unwrap(),
        Reservation::Reserved
    );
    store.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sslmode_verify_full_refuses_an_untrusted_certificate() {
    // Without `sslrootcert`, the test CA is no trusted root (only webpki's are).
    let (_cluster, db) = tls_cluster().await;
    let url = with_sslmode(&db.url, "verify-full");
    let error = migrate(&url).await.unwrap_err();
    assert!(matches!(error, MigrateError::Connect(_)), "{error:?}");
    assert!(error.to_string().contains("certificate"), "{error}");
    let reason = assert_cannot_connect(PostgresStore::connect(quick_options(&url)).await);
    assert!(reason.contains("certificate"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sslmode_verify_full_trusts_the_root_certificate_and_checks_the_host_name() {
    let (cluster, db) = tls_cluster().await;
    let verify = |host: &str| {
        let url = with_database(&cluster.url_via(host), &db.name).unwrap();
        format!(
            "{}&sslrootcert={}",
            with_sslmode(&url, "verify-full"),
            cluster.ca_path().display()
        )
    };
    // A name and an address the certificate names: verified, encrypted, working.
    for host in ["localhost", "127.0.0.1"] {
        let url = verify(host);
        migrate(&url).await.unwrap();
        let store = PostgresStore::connect(quick_options(&url)).await.unwrap();
        assert!(uses_tls(store.pool()).await, "{host}");
        assert_eq!(
            reserve(
                &store,
                &key("alice", "default", host),
                &fp('a'),
                &intent("echo")
            )
            .await
            .unwrap(),
            Reservation::Reserved,
            "{host}"
        );
        store.shutdown().await.unwrap();
    }
    // The same server through an address the certificate does not name: refused.
    let url = verify(UNCERTIFIED_ADDRESS);
    let error = migrate(&url).await.unwrap_err();
    assert!(matches!(error, MigrateError::Connect(_)), "{error:?}");
    assert!(error.to_string().contains("not valid for name"), "{error}");
    let reason = assert_cannot_connect(PostgresStore::connect(quick_options(&url)).await);
    assert!(reason.contains("not valid for name"), "{reason}");
}
