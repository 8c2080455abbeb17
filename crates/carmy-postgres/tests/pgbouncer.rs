//! Carmy behind a real PgBouncer (Debian's `pgbouncer`, 1.18; scripts/test installs it), on a
//! loopback port (docs/semantics.md §14.3): in session mode the store serves calls through it;
//! in transaction mode [`check_path`] tells it apart, sqlx's own statements break there, and the
//! store with a session URL passes the conformance suite and concurrent calls through it.
//! `CARMY_PGBOUNCER` names another binary.

use carmy::fingerprint::Fingerprint;
use carmy::outcome::{ExecutionId, ExecutionResult, ExecutionStatus};
use carmy::store::{Claim, ExecutionIntent, IdempotencyKey, IdempotencyStore, Reservation};
use carmy_postgres::{check_path, PathError, Pinning, PostgresStore, Through};
use carmy_test_support::{Bouncer, TestDb};
use chrono::Utc;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, Row};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_pgbouncer_in_session_mode_the_store_serves_calls() {
    let db = TestDb::migrated().await;
    let bouncer = Bouncer::start("session").await;
    let url = bouncer.url(&db.name);
    let connect: PgConnectOptions = url.parse().unwrap();
    // The startup options are ignored by PgBouncer: the server's own statement_timeout shows.
    assert_eq!(check_path(&connect).await.unwrap(), "0");
    let mut options = db.options();
    options.database_url = url;
    let store = PostgresStore::connect(options).await.unwrap();
    store.check_ready().await.unwrap();
    let key = IdempotencyKey::new("p", "s", "through-bouncer");
    let fingerprint = Fingerprint {
        version: "v1".to_owned(),
        digest: "c".repeat(64),
    };
    let claim = Claim {
        key: &key,
        fingerprint: &fingerprint,
    };
    for attempt in 0..3 {
        let intent = ExecutionIntent {
            execution_id: ExecutionId::generate(),
            tool: "create_order".to_owned(),
            parts: None,
            retention: None,
            arguments: None,
        };
        let reserved = store.reserve(claim, &intent).await.unwrap();
        if attempt > 0 {
            // The retry replays the recorded outcome.
            assert!(matches!(reserved, Reservation::Existing(_)), "{reserved:?}");
            continue;
        }
        assert!(matches!(reserved, Reservation::Reserved), "{reserved:?}");
        let result = ExecutionResult {
            execution_id: intent.execution_id.clone(),
            status: ExecutionStatus::Completed,
            data: serde_json::json!({ "order_id": 3 }),
            error: None,
            tool: intent.tool.clone(),
            request_id: Some("through-bouncer".to_owned()),
            session_id: "s".to_owned(),
            started_at: Utc::now(),
            finished_at: Utc::now(),
            resolution: None,
        };
        store.complete(claim, &result.into()).await.unwrap();
    }
    store.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbouncer_in_transaction_mode_is_refused_with_what_to_do() {
    let db = TestDb::migrated().await;
    let bouncer = Bouncer::start("transaction").await;
    let connect: PgConnectOptions = bouncer.url(&db.name).parse().unwrap();
    let refused = check_path(&connect).await.unwrap_err();
    assert!(
        matches!(refused, PathError::TransactionPooler(_)),
        "{refused}"
    );
    assert!(
        refused.to_string().ends_with(
            "(CARMY_DATABASE_SESSION_URL, PostgresStoreOptions::session_url and transaction_pooler), use pool_mode = session, or connect directly (docs/operations.md, Connection poolers)"
        ),
        "{refused}"
    );
    // Directly, the same check passes.
    let direct: PgConnectOptions = db.url.parse().unwrap();
    assert_eq!(check_path(&direct).await.unwrap(), "0");
}

/// A store whose pool and hot path go through `bouncer` (transaction mode) while its lease and
/// `LISTEN` connection use `db`'s own URL (`CARMY_DATABASE_SESSION_URL` in the gateway).
async fn pooled_store(db: &TestDb, bouncer: &Bouncer) -> PostgresStore {
    let mut options = db.options();
    options.database_url = bouncer.url(&db.name);
    options.session_url = Some(db.url.clone());
    options.transaction_pooler = true;
    PostgresStore::connect(options).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlx_statements_break_behind_a_transaction_pooler_unless_pinned() {
    let db = TestDb::migrated().await;
    // One server process for every client: what one client leaves there, the next one meets.
    let bouncer = Bouncer::start_with("transaction", 1).await;
    let url = bouncer.url(&db.name);
    let mut first = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut second = sqlx::PgConnection::connect(&url).await.unwrap();
    let query = || sqlx::query("SELECT $1::int + 1").bind(41_i32);
    // sqlx's named statement stays on the server after the first client's call …
    let answer: i32 = query().fetch_one(&mut first).await.unwrap().get(0);
    assert_eq!(answer, 42);
    // … so the second client's statement of the same name is refused there.
    let refused = query().fetch_one(&mut second).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("prepared statement \"sqlx_s_1\" already exists"),
        "{refused}"
    );
    drop((first, second));
    // Pinned (a transaction of its own, an unnamed statement), both clients run it, again and
    // again, with the statement timeout set for the transaction.
    let pinning = Pinning::transaction_pooler(Duration::from_millis(1234));
    let mut clients = [
        sqlx::PgConnection::connect(&url).await.unwrap(),
        sqlx::PgConnection::connect(&url).await.unwrap(),
    ];
    for round in 0..3_i32 {
        for client in &mut clients {
            let through = Through::new(client, pinning.clone());
            let row = sqlx::query("SELECT $1::int + 1, current_setting('statement_timeout')")
                .bind(round)
                .fetch_one(through)
                .await
                .unwrap();
            assert_eq!(
                (row.get::<i32, _>(0), row.get::<String, _>(1)),
                (round + 1, "1234ms".to_owned())
            );
        }
    }
    // A failed statement leaves no transaction open on the shared server.
    let through = Through::new(&mut clients[0], pinning.clone());
    let failed = sqlx::query("SELECT 1 / $1::int")
        .bind(0_i32)
        .fetch_one(through)
        .await
        .unwrap_err();
    assert!(failed.to_string().contains("division by zero"), "{failed}");
    let through = Through::new(&mut clients[1], pinning);
    let row = sqlx::query("SELECT $1::text")
        .bind("after")
        .fetch_one(through)
        .await
        .unwrap();
    assert_eq!(row.get::<String, _>(0), "after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_transaction_pooler_with_a_session_url_concurrent_calls_are_exact() {
    let db = TestDb::migrated().await;
    // Two server processes for the store's twenty client connections.
    let bouncer = Bouncer::start_with("transaction", 2).await;
    let store = std::sync::Arc::new(pooled_store(&db, &bouncer).await);
    store.check_ready().await.unwrap();
    let fingerprint = Fingerprint {
        version: "v1".to_owned(),
        digest: "d".repeat(64),
    };
    // 40 identities, each claimed by 3 racing calls: exactly one reservation per identity, its
    // outcome recorded once.
    let mut tasks = Vec::new();
    for call in 0..120_i64 {
        let store = std::sync::Arc::clone(&store);
        let fingerprint = fingerprint.clone();
        tasks.push(tokio::spawn(async move {
            let key = IdempotencyKey::new("p", "s", format!("pooled-{}", call % 40));
            let claim = Claim {
                key: &key,
                fingerprint: &fingerprint,
            };
            let intent = ExecutionIntent {
                execution_id: ExecutionId::generate(),
                tool: "create_order".to_owned(),
                parts: None,
                retention: None,
                arguments: None,
            };
            match store.reserve(claim, &intent).await.unwrap() {
                Reservation::Reserved => {
                    let result = ExecutionResult {
                        execution_id: intent.execution_id.clone(),
                        status: ExecutionStatus::Completed,
                        data: serde_json::json!({ "order_id": call % 40 }),
                        error: None,
                        tool: intent.tool.clone(),
                        request_id: Some(format!("pooled-{}", call % 40)),
                        session_id: "s".to_owned(),
                        started_at: Utc::now(),
                        finished_at: Utc::now(),
                        resolution: None,
                    };
                    store.complete(claim, &result.into()).await.unwrap();
                    1
                }
                Reservation::Existing(_) | Reservation::Replaced(_) => 0,
            }
        }));
    }
    let mut reserved = 0;
    for task in tasks {
        reserved += task.await.unwrap();
    }
    assert_eq!(reserved, 40);
    for identity in 0..40_i64 {
        let key = IdempotencyKey::new("p", "s", format!("pooled-{identity}"));
        assert!(
            store.lookup(&key).await.unwrap().is_some(),
            "pooled-{identity}"
        );
    }
    let mut connection = db.connect().await;
    let rows: Vec<(String, serde_json::Value)> = sqlx::query_as(
        "SELECT request_id, outcome::jsonb -> 'data' FROM carmy.reservations \
         WHERE request_id LIKE 'pooled-%' AND state = 'completed' ORDER BY request_id",
    )
    .fetch_all(&mut connection)
    .await
    .unwrap();
    assert_eq!(rows.len(), 40);
    for (request_id, data) in rows {
        let identity: i64 = request_id.trim_start_matches("pooled-").parse().unwrap();
        assert_eq!(data, serde_json::json!({ "order_id": identity }));
    }
    store.shutdown().await.unwrap();
}

/// The conformance suite (`carmy::conformance`) with the store behind PgBouncer in transaction
/// mode, its lease and `LISTEN` connection on the direct URL.
mod conformance_through_a_transaction_pooler {
    use carmy::store::{IdempotencyStore, StoreFuture};
    use carmy_postgres::PostgresStore;
    use carmy_test_support::{Bouncer, TestDb};
    use std::sync::Arc;

    /// The store, its PgBouncer and its database, dropped in that order.
    struct OwnedStore {
        store: PostgresStore,
        _bouncer: Bouncer,
        _db: TestDb,
    }

    impl IdempotencyStore for OwnedStore {
        carmy::forward_store!(store =>
            reserve, complete, release, lookup, find_execution, check_ready, resolve_execution,
            release_execution, list_executions, audit_trail, record_late_arrival, take_over,
            wait_for_outcome, prune_expired, lease_state, request_cancel, cancel_requests,
            record_changes, drop_cached, readiness_warnings,
        );

        fn shutdown(&self) -> StoreFuture<'_, ()> {
            IdempotencyStore::shutdown(&self.store)
        }
    }

    async fn fresh_pooled_store() -> Arc<dyn IdempotencyStore> {
        let db = TestDb::migrated().await;
        let bouncer = Bouncer::start("transaction").await;
        let store = super::pooled_store(&db, &bouncer).await;
        Arc::new(OwnedStore {
            store,
            _bouncer: bouncer,
            _db: db,
        })
    }

    carmy::store_conformance_tests!(fresh_pooled_store);
}

/// The store's check at start for a distributed `carmy.reservations` (Citus) runs pinned like
/// every statement: through a transaction-mode pooler whose one server process every client
/// shares, two stores' checks both answer (unpinned, sqlx's named statement of the first meets
/// the second's: `prepared statement "sqlx_s_1" already exists`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_distribution_check_at_start_is_pinned_behind_a_transaction_pooler() {
    let db = TestDb::migrated().await;
    let bouncer = Bouncer::start_with("transaction", 1).await;
    let url = bouncer.url(&db.name);
    let pool = || {
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect_lazy(&url)
            .unwrap()
    };
    let pinning = Pinning::transaction_pooler(Duration::from_secs(5));
    for _ in 0..2 {
        let db = carmy_postgres::Db::new(pool(), pinning.clone());
        assert!(!carmy_postgres::distribution(&db).await.unwrap());
    }
    // The same two checks unpinned: the second client meets the first one's statement.
    let first = carmy_postgres::Db::new(pool(), Pinning::direct());
    assert!(!carmy_postgres::distribution(&first).await.unwrap());
    let second = carmy_postgres::Db::new(pool(), Pinning::direct());
    let refused = carmy_postgres::distribution(&second).await.unwrap_err();
    assert!(refused.to_string().contains("already exists"), "{refused}");
    drop((first, second));
}

/// `deploy/pgbouncer.ini`, the file docs/operations.md gives.
fn deploy_file() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/pgbouncer.ini")
}

/// The deployment's PgBouncer file, as written (but for its addresses, authentication and
/// paths): it is a transaction-mode pooler, and the store with a session URL serves calls and
/// replays through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deploy_pgbouncer_file_as_written_serves_the_store() {
    let db = TestDb::migrated().await;
    let bouncer = Bouncer::start_from_file(&deploy_file(), &[]).await;
    let connect: PgConnectOptions = bouncer.url(&db.name).parse().unwrap();
    let found = check_path(&connect).await.unwrap_err();
    assert!(matches!(found, PathError::TransactionPooler(_)), "{found}");
    let store = pooled_store(&db, &bouncer).await;
    store.check_ready().await.unwrap();
    let key = IdempotencyKey::new("p", "s", "deploy-file");
    let fingerprint = Fingerprint {
        version: "v1".to_owned(),
        digest: "e".repeat(64),
    };
    let claim = Claim {
        key: &key,
        fingerprint: &fingerprint,
    };
    let intent = ExecutionIntent {
        execution_id: ExecutionId::generate(),
        tool: "create_order".to_owned(),
        parts: None,
        retention: None,
        arguments: None,
    };
    assert!(matches!(
        store.reserve(claim, &intent).await.unwrap(),
        Reservation::Reserved
    ));
    let result = ExecutionResult {
        execution_id: intent.execution_id.clone(),
        status: ExecutionStatus::Completed,
        data: serde_json::json!({ "order_id": 5 }),
        error: None,
        tool: intent.tool.clone(),
        request_id: Some("deploy-file".to_owned()),
        session_id: "s".to_owned(),
        started_at: Utc::now(),
        finished_at: Utc::now(),
        resolution: None,
    };
    store.complete(claim, &result.into()).await.unwrap();
    let again = ExecutionIntent {
        execution_id: ExecutionId::generate(),
        ..intent
    };
    assert!(matches!(
        store.reserve(claim, &again).await.unwrap(),
        Reservation::Existing(_)
    ));
    store.shutdown().await.unwrap();
}

/// Without the file's `ignore_startup_parameters`, PgBouncer refuses Carmy's connections: the
/// store's error names the setting to add.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pgbouncer_that_refuses_a_startup_parameter_is_named_with_its_setting() {
    let db = TestDb::migrated().await;
    let bouncer = Bouncer::start_from_file(&deploy_file(), &["ignore_startup_parameters"]).await;
    let mut options = db.options();
    options.database_url = bouncer.url(&db.name);
    options.session_url = Some(db.url.clone());
    options.transaction_pooler = true;
    let Err(refused) = PostgresStore::connect(options).await else {
        panic!("connected through a PgBouncer that refuses startup parameters");
    };
    let text = refused.to_string();
    assert!(text.contains("unsupported startup parameter"), "{text}");
    assert!(
        text.contains("add `ignore_startup_parameters = extra_float_digits, options` to the [pgbouncer] section"),
        "{text}"
    );
}
