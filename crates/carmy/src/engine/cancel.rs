//! Cancellation: of one execution on request (here or on another replica, through the store's
//! cancel delivery), and the tracking of this process's running executions that it needs.

use super::lease_loss::Running;
use super::{CancelAnswer, Engine, Refusal};
use crate::outcome::ExecutionId;
use crate::store::{InFlightState, RecordState};
use std::collections::HashMap;
use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

/// How often a cancel request reads the record while it waits for the outcome.
const CANCEL_POLL: Duration = Duration::from_millis(20);

/// Removes an execution from the running map when its task ends, however it ends.
pub(super) struct RunningGuard<'a> {
    engine: &'a Engine,
    execution_id: ExecutionId,
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.engine.running_map().remove(&self.execution_id);
    }
}

impl Engine {
    pub(super) fn running_map(&self) -> MutexGuard<'_, HashMap<ExecutionId, Running>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a running execution and returns its cancellation token. A `reserved` one (its
    /// identity is held in the store) is asked to stop at once if the lease has lapsed
    /// meanwhile (docs/semantics.md §12.2).
    pub(super) fn track(&self, execution_id: &ExecutionId, reserved: bool) -> CancellationToken {
        let token = self.cancel_executions.child_token();
        self.running_map()
            .insert(execution_id.clone(), Running::new(token.clone(), reserved));
        if reserved && self.lease_lapsed() {
            self.stop_for_lease_loss(execution_id, false);
        }
        token
    }

    /// Unregisters `execution_id` when the guard drops.
    pub(super) fn running_guard(&self, execution_id: ExecutionId) -> RunningGuard<'_> {
        RunningGuard {
            engine: self,
            execution_id,
        }
    }

    /// Forwards cancel requests published by other processes (see
    /// [`IdempotencyStore::cancel_requests`](crate::store::IdempotencyStore::cancel_requests))
    /// to the executions this process runs, until the engine is dropped. Needs a Tokio runtime;
    /// does nothing for process-local stores.
    pub fn listen_for_remote_cancels(self: &Arc<Self>) {
        let Some(mut requests) = self.store.cancel_requests() else {
            return;
        };
        let engine = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let execution_id = match requests.recv().await {
                    Ok(execution_id) => execution_id,
                    Err(RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "missed cancel requests");
                        continue;
                    }
                    Err(RecvError::Closed) => return,
                };
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                let token = engine.running_map().get(&execution_id).map(Running::token);
                if let Some(token) = token {
                    tracing::info!(%execution_id, "cancelling on request of another process");
                    token.cancel();
                }
            }
        });
    }

    /// Cancels a running execution of `principal`:
    ///
    /// - not `principal`'s, or unknown → [`Refusal::NotFound`];
    /// - already finished → [`Refusal::Finished`] (the record is unchanged);
    /// - interrupted (its process died) → [`Refusal::Uncertain`]: nothing can stop it;
    /// - running here or on another replica → cancelled, and once its outcome is recorded
    ///   (normally `cancelled`) [`CancelAnswer::Finished`]; if that takes longer than
    ///   [`EngineConfig::cancel_wait`](super::EngineConfig::cancel_wait),
    ///   [`CancelAnswer::Pending`].
    ///
    /// # Errors
    /// The [`Refusal`]s above, or [`Refusal::StoreUnavailable`].
    pub async fn cancel(
        &self,
        principal: &str,
        execution_id: &ExecutionId,
    ) -> Result<CancelAnswer, Refusal> {
        let found = self.find(principal, execution_id).await?;
        if found.released.is_some() {
            return Err(Refusal::Finished {
                execution_id: execution_id.clone(),
            });
        }
        match found.record.state {
            RecordState::Finished(_) => {
                return Err(Refusal::Finished {
                    execution_id: execution_id.clone(),
                })
            }
            RecordState::InFlight(InFlightState::Interrupted) => {
                return Err(Refusal::Uncertain {
                    execution_id: execution_id.clone(),
                    state: InFlightState::Interrupted,
                    reconciling: false,
                    retry_after: None,
                })
            }
            RecordState::InFlight(InFlightState::Running) => {}
        }
        let local = self.running_map().get(execution_id).map(Running::token);
        match local {
            Some(token) => token.cancel(),
            None => self.store.request_cancel(execution_id).await?,
        }
        let deadline = Instant::now() + self.config.cancel_wait;
        loop {
            if let RecordState::Finished(result) =
                self.find(principal, execution_id).await?.record.state
            {
                return Ok(CancelAnswer::Finished(result));
            }
            if Instant::now() >= deadline {
                return Ok(CancelAnswer::Pending(execution_id.clone()));
            }
            tokio::time::sleep(CANCEL_POLL).await;
        }
    }
}
