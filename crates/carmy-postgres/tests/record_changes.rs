//! Changes to finished records announced to replay caches (docs/semantics.md §8.4, §12.3;
//! migrations `V11`, `V14`):
//!
//! - a DBA's `DELETE` or `UPDATE` of a finished row is announced on `carmy_changed` with the
//!   row's identity when the DBA calls `carmy.announce_change(...)` in its transaction, and
//!   only then (no trigger, docs/semantics.md §15); recording an outcome (an update of a
//!   running row) and pruning are not announced; `carmy.announce_change()` announces every
//!   copy (the empty payload), as after a `TRUNCATE`;
//! - the store forwards those as [`RecordChange::Changed`], and reports
//!   [`RecordChange::Unknown`] when its listener's session was cut and started again, then
//!   still forwards changes.

use carmy::store::{IdempotencyKey, IdempotencyStore, RecordChange};
use carmy_postgres::CHANGED_CHANNEL;
use carmy_test_support::TestDb;
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use std::time::{Duration, Instant};
use tokio::sync::broadcast;

/// How long a notification or a change may take to arrive.
const DEADLINE: Duration = Duration::from_secs(10);

fn outcome(execution_id: &str, data: i64) -> String {
    serde_json::json!({
        "execution_id": execution_id, "status": "completed", "data": data, "error": null,
        "tool": "echo", "request_id": execution_id, "session_id": "s",
        "started_at": "2026-01-02T03:04:05.000Z", "finished_at": "2026-01-02T03:04:06.000Z",
    })
    .to_string()
}

/// Inserts a finished row ('p', 's', `request_id`) that finished `age` ago.
async fn finished_row(pool: &PgPool, request_id: &str, age: &str) {
    sqlx::query(
        "INSERT INTO carmy.reservations (principal, session_id, request_id, tool, fingerprint, \
             fingerprint_version, state, execution_id, outcome, created_at, finished_at) \
         VALUES ('p', 's', $1, 'echo', 'f', 'v1', 'completed', $1, $2, \
             now() - $3::interval, now() - $3::interval)",
    )
    .bind(request_id)
    .bind(outcome(request_id, 1))
    .bind(age)
    .execute(pool)
    .await
    .unwrap();
}

async fn run(pool: &PgPool, sql: &str) {
    sqlx::raw_sql(sql).execute(pool).await.unwrap();
}

/// The next notification's payload, within [`DEADLINE`].
async fn next_payload(listener: &mut PgListener) -> String {
    let received = tokio::time::timeout(DEADLINE, listener.recv()).await;
    let notification = received
        .unwrap_or_else(|_| panic!("no notification on {CHANGED_CHANNEL} within {DEADLINE:?}"))
        .unwrap();
    notification.payload().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn announced_edits_reach_the_listeners_and_nothing_else_does() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;
    let store = db.store().await;
    for i in 0..5 {
        finished_row(&pool, &format!("old-{i}"), "2 hours").await;
    }
    finished_row(&pool, "kept-1", "1 minute").await;
    finished_row(&pool, "kept-2", "1 minute").await;
    let mut listener = PgListener::connect(&db.url).await.unwrap();
    listener.listen(CHANGED_CHANNEL).await.unwrap();

    // Nothing of these is announced: notifications arrive in commit order, so the first one
    // heard below is the DBA's DELETE.
    let step = store
        .prune_expired(Duration::from_secs(3600), 100)
        .await
        .unwrap();
    assert_eq!(
        step,
        carmy::retention::PruneStep::Pruned(carmy::retention::Pruned {
            records: 5,
            ..Default::default()
        })
    );
    run(
        &pool,
        "INSERT INTO carmy.reservations (principal, session_id, request_id, tool, fingerprint, \
             fingerprint_version, state, execution_id) \
         VALUES ('p', 's', 'fresh', 'echo', 'f', 'v1', 'running', 'fresh')",
    )
    .await;
    sqlx::query(
        "UPDATE carmy.reservations SET state = 'completed', outcome = $1, finished_at = now() \
         WHERE request_id = 'fresh'",
    )
    .bind(outcome("fresh", 1))
    .execute(&pool)
    .await
    .unwrap();

    run(
        &pool,
        "BEGIN; \
         DELETE FROM carmy.reservations WHERE request_id = 'kept-1'; \
         SELECT carmy.announce_change('p', 's', 'kept-1'); \
         COMMIT",
    )
    .await;
    assert_eq!(next_payload(&mut listener).await, r#"["p", "s", "kept-1"]"#);
    // An edit the DBA does not announce is not announced (the next payload is the one after).
    sqlx::query("UPDATE carmy.reservations SET outcome = $1 WHERE request_id = 'kept-2'")
        .bind(outcome("kept-2", 2))
        .execute(&pool)
        .await
        .unwrap();

    // A pruning step and a DBA's announced DELETE in one transaction: only the DELETE is
    // announced.
    finished_row(&pool, "old-5", "2 hours").await;
    run(
        &pool,
        "BEGIN; \
         SELECT * FROM carmy.prune_expired(interval '1 hour'); \
         DELETE FROM carmy.reservations WHERE request_id = 'fresh'; \
         SELECT carmy.announce_change('p', 's', 'fresh'); \
         COMMIT",
    )
    .await;
    assert_eq!(next_payload(&mut listener).await, r#"["p", "s", "fresh"]"#);
    let left: Vec<String> =
        sqlx::query_scalar("SELECT request_id FROM carmy.reservations ORDER BY 1")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(left, vec!["kept-2".to_owned()]);

    // After a TRUNCATE, announce_change() says that anything may have changed: the empty
    // payload. An identity too long for a notification is announced the same way.
    run(
        &pool,
        "BEGIN; TRUNCATE carmy.reservations; SELECT carmy.announce_change(); COMMIT",
    )
    .await;
    assert_eq!(next_payload(&mut listener).await, "");
    run(
        &pool,
        "SELECT carmy.announce_change('p', 's', repeat('x', 8000))",
    )
    .await;
    assert_eq!(next_payload(&mut listener).await, "");
    run(&pool, "NOTIFY carmy_changed, 'end of test'").await;
    assert_eq!(next_payload(&mut listener).await, "end of test");
    store.shutdown().await.unwrap();
    pool.close().await;
}

/// The next change other than [`RecordChange::Unknown`], within [`DEADLINE`].
async fn next_change(changes: &mut broadcast::Receiver<RecordChange>) -> RecordChange {
    let start = Instant::now();
    loop {
        let left = DEADLINE.saturating_sub(start.elapsed());
        match tokio::time::timeout(left, changes.recv()).await {
            Ok(Ok(RecordChange::Unknown)) => continue,
            Ok(received) => return received.unwrap(),
            Err(_) => panic!("no change within {DEADLINE:?}"),
        }
    }
}

/// Waits for a [`RecordChange::Unknown`] within [`DEADLINE`], failing with what came instead.
async fn until_unknown(changes: &mut broadcast::Receiver<RecordChange>) {
    let start = Instant::now();
    let mut seen = Vec::new();
    loop {
        let left = DEADLINE.saturating_sub(start.elapsed());
        match tokio::time::timeout(left, changes.recv()).await {
            Ok(Ok(RecordChange::Unknown)) => return,
            Ok(other) => seen.push(other),
            Err(_) => panic!("no Unknown within {DEADLINE:?}; saw {seen:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_store_forwards_changes_and_reports_a_new_listening_session_as_unknown() {
    let db = TestDb::migrated().await;
    let pool = db.pool().await;
    let store = db.store().await;
    let mut changes = store
        .record_changes()
        .expect("PostgreSQL announces changes");
    finished_row(&pool, "a", "1 minute").await;
    finished_row(&pool, "b", "1 minute").await;
    run(
        &pool,
        "DELETE FROM carmy.reservations WHERE request_id = 'a'; \
         SELECT carmy.announce_change('p', 's', 'a')",
    )
    .await;
    assert_eq!(
        next_change(&mut changes).await,
        RecordChange::Changed(IdempotencyKey::new("p", "s", "a"))
    );

    // Cut the listener's session: whatever was announced meanwhile is lost, so the store says
    // Unknown once it listens again, and forwards changes after that.
    let cut: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND query LIKE 'LISTEN%'",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(cut, vec![true]);
    until_unknown(&mut changes).await;
    run(
        &pool,
        "DELETE FROM carmy.reservations WHERE request_id = 'b'; \
         SELECT carmy.announce_change('p', 's', 'b')",
    )
    .await;
    assert_eq!(
        next_change(&mut changes).await,
        RecordChange::Changed(IdempotencyKey::new("p", "s", "b"))
    );
    store.shutdown().await.unwrap();
    pool.close().await;
}
