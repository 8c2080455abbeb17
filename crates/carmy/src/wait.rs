//! Waiting for a running execution's outcome (docs/semantics.md §12.6, `Prefer: wait=N`): the one
//! loop both stores use, woken by their notifications of recorded outcomes and reading the
//! record at least every [`POLL_EVERY`] in case a notification was lost.

use crate::outcome::ExecutionId;
use crate::store::{IdempotencyKey, IdempotencyStore, RecordState, StoreError, StoredRecord};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::time::Instant;

/// The longest pause between two reads of the record while waiting.
pub const POLL_EVERY: Duration = Duration::from_secs(1);

/// Whether `record` is still `execution_id`'s and without an outcome.
fn still_waiting(record: Option<&StoredRecord>, execution_id: &ExecutionId) -> bool {
    record.is_some_and(|record| {
        &record.execution_id == execution_id && matches!(record.state, RecordState::InFlight(_))
    })
}

/// Reads `key`'s record until `execution_id` no longer holds it without an outcome (it
/// finished, was resolved or released) or `timeout` passed; returns the record as last read
/// (`None` when the identity is vacant). `recorded` carries the ids of executions whose outcome
/// was just recorded (or decided); subscribe before calling, so nothing recorded in between is
/// missed.
///
/// # Errors
/// [`StoreError`] from [`IdempotencyStore::lookup`].
pub async fn until_decided(
    store: &dyn IdempotencyStore,
    mut recorded: Option<broadcast::Receiver<ExecutionId>>,
    key: &IdempotencyKey,
    execution_id: &ExecutionId,
    timeout: Duration,
) -> Result<Option<StoredRecord>, StoreError> {
    let deadline = Instant::now() + timeout;
    loop {
        let record = store.lookup(key).await?;
        let now = Instant::now();
        if !still_waiting(record.as_ref(), execution_id) || now >= deadline {
            return Ok(record);
        }
        let pause = tokio::time::sleep((deadline - now).min(POLL_EVERY));
        tokio::pin!(pause);
        loop {
            let Some(receiver) = recorded.as_mut() else {
                pause.as_mut().await;
                break;
            };
            tokio::select! {
                () = pause.as_mut() => break,
                heard = receiver.recv() => match heard {
                    Ok(id) if &id == execution_id => break,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => recorded = None,
                },
            }
        }
    }
}
