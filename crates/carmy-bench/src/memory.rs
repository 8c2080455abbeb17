//! The in-memory store workload: reserve + complete pairs on fresh identities
//! ([`carmy::memory::InMemoryIdempotencyStore`] through [`IdempotencyStore`]), as the engine
//! does for each new call.
//!
//! Only the two store calls are timed. The inputs of a batch (keys, intents, results) are made
//! before its clock starts, and each batch gets a new store sized for it, dropped after its clock
//! stopped, so the figure is the store's own cost and does not depend on how full it already is.

use carmy::fingerprint::Fingerprint;
use carmy::memory::InMemoryIdempotencyStore;
use carmy::outcome::{ExecutionId, ExecutionResult, ExecutionStatus, RecordedResult};
use carmy::store::{
    Claim, ExecutionIntent, IdempotencyKey, IdempotencyStore, Reservation, StoreError,
    DEFAULT_SESSION,
};
use serde::Serialize;
use std::time::{Duration, Instant};

/// Pairs per batch in [`measure`].
pub const BATCH: usize = 50_000;

/// The inputs of one reserve + complete pair.
#[derive(Clone, Debug)]
pub struct PairInput {
    /// A fresh identity.
    pub key: IdempotencyKey,
    /// What is reserved for it.
    pub intent: ExecutionIntent,
    /// The outcome recorded for it (the intent's execution id, `completed`, `data` = `{}`),
    /// already serialised as the engine hands it to the store.
    pub result: RecordedResult,
}

/// The fingerprint every pair uses (the store compares it; its value does not matter).
pub fn fingerprint() -> Fingerprint {
    carmy::fingerprint::fingerprint("echo", &serde_json::json!({}), None)
        .expect("an empty object always has a fingerprint")
}

/// Makes `count` pairs on identities `mem-<first>` … of principal `bench`.
pub fn make_inputs(first: u64, count: usize) -> Vec<PairInput> {
    let now = chrono::Utc::now();
    // As the engine passes them: the call's part digests go with every reservation.
    let (_, parts) =
        carmy::fingerprint::fingerprint_with_parts("echo", &serde_json::json!({}), None)
            .expect("an empty object always has a fingerprint");
    (0..count as u64)
        .map(|offset| {
            let request_id = format!("mem-{}", first + offset);
            let execution_id = ExecutionId::generate();
            PairInput {
                key: IdempotencyKey::new("bench", DEFAULT_SESSION, request_id.clone()),
                intent: ExecutionIntent {
                    execution_id: execution_id.clone(),
                    tool: "echo".to_owned(),
                    parts: Some(parts),
                    retention: Some(carmy::retention::DEFAULT_RETENTION),
                    arguments: None,
                },
                result: RecordedResult::new(ExecutionResult {
                    execution_id,
                    status: ExecutionStatus::Completed,
                    data: serde_json::json!({}),
                    error: None,
                    tool: "echo".to_owned(),
                    request_id: Some(request_id),
                    session_id: DEFAULT_SESSION.to_owned(),
                    started_at: now,
                    finished_at: now,
                    resolution: None,
                }),
            }
        })
        .collect()
}

/// Runs reserve then complete for every input, in order.
///
/// # Errors
/// The store's error, or [`StoreError::Unavailable`] when a fresh identity was not
/// [`Reservation::Reserved`] (the inputs were not fresh).
pub async fn run_pairs(
    store: &dyn IdempotencyStore,
    fingerprint: &Fingerprint,
    inputs: &[PairInput],
) -> Result<(), StoreError> {
    for input in inputs {
        match store
            .reserve(
                Claim {
                    key: &input.key,
                    fingerprint,
                },
                &input.intent,
            )
            .await?
        {
            Reservation::Reserved => {}
            other => {
                return Err(StoreError::Unavailable(format!(
                    "a fresh identity was answered {other:?}"
                )))
            }
        }
        store
            .complete(
                Claim {
                    key: &input.key,
                    fingerprint,
                },
                &input.result,
            )
            .await?;
    }
    Ok(())
}

/// Times [`run_pairs`] over one batch of `inputs` on a new store, on the current-thread
/// `runtime`; the store is dropped after the clock stopped.
///
/// # Errors
/// As [`run_pairs`].
pub fn time_batch(
    runtime: &tokio::runtime::Runtime,
    fingerprint: &Fingerprint,
    inputs: &[PairInput],
) -> Result<Duration, StoreError> {
    let store = InMemoryIdempotencyStore::new(inputs.len());
    let started = Instant::now();
    runtime.block_on(run_pairs(&store, fingerprint, inputs))?;
    let elapsed = started.elapsed();
    drop(store);
    Ok(elapsed)
}

/// The result of [`measure`].
#[derive(Clone, Debug, Serialize)]
pub struct MemoryStoreResult {
    /// Reserve + complete pairs run.
    pub pairs: u64,
    /// Seconds on the clock (the store calls only).
    pub timed_seconds: f64,
    /// `pairs / timed_seconds`.
    pub pairs_per_second: f64,
}

/// Runs batches of [`BATCH`] pairs on one thread (a current-thread Tokio runtime, on the calling
/// thread) until `duration` of store time has been timed.
///
/// # Errors
/// As [`run_pairs`]; also [`StoreError::Unavailable`] when the runtime cannot be built.
pub fn measure(duration: Duration) -> Result<MemoryStoreResult, StoreError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| StoreError::Unavailable(format!("cannot build a runtime: {error}")))?;
    let fingerprint = fingerprint();
    // One untimed batch first: page the allocator in.
    time_batch(&runtime, &fingerprint, &make_inputs(0, BATCH / 5))?;
    let mut timed = Duration::ZERO;
    let mut pairs = 0u64;
    while timed < duration {
        let inputs = make_inputs(pairs, BATCH);
        timed += time_batch(&runtime, &fingerprint, &inputs)?;
        pairs += inputs.len() as u64;
    }
    let timed_seconds = timed.as_secs_f64();
    Ok(MemoryStoreResult {
        pairs,
        timed_seconds,
        pairs_per_second: pairs as f64 / timed_seconds,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn pairs_complete() {
        let result = super::measure(std::time::Duration::from_millis(10)).unwrap();
        assert!(result.pairs >= super::BATCH as u64);
        assert!(result.pairs_per_second > 0.0);
    }
}
