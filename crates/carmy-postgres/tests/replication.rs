//! [`check_replication`] (docs/semantics.md §14) on a real primary with a streaming standby,
//! started by `scripts/pg-replica-pair`: asynchronous (PostgreSQL's default, a failover can lose
//! reported outcomes, a warning in readiness, or not ready with `require_sync_replica`) until the
//! primary's commits wait for the standby, synchronous after.

use carmy::store::{IdempotencyStore, StoreError};
use carmy_postgres::{check_replication, PostgresStore, PostgresStoreOptions, Replication};
use carmy_test_support::eventually_eq;
use sqlx::postgres::PgPoolOptions;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The repository's `scripts/` directory.
fn scripts() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts")
}

/// A primary and its standby, stopped and removed on drop.
struct Pair {
    dir: PathBuf,
    primary: u16,
}

impl Pair {
    fn start() -> Self {
        let dir =
            std::env::temp_dir().join(format!("carmy-pair-{}", uuid::Uuid::new_v4().simple()));
        let out = Command::new(scripts().join("pg-replica-pair"))
            .arg("start")
            .arg(&dir)
            .output()
            .unwrap();
        let mut pair = Self { dir, primary: 0 };
        assert!(
            out.status.success(),
            "scripts/pg-replica-pair start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ports = String::from_utf8(out.stdout).unwrap();
        pair.primary = ports.split_whitespace().next().unwrap().parse().unwrap();
        pair
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = Command::new(scripts().join("pg-replica-pair"))
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_with_an_asynchronous_standby_is_told_apart_from_a_synchronous_one() {
    let pair = Pair::start();
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", pair.primary);
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let found = check_replication(&pool).await.unwrap();
    assert_eq!(
        found,
        Replication::Asynchronous {
            standbys: 1,
            standby_names: String::new(),
            synchronous_commit: "on".to_owned(),
        }
    );
    assert!(found
        .warning()
        .unwrap()
        .starts_with("the primary has 1 standby(s) but commits do not wait for a synchronous one"));

    // Readiness (`/readyz`) says so too: a warning, or with require_sync_replica not ready.
    carmy_postgres::migrate(&url).await.unwrap();
    let warning = found.warning().unwrap();
    let warned = store(&url, false).await;
    warned.check_ready().await.unwrap();
    assert_eq!(
        warned.readiness_warnings().await.unwrap(),
        vec![warning.clone()]
    );
    let strict = store(&url, true).await;
    match strict.check_ready().await {
        Err(StoreError::NotReady(reason)) => assert_eq!(
            reason,
            format!("{warning} (not ready: CARMY_REQUIRE_SYNC_REPLICA=true)")
        ),
        other => panic!("{other:?}"),
    }

    for statement in [
        "ALTER SYSTEM SET synchronous_standby_names = '*'",
        "SELECT pg_reload_conf()",
    ] {
        sqlx::raw_sql(statement).execute(&pool).await.unwrap();
    }
    eventually_eq(
        Duration::from_secs(10),
        "the primary's replication after synchronous_standby_names = '*'",
        Replication::Synchronous { standbys: 1 },
        || {
            let pool = pool.clone();
            async move { check_replication(&pool).await.unwrap() }
        },
    )
    .await;
    strict.check_ready().await.unwrap();
    assert_eq!(
        strict.readiness_warnings().await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        warned.readiness_warnings().await.unwrap(),
        Vec::<String>::new()
    );
    strict.shutdown().await.unwrap();
    warned.shutdown().await.unwrap();
    pool.close().await;
}

/// A store on `url` with `require_sync_replica`.
async fn store(url: &str, require_sync_replica: bool) -> PostgresStore {
    let mut options = PostgresStoreOptions::new(url);
    options.require_sync_replica = require_sync_replica;
    PostgresStore::connect(options).await.unwrap()
}
