//! The store conformance suite: the same checks run against every [`IdempotencyStore`]
//! (docs/semantics.md §8). Enabled by the `conformance` feature.
//!
//! A store crate generates one test per check with
//! [`store_conformance_tests!`](crate::store_conformance_tests):
//!
//! ```ignore
//! async fn fresh_store() -> std::sync::Arc<dyn carmy::store::IdempotencyStore> { /* … */ }
//! carmy::store_conformance_tests!(fresh_store);
//! ```
//!
//! Every check receives a fresh, empty store and panics with a message naming the broken rule.
//! The checks of decisions (docs/semantics.md §12.1) are in `decisions`, of listing executions
//! (§12.4) in `listing`, of waiting for an outcome (§12.6) in `waiting`, of retention (§12.9) in
//! `retention`, of who holds an identity (concurrent reserves, `release`) in `holding`.

mod decisions;
mod holding;
mod listing;
mod retention;
mod waiting;

pub use decisions::*;
pub use holding::*;
pub use listing::*;
pub use retention::*;
pub use waiting::*;

use crate::fingerprint::{fingerprint, Fingerprint};
use crate::outcome::{
    ExecutionError, ExecutionId, ExecutionResult, ExecutionStatus, RecordedResult,
};
use crate::store::{
    Claim, ExecutionIntent, Existing, IdempotencyKey, IdempotencyStore, InFlightState, RecordState,
    Reservation, StoreError, StoreFuture,
};
use chrono::{TimeZone, Utc};
use serde_json::{json, Value};
use std::sync::Arc;

/// Generates one `#[tokio::test]` (multi-thread runtime) per conformance check; `$factory` is
/// an async fn returning a fresh `Arc<dyn IdempotencyStore>`.
#[macro_export]
macro_rules! store_conformance_tests {
    ($factory:path) => {
        $crate::store_conformance_tests!(@cases $factory;
            reserve_complete_replay,
            conflict_in_every_state,
            uncertain_while_running,
            identity_parts_never_collide,
            complete_only_by_the_owner,
            complete_is_idempotent,
            outcomes_are_lossless,
            lookups_are_scoped_to_the_principal,
            concurrent_reserves_have_one_winner,
            release_frees_only_an_unused_reservation,
            ready_when_reachable,
            resolve_records_once_and_replays,
            release_frees_the_identity_and_keeps_history,
            decisions_are_scoped_to_the_principal,
            concurrent_decisions_have_one_winner,
            listing_filters_and_scopes,
            listing_filters_by_tool_and_failure_in_either_order,
            listing_finds_by_arguments,
            waiting_ends_when_the_outcome_is_recorded,
            late_arrivals_are_kept_beside_the_record,
            expired_records_run_as_new,
            pruning_removes_only_expired_records,
            the_pruner_deletes_a_backlog_in_one_pass,
        );
    };
    (@cases $factory:path; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                $crate::conformance::$case($factory().await).await;
            }
        )+
    };
}

fn key(principal: &str, session_id: &str, request_id: &str) -> IdempotencyKey {
    IdempotencyKey::new(principal, session_id, request_id)
}

fn fp(arguments: &Value) -> Fingerprint {
    fingerprint("echo", arguments, None).expect("test arguments fingerprint")
}

fn intent() -> ExecutionIntent {
    ExecutionIntent {
        execution_id: ExecutionId::generate(),
        tool: "echo".into(),
        parts: None,
        retention: Some(crate::retention::DEFAULT_RETENTION),
        arguments: None,
    }
}

fn result_for(
    intent: &ExecutionIntent,
    key: &IdempotencyKey,
    status: ExecutionStatus,
    data: Value,
) -> ExecutionResult {
    ExecutionResult {
        execution_id: intent.execution_id.clone(),
        status,
        error: (status != ExecutionStatus::Completed).then(|| ExecutionError {
            code: "TOOL_ERROR".into(),
            message: "failed".into(),
            effect: None,
            details: None,
        }),
        data,
        tool: intent.tool.clone(),
        request_id: Some(key.request_id.clone()),
        session_id: key.session_id.clone(),
        started_at: Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap(),
        finished_at: Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 6).unwrap(),
        resolution: None,
    }
}

async fn reserve(
    store: &dyn IdempotencyStore,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
    intent: &ExecutionIntent,
) -> Reservation {
    store
        .reserve(Claim { key, fingerprint }, intent)
        .await
        .expect("reserve succeeds")
}

/// The store's `complete` of `result` for `key`, reserved with `fingerprint`.
fn complete<'a>(
    store: &'a dyn IdempotencyStore,
    key: &'a IdempotencyKey,
    fingerprint: &'a Fingerprint,
    result: &'a RecordedResult,
) -> StoreFuture<'a, ()> {
    store.complete(Claim { key, fingerprint }, result)
}

/// New identity → `Reserved`; after `complete`, the same fingerprint → `Replay` of exactly the
/// recorded outcome.
pub async fn reserve_complete_replay(store: Arc<dyn IdempotencyStore>) {
    let k = key("p", "s", "r1");
    let f = fp(&json!({"a": 1}));
    let first = intent();
    assert_eq!(
        reserve(&*store, &k, &f, &first).await,
        Reservation::Reserved
    );
    let recorded = result_for(
        &first,
        &k,
        ExecutionStatus::Completed,
        json!({"order_id": 1}),
    );
    complete(&*store, &k, &f, &recorded.clone().into())
        .await
        .expect("complete");
    assert_eq!(
        reserve(&*store, &k, &f, &intent()).await,
        Reservation::Existing(Existing::Replay(recorded.clone().into()))
    );
    for status in [
        ExecutionStatus::Failed,
        ExecutionStatus::TimedOut,
        ExecutionStatus::Cancelled,
    ] {
        let k = key("p", "s", status.as_str());
        let attempt = intent();
        assert_eq!(
            reserve(&*store, &k, &f, &attempt).await,
            Reservation::Reserved
        );
        let recorded = result_for(&attempt, &k, status, Value::Null);
        complete(&*store, &k, &f, &recorded.clone().into())
            .await
            .expect("complete");
        assert_eq!(
            reserve(&*store, &k, &f, &intent()).await,
            Reservation::Existing(Existing::Replay(recorded.into())),
            "{status:?} replays like any other outcome"
        );
    }
}

/// A different fingerprint is a conflict while running and after finishing, and the conflict
/// names the holder's execution and its part digests only (docs/semantics.md §12.8); a record
/// reserved without part digests conflicts all the same, naming none.
pub async fn conflict_in_every_state(store: Arc<dyn IdempotencyStore>) {
    let k = key("p", "s", "r6");
    let a = fp(&json!({"sku": "A"}));
    let b = fp(&json!({"sku": "B"}));
    let (_, parts) =
        crate::fingerprint::fingerprint_with_parts("echo", &json!({"sku": "A"}), None).unwrap();
    let holder = ExecutionIntent {
        parts: Some(parts),
        ..intent()
    };
    assert_eq!(
        reserve(&*store, &k, &a, &holder).await,
        Reservation::Reserved
    );
    let conflict = Reservation::Existing(Existing::Conflict {
        execution_id: holder.execution_id.clone(),
        parts: Some(parts),
    });
    assert_eq!(reserve(&*store, &k, &b, &intent()).await, conflict);
    let recorded = result_for(
        &holder,
        &k,
        ExecutionStatus::Completed,
        json!({"secret": 1}),
    );
    complete(&*store, &k, &a, &recorded.clone().into())
        .await
        .expect("complete");
    assert_eq!(reserve(&*store, &k, &b, &intent()).await, conflict);
    let other_tool = fingerprint("find_orders", &json!({"sku": "A"}), None).unwrap();
    assert_eq!(reserve(&*store, &k, &other_tool, &intent()).await, conflict);

    let without = key("p", "s", "r6-no-parts");
    let holder = intent();
    assert_eq!(
        reserve(&*store, &without, &a, &holder).await,
        Reservation::Reserved
    );
    assert_eq!(
        reserve(&*store, &without, &b, &intent()).await,
        Reservation::Existing(Existing::Conflict {
            execution_id: holder.execution_id.clone(),
            parts: None,
        })
    );
}

/// Same fingerprint while running → `Uncertain { state: Running }` naming the holder.
pub async fn uncertain_while_running(store: Arc<dyn IdempotencyStore>) {
    let k = key("p", "s", "r-running");
    let f = fp(&json!({}));
    let holder = intent();
    assert_eq!(
        reserve(&*store, &k, &f, &holder).await,
        Reservation::Reserved
    );
    assert_eq!(
        reserve(&*store, &k, &f, &intent()).await,
        Reservation::Existing(Existing::Uncertain {
            execution_id: holder.execution_id.clone(),
            state: InFlightState::Running,
        })
    );
}

/// Identity parts are separate values: no separator collisions, principals apart.
pub async fn identity_parts_never_collide(store: Arc<dyn IdempotencyStore>) {
    let f = fp(&json!({}));
    for k in [
        key("p", "a", "b:c"),
        key("p", "a:b", "c"),
        key("p:a", "b", "c"),
        key("q", "a", "b:c"),
        key("p", "a\u{1f}b", "c"),
    ] {
        assert_eq!(
            reserve(&*store, &k, &f, &intent()).await,
            Reservation::Reserved,
            "{k:?} is its own identity"
        );
    }
}

/// `complete` from an execution that does not hold the identity is refused and changes nothing.
pub async fn complete_only_by_the_owner(store: Arc<dyn IdempotencyStore>) {
    let k = key("p", "s", "r-owner");
    let f = fp(&json!({}));
    let holder = intent();
    assert_eq!(
        reserve(&*store, &k, &f, &holder).await,
        Reservation::Reserved
    );
    let stranger = intent();
    let forged = result_for(&stranger, &k, ExecutionStatus::Completed, json!(1));
    assert!(matches!(
        complete(&*store, &k, &f, &forged.clone().into()).await,
        Err(StoreError::NotOwner { .. })
    ));
    let vacant = key("p", "s", "r-never-reserved");
    assert!(matches!(
        complete(&*store, &vacant, &f, &forged.clone().into()).await,
        Err(StoreError::NotOwner { .. })
    ));
    assert_eq!(
        reserve(&*store, &k, &f, &intent()).await,
        Reservation::Existing(Existing::Uncertain {
            execution_id: holder.execution_id.clone(),
            state: InFlightState::Running,
        }),
        "a refused complete leaves the reservation running"
    );
    let genuine = result_for(&holder, &k, ExecutionStatus::Completed, json!(2));
    complete(&*store, &k, &f, &genuine.clone().into())
        .await
        .expect("owner completes");
    assert_eq!(
        reserve(&*store, &k, &f, &intent()).await,
        Reservation::Existing(Existing::Replay(genuine.into()))
    );
}

/// Repeating `complete` with the same outcome is `Ok` (a retry after a lost acknowledgement);
/// a different outcome for a finished execution is refused and the first one stands.
pub async fn complete_is_idempotent(store: Arc<dyn IdempotencyStore>) {
    let k = key("p", "s", "r-twice");
    let f = fp(&json!({}));
    let holder = intent();
    assert_eq!(
        reserve(&*store, &k, &f, &holder).await,
        Reservation::Reserved
    );
    let first = result_for(&holder, &k, ExecutionStatus::Completed, json!({"n": 1}));
    complete(&*store, &k, &f, &first.clone().into())
        .await
        .expect("complete");
    complete(&*store, &k, &f, &first.clone().into())
        .await
        .expect("same outcome again");
    let second = result_for(&holder, &k, ExecutionStatus::Completed, json!({"n": 2}));
    assert!(matches!(
        complete(&*store, &k, &f, &second.clone().into()).await,
        Err(StoreError::NotOwner { .. })
    ));
    assert_eq!(
        reserve(&*store, &k, &f, &intent()).await,
        Reservation::Existing(Existing::Replay(first.into()))
    );
}

/// Every outcome reads back exactly: empty containers, null, empty strings, NUL characters,
/// integers beyond 64 bits, and the record's timestamps.
pub async fn outcomes_are_lossless(store: Arc<dyn IdempotencyStore>) {
    let big: Value = serde_json::from_str("123456789012345678901234567890").unwrap();
    let values = [
        json!({}),
        json!([]),
        Value::Null,
        json!(""),
        json!({"note": "a\u{0}b", "v": [null, {}, []]}),
        json!({"big": big, "float": 0.1, "neg": -0.0}),
        json!("é and e\u{301} and \u{1F600}"),
    ];
    for (index, data) in values.into_iter().enumerate() {
        let k = key("p", "s", &format!("lossless-{index}"));
        let f = fp(&json!({"i": index}));
        let holder = intent();
        assert_eq!(
            reserve(&*store, &k, &f, &holder).await,
            Reservation::Reserved
        );
        let recorded = result_for(&holder, &k, ExecutionStatus::Completed, data);
        complete(&*store, &k, &f, &recorded.clone().into())
            .await
            .expect("complete");
        let Reservation::Existing(Existing::Replay(replayed)) =
            reserve(&*store, &k, &f, &intent()).await
        else {
            panic!("no replay for {index}");
        };
        assert_eq!(replayed.result(), &recorded);
        assert_eq!(replayed.record_json(), recorded.to_record_json());
    }
}

/// `lookup` and `find_execution` see only the given identity / principal.
pub async fn lookups_are_scoped_to_the_principal(store: Arc<dyn IdempotencyStore>) {
    let k = key("alice", "s", "r8");
    let f = fp(&json!({}));
    let holder = intent();
    assert_eq!(store.lookup(&k).await.unwrap(), None);
    assert_eq!(
        reserve(&*store, &k, &f, &holder).await,
        Reservation::Reserved
    );
    let record = store.lookup(&k).await.unwrap().expect("record");
    assert_eq!(record.execution_id, holder.execution_id);
    assert_eq!(record.fingerprint, f);
    assert_eq!(record.tool, "echo");
    assert_eq!(record.state, RecordState::InFlight(InFlightState::Running));
    assert_eq!(store.lookup(&key("bob", "s", "r8")).await.unwrap(), None);
    let found = store
        .find_execution("alice", &holder.execution_id)
        .await
        .unwrap()
        .expect("the owner finds it");
    assert_eq!(found.key, k);
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
}

/// A reachable, migrated store is ready.
pub async fn ready_when_reachable(store: Arc<dyn IdempotencyStore>) {
    store.check_ready().await.expect("ready");
}
