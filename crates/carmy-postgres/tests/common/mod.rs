//! Helpers shared by the carmy-postgres test binaries that include this module (`mod common;`):
//! identities, fingerprints, intents and outcomes built one way, the store's `reserve` and
//! `complete` without an inline `Claim`, and the raw columns of a reservation row.

// Every binary that includes this module uses only some of it.
#![allow(dead_code)]

use carmy::fingerprint::Fingerprint;
use carmy::outcome::{
    ExecutionError, ExecutionId, ExecutionResult, ExecutionStatus, RecordedResult,
};
use carmy::store::{
    Claim, ExecutionIntent, IdempotencyKey, IdempotencyStore, Reservation, StoreError, StoreFuture,
};
use carmy_postgres::{ConnectError, PostgresStore};
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgPool, Row};

/// Reserves and completes one new call on `store`: principal `p`, session `s`, request id
/// `request`, tool `create_order`, recorded `completed` with `{"order_id": 1}`.
///
/// # Panics
/// When the identity is not new or the store fails.
pub async fn one_call(store: &PostgresStore, request: &str) {
    let key = IdempotencyKey::new("p", "s", request);
    let fingerprint = Fingerprint {
        version: "v1".to_owned(),
        digest: "a".repeat(64),
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
    let reserved = store.reserve(claim, &intent).await.unwrap();
    assert!(matches!(reserved, Reservation::Reserved), "{reserved:?}");
    let result = ExecutionResult {
        execution_id: intent.execution_id.clone(),
        status: ExecutionStatus::Completed,
        data: serde_json::json!({ "order_id": 1 }),
        error: None,
        tool: intent.tool.clone(),
        request_id: Some(request.to_owned()),
        session_id: "s".to_owned(),
        started_at: Utc::now(),
        finished_at: Utc::now(),
        resolution: None,
    };
    store.complete(claim, &result.into()).await.unwrap();
}

pub fn key(principal: &str, session: &str, request: &str) -> IdempotencyKey {
    IdempotencyKey::new(principal, session, request)
}

/// A `v1` fingerprint whose digest is `c` repeated 64 times.
pub fn fp(c: char) -> Fingerprint {
    Fingerprint {
        version: "v1".to_owned(),
        digest: c.to_string().repeat(64),
    }
}

/// The store's `complete` of `result` for `key`, reserved with `fingerprint`.
pub fn complete<'a>(
    store: &'a (impl IdempotencyStore + ?Sized),
    key: &'a IdempotencyKey,
    fingerprint: &'a Fingerprint,
    result: &'a RecordedResult,
) -> StoreFuture<'a, ()> {
    store.complete(Claim { key, fingerprint }, result)
}

/// The store's `reserve` of `key` with `fingerprint` for `intent`.
pub fn reserve<'a>(
    store: &'a (impl IdempotencyStore + ?Sized),
    key: &'a IdempotencyKey,
    fingerprint: &'a Fingerprint,
    intent: &'a ExecutionIntent,
) -> StoreFuture<'a, Reservation> {
    store.reserve(Claim { key, fingerprint }, intent)
}

pub fn intent(tool: &str) -> ExecutionIntent {
    ExecutionIntent {
        execution_id: ExecutionId::generate(),
        tool: tool.to_owned(),
        parts: None,
        retention: Some(carmy::retention::DEFAULT_RETENTION),
        arguments: None,
    }
}

/// Millisecond timestamps: the record keeps milliseconds, so these compare equal after a replay.
pub fn at(millis: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(millis).unwrap()
}

pub fn result(
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
        // `ExecutionStatus` is non-exhaustive; these tests know the four above.
        other => panic!("no test outcome for status {other:?}"),
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

pub fn order(id: u64) -> Value {
    serde_json::json!({ "order_id": id })
}

/// The raw columns of one reservation row.
#[derive(Debug, PartialEq)]
pub struct RawRow {
    pub state: String,
    pub execution_id: String,
    pub outcome: Option<String>,
    pub error_code: Option<String>,
    pub owner_instance: Option<String>,
    pub finished: bool,
}

pub async fn raw_row(pool: &PgPool, key: &IdempotencyKey) -> Option<RawRow> {
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

pub async fn applied_versions(pool: &PgPool) -> Vec<(i32, String, String)> {
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

pub fn assert_unavailable<T: std::fmt::Debug>(outcome: Result<T, StoreError>) -> String {
    match outcome {
        Err(StoreError::Unavailable(reason)) => reason,
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

pub fn assert_not_ready<T: std::fmt::Debug>(outcome: Result<T, StoreError>) -> String {
    match outcome {
        Err(StoreError::NotReady(reason)) => reason,
        other => panic!("expected NotReady, got {other:?}"),
    }
}

/// The text of a [`ConnectError::Unavailable`]; panics on anything else.
pub fn assert_cannot_connect<T: std::fmt::Debug>(outcome: Result<T, ConnectError>) -> String {
    match outcome {
        Err(ConnectError::Unavailable(reason)) => reason,
        other => panic!("expected ConnectError::Unavailable, got {other:?}"),
    }
}
