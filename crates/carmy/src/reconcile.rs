//! Reconciliation (docs/semantics.md §12.10): a tool's probe asks its
//! upstream whether the effect of an interrupted execution happened, and the answer is decided
//! through the same path as a person's resolve or release, with actor [`RECONCILER_ACTOR`].
//!
//! This module holds the shapes: the [`Probe`] a tool offers ([`crate::Tool::probe`]), what it
//! answers ([`ProbeAnswer`]), and what the store claims and keeps ([`ReconcileClaim`],
//! [`ReconcileTarget`], [`ProbeRecord`]). The engine runs them (`engine::reconcile`).

use crate::outcome::ExecutionId;
use crate::store::IdempotencyKey;
use crate::tool::Tool;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// The actor of every decision the reconciler takes (`resolution.by`, `audit_log.actor`).
pub const RECONCILER_ACTOR: &str = "reconciler";

/// A probe's evidence as kept on the record (JSON; see [`ProbeAnswer::evidence`]).
pub type Evidence = Value;

/// What a probe is asked about: one interrupted execution.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeTarget {
    /// The execution (the upstream saw it as its idempotency key).
    pub execution_id: ExecutionId,
    /// The identity it holds.
    pub key: IdempotencyKey,
    /// The call's arguments, when a retry carries them (`None` in the background reconciler:
    /// arguments are never stored).
    pub arguments: Option<Value>,
}

/// What the upstream said.
#[derive(Clone, Debug, PartialEq)]
pub enum ProbeVerdict {
    /// The effect happened; the value is the outcome's `data` (the probe's body).
    Found(Value),
    /// The upstream says the effect did not happen.
    Absent,
    /// No conclusion: an error, a timeout, another status, a probe that needs the call's
    /// arguments. Never decides anything.
    Inconclusive,
}

/// A probe's answer: the verdict and the evidence kept on the record (never a header value).
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeAnswer {
    /// The verdict.
    pub verdict: ProbeVerdict,
    /// `{"answer": "found"|"absent"|"error", "status": 200, "body": …, "detail": "…"}`.
    pub evidence: Value,
}

/// The boxed future of [`Probe::probe`].
pub type ProbeFuture<'a> = Pin<Box<dyn Future<Output = ProbeAnswer> + Send + 'a>>;

/// A tool's way to ask its upstream whether an execution's effect happened (the tools file's
/// `[tools.reconcile]`, docs/semantics.md §10 and §12.10).
pub trait Probe: Send + Sync {
    /// Whether the upstream's "absent" proves that the effect did not happen
    /// (`absent_means = "not_executed"`); otherwise absent leaves the execution for a person.
    /// Even then, the engine takes it for proof only once the interrupted attempt's deadline
    /// has passed (docs/semantics.md §12.10): before, its request may still land.
    fn absent_means_not_executed(&self) -> bool;

    /// The probe's own deadline.
    fn timeout(&self) -> Duration;

    /// Asks the upstream about `target`. `tools` are the tools served at this moment, for a
    /// probe that calls one of them (`[tools.reconcile] tool = …`); an HTTP probe ignores
    /// them. Never fails: a failure is an [`ProbeVerdict::Inconclusive`] answer with its
    /// evidence.
    fn probe<'a>(&'a self, target: &'a ProbeTarget, tools: &'a dyn ProbeTools) -> ProbeFuture<'a>;
}

/// The tools a probe may call: a snapshot of the engine's registry taken when the probe
/// starts (an MCP server's tools may come and go).
pub trait ProbeTools: Send + Sync {
    /// The served tool named `name`, if any.
    fn find_tool(&self, name: &str) -> Option<Arc<dyn Tool>>;
}

impl ProbeTools for Vec<Arc<dyn Tool>> {
    fn find_tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.iter().find(|tool| tool.name() == name).cloned()
    }
}

/// What a replica asks the store for: interrupted executions of `tools` due for a probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcileClaim {
    /// The tools that have a probe (only their executions are claimed).
    pub tools: Vec<String>,
    /// At most this many.
    pub limit: usize,
    /// How long a claim keeps other replicas away (longer than the probe and the decision).
    pub hold: Duration,
    /// Executions claimed this many times already are never claimed again.
    pub max_attempts: u32,
    /// On demand: only this execution, whether due or not and whatever its attempts.
    pub execution_id: Option<ExecutionId>,
    /// Only this principal's executions (`None`: any principal's).
    pub principal: Option<String>,
}

/// One claimed execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconcileTarget {
    /// The execution.
    pub execution_id: ExecutionId,
    /// The identity it holds.
    pub key: IdempotencyKey,
    /// Its tool.
    pub tool: String,
    /// Claims so far, this one included (1 for the first).
    pub attempts: u32,
}

/// A probe's answer as the store keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeRecord {
    /// The execution probed.
    pub execution_id: ExecutionId,
    /// The evidence ([`ProbeAnswer::evidence`], with `at` and `attempts` added).
    pub evidence: Value,
    /// When to probe again; `None` never again (decided, or attempts used up).
    pub retry_in: Option<Duration>,
    /// Whether the attempt its claim counted is given back: the probe answered absent before
    /// the interrupted attempt's deadline, which proves nothing yet (docs/semantics.md
    /// §12.10), so it does not use up the execution's probes.
    pub refund_attempt: bool,
}

/// The pause before probe number `attempts + 1`: `base` doubled per attempt, at most `max`.
pub fn backoff(base: Duration, max: Duration, attempts: u32) -> Duration {
    let factor = 1u32 << attempts.saturating_sub(1).min(16);
    base.saturating_mul(factor).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_bound() {
        let base = Duration::from_millis(100);
        let max = Duration::from_secs(1);
        assert_eq!(backoff(base, max, 1), Duration::from_millis(100));
        assert_eq!(backoff(base, max, 2), Duration::from_millis(200));
        assert_eq!(backoff(base, max, 4), Duration::from_millis(800));
        assert_eq!(backoff(base, max, 5), max);
        assert_eq!(backoff(base, max, 40), max);
    }
}
