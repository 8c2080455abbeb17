//! Least-privilege roles (docs/semantics.md §14.2) on a real server: a store running as the
//! runtime role serves calls, prunes and releases; the runtime role cannot rewrite history (no
//! DELETE or UPDATE of audit rows, no DDL, no TRUNCATE) nor migrate; the reader role reads and
//! changes nothing.

mod common;

use carmy::store::IdempotencyStore;
use carmy_postgres::{
    grant_reader, grant_runtime, migrate, GrantError, MigrateError, PostgresStore,
};
use carmy_test_support::{server_url, TestDb};
use sqlx::{Connection, PgConnection};

/// `url` with its user replaced by `role`.
fn as_role(url: &str, role: &str) -> String {
    let mut parsed = url::Url::parse(url).unwrap();
    parsed.set_username(role).unwrap();
    parsed.into()
}

/// Runs `sql` as the session `connection`; returns the SQLSTATE it failed with, if any.
async fn sqlstate(connection: &mut PgConnection, sql: &str) -> Option<String> {
    match sqlx::raw_sql(sql).execute(&mut *connection).await {
        Ok(_) => None,
        Err(error) => Some(
            error
                .as_database_error()
                .and_then(|error| error.code())
                .map(|code| code.into_owned())
                .unwrap_or_else(|| format!("not a database error: {error}")),
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_role_serves_but_cannot_rewrite_history_and_the_reader_only_reads() {
    let db = TestDb::migrated().await;
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let (runtime, reader) = (format!("carmy_rt_{suffix}"), format!("carmy_rd_{suffix}"));
    let mut admin = PgConnection::connect(&server_url()).await.unwrap();
    for role in [&runtime, &reader] {
        sqlx::raw_sql(&format!("CREATE ROLE {role} LOGIN"))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    let missing = grant_runtime(&db.url, "carmy_no_such_role")
        .await
        .unwrap_err();
    assert!(matches!(missing, GrantError::NoSuchRole(_)), "{missing}");
    grant_runtime(&db.url, &runtime).await.unwrap();
    grant_reader(&db.url, &reader).await.unwrap();
    // Granting again is harmless.
    grant_runtime(&db.url, &runtime).await.unwrap();

    // The runtime role: a migrated schema starts without DDL; a store serves calls and prunes.
    let runtime_url = as_role(&db.url, &runtime);
    migrate(&runtime_url).await.unwrap();
    let mut options = db.options();
    options.database_url = runtime_url.clone();
    let store = PostgresStore::connect(options).await.unwrap();
    store.check_ready().await.unwrap();
    common::one_call(&store, "as-runtime").await;
    let mut session = PgConnection::connect(&runtime_url).await.unwrap();
    // The owner writes one audit row to try to rewrite.
    let mut owner = db.connect().await;
    sqlx::raw_sql(
        "INSERT INTO carmy.audit_log (actor, principal, execution_id, action, before, after, note) \
         VALUES ('dba', 'alice', 'exe_x', 'late_arrival', '{}', '{}', 'kept')",
    )
    .execute(&mut owner)
    .await
    .unwrap();
    for refused in [
        "DELETE FROM carmy.audit_log",
        "UPDATE carmy.audit_log SET note = 'rewritten'",
        "DELETE FROM carmy.late_arrivals",
        "TRUNCATE carmy.audit_log",
        "TRUNCATE carmy.reservations",
        "DELETE FROM carmy.instances",
        "DELETE FROM carmy.released_executions",
        "CREATE TABLE carmy.intruder (id int)",
        "DROP VIEW carmy.uncertain_executions",
        "ALTER TABLE carmy.audit_log DISABLE TRIGGER ALL",
        "ALTER FUNCTION carmy.prune_expired(interval, integer, boolean) SECURITY INVOKER",
    ] {
        assert_eq!(
            sqlstate(&mut session, refused).await.as_deref(),
            Some("42501"),
            "the runtime role may not: {refused}"
        );
    }
    let audit: (i64, String) =
        sqlx::query_as("SELECT count(*), min(note) FROM carmy.audit_log WHERE actor = 'dba'")
            .fetch_one(&mut owner)
            .await
            .unwrap();
    assert_eq!(audit, (1, "kept".to_owned()), "the audit row is untouched");
    // Pruning goes through carmy.prune_expired only, which keeps the retention rules.
    let pruned: i64 = sqlx::query_scalar(
        "SELECT records FROM carmy.prune_expired(interval '0', 1000, short_retention_ok => true)",
    )
    .fetch_one(&mut session)
    .await
    .unwrap();
    assert_eq!(pruned, 1, "the finished record past a zero retention");

    // The reader reads every view and changes nothing.
    let mut reading = PgConnection::connect(&as_role(&db.url, &reader))
        .await
        .unwrap();
    for allowed in [
        "SELECT * FROM carmy.uncertain_executions",
        "SELECT * FROM carmy.late_arrivals",
        "SELECT * FROM carmy.audit_log",
        "SELECT * FROM carmy.reservations",
    ] {
        assert_eq!(sqlstate(&mut reading, allowed).await, None, "{allowed}");
    }
    for refused in [
        "INSERT INTO carmy.audit_log (actor, principal, execution_id, action, before, after) VALUES ('r', 'p', 'e', 'late_arrival', '{}', '{}')",
        "UPDATE carmy.instances SET pid = 1",
        "DELETE FROM carmy.reservations",
        "SELECT * FROM carmy.prune_expired(interval '0', 1000)",
    ] {
        assert_eq!(
            sqlstate(&mut reading, refused).await.as_deref(),
            Some("42501"),
            "the reader may not: {refused}"
        );
    }

    // A schema behind this build: the runtime role refuses to migrate, naming what to do.
    sqlx::raw_sql(
        "DELETE FROM carmy.refinery_schema_history \
         WHERE version = (SELECT max(version) FROM carmy.refinery_schema_history)",
    )
    .execute(&mut owner)
    .await
    .unwrap();
    let behind = migrate(&runtime_url).await.unwrap_err();
    assert!(
        matches!(&behind, MigrateError::NotPermitted { role, .. } if *role == runtime),
        "{behind}"
    );
    assert!(
        behind.to_string().ends_with(&format!(
            "and role \"{runtime}\" may not change it: run carmy-gateway migrate as the schema's owner"
        )),
        "{behind}"
    );

    store.shutdown().await.unwrap();
    drop((session, reading));
    sqlx::raw_sql(&format!("DROP OWNED BY {runtime}, {reader}"))
        .execute(&mut owner)
        .await
        .unwrap();
    owner.close().await.unwrap();
    drop(db);
    for role in [&runtime, &reader] {
        sqlx::raw_sql(&format!("DROP ROLE {role}"))
            .execute(&mut admin)
            .await
            .unwrap();
    }
}
