//! Group commit of `reserve` and `complete` (docs/semantics.md §8) against a real PostgreSQL:
//! many concurrent calls through one store, each answer checked against a sequential model,
//! and the commits they cost counted in `pg_stat_database`.
//!
//! `DATABASE_URL` as in `tests/it/main.rs`; every test has a database of its own.

use carmy::fingerprint::Fingerprint;
use carmy::outcome::{ExecutionId, ExecutionResult, ExecutionStatus};
use carmy::store::{
    Claim, ExecutionIntent, Existing, IdempotencyKey, IdempotencyStore, InFlightState, Reservation,
    StoreError,
};
use carmy_postgres::{PostgresStore, PostgresStoreOptions};
use carmy_test_support::TestDb;
use chrono::DateTime;
use sqlx::{Connection, PgConnection, Row};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Concurrent calls in the big test.
const CALLS: usize = 200;
/// Of those, this many share identities in groups of [`GROUP`] (a tenth).
const DUPLICATES: usize = CALLS / 10;
/// Calls per shared identity.
const GROUP: usize = 4;

fn fp(c: char) -> Fingerprint {
    Fingerprint {
        version: "v1".to_owned(),
        digest: c.to_string().repeat(64),
    }
}

/// One call of the test: its identity, fingerprint and execution.
#[derive(Clone, Debug)]
struct Attempt {
    key: IdempotencyKey,
    fingerprint: Fingerprint,
    intent: ExecutionIntent,
}

impl Attempt {
    fn new(request_id: &str, fingerprint: char) -> Self {
        Self {
            key: IdempotencyKey::new("alice", "default", request_id),
            fingerprint: fp(fingerprint),
            intent: ExecutionIntent {
                execution_id: ExecutionId::generate(),
                tool: "create_order".to_owned(),
                // Digests that tell the fingerprints apart, so that a conflict must carry the
                // winner's.
                parts: Some(carmy::fingerprint::FingerprintParts {
                    tool: [1; 8],
                    arguments: [fingerprint as u8; 8],
                    metadata: [0; 8],
                }),
                retention: Some(carmy::retention::DEFAULT_RETENTION),
                arguments: None,
            },
        }
    }

    /// The outcome this attempt records when it wins its identity.
    fn outcome(&self) -> ExecutionResult {
        ExecutionResult {
            execution_id: self.intent.execution_id.clone(),
            status: ExecutionStatus::Completed,
            data: serde_json::json!({ "request_id": self.key.request_id, "big": u64::MAX }),
            error: None,
            tool: self.intent.tool.clone(),
            request_id: Some(self.key.request_id.clone()),
            session_id: self.key.session_id.clone(),
            started_at: DateTime::from_timestamp_millis(1_700_000_000_123).unwrap(),
            finished_at: DateTime::from_timestamp_millis(1_700_000_001_456).unwrap(),
            resolution: None,
        }
    }
}

/// The sequential model: what `later` must be answered once `winner` holds the identity, its
/// outcome recorded or not yet: `false` when the answer is wrong.
fn model_allows(winner: &Attempt, later: &Attempt, answer: &Reservation) -> bool {
    let held_by = &winner.intent.execution_id;
    match answer {
        Reservation::Reserved | Reservation::Replaced(_) => false,
        Reservation::Existing(Existing::Conflict {
            execution_id,
            parts,
        }) => {
            later.fingerprint != winner.fingerprint
                && execution_id == held_by
                && *parts == winner.intent.parts
        }
        Reservation::Existing(Existing::Uncertain {
            execution_id,
            state,
        }) => {
            later.fingerprint == winner.fingerprint
                && execution_id == held_by
                && *state == InFlightState::Running
        }
        Reservation::Existing(Existing::Replay(result)) => {
            later.fingerprint == winner.fingerprint && *result.result() == winner.outcome()
        }
    }
}

/// The attempts: distinct identities, then [`DUPLICATES`] calls sharing identities in groups of
/// [`GROUP`], the third of each group with another fingerprint.
fn attempts() -> Vec<Attempt> {
    let mut attempts: Vec<Attempt> = (0..CALLS - DUPLICATES)
        .map(|index| Attempt::new(&format!("new-{index}"), 'a'))
        .collect();
    for index in 0..DUPLICATES {
        let fingerprint = if index % GROUP == 2 { 'b' } else { 'a' };
        attempts.push(Attempt::new(
            &format!("shared-{}", index / GROUP),
            fingerprint,
        ));
    }
    attempts
}

/// Commits of `database` so far (`pg_stat_database.xact_commit`), read once every other session
/// of it has ended (a backend reports its counts when it exits), within 20 s.
async fn commits_after_sessions_end(observer: &mut PgConnection, database: &str) -> i64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let others: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
        )
        .bind(database)
        .fetch_one(&mut *observer)
        .await
        .unwrap();
        if others == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{others} sessions of {database} still open after 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(&mut *observer)
        .await
        .unwrap();
    let row = sqlx::query("SELECT xact_commit FROM pg_stat_database WHERE datname = $1")
        .bind(database)
        .fetch_one(&mut *observer)
        .await
        .unwrap();
    row.get("xact_commit")
}

/// Runs `attempts` at once through `store`; a winner completes at once. Returns each answer.
async fn run_all(store: &Arc<PostgresStore>, attempts: &[Attempt]) -> Vec<Reservation> {
    let start = Arc::new(tokio::sync::Barrier::new(attempts.len()));
    let tasks: Vec<_> = attempts
        .iter()
        .cloned()
        .map(|attempt| {
            let store = Arc::clone(store);
            let start = Arc::clone(&start);
            tokio::spawn(async move {
                start.wait().await;
                let answer = store
                    .reserve(
                        Claim {
                            key: &attempt.key,
                            fingerprint: &attempt.fingerprint,
                        },
                        &attempt.intent,
                    )
                    .await
                    .unwrap();
                if answer == Reservation::Reserved {
                    store
                        .complete(
                            Claim {
                                key: &attempt.key,
                                fingerprint: &attempt.fingerprint,
                            },
                            &attempt.outcome().into(),
                        )
                        .await
                        .unwrap();
                }
                answer
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_new_identities_match_the_sequential_model_in_fewer_commits() {
    let db = TestDb::migrated().await;
    let mut observer = PgConnection::connect(&carmy_test_support::server_url())
        .await
        .unwrap();
    let before = commits_after_sessions_end(&mut observer, &db.name).await;
    let store = Arc::new(db.store().await);
    let attempts = attempts();
    let answers = run_all(&store, &attempts).await;
    store.shutdown().await.unwrap();
    drop(store);
    let commits = commits_after_sessions_end(&mut observer, &db.name).await - before;

    // Per identity: exactly one winner; every other answer is what the model says.
    let mut by_identity: HashMap<&str, Vec<(&Attempt, &Reservation)>> = HashMap::new();
    for (attempt, answer) in attempts.iter().zip(&answers) {
        by_identity
            .entry(&attempt.key.request_id)
            .or_default()
            .push((attempt, answer));
    }
    assert_eq!(by_identity.len(), CALLS - DUPLICATES + DUPLICATES / GROUP);
    // Unbatched, the winners alone would cost one commit to reserve and one to complete.
    let unbatched = 2 * by_identity.len() as i64;
    assert!(
        commits < unbatched * 3 / 4,
        "{commits} commits in the database; without batching the winners alone need {unbatched}"
    );
    let store = db.store().await;
    let mut conflicts = 0;
    for (identity, calls) in &by_identity {
        let winners: Vec<&Attempt> = calls
            .iter()
            .filter(|(_, answer)| **answer == Reservation::Reserved)
            .map(|(attempt, _)| *attempt)
            .collect();
        assert_eq!(winners.len(), 1, "{identity}: {calls:?}");
        for (attempt, answer) in calls {
            if attempt.intent.execution_id == winners[0].intent.execution_id {
                continue;
            }
            assert!(
                model_allows(winners[0], attempt, answer),
                "{identity}: {attempt:?} got {answer:?}, winner {:?}",
                winners[0]
            );
            conflicts += usize::from(matches!(
                answer,
                Reservation::Existing(Existing::Conflict { .. })
            ));
        }
        // The row holds the winner's outcome, exactly.
        let record = store.lookup(&calls[0].0.key).await.unwrap().unwrap();
        assert_eq!(record.execution_id, winners[0].intent.execution_id);
        assert_eq!(
            record.state,
            carmy::store::RecordState::Finished(winners[0].outcome())
        );
    }
    assert!(
        conflicts >= 1,
        "some duplicates conflict (one in four of them, or its winner)"
    );

    let pool = db.pool().await;
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM carmy.reservations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows as usize, by_identity.len());
    pool.close().await;
    store.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_row_the_server_refuses_fails_only_its_own_call() {
    let db = TestDb::migrated().await;
    let store = Arc::new(db.store().await);
    let mut attempts: Vec<Attempt> = (0..40)
        .map(|index| Attempt::new(&format!("call-{index}"), 'a'))
        .collect();
    // Two identities with one execution id: the second insert breaks its unique constraint.
    attempts[20].intent.execution_id = attempts[10].intent.execution_id.clone();
    let start = Arc::new(tokio::sync::Barrier::new(attempts.len()));
    let tasks: Vec<_> = attempts
        .iter()
        .cloned()
        .map(|attempt| {
            let store = Arc::clone(&store);
            let start = Arc::clone(&start);
            tokio::spawn(async move {
                start.wait().await;
                store
                    .reserve(
                        Claim {
                            key: &attempt.key,
                            fingerprint: &attempt.fingerprint,
                        },
                        &attempt.intent,
                    )
                    .await
            })
        })
        .collect();
    let mut refused = Vec::new();
    for (index, task) in tasks.into_iter().enumerate() {
        match task.await.unwrap() {
            Ok(Reservation::Reserved) => {}
            Err(StoreError::Unavailable(text)) => refused.push((index, text)),
            other => panic!("call {index}: {other:?}"),
        }
    }
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!([10, 20].contains(&refused[0].0), "{refused:?}");
    store.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batching_off_gives_the_same_answers() {
    let db = TestDb::migrated().await;
    let mut options: PostgresStoreOptions = db.options();
    options.batch_max_rows = 1;
    let store = Arc::new(PostgresStore::connect(options).await.unwrap());
    let attempts: Vec<Attempt> = attempts()
        .into_iter()
        .skip(CALLS - DUPLICATES - 10)
        .collect();
    let answers = run_all(&store, &attempts).await;
    let reserved = answers
        .iter()
        .filter(|answer| **answer == Reservation::Reserved)
        .count();
    assert_eq!(reserved, 10 + DUPLICATES / GROUP, "{answers:?}");
    store.shutdown().await.unwrap();
}

/// Reserves `attempt`'s identity through `store` (in a task of its own).
fn spawn_reserve(
    store: &Arc<PostgresStore>,
    attempt: &Attempt,
) -> tokio::task::JoinHandle<Result<Reservation, StoreError>> {
    let (store, attempt) = (Arc::clone(store), attempt.clone());
    tokio::spawn(async move {
        let claim = Claim {
            key: &attempt.key,
            fingerprint: &attempt.fingerprint,
        };
        store.reserve(claim, &attempt.intent).await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reservations_and_outcomes_waiting_together_commit_in_one_transaction() {
    let db = TestDb::migrated().await;
    let store = Arc::new(db.store().await);
    // Ten identities reserved and committed: their outcomes are recorded later.
    let running: Vec<Attempt> = (0..10)
        .map(|index| Attempt::new(&format!("running-{index}"), 'a'))
        .collect();
    for attempt in &running {
        let answer = spawn_reserve(&store, attempt).await.unwrap().unwrap();
        assert_eq!(answer, Reservation::Reserved);
    }
    // new-0's identity held an execution that was released: its batched reservation names it
    // (docs/semantics.md §12.1, "A rerun says so").
    let earlier = Attempt::new("new-0", 'a');
    let answer = spawn_reserve(&store, &earlier).await.unwrap().unwrap();
    assert_eq!(answer, Reservation::Reserved);
    sqlx::query("SELECT carmy.release_execution($1, 'nothing upstream', 'dba', true)")
        .bind(earlier.intent.execution_id.as_str())
        .execute(&mut db.connect().await)
        .await
        .unwrap();
    // Hold every write to the table: the two batches in flight wait for the lock, and
    // everything queued meanwhile forms the next batch.
    let mut locker = db.connect().await;
    sqlx::query("BEGIN").execute(&mut locker).await.unwrap();
    sqlx::query("LOCK TABLE carmy.reservations IN SHARE MODE")
        .execute(&mut locker)
        .await
        .unwrap();
    let mut observer = db.connect().await;
    let plugs: Vec<_> = (0..2)
        .map(|index| spawn_reserve(&store, &Attempt::new(&format!("plug-{index}"), 'a')))
        .collect();
    db.until_lock_waiters(2, "the two batches in flight").await;
    let new: Vec<Attempt> = (0..10)
        .map(|index| Attempt::new(&format!("new-{index}"), 'a'))
        .collect();
    let mut reserves: Vec<_> = new.iter().map(|a| spawn_reserve(&store, a)).collect();
    // A retry of a running identity, in the batch that records its outcome.
    let retry = Attempt {
        intent: Attempt::new("retry", 'a').intent,
        ..running[0].clone()
    };
    reserves.push(spawn_reserve(&store, &retry));
    let completes: Vec<_> = running
        .iter()
        .cloned()
        .map(|attempt| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let claim = Claim {
                    key: &attempt.key,
                    fingerprint: &attempt.fingerprint,
                };
                store.complete(claim, &attempt.outcome().into()).await
            })
        })
        .collect();
    // Every call queued behind the two batches in flight (none can be answered meanwhile).
    tokio::time::sleep(Duration::from_millis(500)).await;
    sqlx::query("COMMIT").execute(&mut locker).await.unwrap();
    for plug in plugs {
        assert_eq!(plug.await.unwrap().unwrap(), Reservation::Reserved);
    }
    let mut answers = Vec::new();
    for task in reserves {
        answers.push(task.await.unwrap().unwrap());
    }
    for task in completes {
        task.await.unwrap().unwrap();
    }
    assert_eq!(
        answers[0],
        Reservation::Replaced(carmy::store::Replaced {
            execution_id: earlier.intent.execution_id.clone(),
            ended: carmy::store::ReplacedEnd::Released {
                by: "dba".into(),
                note: "nothing upstream".into(),
            },
        })
    );
    assert!(answers[1..10].iter().all(|a| *a == Reservation::Reserved));
    // The retry read the row as the batch's snapshot had it: running, before its outcome.
    assert_eq!(
        answers[10],
        Reservation::Existing(Existing::Uncertain {
            execution_id: running[0].intent.execution_id.clone(),
            state: InFlightState::Running,
        })
    );
    // The ten new rows and the ten outcomes were written by one transaction.
    let writers: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT xmin::text FROM carmy.reservations \
         WHERE request_id LIKE 'new-%' OR request_id LIKE 'running-%'",
    )
    .fetch_all(&mut observer)
    .await
    .unwrap();
    assert_eq!(writers.len(), 1, "written by transactions {writers:?}");
    let finished: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM carmy.reservations \
         WHERE request_id LIKE 'running-%' AND state = 'completed'",
    )
    .fetch_one(&mut observer)
    .await
    .unwrap();
    assert_eq!(finished, 10);
    store.shutdown().await.unwrap();
}
