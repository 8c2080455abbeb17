//! Recording outcomes and freeing unused reservations, both retried with one backoff until the
//! store answers (docs/semantics.md §4: an outcome is never lost while the process lives).

use super::run::Delivery;
use super::{Engine, Refusal};
use crate::fault;
use crate::fingerprint::Fingerprint;
use crate::outcome::{ExecutionId, RecordedResult};
use crate::store::{Claim, IdempotencyKey, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// Exponential backoff between store attempts: the pause doubles from `initial` up to `max`.
struct Backoff {
    pause: Duration,
    max: Duration,
}

impl Backoff {
    fn new(initial: Duration, max: Duration) -> Self {
        Self {
            pause: initial,
            max,
        }
    }

    /// Sleeps for the current pause, then doubles it (up to the maximum).
    async fn wait(&mut self) {
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(self.max);
    }
}

impl Engine {
    /// Keeps an outcome that arrived after its execution was decided as a late arrival
    /// (docs/semantics.md §12.6), retrying until the store accepts it, and tells the waiting
    /// caller which execution holds the identity now.
    pub(super) async fn late_arrival(
        &self,
        claim: Claim<'_>,
        result: &RecordedResult,
        recorded: Option<oneshot::Sender<Delivery>>,
    ) {
        let execution_id = result.result().execution_id.clone();
        let mut backoff = self.backoff();
        let current = loop {
            match self.store.record_late_arrival(claim, result).await {
                Ok(current) => break current,
                Err(error) => {
                    tracing::warn!(%execution_id, %error, "keeping a late arrival failed; retrying");
                    backoff.wait().await;
                }
            }
        };
        self.metrics.late_arrival();
        self.flag_contradiction(&execution_id, result.result().status)
            .await;
        tracing::warn!(
            %execution_id,
            current = current.as_ref().map(ExecutionId::as_str),
            status = result.result().status.as_str(),
            "late arrival: the tool finished after its execution was decided; its outcome is in the audit log, not the record, and its effect may have happened twice"
        );
        if let Some(sender) = recorded {
            let _ = sender.send(Err(Refusal::Superseded {
                execution_id,
                current,
            }));
        }
    }

    fn backoff(&self) -> Backoff {
        Backoff::new(
            self.config.complete_retry_initial,
            self.config.complete_retry_max,
        )
    }

    /// Frees a reservation that may have been made for an execution that will never run (the
    /// store failed mid-`reserve`), retrying until the store answers.
    pub(super) fn release_in_background(
        self: &Arc<Self>,
        key: IdempotencyKey,
        execution_id: ExecutionId,
    ) {
        let engine = Arc::clone(self);
        self.executions.spawn(async move {
            let mut backoff = engine.backoff();
            while let Err(error) = engine.store.release(&key, &execution_id).await {
                tracing::warn!(%execution_id, %error, "freeing an unused reservation failed; retrying");
                backoff.wait().await;
            }
        });
    }

    /// Frees the reservation of an execution whose tool reported no effect, before the caller
    /// is told (so a retry finds the identity free); if the store fails, keeps trying in the
    /// background.
    pub(super) async fn release_now(
        self: &Arc<Self>,
        key: IdempotencyKey,
        execution_id: ExecutionId,
    ) {
        if let Err(error) = self.store.release(&key, &execution_id).await {
            tracing::warn!(%execution_id, %error, "freeing a reservation without effect failed; retrying");
            self.release_in_background(key, execution_id);
        }
    }

    /// Records the outcome, telling the waiting caller after the first attempt (`Some` when it
    /// succeeded) and retrying failures in the background until the store accepts it.
    pub(super) async fn record(
        &self,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        result: RecordedResult,
        recorded: oneshot::Sender<Delivery>,
    ) {
        let mut recorded = Some(recorded);
        let mut backoff = self.backoff();
        loop {
            let recording = std::time::Instant::now();
            let claim = Claim { key, fingerprint };
            let completed = self.store.complete(claim, &result).await;
            self.metrics.complete_took(recording.elapsed());
            match completed {
                Ok(()) => {
                    fault::point(fault::AFTER_COMPLETE);
                    if let Some(sender) = recorded.take() {
                        // The caller may have gone; the record stands either way.
                        let _ = sender.send(Ok(result));
                    } else {
                        tracing::info!(execution_id = %result.result().execution_id, "outcome recorded after retries");
                    }
                    return;
                }
                Err(StoreError::NotOwner { .. }) => {
                    self.late_arrival(claim, &result, recorded.take()).await;
                    return;
                }
                Err(error) => {
                    tracing::warn!(execution_id = %result.result().execution_id, %error, "recording the outcome failed; retrying");
                    if let Some(sender) = recorded.take() {
                        let _ = sender.send(Err(Refusal::RecordingPending {
                            execution_id: result.result().execution_id.clone(),
                        }));
                    }
                    backoff.wait().await;
                }
            }
        }
    }
}
