//! The three callers of reconciliation (docs/semantics.md §12.10): the reconciler every replica
//! runs in the background (rounds of claimed executions, retried with backoff), an operator's
//! request to probe one execution now, and a retry that meets an interrupted execution and is
//! answered from what the probe decided.

use super::Reconciled;
use crate::auth::Caller;
use crate::call::ValidatedCall;
use crate::engine::{Answer, Engine, Refusal};
use crate::outcome::ExecutionId;
use crate::reconcile::{backoff, Evidence, ProbeTarget, ReconcileClaim, ReconcileTarget};
use crate::store::{Existing, IdempotencyKey, InFlightState};
use crate::tool::{OnInterrupted, Tool};
use std::sync::Arc;
use std::time::Duration;

/// Executions one replica claims per round.
const CLAIM_BATCH: usize = 16;

/// Beyond the longest probe's deadline, how long a claim still holds an execution: the time
/// to keep the probe's evidence or decide.
const CLAIM_MARGIN: Duration = Duration::from_secs(5);

/// How long a claim holds its executions from other replicas: one probe's time, `longest`
/// (the longest `timeout_ms` of the tools' probes) and [`CLAIM_MARGIN`], since a round
/// probes all it claimed at once. A replica that dies holding claims delays their next probe
/// by at most this (25 s with a 20 s probe).
fn claim_hold(longest: Duration) -> Duration {
    longest + CLAIM_MARGIN
}

/// The pauses after each try of an on-demand claim that found nothing; after the third try
/// the answer is a refusal.
const ON_DEMAND_CLAIM_PAUSES: [Duration; 3] = [
    Duration::from_millis(50),
    Duration::from_millis(150),
    Duration::ZERO,
];

impl Engine {
    /// Starts the reconciler of this replica (docs/semantics.md §12.10): every
    /// [`EngineConfig::reconcile_interval`](crate::engine::EngineConfig) it claims interrupted
    /// executions of tools with a probe, probes and decides them. Stops with the engine's
    /// background work. Does nothing for a store that never has interrupted executions (it
    /// claims none).
    pub fn start_reconciler(self: &Arc<Self>) {
        let engine = Arc::downgrade(self);
        let stop = self.stop_background.clone();
        let interval = self.config.reconcile_interval;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(interval) => {}
                }
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                if let Err(error) = engine.reconcile_round().await {
                    tracing::warn!(%error, "reconciliation round failed; trying again later");
                }
            }
        });
    }

    /// One round: claims what is due and reconciles them all at once, so that the claim holds
    /// each for one probe's time ([`claim_hold`]): a replica that dies mid-round lets the
    /// others probe its claims as soon as that hold ends (docs/semantics.md §12.10).
    async fn reconcile_round(&self) -> Result<(), crate::store::StoreError> {
        let (tools, longest) = self.probed_tools();
        if tools.is_empty() {
            return Ok(());
        }
        let claim = ReconcileClaim {
            tools: tools.iter().map(|tool| tool.name().to_owned()).collect(),
            limit: CLAIM_BATCH,
            hold: claim_hold(longest),
            max_attempts: self.config.reconcile_max_attempts,
            execution_id: None,
            principal: None,
        };
        let claimed = self.store.claim_reconciliations(&claim).await?;
        let probes = claimed.iter().filter_map(|target| {
            let tool = tools.iter().find(|tool| tool.name() == target.tool)?;
            Some(self.reconcile_claimed(tool, target))
        });
        // Every probe finishes (and keeps its evidence) even when another one's store write
        // failed; the first failure is the round's.
        futures::future::join_all(probes)
            .await
            .into_iter()
            .collect::<Result<Vec<()>, _>>()
            .map(drop)
    }

    /// The tools that have a probe, and the longest of their deadlines.
    fn probed_tools(&self) -> (Vec<Arc<dyn Tool>>, Duration) {
        let tools: Vec<Arc<dyn Tool>> = self
            .tools()
            .into_iter()
            .filter(|tool| tool.probe().is_some())
            .collect();
        let longest = tools
            .iter()
            .filter_map(|tool| tool.probe().map(|probe| probe.timeout()))
            .max()
            .unwrap_or_default();
        (tools, longest)
    }

    /// Probes `execution_id` now and decides what the probe found (`POST
    /// /v1/executions/{id}/reconcile`, docs/semantics.md §12.10), on behalf of
    /// `caller`: its own execution, or any principal's for an operator. The execution is
    /// claimed first, so no replica probes it at the same time.
    ///
    /// # Errors
    /// [`Refusal::Invalid`] when it is not an interrupted execution of a tool with a probe
    /// (it has an outcome, a live owner, no probe, or another replica probes it right now);
    /// [`Refusal::StoreUnavailable`].
    pub async fn reconcile_now(
        &self,
        caller: &Caller,
        execution_id: &ExecutionId,
    ) -> Result<(Reconciled, Evidence), Refusal> {
        let (tools, longest) = self.probed_tools();
        let claim = ReconcileClaim {
            tools: tools.iter().map(|tool| tool.name().to_owned()).collect(),
            limit: 1,
            hold: claim_hold(longest),
            max_attempts: self.config.reconcile_max_attempts,
            execution_id: Some(execution_id.clone()),
            principal: caller.scope(),
        };
        // A replica's background claim locks the row for the instant of its statement (the
        // claim skips locked rows): a few short tries tell that instant from a real refusal.
        let mut claimed = Vec::new();
        for pause in ON_DEMAND_CLAIM_PAUSES {
            claimed = self.store.claim_reconciliations(&claim).await?;
            if !claimed.is_empty() {
                break;
            }
            tokio::time::sleep(pause).await;
        }
        let (Some(target), Some(tool)) = (
            claimed.first(),
            claimed
                .first()
                .and_then(|target| tools.iter().find(|tool| tool.name() == target.tool)),
        ) else {
            return Err(Refusal::Invalid(format!(
                "execution {execution_id} is not an interrupted execution of a tool with a [tools.reconcile] probe: it has an outcome, its owner is alive, its tool has no probe, another replica is probing it right now, or it is not yours; read it with GET /v1/executions/{execution_id}"
            )));
        };
        let probe_target = ProbeTarget {
            execution_id: target.execution_id.clone(),
            key: target.key.clone(),
            arguments: None,
        };
        let (reconciled, evidence) = self
            .reconcile_target(tool, &probe_target, Duration::MAX)
            .await?;
        let too_early = matches!(reconciled, Reconciled::TooEarly { .. });
        let retry_in = (reconciled.probe_again()
            && (too_early || target.attempts < self.config.reconcile_max_attempts))
            .then(|| reconciled.retry_in(self.config.reconcile_interval));
        self.keep_evidence(
            &probe_target,
            evidence.clone(),
            Some(target.attempts),
            retry_in,
            too_early,
        )
        .await?;
        Ok((reconciled, evidence))
    }

    /// Reconciles one claimed execution and keeps the evidence with when to probe again.
    async fn reconcile_claimed(
        &self,
        tool: &Arc<dyn Tool>,
        target: &ReconcileTarget,
    ) -> Result<(), crate::store::StoreError> {
        let probe_target = ProbeTarget {
            execution_id: target.execution_id.clone(),
            key: target.key.clone(),
            arguments: None,
        };
        let (reconciled, evidence) = match self
            .reconcile_target(tool, &probe_target, Duration::MAX)
            .await
        {
            Ok(done) => done,
            Err(refusal) => return Err(crate::store::StoreError::Unavailable(refusal.to_string())),
        };
        let too_early = matches!(reconciled, Reconciled::TooEarly { .. });
        let retry_in = (reconciled.probe_again()
            && (too_early || target.attempts < self.config.reconcile_max_attempts))
            .then(|| {
                reconciled.retry_in(backoff(
                    self.config.reconcile_interval,
                    self.config.reconcile_backoff_max,
                    target.attempts,
                ))
            });
        self.keep_evidence(
            &probe_target,
            evidence,
            Some(target.attempts),
            retry_in,
            too_early,
        )
        .await
    }

    /// A retry met `execution_id`, interrupted, of `tool`, which has a probe (docs/semantics.md
    /// §12.10): the probe runs now, within
    /// [`EngineConfig::reconcile_inline`](crate::engine::EngineConfig), and the call is answered from
    /// what it decided: the resolved outcome replayed, a new run after a release, a takeover
    /// for a `rerun` tool; else `EXECUTION_UNCERTAIN` (`interrupted`, being reconciled while
    /// the probe was inconclusive).
    ///
    /// # Errors
    /// As [`Engine::execute`].
    pub(in crate::engine) async fn reconcile_retry(
        self: &Arc<Self>,
        tool: Arc<dyn Tool>,
        call: ValidatedCall,
        key: IdempotencyKey,
        execution_id: ExecutionId,
    ) -> Result<Answer, Refusal> {
        let target = ProbeTarget {
            execution_id: execution_id.clone(),
            key: key.clone(),
            arguments: Some(call.arguments().clone()),
        };
        let (reconciled, evidence) = self
            .reconcile_target(&tool, &target, self.config.reconcile_inline)
            .await?;
        let inconclusive = evidence["answer"] != "absent";
        let retry_in = reconciled
            .probe_again()
            .then(|| reconciled.retry_in(self.config.reconcile_interval));
        if let Err(error) = self
            .keep_evidence(&target, evidence, None, retry_in, false)
            .await
        {
            tracing::warn!(%execution_id, %error, "a probe's evidence could not be kept");
        }
        match reconciled {
            Reconciled::Resolved(_) | Reconciled::DecidedElsewhere => {
                match self.lookup(&key).await? {
                    Some(record) => {
                        let existing = Existing::for_record(record, call.fingerprint());
                        self.answer_existing(call, &key, existing).await
                    }
                    None => Box::pin(self.execute_attached(call)).await,
                }
            }
            Reconciled::Released(_) => Box::pin(self.execute_attached(call)).await,
            Reconciled::Rerun => self.take_over(tool, call, key, execution_id).await,
            // A `rerun` tool's next attempt reuses the execution's upstream key (§12.7): an
            // inconclusive probe, or one asked too early, takes it over as no probe would.
            Reconciled::Undecided | Reconciled::TooEarly { .. }
                if tool.on_interrupted() == OnInterrupted::Rerun =>
            {
                self.take_over(tool, call, key, execution_id).await
            }
            Reconciled::TooEarly { wait } => Err(Refusal::Uncertain {
                execution_id,
                state: InFlightState::Interrupted,
                reconciling: true,
                retry_after: Some(wait),
            }),
            Reconciled::Undecided => Err(Refusal::Uncertain {
                execution_id,
                state: InFlightState::Interrupted,
                reconciling: inconclusive,
                retry_after: None,
            }),
        }
    }
}
