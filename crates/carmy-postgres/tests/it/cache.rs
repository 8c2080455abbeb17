//! The replay cache in front of `PostgresStore` (docs/semantics.md §12): a cached copy that
//! differs from the row read by id is dropped.

use crate::common::*;
use carmy::outcome::ExecutionStatus;
use carmy::store::{ExecutionIntent, Existing, IdempotencyStore, RecordState, Reservation};
use std::sync::Arc;
use std::time::Duration;

use carmy_test_support::TestDb;

/// A replica whose replay cache holds a finished record drops the copy as soon as it reads the
/// row (by id) and finds it changed by an operator's SQL (docs/semantics.md §12.3).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cached_copy_that_differs_from_the_row_read_is_dropped() {
    let db = TestDb::migrated().await;
    let store: Arc<dyn IdempotencyStore> = Arc::new(db.store().await);
    let cached = carmy::cache::ReplayCache::new(store, 100, Duration::from_secs(3600));
    let k = key("alice", "s", "cached");
    let first = intent("echo");
    let reserved = reserve(&cached, &k, &fp('a'), &first).await.unwrap();
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
    let replay = reserve(&cached, &k, &fp('a'), &forever).await.unwrap();
    assert_eq!(
        replay,
        Reservation::Existing(Existing::Replay(recorded.into())),
        "still cached"
    );
    let found = cached.find_execution("alice", &first.execution_id).await;
    assert_eq!(
        found.unwrap().unwrap().record.state,
        RecordState::Finished(changed.clone())
    );
    let replay = reserve(&cached, &k, &fp('a'), &intent("echo"))
        .await
        .unwrap();
    assert_eq!(
        replay,
        Reservation::Existing(Existing::Replay(changed.into())),
        "the copy was dropped"
    );
}
