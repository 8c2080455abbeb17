//! Retention on PostgreSQL (docs/semantics.md §12.9), beyond the conformance checks that both
//! stores pass (`carmy::conformance::expired_records_run_as_new`, `…pruning_removes_only_expired_records`):
//!
//! - a property test over random rows (every state, owners alive or dead, ages on both sides of
//!   the retention, a missing `finished_at`) and random instances: pruning to the end deletes
//!   exactly the finished rows past the retention and the stopped instances past it that own no
//!   running row, and never a running or interrupted row;
//! - a stopped instance that owns an interrupted row never ends pruning before the stopped
//!   instances after it are deleted;
//! - two replicas pruning at once: while one holds the pruning lock the other is told `Busy` at
//!   once and deletes nothing;
//! - an expired row is replaced in place by the next reservation across replicas, once.

use carmy::fingerprint::Fingerprint;
use carmy::outcome::ExecutionId;
use carmy::retention::{PruneStep, Pruned};
use carmy::store::{Claim, ExecutionIntent, IdempotencyKey, IdempotencyStore, Reservation};
use carmy_test_support::TestDb;
use proptest::prelude::*;
use sqlx::PgPool;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// The retention of the property test.
const RETENTION: Duration = Duration::from_secs(3600);

/// Ages (seconds) within this of the retention are not generated: the database clock moves on
/// while a case runs.
const MARGIN_SECONDS: i64 = 120;

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// `running`, its owner's lease live.
    Running,
    /// `running`, its owner's lease lapsed (or no owner row): interrupted.
    Interrupted,
    /// One of the finished states.
    Finished(&'static str),
    /// Finished, `finished_at` NULL (a hand-written row): `created_at` counts.
    FinishedWithoutTime,
}

#[derive(Clone, Debug)]
struct Row {
    kind: Kind,
    /// Seconds since it finished (or was created).
    age: i64,
    /// Which generated instance owns it.
    owner: usize,
}

#[derive(Clone, Debug)]
struct Instance {
    /// Seconds since its lease lapsed; negative: still live.
    lapsed: i64,
}

fn age() -> impl Strategy<Value = i64> {
    let retention = RETENTION.as_secs() as i64;
    prop_oneof![
        0..retention - MARGIN_SECONDS,
        retention + MARGIN_SECONDS..retention * 3,
    ]
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Running),
        Just(Kind::Interrupted),
        Just(Kind::Finished("completed")),
        Just(Kind::Finished("failed")),
        Just(Kind::Finished("timed_out")),
        Just(Kind::Finished("cancelled")),
        Just(Kind::FinishedWithoutTime),
    ]
}

fn instance() -> impl Strategy<Value = Instance> {
    let retention = RETENTION.as_secs() as i64;
    prop_oneof![
        (-600..-60i64).prop_map(|lapsed| Instance { lapsed }),
        age().prop_map(|lapsed| Instance { lapsed }),
        (retention + MARGIN_SECONDS..retention * 3).prop_map(|lapsed| Instance { lapsed }),
    ]
}

fn case() -> impl Strategy<Value = (Vec<Instance>, Vec<Row>)> {
    proptest::collection::vec(instance(), 1..5).prop_flat_map(|instances| {
        let owners = instances.len();
        let rows = proptest::collection::vec(
            (kind(), age(), 0..owners).prop_map(|(kind, age, owner)| Row { kind, age, owner }),
            0..40,
        );
        (Just(instances), rows)
    })
}

/// An outcome text the schema accepts for `execution_id` in `state`.
fn outcome(execution_id: &str, state: &str) -> String {
    let error = if state == "completed" {
        serde_json::Value::Null
    } else {
        serde_json::json!({"code": "TOOL_ERROR", "message": "failed"})
    };
    serde_json::json!({
        "execution_id": execution_id, "status": state, "data": null, "error": error,
        "tool": "echo", "request_id": execution_id, "session_id": "s",
        "started_at": "2026-01-02T03:04:05.000Z", "finished_at": "2026-01-02T03:04:06.000Z",
    })
    .to_string()
}

/// Writes the case's instances and rows (after emptying both tables but for `keep`, the test
/// store's own instance); returns the execution ids and instance ids that must survive.
async fn write_case(
    connection: &PgPool,
    keep: &str,
    instances: &[Instance],
    rows: &[Row],
) -> (BTreeSet<String>, BTreeSet<String>) {
    sqlx::query("DELETE FROM carmy.reservations")
        .execute(connection)
        .await
        .unwrap();
    sqlx::query("DELETE FROM carmy.instances WHERE instance_id <> $1")
        .bind(keep)
        .execute(connection)
        .await
        .unwrap();
    let retention = RETENTION.as_secs() as i64;
    let names: Vec<String> = (0..instances.len())
        .map(|i| format!("inst_case_{i}"))
        .collect();
    let mut kept_instances = BTreeSet::from([keep.to_owned()]);
    for (name, instance) in names.iter().zip(instances) {
        sqlx::query(
            "INSERT INTO carmy.instances (instance_id, lease_expires_at) \
             VALUES ($1, now() - $2::bigint * interval '1 second')",
        )
        .bind(name)
        .bind(instance.lapsed)
        .execute(connection)
        .await
        .unwrap();
    }
    let mut kept_rows = BTreeSet::new();
    for (i, row) in rows.iter().enumerate() {
        let execution_id = format!("exec_case_{i}");
        let owner = &names[row.owner];
        let live_owner = instances[row.owner].lapsed < 0;
        let (state, owner, finished) = match row.kind {
            // A running row's owner decides running or interrupted; keep the kind honest.
            Kind::Running if live_owner => ("running", owner.as_str(), false),
            Kind::Running => ("running", keep, false),
            Kind::Interrupted if live_owner => ("running", "inst_gone", false),
            Kind::Interrupted => ("running", owner.as_str(), false),
            Kind::Finished(state) => (state, owner.as_str(), true),
            Kind::FinishedWithoutTime => ("completed", owner.as_str(), true),
        };
        let with_time = !matches!(row.kind, Kind::FinishedWithoutTime);
        sqlx::query(
            "INSERT INTO carmy.reservations (principal, session_id, request_id, tool, \
                 fingerprint, fingerprint_version, state, execution_id, outcome, owner_instance, \
                 created_at, started_at, finished_at) \
             VALUES ('p', 's', $1, 'echo', 'f', 'v1', $2, $1, $3, $4, \
                 now() - $5::bigint * interval '1 second', now() - $5::bigint * interval '1 second', \
                 CASE WHEN $6 THEN now() - $5::bigint * interval '1 second' END)",
        )
        .bind(&execution_id)
        .bind(state)
        .bind(finished.then(|| outcome(&execution_id, state)))
        .bind(owner)
        .bind(row.age)
        .bind(finished && with_time)
        .execute(connection)
        .await
        .unwrap();
        if !(finished && row.age >= retention) {
            kept_rows.insert(execution_id);
        }
    }
    for (i, (name, instance)) in names.iter().zip(instances).enumerate() {
        let owns_running = rows.iter().any(|row| {
            row.owner == i
                && match row.kind {
                    Kind::Running => instance.lapsed < 0,
                    Kind::Interrupted => instance.lapsed >= 0,
                    _ => false,
                }
        });
        if instance.lapsed < retention || owns_running {
            kept_instances.insert(name.clone());
        }
    }
    (kept_rows, kept_instances)
}

async fn column(connection: &PgPool, sql: &str) -> BTreeSet<String> {
    sqlx::query_scalar::<_, String>(sql)
        .fetch_all(connection)
        .await
        .unwrap()
        .into_iter()
        .collect()
}

#[test]
fn pruning_removes_exactly_the_expired_finished_rows_and_stopped_instances() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (db, store, pool) = runtime.block_on(async {
        let db = TestDb::migrated().await;
        let store = db.store().await;
        let pool = db.pool().await;
        (db, store, pool)
    });
    let config = ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |((instances, rows) in case(), batch in 1..8usize)| {
        runtime.block_on(async {
            let (kept_rows, kept_instances) =
                write_case(&pool, store.instance_id(), &instances, &rows).await;
            let mut pruned = Pruned::default();
            // Every step deletes at most `batch` of a kind; a bounded number of steps ends it.
            for _ in 0..=(rows.len() + instances.len()) {
                let step = store.prune_expired(RETENTION, batch).await.unwrap();
                let PruneStep::Pruned(step) = step else { panic!("nobody else prunes") };
                assert!(step.records <= batch as u64 && step.instances <= batch as u64);
                pruned.add(step);
                if !step.filled(batch) {
                    break;
                }
            }
            let rows_left = column(&pool, "SELECT execution_id FROM carmy.reservations").await;
            let instances_left = column(&pool, "SELECT instance_id FROM carmy.instances").await;
            assert_eq!(rows_left, kept_rows, "rows left for {rows:?}");
            assert_eq!(instances_left, kept_instances, "instances left for {instances:?} {rows:?}");
            assert_eq!(pruned.records as usize, rows.len() - kept_rows.len());
        });
    });
    runtime.block_on(async {
        store.shutdown().await.unwrap();
        pool.close().await;
        drop(db);
    });
}

fn key(request_id: &str) -> IdempotencyKey {
    IdempotencyKey::new("p", "s", request_id)
}

fn fp() -> Fingerprint {
    Fingerprint {
        version: "v1".to_owned(),
        digest: "a".repeat(64),
    }
}

/// A step's batch of instances is chosen among those that may go: a stopped instance that
/// still owns an interrupted row (here the longest stopped, so first in any order) neither
/// fills a batch of one nor ends the pruning before the next stopped instance is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_owning_a_running_row_never_ends_pruning_early() {
    let db = TestDb::migrated().await;
    let store = db.store().await;
    let pool = db.pool().await;
    for (name, lapsed_hours) in [("inst_owner", 3), ("inst_idle", 2)] {
        sqlx::query(
            "INSERT INTO carmy.instances (instance_id, lease_expires_at) \
             VALUES ($1, now() - $2::bigint * interval '1 hour')",
        )
        .bind(name)
        .bind(lapsed_hours)
        .execute(&pool)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO carmy.reservations (principal, session_id, request_id, tool, fingerprint, \
             fingerprint_version, state, execution_id, owner_instance, created_at, started_at) \
         VALUES ('p', 's', 'interrupted', 'echo', 'f', 'v1', 'running', 'exec_interrupted', \
             'inst_owner', now() - interval '3 hours', now() - interval '3 hours')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let mut pruned = Pruned::default();
    for _ in 0..5 {
        let PruneStep::Pruned(step) = store.prune_expired(RETENTION, 1).await.unwrap() else {
            panic!("nobody else prunes")
        };
        pruned.add(step);
        if !step.filled(1) {
            break;
        }
    }
    assert_eq!(
        pruned,
        Pruned {
            instances: 1,
            ..Pruned::default()
        }
    );
    let left = column(&pool, "SELECT instance_id FROM carmy.instances").await;
    assert_eq!(
        left,
        BTreeSet::from([store.instance_id().to_owned(), "inst_owner".to_owned()])
    );
    store.shutdown().await.unwrap();
}

/// While one replica's pruning step holds the lock (its `DELETE` waits on a table lock the test
/// holds), the other replica's step answers `Busy` at once and deletes nothing; the first one
/// then finishes and prunes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_pruning_at_once_never_both_hold_the_lock() {
    let db = TestDb::migrated().await;
    let first = Arc::new(db.store().await);
    let second = db.store().await;
    let mut connection = db.connect().await;
    sqlx::query(
        "INSERT INTO carmy.reservations (principal, session_id, request_id, tool, fingerprint, \
             fingerprint_version, state, execution_id, outcome, created_at, finished_at) \
         VALUES ('p', 's', 'old', 'echo', 'f', 'v1', 'completed', 'exec_old', $1, \
             now() - interval '2 hours', now() - interval '2 hours')",
    )
    .bind(outcome("exec_old", "completed"))
    .execute(&mut connection)
    .await
    .unwrap();
    let mut blocker = db.connect().await;
    sqlx::query("BEGIN").execute(&mut blocker).await.unwrap();
    sqlx::query("LOCK TABLE carmy.reservations IN SHARE MODE")
        .execute(&mut blocker)
        .await
        .unwrap();
    let holding = {
        let first = Arc::clone(&first);
        tokio::spawn(async move { first.prune_expired(RETENTION, 10).await })
    };
    db.until_lock_waiters(
        1,
        "the first step waits on the table lock, holding the pruning lock",
    )
    .await;
    for _ in 0..5 {
        assert_eq!(
            second.prune_expired(RETENTION, 10).await.unwrap(),
            PruneStep::Busy,
            "a second replica never prunes while the first holds the lock"
        );
    }
    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
    assert_eq!(
        holding.await.unwrap().unwrap(),
        PruneStep::Pruned(Pruned {
            records: 1,
            ..Pruned::default()
        })
    );
    assert_eq!(
        second.prune_expired(RETENTION, 10).await.unwrap(),
        PruneStep::Pruned(Pruned::default()),
        "the lock is free once the step committed"
    );
    first.shutdown().await.unwrap();
    second.shutdown().await.unwrap();
}

/// Twenty concurrent reservations of one expired identity over two replicas: exactly one is
/// reserved (the row replaced in place), every other one sees the new running execution.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expired_row_is_replaced_by_exactly_one_reservation() {
    let db = TestDb::migrated().await;
    let stores: Vec<Arc<dyn IdempotencyStore>> =
        vec![Arc::new(db.store().await), Arc::new(db.store().await)];
    let mut connection = db.connect().await;
    sqlx::query(
        "INSERT INTO carmy.reservations (principal, session_id, request_id, tool, fingerprint, \
             fingerprint_version, state, execution_id, outcome, created_at, finished_at) \
         VALUES ('p', 's', 'reused', 'echo', $1, 'v1', 'completed', 'exec_old', $2, \
             now() - interval '2 hours', now() - interval '2 hours')",
    )
    .bind("a".repeat(64))
    .bind(outcome("exec_old", "completed"))
    .execute(&mut connection)
    .await
    .unwrap();
    let attempts = (0..20).map(|i| {
        let store = Arc::clone(&stores[i % 2]);
        tokio::spawn(async move {
            let intent = ExecutionIntent {
                execution_id: ExecutionId::generate(),
                tool: "echo".into(),
                parts: None,
                retention: Some(RETENTION),
                arguments: None,
            };
            let reserved = store
                .reserve(
                    Claim {
                        key: &key("reused"),
                        fingerprint: &fp(),
                    },
                    &intent,
                )
                .await
                .unwrap();
            (intent.execution_id, reserved)
        })
    });
    let mut winners = Vec::new();
    for attempt in attempts {
        let (execution_id, reserved) = attempt.await.unwrap();
        match reserved {
            Reservation::Reserved => winners.push(execution_id),
            Reservation::Existing(carmy::store::Existing::Uncertain { .. }) => {}
            other => panic!("an expired record is never replayed: {other:?}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one reservation replaces it");
    let held: Vec<String> = sqlx::query_scalar(
        "SELECT execution_id FROM carmy.reservations WHERE request_id = 'reused'",
    )
    .fetch_all(&mut connection)
    .await
    .unwrap();
    assert_eq!(held, vec![winners[0].as_str().to_owned()]);
}
