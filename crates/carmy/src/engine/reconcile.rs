//! Reconciliation (docs/semantics.md §12.10): running a tool's probe for an
//! interrupted execution and deciding what it found through the same path as a person's
//! resolve and release (`Engine::record_resolution`, `Engine::record_release`), with actor
//! [`RECONCILER_ACTOR`]. Three callers: the reconciler every replica runs ([`Engine::start_reconciler`],
//! executions claimed one replica at a time by the store), a retry that meets an interrupted
//! execution (`engine::reconcile_retry`), and an operator's request; those three are in
//! `callers`, what a probe's answer decides is here.

mod callers;

use super::{Engine, Refusal};
use crate::decision::{check_outcome, AuditAction, Decision, Released, ResolveRequest};
use crate::outcome::ExecutionId;
use crate::outcome::{ExecutionResult, ExecutionStatus};
use crate::reconcile::{
    Evidence, ProbeAnswer, ProbeRecord, ProbeTarget, ProbeVerdict, RECONCILER_ACTOR,
};
use crate::tool::{OnInterrupted, Tool};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

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
