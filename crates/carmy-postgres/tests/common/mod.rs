//! Helpers shared by the carmy-postgres test binaries that include this module (`mod common;`).

use carmy::fingerprint::Fingerprint;
use carmy::outcome::{ExecutionId, ExecutionResult, ExecutionStatus};
use carmy::runtime::{Claim, ExecutionIntent, IdempotencyKey, IdempotencyStore, Reservation};
use carmy_postgres::PostgresStore;
use chrono::Utc;

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
