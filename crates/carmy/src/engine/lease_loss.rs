//! Lease loss (docs/semantics.md §12.2): once the store reports that this process's lease lapsed
//! ([`LeaseState::Lapsed`]), the other replicas read its reserved executions as interrupted, so
//! the engine asks their tools to stop, through the same token as a cancel request, and gives
//! each tool that was running the grace ([`EngineConfig::lease_loss_grace`](super::EngineConfig))
//! to finish: a tool that finishes within it has its real outcome recorded (or kept as a late
//! arrival when the execution was decided meanwhile); one still running after it is recorded
//! `cancelled` (effect unknown). The store refuses new reservations until a renewal succeeds.

use super::Engine;
use crate::outcome::ExecutionId;
use crate::store::LeaseState;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// One execution this process runs.
pub(super) struct Running {
    token: CancellationToken,
    /// Whether its identity is held in the store (a call with replay protection).
    reserved: bool,
    /// Whether it was asked to stop because the lease lapsed.
    stopped_for_lease_loss: bool,
    /// Whether it was running when the lease lapsed, so its tool gets the grace to finish
    /// ([`EngineConfig::lease_loss_grace`](super::EngineConfig::lease_loss_grace)); one
    /// started while the lease read lapsed gets none.
    grace: bool,
}

impl Running {
    pub(super) fn new(token: CancellationToken, reserved: bool) -> Self {
        Self {
            token,
            reserved,
            stopped_for_lease_loss: false,
            grace: false,
        }
    }

    /// Its cancellation token.
    pub(super) fn token(&self) -> CancellationToken {
        self.token.clone()
    }
}

impl Engine {
    /// Asks the tools of reserved executions to stop whenever the store reports that the lease
    /// lapsed ([`IdempotencyStore::lease_state`](crate::store::IdempotencyStore::lease_state)),
    /// until the engine is dropped. Needs a Tokio runtime; does nothing for stores without
    /// leases.
    pub fn stop_tools_on_lease_loss(self: &Arc<Self>) {
        let Some(mut lease) = self.lease.clone() else {
            return;
        };
        let engine = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                if lease
                    .wait_for(|state| *state == LeaseState::Lapsed)
                    .await
                    .is_err()
                {
                    return;
                }
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                // Read again under the running map's lock: a renewal that landed since the
                // wake-up must not stop an execution started after it.
                let reserved: Vec<ExecutionId> = {
                    let running = engine.running_map();
                    if engine.lease_lapsed() {
                        running
                            .iter()
                            .filter(|(_, running)| running.reserved)
                            .map(|(execution_id, _)| execution_id.clone())
                            .collect()
                    } else {
                        Vec::new()
                    }
                };
                for execution_id in &reserved {
                    engine.stop_for_lease_loss(execution_id, true);
                }
                drop(engine);
                if lease
                    .wait_for(|state| *state == LeaseState::Held)
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
    }

    /// Whether the store reports the lease lapsed now.
    pub(super) fn lease_lapsed(&self) -> bool {
        self.lease
            .as_ref()
            .is_some_and(|lease| *lease.borrow() == LeaseState::Lapsed)
    }

    /// Asks one running execution's tool to stop because the lease lapsed (once); with
    /// `grace`, its tool may still finish within the grace (docs/semantics.md §12.2).
    pub(super) fn stop_for_lease_loss(&self, execution_id: &ExecutionId, grace: bool) {
        let token = {
            let mut running = self.running_map();
            let Some(running) = running.get_mut(execution_id) else {
                return;
            };
            if running.token.is_cancelled() {
                return;
            }
            running.stopped_for_lease_loss = true;
            running.grace = grace;
            running.token.clone()
        };
        tracing::warn!(%execution_id, "asking the tool to stop: this replica's lease lapsed, the other replicas report the execution interrupted");
        token.cancel();
    }

    /// Whether `execution_id` was asked to stop because the lease lapsed.
    pub(super) fn stopped_for_lease_loss(&self, execution_id: &ExecutionId) -> bool {
        self.running_map()
            .get(execution_id)
            .is_some_and(|running| running.stopped_for_lease_loss)
    }

    /// How long the tool of `execution_id`, asked to stop, may still take to finish: the
    /// lease-loss grace when it was running as the lease lapsed (and the process is not
    /// shutting down), else nothing.
    pub(super) fn grace_after_stop(&self, execution_id: &ExecutionId) -> Option<Duration> {
        if self.cancel_executions.is_cancelled() {
            return None;
        }
        self.running_map()
            .get(execution_id)
            .filter(|running| running.stopped_for_lease_loss && running.grace)
            .map(|_| self.config.lease_loss_grace)
    }
}
