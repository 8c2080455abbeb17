//! Migrations (`carmy_postgres::migrate`): idempotent, concurrent, transactional, reported with
//! their cause, and the schema they leave: documented, constrained, without the example tools'
//! table.

use crate::common::*;
use carmy_postgres::{
    latest_migration_version, migrate, MigrateError, PostgresStore, PostgresStoreOptions,
};
use std::time::Duration;

use carmy_test_support::{server_url, with_database, TestDb};

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
            (13, "reconciliation"),
            (14, "distributable"),
            (15, "arguments")
        ]
    );
    assert_eq!(latest_migration_version(), 15);

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
    assert_eq!(
        versions,
        vec![1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    );
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_migration_is_rolled_back_and_reported_with_its_cause() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;
    // Forget version 5 while its objects stay: V5 now fails ("already exists").
    sqlx::query("DELETE FROM carmy.refinery_schema_history WHERE version >= 5")
        .execute(&pool)
        .await
        .unwrap();
    let error = migrate(&db.url).await.unwrap_err();
    assert!(matches!(error, MigrateError::Migration(_)), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains("V5__outcome_is_record")
            && text.contains("function \"outcome_is_record\" already exists"),
        "{text}"
    );
    // Its transaction was rolled back (no history row), the lock is free.
    let versions: Vec<i32> = applied_versions(&pool)
        .await
        .into_iter()
        .map(|(v, _, _)| v)
        .collect();
    assert_eq!(versions, vec![1, 3, 4]);
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

    // Every function is documented; the in-flight rule is a semi-join, not a function
    // (migration V14), and no trigger function is left.
    let functions: Vec<(String, String, bool)> = sqlx::query_as(
        "SELECT p.proname::text, p.provolatile::text, obj_description(p.oid, 'pg_proc') IS NOT NULL \
         FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace AND n.nspname = 'carmy' \
         ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let expected = [
        ("announce_change", "v"),
        ("arguments_jsonb", "i"),
        ("decision_refused", "v"),
        ("decision_value_refused", "v"),
        ("execution_principal", "s"),
        ("explain_undecided", "v"),
        ("json_problem", "i"),
        ("jsonb_or_text", "i"),
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
    assert!(view.contains("LEFT JOIN carmy.instances i"), "{view}");
    assert!(!view.contains("in_flight_state("), "{view}");
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
