//! Tests of the migrations and of `PostgresStore` against a real PostgreSQL.
//!
//! `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`) names a server and a
//! role that may create databases. Every test creates its own database `carmy_test_<uuid>` and
//! drops it when done (best effort, also when the test panics).

use carmy::decision::AuditAction;
use carmy::fingerprint::Fingerprint;
use carmy::outcome::{
    ExecutionError, ExecutionId, ExecutionResult, ExecutionStatus, RecordedResult,
};
use carmy::runtime::{
    Claim, ExecutionIntent, Existing, IdempotencyKey, IdempotencyStore, InFlightState, RecordState,
    Reservation, StoreError, StoreFuture,
};
use carmy_postgres::{
    latest_migration_version, migrate, ConnectError, MigrateError, OptionsError, PostgresStore,
    PostgresStoreOptions,
};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Row};
use std::sync::Arc;
use std::time::{Duration, Instant};

use carmy_test_support::cluster::UNCERTIFIED_ADDRESS;
use carmy_test_support::{eventually_eq, server_url, with_database, Cluster, TestDb};

fn key(principal: &str, session: &str, request: &str) -> IdempotencyKey {
    IdempotencyKey::new(principal, session, request)
}

/// A `v1` fingerprint whose digest is `c` repeated 64 times.
fn fp(c: char) -> Fingerprint {
    Fingerprint {
        version: "v1".to_owned(),
        digest: c.to_string().repeat(64),
    }
}

/// The store's `complete` of `result` for `key`, reserved with `fingerprint`.
fn complete<'a>(
    store: &'a (impl IdempotencyStore + ?Sized),
    key: &'a IdempotencyKey,
    fingerprint: &'a Fingerprint,
    result: &'a RecordedResult,
) -> StoreFuture<'a, ()> {
    store.complete(Claim { key, fingerprint }, result)
}

/// The store's `reserve` of `key` with `fingerprint` for `intent`.
fn reserve<'a>(
    store: &'a (impl IdempotencyStore + ?Sized),
    key: &'a IdempotencyKey,
    fingerprint: &'a Fingerprint,
    intent: &'a ExecutionIntent,
) -> StoreFuture<'a, Reservation> {
    store.reserve(Claim { key, fingerprint }, intent)
}

fn intent(tool: &str) -> ExecutionIntent {
    ExecutionIntent {
        execution_id: ExecutionId::generate(),
        tool: tool.to_owned(),
        parts: None,
        retention: Some(carmy::retention::DEFAULT_RETENTION),
    }
}

/// Millisecond timestamps: the record keeps milliseconds, so these compare equal after a replay.
fn at(millis: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(millis).unwrap()
}

fn result(
    key: &IdempotencyKey,
    intent: &ExecutionIntent,
    status: ExecutionStatus,
    data: Value,
) -> ExecutionResult {
    let error = match status {
        ExecutionStatus::Completed => None,
        ExecutionStatus::Failed => Some("TOOL_ERROR"),
        ExecutionStatus::TimedOut => Some("TIMEOUT"),
        ExecutionStatus::Cancelled => Some("CANCELLED"),
    }
    .map(|code| ExecutionError {
        code: code.to_owned(),
        message: format!("{code} happened"),
        effect: None,
        details: None,
    });
    ExecutionResult {
        execution_id: intent.execution_id.clone(),
        status,
        data: if error.is_some() { Value::Null } else { data },
        error,
        tool: intent.tool.clone(),
        request_id: Some(key.request_id.clone()),
        session_id: key.session_id.clone(),
        started_at: at(1_700_000_000_123),
        finished_at: at(1_700_000_001_456),
        resolution: None,
    }
}

fn order(id: u64) -> Value {
    serde_json::json!({ "order_id": id })
}

/// The raw columns of one reservation row.
#[derive(Debug, PartialEq)]
struct RawRow {
    state: String,
    execution_id: String,
    outcome: Option<String>,
    error_code: Option<String>,
    owner_instance: Option<String>,
    finished: bool,
}

async fn raw_row(pool: &PgPool, key: &IdempotencyKey) -> Option<RawRow> {
    sqlx::query(
        "SELECT state, execution_id, outcome, error_code, owner_instance, \
                finished_at IS NOT NULL AS finished \
         FROM carmy.reservations \
         WHERE principal = $1 AND session_id = $2 AND request_id = $3",
    )
    .bind(&key.principal)
    .bind(&key.session_id)
    .bind(&key.request_id)
    .fetch_optional(pool)
    .await
    .unwrap()
    .map(|row| RawRow {
        state: row.get("state"),
        execution_id: row.get("execution_id"),
        outcome: row.get("outcome"),
        error_code: row.get("error_code"),
        owner_instance: row.get("owner_instance"),
        finished: row.get("finished"),
    })
}

async fn applied_versions(pool: &PgPool) -> Vec<(i32, String, String)> {
    sqlx::query(
        "SELECT version, name, applied_on FROM carmy.refinery_schema_history ORDER BY version",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .map(|row| (row.get("version"), row.get("name"), row.get("applied_on")))
    .collect()
}

fn assert_unavailable<T: std::fmt::Debug>(outcome: Result<T, StoreError>) -> String {
    match outcome {
        Err(StoreError::Unavailable(reason)) => reason,
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

fn assert_not_ready<T: std::fmt::Debug>(outcome: Result<T, StoreError>) -> String {
    match outcome {
        Err(StoreError::NotReady(reason)) => reason,
        other => panic!("expected NotReady, got {other:?}"),
    }
}

/// The text of a [`ConnectError::Unavailable`]; panics on anything else.
fn assert_cannot_connect<T: std::fmt::Debug>(outcome: Result<T, ConnectError>) -> String {
    match outcome {
        Err(ConnectError::Unavailable(reason)) => reason,
        other => panic!("expected ConnectError::Unavailable, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Migrations
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrate_twice_is_a_noop() {
    let db = TestDb::create().await;
    migrate(&db.url).await.unwrap();
    let pool = db.pool().await;
    let first = applied_versions(&pool).await;
    assert_eq!(
        first
            .iter()
            .map(|(v, n, _)| (*v, n.as_str()))
            .collect::<Vec<_>>(),
        vec![
            (1, "reservations"),
            (3, "document_history"),
            (4, "in_flight_state"),
            (5, "outcome_is_record"),
            (6, "decisions"),
            (7, "outcome_waiters"),
            (8, "late_arrivals"),
            (9, "retention"),
            (10, "recovery_columns"),
            (11, "replay_cache_changes"),
            (12, "decision_limits"),
            (13, "reconciliation")
        ]
    );
    assert_eq!(latest_migration_version(), 13);

    migrate(&db.url).await.unwrap();
    assert_eq!(applied_versions(&pool).await, first);

    // The advisory lock is released after migrating.
    let locks: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
         AND classid = 1667330669 AND objid = 2037213543 \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(locks, 0);
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrations_alone_create_no_example_orders() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = 'carmy' AND c.relkind = 'r' ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        tables,
        vec![
            "audit_log",
            "instances",
            "outcome_waiters",
            "refinery_schema_history",
            "released_executions",
            "reservations"
        ]
    );
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_concurrent_migrations_of_an_empty_database_all_succeed() {
    let db = TestDb::create().await;
    let url = format!("{}?sslmode=prefer", db.url);
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { migrate(&url).await })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let pool = db.pool().await;
    let versions: Vec<i32> = applied_versions(&pool)
        .await
        .into_iter()
        .map(|(v, _, _)| v)
        .collect();
    assert_eq!(versions, vec![1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]);
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_migration_is_rolled_back_and_reported_with_its_cause() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;
    // Forget version 4 while its objects stay: V4 now fails ("already exists").
    sqlx::query("DELETE FROM carmy.refinery_schema_history WHERE version >= 4")
        .execute(&pool)
        .await
        .unwrap();
    let error = migrate(&db.url).await.unwrap_err();
    assert!(matches!(error, MigrateError::Migration(_)), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains("V4__in_flight_state")
            && text.contains("function \"in_flight_state\" already exists"),
        "{text}"
    );
    // Its transaction was rolled back (no history row), the lock is free.
    let versions: Vec<i32> = applied_versions(&pool)
        .await
        .into_iter()
        .map(|(v, _, _)| v)
        .collect();
    assert_eq!(versions, vec![1, 3]);
    let locks: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
         AND classid = 1667330669 AND objid = 2037213543 \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(locks, 0);

    // A changed file (another checksum) is a diverging history.
    sqlx::query("UPDATE carmy.refinery_schema_history SET checksum = '1' WHERE version = 1")
        .execute(&pool)
        .await
        .unwrap();
    let error = migrate(&db.url).await.unwrap_err();
    assert!(matches!(error, MigrateError::Migration(_)), "{error:?}");
    assert!(error.to_string().contains("V1__reservations"), "{error}");
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn schema_is_documented_and_constrained() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;

    // Every table, view and column of the carmy schema, refinery's history table included, has a
    // comment.
    let undocumented: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname || coalesce('.' || a.attname, '') \
         FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'carmy' \
         LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
         WHERE c.relkind IN ('r', 'v') \
           AND (col_description(c.oid, 0) IS NULL \
                OR (a.attnum IS NOT NULL AND col_description(c.oid, a.attnum) IS NULL)) \
         ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(undocumented, Vec::<String>::new());
    let history_columns: Vec<String> = sqlx::query_scalar(
        "SELECT a.attname::text FROM pg_attribute a \
         WHERE a.attrelid = 'carmy.refinery_schema_history'::regclass \
           AND a.attnum > 0 AND NOT a.attisdropped \
           AND col_description(a.attrelid, a.attnum) IS NOT NULL \
         ORDER BY a.attnum",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        history_columns,
        vec!["version", "name", "applied_on", "checksum"]
    );
    let relations: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = 'carmy' AND c.relkind IN ('r', 'v') \
           AND obj_description(c.oid, 'pg_class') IS NOT NULL ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        relations,
        vec![
            "audit_log",
            "instances",
            "late_arrivals",
            "outcome_waiters",
            "refinery_schema_history",
            "released_executions",
            "reservations",
            "uncertain_executions"
        ]
    );

    // The state CHECK and the "running iff no outcome" CHECK hold.
    let bad_state = sqlx::query(
        "INSERT INTO carmy.reservations (principal, session_id, request_id, tool, fingerprint, \
         fingerprint_version, state, execution_id, outcome) \
         VALUES ('p', 's', 'r', 't', 'f', 'v1', 'done', 'exec_x', '{}')",
    )
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(
        bad_state.to_string().contains("reservations_state_check"),
        "{bad_state}"
    );
    let running_with_outcome = sqlx::query(
        "INSERT INTO carmy.reservations (principal, session_id, request_id, tool, fingerprint, \
         fingerprint_version, state, execution_id, outcome) \
         VALUES ('p', 's', 'r', 't', 'f', 'v1', 'running', 'exec_x', '{}')",
    )
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(
        running_with_outcome
            .to_string()
            .contains("reservations_outcome_iff_finished"),
        "{running_with_outcome}"
    );
    let finished_without_outcome = sqlx::query(
        "INSERT INTO carmy.reservations (principal, session_id, request_id, tool, fingerprint, \
         fingerprint_version, state, execution_id) \
         VALUES ('p', 's', 'r', 't', 'f', 'v1', 'completed', 'exec_x')",
    )
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(
        finished_without_outcome
            .to_string()
            .contains("reservations_outcome_iff_finished"),
        "{finished_without_outcome}"
    );

    // The in-flight rule is one documented function, used by the operator view.
    let functions: Vec<(String, String, bool)> = sqlx::query_as(
        "SELECT p.proname::text, p.provolatile::text, obj_description(p.oid, 'pg_proc') IS NOT NULL \
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace AND n.nspname = 'carmy' \
         ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    // Every function is documented; the in-flight rule is stable, decisions are volatile.
    let expected = [
        ("decision_refused", "v"),
        ("decision_value_refused", "v"),
        ("explain_undecided", "v"),
        ("flag_contradicting_late_arrival", "v"),
        ("in_flight_state", "s"),
        ("json_problem", "i"),
        ("jsonb_or_text", "i"),
        ("notify_outcome_waiters", "v"),
        ("notify_record_changed", "v"),
        ("outcome_is_record", "i"),
        ("prune_expired", "v"),
        ("prune_expired_step", "v"),
        ("record_damaged", "i"),
        ("record_expired", "s"),
        ("record_timestamp", "i"),
        ("release_execution", "v"),
        ("resolve_execution", "v"),
    ];
    assert_eq!(
        functions,
        expected
            .iter()
            .map(|(name, volatility)| ((*name).to_owned(), (*volatility).to_owned(), true))
            .collect::<Vec<_>>()
    );
    let view: String =
        sqlx::query_scalar("SELECT pg_get_viewdef('carmy.uncertain_executions'::regclass)")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(
        view.contains("carmy.in_flight_state(r.owner_instance) AS in_flight_state"),
        "{view}"
    );
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migrate_reports_an_unreachable_server() {
    let error = migrate("postgres://postgres@127.0.0.1:1/postgres")
        .await
        .unwrap_err();
    assert!(matches!(error, MigrateError::Connect(_)), "{error:?}");
    let text = error.to_string();
    assert!(
        text.starts_with("cannot connect to PostgreSQL for migrations: ")
            && text.to_lowercase().contains("connection refused"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_database_is_named_in_the_errors() {
    let name = format!("carmy_missing_{}", uuid::Uuid::new_v4().simple());
    let url = with_database(&server_url(), &name).unwrap();
    let expected = format!("database \"{name}\" does not exist");

    let error = migrate(&url).await.unwrap_err();
    assert!(matches!(error, MigrateError::Connect(_)), "{error:?}");
    assert!(error.to_string().contains(&expected), "{error}");

    let mut options = PostgresStoreOptions::new(&url);
    options.acquire_timeout = Duration::from_millis(500);
    let reason = assert_cannot_connect(PostgresStore::connect(options).await);
    assert!(
        reason.starts_with("cannot connect to PostgreSQL: ") && reason.contains(&expected),
        "{reason}"
    );
}

// ---------------------------------------------------------------------------------------------
// Reservations
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reserve_complete_replay() {
    let db = TestDb::migrated().await;
    let store = db.store().await;
    let pool = db.pool().await;
    let k = key("alice", "default", "req-1");
    let first = intent("create_order");

    assert_eq!(store.lookup(&k).await.unwrap(), None);
    assert_eq!(
        store
            .reserve(
                Claim {
                    key: &k,
                    fingerprint: &fp('a')
                },
                &first
            )
            .await
            .unwrap(),
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
        store
            .reserve(
                Claim {
                    key: &k,
                    fingerprint: &fp('a')
                },
                &intent("create_order")
            )
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
        store
            .reserve(
                Claim {
                    key: &k,
                    fingerprint: &fp('a')
                },
                &retry
            )
            .await
            .unwrap(),
        Reservation::Existing(Existing::Replay(done.clone()))
    );
    let other = db.store().await;
    assert_eq!(
        other
            .reserve(
                Claim {
                    key: &k,
                    fingerprint: &fp('a')
                },
                &retry
            )
            .await
            .unwrap(),
        Reservation::Existing(Existing::Replay(done.clone()))
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
async fn identity_parts_and_principals_are_separate() {
    let db = TestDb::migrated().await;
    let store = db.store().await;
    let keys = [
        key("alice", "a", "b:c"),
        key("alice", "a:b", "c"),
        key("bob", "a", "b:c"),
        key("alice", "a", "b:C"),
    ];
    for k in &keys {
        assert_eq!(
            store
                .reserve(
                    Claim {
                        key: k,
                        fingerprint: &fp('a')
                    },
                    &intent("echo")
                )
                .await
                .unwrap(),
            Reservation::Reserved,
            "{k:?}"
        );
    }
    store.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_different_fingerprint_conflicts_in_every_state() {
    let db = TestDb::migrated().await;
    let store = db.store().await;

    // Running.
    let k = key("alice", "default", "running");
    let holder = intent("create_order");
    assert_eq!(
        store
            .reserve(
                Claim {
                    key: &k,
                    fingerprint: &fp('a')
                },
                &holder
            )
            .await
            .unwrap(),
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
            store
                .reserve(
                    Claim {
                        key: &k,
                        fingerprint: &other
                    },
                    &intent("create_order")
                )
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
            store
                .reserve(
                    Claim {
                        key: &k,
                        fingerprint: &fp('a')
                    },
                    &holder
                )
                .await
                .unwrap(),
            Reservation::Reserved
        );
        let outcome = result(&k, &holder, status, order(7));
        complete(&store, &k, &fp('a'), &outcome.clone().into())
            .await
            .unwrap();
        assert_eq!(
            store
                .reserve(
                    Claim {
                        key: &k,
                        fingerprint: &fp('b')
                    },
                    &intent("create_order")
                )
                .await
                .unwrap(),
            Reservation::Existing(Existing::Conflict {
                execution_id: holder.execution_id.clone(),
                parts: None,
            }),
            "{status:?}"
        );
        assert_eq!(
            store
                .reserve(
                    Claim {
                        key: &k,
                        fingerprint: &fp('a')
                    },
                    &intent("create_order")
                )
                .await
                .unwrap(),
            Reservation::Existing(Existing::Replay(outcome.clone())),
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
                let reservation = store
                    .reserve(
                        Claim {
                            key: &k,
                            fingerprint: &fp('a'),
                        },
                        &attempt,
                    )
                    .await
                    .unwrap();
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
                assert_eq!(replay, &done);
                replayed += 1;
            }
            Reservation::Existing(Existing::Conflict { .. }) => {
                panic!("unexpected conflict: {outcomes:?}")
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
        owner
            .reserve(
                Claim {
                    key: &k,
                    fingerprint: &fp('a')
                },
                &holder
            )
            .await
            .unwrap(),
        Reservation::Reserved
    );
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let running = Reservation::Existing(Existing::Uncertain {
        execution_id: holder.execution_id.clone(),
        state: InFlightState::Running,
    });
    assert_eq!(
        observer
            .reserve(
                Claim {
                    key: &k,
                    fingerprint: &fp('a')
                },
                &intent("create_order")
            )
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
        observer
            .reserve(
                Claim {
                    key: &k,
                    fingerprint: &fp('a')
                },
                &intent("create_order")
            )
            .await
            .unwrap(),
        interrupted
    );
    assert_eq!(
        observer.lookup(&k).await.unwrap().unwrap().state,
        RecordState::InFlight(InFlightState::Interrupted)
    );
    assert_eq!(
        observer
            .reserve(
                Claim {
                    key: &k,
                    fingerprint: &fp('b')
                },
                &intent("create_order")
            )
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
        owner
            .reserve(
                Claim {
                    key: &k,
                    fingerprint: &fp('a')
                },
                &holder
            )
            .await
            .unwrap(),
        Reservation::Reserved
    );
    owner.shutdown().await.unwrap();
    owner.shutdown().await.unwrap();
    assert_eq!(
        observer
            .reserve(
                Claim {
                    key: &k,
                    fingerprint: &fp('a')
                },
                &intent("sleep")
            )
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
        live.reserve(
            Claim {
                key: &k2,
                fingerprint: &fp('a')
            },
            &holder2
        )
        .await
        .unwrap(),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn complete_by_another_execution_is_not_owner_and_changes_nothing() {
    let db = TestDb::migrated().await;
    let store = db.store().await;
    let pool = db.pool().await;
    let k = key("alice", "default", "owned");
    let holder = intent("create_order");
    assert_eq!(
        store
            .reserve(
                Claim {
                    key: &k,
                    fingerprint: &fp('a')
                },
                &holder
            )
            .await
            .unwrap(),
        Reservation::Reserved
    );
    let before = raw_row(&pool, &k).await.unwrap();

    // A stale executor with another execution id.
    let stale = intent("create_order");
    let stale_result = result(&k, &stale, ExecutionStatus::Completed, order(2));
    match complete(&store, &k, &fp('a'), &stale_result.clone().into()).await {
        Err(StoreError::NotOwner { execution_id }) => {
            assert_eq!(execution_id, stale.execution_id);
        }
        other => panic!("expected NotOwner, got {other:?}"),
    }
    assert_eq!(raw_row(&pool, &k).await.unwrap(), before);

    // The holder completes; afterwards another outcome is refused, even by the holder.
    let done = result(&k, &holder, ExecutionStatus::Completed, order(1));
    complete(&store, &k, &fp('a'), &done.clone().into())
        .await
        .unwrap();
    let after = raw_row(&pool, &k).await.unwrap();
    assert!(matches!(
        complete(&store, &k, &fp('a'), &stale_result.clone().into()).await,
        Err(StoreError::NotOwner { .. })
    ));
    let changed = result(&k, &holder, ExecutionStatus::Failed, Value::Null);
    assert!(matches!(
        complete(&store, &k, &fp('a'), &changed.clone().into()).await,
        Err(StoreError::NotOwner { .. })
    ));
    assert_eq!(raw_row(&pool, &k).await.unwrap(), after);

    // An identity that was never reserved.
    let vacant = key("alice", "default", "never");
    let vacant_result = result(&vacant, &holder, ExecutionStatus::Completed, order(1));
    assert!(matches!(
        complete(&store, &vacant, &fp('a'), &vacant_result.clone().into()).await,
        Err(StoreError::NotOwner { .. })
    ));
    assert_eq!(raw_row(&pool, &vacant).await, None);

    store.shutdown().await.unwrap();
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_fences_the_earlier_attempt_and_has_one_winner() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;
    let owner = db.store().await;
    let takers = [db.store().await, db.store().await];
    let k = key("alice", "default", "taken");
    let holder = intent("read_orders");

    // A live owner's execution is not taken over; nor one with another fingerprint.
    owner
        .reserve(
            Claim {
                key: &k,
                fingerprint: &fp('a'),
            },
            &holder,
        )
        .await
        .unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repeated_complete_with_the_same_outcome_is_ok() {
    let db = TestDb::migrated().await;
    let store = db.store().await;
    let other = db.store().await;
    let k = key("alice", "default", "twice");
    let holder = intent("create_order");
    assert_eq!(
        store
            .reserve(
                Claim {
                    key: &k,
                    fingerprint: &fp('a')
                },
                &holder
            )
            .await
            .unwrap(),
        Reservation::Reserved
    );
    let done = result(&k, &holder, ExecutionStatus::TimedOut, Value::Null);
    complete(&store, &k, &fp('a'), &done.clone().into())
        .await
        .unwrap();
    complete(&store, &k, &fp('a'), &done.clone().into())
        .await
        .unwrap();
    complete(&other, &k, &fp('a'), &done.clone().into())
        .await
        .unwrap();
    assert_eq!(
        store
            .reserve(
                Claim {
                    key: &k,
                    fingerprint: &fp('a')
                },
                &intent("create_order")
            )
            .await
            .unwrap(),
        Reservation::Existing(Existing::Replay(done))
    );
    store.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn outcomes_round_trip_exactly() {
    let db = TestDb::migrated().await;
    let store = db.store().await;
    let pool = db.pool().await;
    let k = key("alice", "default", "exact");
    let holder = intent("echo");
    assert_eq!(
        store
            .reserve(
                Claim {
                    key: &k,
                    fingerprint: &fp('a')
                },
                &holder
            )
            .await
            .unwrap(),
        Reservation::Reserved
    );
    let data: Value = serde_json::from_str(
        r#"{"nul":"a\u0000b","big":123456789012345678901234567890,"neg":-0.000000000000000000001,
            "obj":{},"arr":[],"null":null,"empty":"","unicode":"e\u0301\u00e9\ud83d\ude00"}"#,
    )
    .unwrap();
    let done = result(&k, &holder, ExecutionStatus::Completed, data);
    complete(&store, &k, &fp('a'), &done.clone().into())
        .await
        .unwrap();

    // The column holds the exact record text.
    let stored: String = sqlx::query_scalar("SELECT outcome FROM carmy.reservations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored, done.to_record_json());
    assert!(stored.contains(r#""nul":"a\u0000b""#), "{stored}");
    assert!(
        stored.contains(r#""big":123456789012345678901234567890"#),
        "{stored}"
    );

    // Another store (another pool) replays it identically.
    let other = db.store().await;
    let Reservation::Existing(Existing::Replay(replayed)) = other
        .reserve(
            Claim {
                key: &k,
                fingerprint: &fp('a'),
            },
            &intent("echo"),
        )
        .await
        .unwrap()
    else {
        panic!("expected a replay");
    };
    assert_eq!(replayed, done);
    assert_eq!(replayed.data["nul"], Value::from("a\u{0}b"));
    assert_eq!(
        replayed.data["big"].to_string(),
        "123456789012345678901234567890"
    );
    assert_eq!(replayed.data["neg"].to_string(), "-0.000000000000000000001");
    assert_eq!(replayed.data["obj"], serde_json::json!({}));
    assert_eq!(replayed.data["arr"], serde_json::json!([]));
    assert_eq!(replayed.data["null"], Value::Null);
    assert_eq!(replayed.data["empty"], Value::from(""));
    assert_eq!(
        replayed.data["unicode"],
        Value::from("e\u{301}\u{e9}\u{1f600}")
    );
    assert_eq!(replayed.to_record_json(), stored);

    store.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
    pool.close().await;
}

/// `StoreError::RecordDamaged`, with its execution id and problem.
fn assert_damaged<T: std::fmt::Debug>(
    outcome: Result<T, StoreError>,
    execution_id: &ExecutionId,
) -> String {
    match outcome {
        Err(StoreError::RecordDamaged {
            execution_id: damaged,
            problem,
        }) => {
            assert_eq!(&damaged, execution_id);
            problem
        }
        other => panic!("expected RecordDamaged, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_damaged_outcome_is_refused_by_the_schema_and_reported_as_damaged() {
    let db = TestDb::migrated().await;
    let store = db.store().await;
    let pool = db.pool().await;
    let k = key("alice", "default", "damaged");
    let holder = intent("echo");
    store
        .reserve(
            Claim {
                key: &k,
                fingerprint: &fp('a'),
            },
            &holder,
        )
        .await
        .unwrap();
    let done = result(&k, &holder, ExecutionStatus::Completed, order(1));
    complete(&store, &k, &fp('a'), &done.clone().into())
        .await
        .unwrap();

    // Hand edits that would damage the row fail at the UPDATE (migration V5).
    let other = intent("echo");
    for (outcome, state) in [
        ("{\"not\":\"a record\"}".to_owned(), "completed"),
        (done.to_record_json(), "failed"),
        (
            result(&k, &other, ExecutionStatus::Completed, order(1)).to_record_json(),
            "completed",
        ),
    ] {
        let refused = sqlx::query("UPDATE carmy.reservations SET outcome = $1, state = $2")
            .bind(&outcome)
            .bind(state)
            .execute(&pool)
            .await
            .unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("reservations_outcome_is_record"),
            "{outcome} as {state}: {refused}"
        );
    }
    let not_json = sqlx::query("UPDATE carmy.reservations SET outcome = 'order 1 done'")
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(not_json.to_string().contains("json"), "{not_json}");
    // A full record of the same execution and status is accepted, \u0000 included.
    let mut resolved = done.clone();
    resolved.data = serde_json::json!({"note": "a\u{0}b"});
    sqlx::query("UPDATE carmy.reservations SET outcome = $1")
        .bind(resolved.to_record_json())
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(
        store.lookup(&k).await.unwrap().unwrap().state,
        RecordState::Finished(resolved)
    );

    // Forced past the schema, a damaged row is RECORD_DAMAGED, never "unavailable".
    sqlx::query("ALTER TABLE carmy.reservations DROP CONSTRAINT reservations_outcome_is_record")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE carmy.reservations SET outcome = '{\"not\":\"a record\"}'")
        .execute(&pool)
        .await
        .unwrap();
    let problem = assert_damaged(store.lookup(&k).await, &holder.execution_id);
    assert!(
        problem.starts_with("outcome is not a record: "),
        "{problem}"
    );
    assert_damaged(
        store
            .reserve(
                Claim {
                    key: &k,
                    fingerprint: &fp('a'),
                },
                &intent("echo"),
            )
            .await,
        &holder.execution_id,
    );
    assert_damaged(
        store.find_execution("alice", &holder.execution_id).await,
        &holder.execution_id,
    );
    // A state column that disagrees with the outcome's status is damaged too.
    sqlx::query("UPDATE carmy.reservations SET outcome = $1, state = 'failed'")
        .bind(done.to_record_json())
        .execute(&pool)
        .await
        .unwrap();
    let problem = assert_damaged(store.lookup(&k).await, &holder.execution_id);
    assert_eq!(problem, "outcome status differs from the state column");
    store.check_ready().await.unwrap();

    store.shutdown().await.unwrap();
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn find_execution_sees_only_the_principals_own_records() {
    let db = TestDb::migrated().await;
    let store = db.store().await;
    let k = key("alice", "s1", "find-me");
    let holder = intent("create_order");
    store
        .reserve(
            Claim {
                key: &k,
                fingerprint: &fp('a'),
            },
            &holder,
        )
        .await
        .unwrap();

    let found = store
        .find_execution("alice", &holder.execution_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.key, k);
    assert_eq!(found.record.execution_id, holder.execution_id);
    assert_eq!(
        found.record.state,
        RecordState::InFlight(InFlightState::Running)
    );

    let done = result(&k, &holder, ExecutionStatus::Completed, order(9));
    complete(&store, &k, &fp('a'), &done.clone().into())
        .await
        .unwrap();
    let found = store
        .find_execution("alice", &holder.execution_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.record.state, RecordState::Finished(done));

    assert_eq!(
        store
            .find_execution("bob", &holder.execution_id)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .find_execution("alice", &ExecutionId::generate())
            .await
            .unwrap(),
        None
    );
    store.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Readiness and availability
// ---------------------------------------------------------------------------------------------

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
        store
            .reserve(
                Claim {
                    key: &key("alice", "default", "early"),
                    fingerprint: &fp('a'),
                },
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
        store
            .reserve(
                Claim {
                    key: &key("alice", "default", "later"),
                    fingerprint: &fp('a')
                },
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
            store
                .reserve(
                    Claim {
                        key: &key("alice", "default", "holder"),
                        fingerprint: &fp('a'),
                    },
                    &intent("echo"),
                )
                .await
        })
    };
    db.until_lock_waiters(1, "the holder queued behind the lock")
        .await;

    let started = Instant::now();
    let outcome = store
        .reserve(
            Claim {
                key: &key("alice", "default", "starved"),
                fingerprint: &fp('a'),
            },
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
        store
            .reserve(
                Claim {
                    key: &key("alice", "default", "down"),
                    fingerprint: &fp('a'),
                },
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

// ---------------------------------------------------------------------------------------------
// TLS (sslmode)
// ---------------------------------------------------------------------------------------------

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
/// now) and a database of its own on it.
async fn tls_cluster() -> (Cluster, TestDb) {
    let cluster = Cluster::start_with_tls();
    let db = TestDb::create_on(&cluster.url()).await;
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
        store
            .reserve(
                Claim {
                    key: &key,
                    fingerprint: &fp('a')
                },
                &intent
            )
            .await
            .unwrap(),
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
    let db = TestDb::create_on(&cluster.url()).await;
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
        store
            .reserve(
                Claim {
                    key: &key("alice", "default", "plain"),
                    fingerprint: &fp('a')
                },
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
            store
                .reserve(
                    Claim {
                        key: &key("alice", "default", host),
                        fingerprint: &fp('a')
                    },
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
    let reserved = store
        .reserve(
            Claim {
                key: &before,
                fingerprint: &fp('a'),
            },
            &intent("echo"),
        )
        .await;
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
            match store
                .reserve(
                    Claim {
                        key: &key,
                        fingerprint: &fp('a'),
                    },
                    &intent("echo"),
                )
                .await
            {
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
                store
                    .reserve(
                        Claim {
                            key: &key,
                            fingerprint: &fp('a')
                        },
                        &intent("echo")
                    )
                    .await,
                Ok(Reservation::Reserved)
            )
        },
    )
    .await;
    store.shutdown().await.unwrap();
}

/// A replica whose replay cache holds a finished record drops the copy as soon as it reads the
/// row (by id) and finds it changed by an operator's SQL (docs/semantics.md §12.3).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cached_copy_that_differs_from_the_row_read_is_dropped() {
    let db = TestDb::migrated().await;
    let store: Arc<dyn IdempotencyStore> = Arc::new(db.store().await);
    let cached = carmy::cache::ReplayCache::new(store, 100, Duration::from_secs(3600));
    let k = key("alice", "s", "cached");
    let first = intent("echo");
    let reserved = cached
        .reserve(
            Claim {
                key: &k,
                fingerprint: &fp('a'),
            },
            &first,
        )
        .await
        .unwrap();
    assert_eq!(reserved, Reservation::Reserved);
    let recorded = result(
        &k,
        &first,
        ExecutionStatus::Completed,
        serde_json::json!({"v": 1}),
    );
    complete(&cached, &k, &fp('a'), &recorded.clone().into())
        .await
        .unwrap();
    let mut changed = recorded.clone();
    changed.data = serde_json::json!({"v": 2});
    let mut connection = db.connect().await;
    sqlx::query("UPDATE carmy.reservations SET outcome = $1 WHERE execution_id = $2")
        .bind(changed.to_record_json())
        .bind(first.execution_id.as_str())
        .execute(&mut connection)
        .await
        .unwrap();
    // The fixture's record finished in 2023: without a retention the cached copy is served.
    let forever = ExecutionIntent {
        retention: None,
        ..intent("echo")
    };
    let replay = cached
        .reserve(
            Claim {
                key: &k,
                fingerprint: &fp('a'),
            },
            &forever,
        )
        .await
        .unwrap();
    assert_eq!(
        replay,
        Reservation::Existing(Existing::Replay(recorded)),
        "still cached"
    );
    let found = cached.find_execution("alice", &first.execution_id).await;
    assert_eq!(
        found.unwrap().unwrap().record.state,
        RecordState::Finished(changed.clone())
    );
    let replay = cached
        .reserve(
            Claim {
                key: &k,
                fingerprint: &fp('a'),
            },
            &intent("echo"),
        )
        .await
        .unwrap();
    assert_eq!(
        replay,
        Reservation::Existing(Existing::Replay(changed)),
        "the copy was dropped"
    );
}
