//! Recording outcomes: only the owning execution completes (the row unchanged otherwise), the
//! same outcome may be repeated from another store, outcomes keep their exact text in the
//! column, and a damaged row is refused by the schema or reported as damaged.

use crate::common::*;
use carmy::outcome::{ExecutionId, ExecutionStatus};
use carmy::store::{Existing, IdempotencyStore, RecordState, Reservation, StoreError};
use serde_json::Value;

use carmy_test_support::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn complete_by_another_execution_is_not_owner_and_changes_nothing() {
    let db = TestDb::migrated().await;
    let store = db.store().await;
    let pool = db.pool().await;
    let k = key("alice", "default", "owned");
    let holder = intent("create_order");
    assert_eq!(
        reserve(&store, &k, &fp('a'), &holder).await.unwrap(),
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
async fn repeated_complete_with_the_same_outcome_is_ok() {
    let db = TestDb::migrated().await;
    let store = db.store().await;
    let other = db.store().await;
    let k = key("alice", "default", "twice");
    let holder = intent("create_order");
    assert_eq!(
        reserve(&store, &k, &fp('a'), &holder).await.unwrap(),
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
        reserve(&store, &k, &fp('a'), &intent("create_order"))
            .await
            .unwrap(),
        Reservation::Existing(Existing::Replay(done.into()))
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
        reserve(&store, &k, &fp('a'), &holder).await.unwrap(),
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
    let Reservation::Existing(Existing::Replay(replayed)) =
        reserve(&other, &k, &fp('a'), &intent("echo"))
            .await
            .unwrap()
    else {
        panic!("expected a replay");
    };
    let replayed = replayed.into_result();
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
    reserve(&store, &k, &fp('a'), &holder).await.unwrap();
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
        reserve(&store, &k, &fp('a'), &intent("echo")).await,
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
