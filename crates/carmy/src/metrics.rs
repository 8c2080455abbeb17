//! Process metrics in the Prometheus text format (`GET /metrics`).
//!
//! `carmy_tool_runs_total{tool}` counts tool bodies started by this process: the number an
//! operator (or a test) reads to see that a retry did not run a tool again.

use crate::outcome::ExecutionStatus;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::sync::Arc;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    tool: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    action: String,
}

/// The counters of one process. Cloning shares them.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    tool_runs: Family<ToolLabels, Counter>,
    tool_outcomes: Family<OutcomeLabels, Counter>,
    decisions: Family<DecisionLabels, Counter>,
    late_arrivals: Family<ToolLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let tool_runs = Family::<ToolLabels, Counter>::default();
        let tool_outcomes = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "carmy_tool_runs",
            "Tool bodies started by this process",
            tool_runs.clone(),
        );
        registry.register(
            "carmy_tool_outcomes",
            "Tool executions finished by this process, by recorded status",
            tool_outcomes.clone(),
        );
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "carmy_decisions",
            "Decisions on uncertain executions taken through this process (action = resolve or release; docs/semantics.md §12)",
            decisions.clone(),
        );
        let late_arrivals = Family::<ToolLabels, Counter>::default();
        registry.register(
            "carmy_late_arrivals",
            "Outcomes of this process's tools that arrived after their execution was decided: kept in the audit log, not recorded; the effect may have happened twice (docs/semantics.md §12)",
            late_arrivals.clone(),
        );
        Self {
            registry: Arc::new(registry),
            tool_runs,
            tool_outcomes,
            decisions,
            late_arrivals,
        }
    }
}

impl Metrics {
    pub(crate) fn tool_started(&self, tool: &str) {
        self.tool_runs
            .get_or_create(&ToolLabels { tool: tool.into() })
            .inc();
    }

    /// A tool reported that its effect did not happen (nothing recorded); counted as the
    /// outcome `not_executed`.
    pub(crate) fn tool_not_executed(&self, tool: &str) {
        self.tool_outcomes
            .get_or_create(&OutcomeLabels {
                tool: tool.into(),
                status: "not_executed".into(),
            })
            .inc();
    }

    pub(crate) fn tool_finished(&self, tool: &str, status: ExecutionStatus) {
        self.tool_outcomes
            .get_or_create(&OutcomeLabels {
                tool: tool.into(),
                status: status.as_str().into(),
            })
            .inc();
    }

    /// An outcome of `tool` arrived after its execution was decided.
    pub(crate) fn late_arrival(&self, tool: &str) {
        self.late_arrivals
            .get_or_create(&ToolLabels { tool: tool.into() })
            .inc();
    }

    /// A decision (`resolve` or `release`) won.
    pub(crate) fn decided(&self, action: crate::decision::AuditAction) {
        self.decisions
            .get_or_create(&DecisionLabels {
                action: action.as_str().into(),
            })
            .inc();
    }

    /// How many times this process started `tool`'s body.
    pub fn tool_runs(&self, tool: &str) -> u64 {
        self.tool_runs
            .get_or_create(&ToolLabels { tool: tool.into() })
            .get()
    }

    /// The OpenMetrics text exposition of every counter.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}
