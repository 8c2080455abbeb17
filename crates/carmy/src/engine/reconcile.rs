//! Reconciliation (docs/semantics.md §12.10): running a tool's probe for an
//! interrupted execution and deciding what it found through the same path as a person's
//! resolve and release (`Engine::record_resolution`, `Engine::record_release`), with actor
//! [`RECONCILER_ACTOR`]. Three callers: the reconciler every replica runs ([`Engine::start_reconciler`],
//! executions claimed one replica at a time by the store), a retry that meets an interrupted
//! execution (`engine::reconcile_retry`), and an operator's request.

use super::{Answer, Engine, Refusal};
use crate::auth::Caller;
use crate::call::ValidatedCall;
use crate::decision::{check_outcome, AuditAction, Decision, Released, ResolveRequest};
use crate::outcome::ExecutionId;
use crate::outcome::{ExecutionResult, ExecutionStatus};
use crate::reconcile::{
    backoff, Evidence, ProbeAnswer, ProbeRecord, ProbeTarget, ProbeVerdict, ReconcileClaim,
    ReconcileTarget, RECONCILER_ACTOR,
};
use crate::store::{Existing, IdempotencyKey, InFlightState};
use crate::tool::{OnInterrupted, Tool};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// Executions one replica claims per round.
const CLAIM_BATCH: usize = 16;

/// The pauses after each try of an on-demand claim that found nothing; after the third try
/// the answer is a refusal.
const ON_DEMAND_CLAIM_PAUSES: [Duration; 3] = [
    Duration::from_millis(50),
    Duration::from_millis(150),
    Duration::ZERO,
];

/// Whether an upstream's "absent" proves that an interrupted attempt did nothing
/// (docs/semantics.md §12.10).
enum AbsentProof {
    /// It was asked after the attempt's deadline (and the margin): the attempt can no longer
    /// take effect, so absent proves "not executed".
    Proves,
    /// It was asked before: the attempt's request may still land. It would prove something
    /// once `wait` (from now) has passed.
    TooEarly { wait: Duration },
    /// The store cannot tell when the attempt started: absent never proves anything then.
    Unknown,
}

/// What reconciling one execution came to.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Reconciled {
    /// The probe found the effect: the execution was resolved `completed` with its body.
    Resolved(ExecutionResult),
    /// The upstream proved the effect absent: the identity was released.
    Released(Released),
    /// The upstream proved the effect absent for a `rerun` tool: the next attempt takes the
    /// execution over under the same upstream key.
    Rerun,
    /// The upstream answered absent (`absent_means = "not_executed"`) before the interrupted
    /// attempt's deadline had passed: its request may still land, so absent proves nothing
    /// yet. No decision; the execution is probed again once `wait` (from now) has passed.
    TooEarly {
        /// How long until an absent answer can prove "not executed".
        wait: Duration,
    },
    /// No decision: the execution stays interrupted, the evidence kept for a person.
    Undecided,
    /// Someone else decided first, or the owner is alive again: nothing changed.
    DecidedElsewhere,
}

impl Reconciled {
    /// Whether the execution may need another probe: it stays without an outcome (undecided,
    /// absent asked too early, or left for a `rerun` takeover that may be interrupted in
    /// turn).
    pub fn probe_again(&self) -> bool {
        matches!(self, Self::Undecided | Self::Rerun | Self::TooEarly { .. })
    }

    /// When to probe again after this answer, given the usual pause: at the interrupted
    /// attempt's deadline for [`Reconciled::TooEarly`], else after `usual`.
    fn retry_in(&self, usual: Duration) -> Duration {
        match self {
            Self::TooEarly { wait } => *wait,
            _ => usual,
        }
    }

    /// The `result` label of `carmy_reconciliations_total`.
    pub fn label(&self, evidence: &Evidence) -> &'static str {
        match self {
            Self::Resolved(_) => "resolved",
            Self::Released(_) => "released",
            Self::Rerun => "rerun",
            Self::TooEarly { .. } => "too_early",
            Self::DecidedElsewhere => "decided_elsewhere",
            Self::Undecided if evidence["answer"] == "absent" => "absent",
            Self::Undecided => "inconclusive",
        }
    }
}

impl Engine {
    /// Probes `target` with `tool`'s probe within `deadline` and decides what it found
    /// (docs/semantics.md §12.10); the probe's evidence with it. A tool without a
    /// probe is [`Reconciled::Undecided`] without asking anyone.
    ///
    /// # Errors
    /// [`Refusal::StoreUnavailable`] when the decision could not be taken.
    ///
    /// Runs in a `carmy.reconcile` span (`execution_id`, `tool`, and `result` once known); the
    /// decision it takes is a `carmy.decision` span inside it (docs/operations.md "Traces").
    pub(super) async fn reconcile_target(
        &self,
        tool: &Arc<dyn Tool>,
        target: &ProbeTarget,
        deadline: Duration,
    ) -> Result<(Reconciled, Evidence), Refusal> {
        let span = crate::trace::exported_span(|| {
            tracing::info_span!(
                "carmy.reconcile",
                execution_id = target.execution_id.as_str(),
                tool = tool.name(),
                result = tracing::field::Empty,
            )
        });
        let reconciled = self
            .probe_and_decide(tool, target, deadline)
            .instrument(span.clone())
            .await;
        if let Ok((reconciled, evidence)) = &reconciled {
            span.record("result", reconciled.label(evidence));
        }
        reconciled
    }

    /// [`Engine::reconcile_target`]'s work, in its span.
    async fn probe_and_decide(
        &self,
        tool: &Arc<dyn Tool>,
        target: &ProbeTarget,
        deadline: Duration,
    ) -> Result<(Reconciled, Evidence), Refusal> {
        let Some(probe) = tool.probe() else {
            return Ok((Reconciled::Undecided, json!({"answer": "none"})));
        };
        let deadline = deadline.min(probe.timeout());
        let served = self.tools();
        let asked = Instant::now();
        let answer = match tokio::time::timeout(deadline, probe.probe(target, &served)).await {
            Ok(answer) => answer,
            Err(_) => ProbeAnswer {
                verdict: ProbeVerdict::Inconclusive,
                evidence: json!({"answer": "error", "detail": format!(
                    "the probe did not answer within {} ms", deadline.as_millis())}),
            },
        };
        let mut evidence = answer.evidence;
        let decision = |note: String| Decision {
            execution_id: target.execution_id.clone(),
            principal: None,
            note,
            actor: RECONCILER_ACTOR.to_owned(),
            force: false,
        };
        let reconciled = match answer.verdict {
            ProbeVerdict::Found(data) => {
                if let Err(problem) = check_outcome(ExecutionStatus::Completed, &data, None) {
                    evidence["detail"] =
                        json!(format!("the probe's body cannot be an outcome: {problem}"));
                    Reconciled::Undecided
                } else {
                    let note = format!(
                        "the upstream's probe found the effect ({})",
                        summary(&evidence)
                    );
                    let request = ResolveRequest {
                        decision: decision(note),
                        status: ExecutionStatus::Completed,
                        data,
                        error: None,
                    };
                    settled(
                        self.record_resolution(request)
                            .await
                            .map(Reconciled::Resolved),
                    )?
                }
            }
            ProbeVerdict::Absent if probe.absent_means_not_executed() => {
                match self
                    .absent_proves(tool, &target.execution_id, asked)
                    .await?
                {
                    AbsentProof::TooEarly { wait } => {
                        let at = chrono::Utc::now()
                            + chrono::Duration::from_std(wait).unwrap_or_default();
                        let at = at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
                        evidence["conclusive_at"] = json!(at);
                        evidence["detail"] = json!(format!(
                            "absent before the interrupted attempt's deadline: its request may still reach the upstream, so this proves nothing before {at}; probed again then"
                        ));
                        Reconciled::TooEarly { wait }
                    }
                    AbsentProof::Unknown => {
                        evidence["detail"] = json!(
                            "absent, but the store cannot tell when the interrupted attempt started, so this proves nothing"
                        );
                        Reconciled::Undecided
                    }
                    AbsentProof::Proves if tool.on_interrupted() == OnInterrupted::Rerun => {
                        Reconciled::Rerun
                    }
                    AbsentProof::Proves => {
                        let note = format!(
                            "the upstream's probe says the effect did not happen ({}); absent_means = not_executed",
                            summary(&evidence)
                        );
                        settled(
                            self.record_release(decision(note))
                                .await
                                .map(Reconciled::Released),
                        )?
                    }
                }
            }
            ProbeVerdict::Absent | ProbeVerdict::Inconclusive => Reconciled::Undecided,
        };
        self.metrics
            .reconciled(tool.name(), reconciled.label(&evidence));
        tracing::info!(execution_id = %target.execution_id, tool = tool.name(),
            result = reconciled.label(&evidence), "reconciliation probe answered");
        Ok((reconciled, evidence))
    }

    /// Whether an "absent" asked at `asked` about `execution_id` of `tool` proves that the
    /// attempt holding it did nothing (docs/semantics.md §12.10): only once that attempt can
    /// no longer take effect, i.e. when the probe was asked after
    /// [`Engine::absent_window`] had passed since the attempt started (the store's clock).
    /// The attempt's age is read after the probe answered and the probe's whole time taken
    /// off it, so the answer errs towards "too early".
    ///
    /// # Errors
    /// [`Refusal::StoreUnavailable`] when the attempt's start cannot be read.
    async fn absent_proves(
        &self,
        tool: &Arc<dyn Tool>,
        execution_id: &ExecutionId,
        asked: Instant,
    ) -> Result<AbsentProof, Refusal> {
        let Some(age) = self.store.attempt_age(execution_id).await? else {
            return Ok(AbsentProof::Unknown);
        };
        let window = self.absent_window(tool.as_ref());
        if age.saturating_sub(asked.elapsed()) >= window {
            Ok(AbsentProof::Proves)
        } else {
            Ok(AbsentProof::TooEarly {
                wait: window.saturating_sub(age),
            })
        }
    }

    /// How long after an attempt of `tool` started its request may still take effect: the
    /// deadline its owner enforced ([`Tool::timeout`], else
    /// [`EngineConfig::default_tool_timeout`](super::EngineConfig)), plus
    /// [`EngineConfig::lease_loss_grace`](super::EngineConfig) as a margin. The owner's
    /// deadline runs from when its tool started, a little after the store stamped the attempt
    /// (the reservation's or the takeover's round trip, the task's start); and a request given
    /// up at its deadline may still have bytes on their way. The lease-loss grace is the
    /// engine's own measure of how long a tool told to stop may still be finishing.
    fn absent_window(&self, tool: &dyn Tool) -> Duration {
        tool.timeout()
            .unwrap_or(self.config.default_tool_timeout)
            .saturating_add(self.config.lease_loss_grace)
    }

    /// Starts the reconciler of this replica (docs/semantics.md §12.10): every
    /// [`EngineConfig::reconcile_interval`](super::EngineConfig) it claims interrupted
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

    /// One round: claims what is due and reconciles each, one after another.
    async fn reconcile_round(&self) -> Result<(), crate::store::StoreError> {
        let (tools, longest) = self.probed_tools();
        if tools.is_empty() {
            return Ok(());
        }
        let claim = ReconcileClaim {
            tools: tools.iter().map(|tool| tool.name().to_owned()).collect(),
            limit: CLAIM_BATCH,
            hold: (longest + Duration::from_secs(5)) * u32::try_from(CLAIM_BATCH).unwrap_or(1),
            max_attempts: self.config.reconcile_max_attempts,
            execution_id: None,
            principal: None,
        };
        for target in self.store.claim_reconciliations(&claim).await? {
            let Some(tool) = tools.iter().find(|tool| tool.name() == target.tool) else {
                continue;
            };
            self.reconcile_claimed(tool, &target).await?;
        }
        Ok(())
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
            hold: longest + Duration::from_secs(5),
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
    /// [`EngineConfig::reconcile_inline`](super::EngineConfig), and the call is answered from
    /// what it decided: the resolved outcome replayed, a new run after a release, a takeover
    /// for a `rerun` tool; else `EXECUTION_UNCERTAIN` (`interrupted`, being reconciled while
    /// the probe was inconclusive).
    ///
    /// # Errors
    /// As [`Engine::execute`].
    pub(super) async fn reconcile_retry(
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

    /// Keeps `evidence` on the record, stamped with the time and the attempts (of a claimed
    /// probe); with `refund_attempt`, the claim's attempt is given back and not stamped (a
    /// probe asked too early to conclude, docs/semantics.md §12.10).
    pub(super) async fn keep_evidence(
        &self,
        target: &ProbeTarget,
        mut evidence: Evidence,
        attempts: Option<u32>,
        retry_in: Option<Duration>,
        refund_attempt: bool,
    ) -> Result<(), crate::store::StoreError> {
        evidence["at"] =
            json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        let refund_attempt = refund_attempt && attempts.is_some();
        match attempts {
            Some(attempts) if !refund_attempt => evidence["attempts"] = json!(attempts),
            _ => {}
        }
        self.store
            .record_probe(&ProbeRecord {
                execution_id: target.execution_id.clone(),
                evidence,
                retry_in,
                refund_attempt,
            })
            .await
    }
}

impl Engine {
    /// Counts a late arrival of `execution_id` with `late` status that contradicts the
    /// reconciler's decision on it (docs/semantics.md §12.10): `completed` after
    /// a release, `failed` after a resolve `completed`. The store flags the audit row itself
    /// (`contradicts_decision`); this counts it in `carmy_late_arrivals_contradicting_total`.
    pub(super) async fn flag_contradiction(
        &self,
        execution_id: &ExecutionId,
        late: ExecutionStatus,
    ) {
        let trail = match self.store.audit_trail(execution_id).await {
            Ok(trail) => trail,
            Err(error) => {
                tracing::warn!(%execution_id, %error, "cannot read the audit trail to check a late arrival against the reconciler");
                return;
            }
        };
        let decided = trail.iter().rev().find(|entry| {
            entry.actor == RECONCILER_ACTOR
                && matches!(entry.action, AuditAction::Resolve | AuditAction::Release)
        });
        let contradicts = decided.is_some_and(|entry| match entry.action {
            AuditAction::Release => late == ExecutionStatus::Completed,
            _ => entry.after["state"] == "completed" && late == ExecutionStatus::Failed,
        });
        if contradicts {
            self.metrics.late_arrival_contradicting();
            tracing::error!(%execution_id, status = late.as_str(), "a late arrival contradicts the reconciler's decision: the tool's probe was wrong; reconcile this execution by hand");
        }
    }
}

/// A decision's answer as reconciliation reads it: a refusal means someone else decided first
/// (or the owner is back); only a store failure is an error.
fn settled(decided: Result<Reconciled, Refusal>) -> Result<Reconciled, Refusal> {
    match decided {
        Ok(reconciled) => Ok(reconciled),
        Err(Refusal::Finished { .. } | Refusal::StillRunning { .. } | Refusal::NotFound) => {
            Ok(Reconciled::DecidedElsewhere)
        }
        Err(other) => Err(other),
    }
}

/// `GET … answered 200`, from the evidence, for a decision's note.
fn summary(evidence: &Evidence) -> String {
    match (evidence.get("request"), evidence.get("status")) {
        (Some(request), Some(status)) => {
            format!("{} answered {status}", request.as_str().unwrap_or_default())
        }
        _ => evidence["answer"].as_str().unwrap_or("answered").to_owned(),
    }
}
