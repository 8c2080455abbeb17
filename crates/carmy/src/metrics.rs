//! Process metrics in the Prometheus text format (`GET /metrics`, docs/semantics.md §13).
//!
//! Every name below is part of the operator's interface (the Grafana dashboard in
//! `deploy/grafana-dashboard.json` is built on exactly these; a test checks it):
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `carmy_calls_total` | counter | `tool`, `outcome` | calls answered by the engine, by [`CallOutcome`] |
//! | `carmy_tool_runs_total` | counter | `tool` | tool bodies started by this process |
//! | `carmy_tool_outcomes_total` | counter | `tool`, `status` | tool runs finished, by recorded status (or `not_executed`) |
//! | `carmy_tool_duration_seconds` | histogram | `tool` | how long tool bodies ran |
//! | `carmy_store_reserve_duration_seconds` | histogram | | one `reserve` round trip to the store (not the answers of the replay cache, §8.4) |
//! | `carmy_store_complete_duration_seconds` | histogram | | one attempt to record an outcome |
//! | `carmy_executions_running` | gauge | `tool` | executions of this process whose outcome is not recorded yet |
//! | `carmy_prunes_total` | counter | | finished records pruned by retention (docs/semantics.md §12.9) |
//! | `carmy_resolutions_total` | counter | `action` (`resolve`, `release`) | uncertain executions closed by an operator or owner (§12.1) |
//! | `carmy_late_arrivals_total` | counter | | outcomes that arrived after their execution was resolved, released or taken over (§12.1) |
//! | `carmy_takeovers_total` | counter | `tool` | interrupted executions this process took over and ran again (`on_interrupted = "rerun"`, §12.7) |
//! | `carmy_late_arrivals_contradicting_total` | counter | | late arrivals that contradict the reconciler's decision: its probe was wrong (§12.10) |
//! | `carmy_mcp_unprotected_calls_total` | counter | `tool` | calls over MCP of a tool not annotated read-only that carried no request id: run unprotected (§11) |
//! | `carmy_reconciliations_total` | counter | `tool`, `result` | reconciliation probes run by this process, by what came of them (§12.10) |
//! | `carmy_interrupted_executions` | gauge | `tool` | interrupted executions in the store, across replicas (read at each scrape) |
//! | `carmy_interrupted_oldest_age_seconds` | gauge | `tool` | age of the oldest of them, since its reservation |
//! | `carmy_decisions_pending` | gauge | `tool` | those waiting for a person: the tool has no probe, or its probes are used up (§12.10) |
//! | `carmy_lease_renewal_failures_total` | counter | | lease renewals of this process that failed (§12.2) |
//!
//! The last three count the recovery features of docs/semantics.md §12:
//! [`Metrics::records_pruned`] (called by the pruner, [`crate::retention::run_pruner`], on the
//! replica that pruned), [`Metrics::resolved`] and [`Metrics::late_arrival`].
//!
//! The `tool` label is the call's tool name only when that tool is registered (or the answer
//! came from a record); a call naming an unknown tool is counted under [`UNREGISTERED_TOOL`], so a
//! caller cannot grow the label set without bound.

mod readings;

use crate::outcome::ExecutionStatus;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

/// The `tool` label of calls that named no registered tool.
pub const UNREGISTERED_TOOL: &str = "_unregistered";

/// How the engine answered one call: the `outcome` label of `carmy_calls_total`
/// (docs/semantics.md §3).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum CallOutcome {
    /// `new`: the tool ran for this call and its outcome was recorded (or, without `request_id`,
    /// returned).
    New,
    /// `replay`: answered from the record; the tool did not run.
    Replay,
    /// `conflict`: `IDEMPOTENCY_CONFLICT`.
    Conflict,
    /// `uncertain_running`: `EXECUTION_UNCERTAIN` with `state: running` (409).
    UncertainRunning,
    /// `uncertain_interrupted`: `EXECUTION_UNCERTAIN` with `state: interrupted`.
    UncertainInterrupted,
    /// `recording_pending`: the tool ran but its outcome is not recorded yet (503
    /// `EXECUTION_UNCERTAIN`).
    RecordingPending,
    /// `capacity`: `IDEMPOTENCY_CAPACITY`; nothing ran.
    Capacity,
    /// `unavailable`: `STORE_UNAVAILABLE`; nothing ran.
    Unavailable,
    /// `not_executed`: the tool reported that its effect did not happen; the reservation was
    /// released.
    NotExecuted,
    /// `rejected`: invalid call or unknown tool; nothing was reserved.
    Rejected,
    /// `lost`: an unprotected call whose task ended without an outcome (shutdown).
    Lost,
    /// `record_damaged`: the identity's record could not be read back (`RECORD_DAMAGED`).
    RecordDamaged,
    /// `superseded`: the tool finished after its execution was decided; its outcome went to the
    /// audit log as a late arrival (`EXECUTION_SUPERSEDED`, docs/semantics.md §12.1).
    Superseded,
}

impl CallOutcome {
    /// The `outcome` attribute of a call's trace span (docs/operations.md "Traces"): `new`,
    /// `replayed`, `conflict`, `uncertain` (running, interrupted or recording pending), else
    /// the refusal's `carmy_calls_total` label (`rejected`, `capacity`, `unavailable`, …).
    pub fn trace_label(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Replay => "replayed",
            Self::Conflict => "conflict",
            Self::UncertainRunning | Self::UncertainInterrupted | Self::RecordingPending => {
                "uncertain"
            }
            other => other.as_str(),
        }
    }
}

/// What a resolution did: the `action` label of `carmy_resolutions_total`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Resolution {
    /// `resolve`: an outcome was recorded for an uncertain execution.
    Resolve,
    /// `release`: the identity was freed so the next attempt runs the tool.
    Release,
}

impl CallOutcome {
    /// The label value, e.g. `uncertain_running`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Replay => "replay",
            Self::Conflict => "conflict",
            Self::UncertainRunning => "uncertain_running",
            Self::UncertainInterrupted => "uncertain_interrupted",
            Self::RecordingPending => "recording_pending",
            Self::Capacity => "capacity",
            Self::Unavailable => "unavailable",
            Self::NotExecuted => "not_executed",
            Self::Rejected => "rejected",
            Self::Lost => "lost",
            Self::RecordDamaged => "record_damaged",
            Self::Superseded => "superseded",
        }
    }
}

impl EncodeLabelValue for CallOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

impl Resolution {
    /// The label value: `resolve` or `release`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Resolve => "resolve",
            Self::Release => "release",
        }
    }
}

impl EncodeLabelValue for Resolution {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> std::fmt::Result {
        encoder.write_str(self.as_str())
    }
}

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
struct CallLabels {
    tool: String,
    outcome: CallOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    tool: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResolutionLabels {
    action: Resolution,
}

type HistogramFamily = Family<ToolLabels, Histogram, fn() -> Histogram>;

/// Buckets of store round trips, in seconds: 0.25 ms to about 4 s.
fn store_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_25, 2.0, 15))
}

/// Buckets of tool runs, in seconds: 1 ms to about 4 min.
fn tool_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.5, 14))
}

/// The metrics of one process. Cloning shares them.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    calls: Family<CallLabels, Counter>,
    tool_runs: Family<ToolLabels, Counter>,
    tool_outcomes: Family<OutcomeLabels, Counter>,
    tool_duration: HistogramFamily,
    reserve_duration: Histogram,
    complete_duration: Histogram,
    running: Family<ToolLabels, Gauge>,
    prunes: Counter,
    resolutions: Family<ResolutionLabels, Counter>,
    late_arrivals: Counter,
    takeovers: Family<ToolLabels, Counter>,
    records_damaged: Counter,
    reconciliations: Family<ReconcileLabels, Counter>,
    contradicting: Counter,
    mcp_unprotected: Family<ToolLabels, Counter>,
    store_gauges: readings::StoreGauges,
}

impl Default for Metrics {
    fn default() -> Self {
        let metrics = Self {
            registry: Arc::new(Registry::default()),
            calls: Family::default(),
            tool_runs: Family::default(),
            tool_outcomes: Family::default(),
            tool_duration: Family::new_with_constructor(tool_histogram),
            reserve_duration: store_histogram(),
            complete_duration: store_histogram(),
            running: Family::default(),
            prunes: Counter::default(),
            resolutions: Family::default(),
            late_arrivals: Counter::default(),
            takeovers: Family::default(),
            records_damaged: Counter::default(),
            reconciliations: Family::default(),
            contradicting: Counter::default(),
            mcp_unprotected: Family::default(),
            store_gauges: readings::StoreGauges::default(),
        };
        for action in [Resolution::Resolve, Resolution::Release] {
            // Created up front so that both read 0 before anything is resolved.
            drop(
                metrics
                    .resolutions
                    .get_or_create(&ResolutionLabels { action }),
            );
        }
        let mut registry = Registry::default();
        metrics.register_all(&mut registry);
        Self {
            registry: Arc::new(registry),
            ..metrics
        }
    }
}

impl Metrics {
    /// A record could not be read back (docs/semantics.md §5, `RECORD_DAMAGED`).
    pub(crate) fn record_damaged(&self) {
        self.records_damaged.inc();
    }

    /// How many `RECORD_DAMAGED` answers this process gave.
    pub fn records_damaged(&self) -> u64 {
        self.records_damaged.get()
    }

    fn register_all(&self, registry: &mut Registry) {
        let m = self.clone();
        registry.register(
            "carmy_calls",
            "Calls answered by the engine, by tool and outcome",
            m.calls,
        );
        registry.register(
            "carmy_tool_runs",
            "Tool bodies started by this process",
            m.tool_runs,
        );
        registry.register(
            "carmy_tool_outcomes",
            "Tool executions finished by this process, by recorded status",
            m.tool_outcomes,
        );
        registry.register(
            "carmy_tool_duration_seconds",
            "How long tool bodies ran",
            m.tool_duration,
        );
        registry.register(
            "carmy_store_reserve_duration_seconds",
            "Duration of one reserve call to the idempotency store",
            m.reserve_duration,
        );
        registry.register(
            "carmy_store_complete_duration_seconds",
            "Duration of one attempt to record an outcome in the idempotency store",
            m.complete_duration,
        );
        registry.register(
            "carmy_executions_running",
            "Executions of this process whose outcome is not recorded yet",
            m.running,
        );
        registry.register(
            "carmy_prunes",
            "Finished records pruned by retention",
            m.prunes,
        );
        registry.register(
            "carmy_resolutions",
            "Uncertain executions resolved or released",
            m.resolutions,
        );
        registry.register(
            "carmy_late_arrivals",
            "Outcomes that arrived after their execution was resolved, released or taken over",
            m.late_arrivals,
        );
        registry.register(
            "carmy_takeovers",
            "Interrupted executions this process took over and ran again (on_interrupted = rerun)",
            m.takeovers,
        );
        registry.register(
            "carmy_records_damaged",
            "Records found unreadable (RECORD_DAMAGED answers) by this process",
            m.records_damaged,
        );
        registry.register(
            "carmy_reconciliations",
            "Reconciliation probes run by this process, by tool and result",
            m.reconciliations,
        );
        registry.register(
            "carmy_late_arrivals_contradicting",
            "Late arrivals that contradict the reconciler's decision (its probe was wrong)",
            m.contradicting,
        );
        registry.register(
            "carmy_mcp_unprotected_calls",
            "Calls over MCP of a tool not annotated read-only that carried no request id",
            m.mcp_unprotected,
        );
        m.store_gauges.register(registry);
    }

    /// Counts one call over MCP of `tool` (a registered tool not annotated read-only) that
    /// carried no request id and so ran unprotected (docs/semantics.md §11).
    pub fn mcp_unprotected_call(&self, tool: &str) {
        self.mcp_unprotected
            .get_or_create(&ToolLabels { tool: tool.into() })
            .inc();
    }

    /// Counts one late arrival that contradicts the reconciler's decision.
    pub(crate) fn late_arrival_contradicting(&self) {
        self.contradicting.inc();
    }

    /// Counts one reconciliation probe of `tool` and what came of it (docs/semantics.md §12.10,
    /// reconciliation): `resolved`, `released`, `rerun`, `too_early`, `absent`, `inconclusive`,
    /// `decided_elsewhere`.
    pub(crate) fn reconciled(&self, tool: &str, result: &str) {
        self.reconciliations
            .get_or_create(&ReconcileLabels {
                tool: tool.into(),
                result: result.into(),
            })
            .inc();
    }

    /// Counts one call answered with `outcome` (`tool`: see the module docs).
    pub(crate) fn call_answered(&self, tool: &str, outcome: CallOutcome) {
        self.calls
            .get_or_create(&CallLabels {
                tool: tool.into(),
                outcome,
            })
            .inc();
    }

    pub(crate) fn tool_started(&self, tool: &str) {
        self.tool_runs
            .get_or_create(&ToolLabels { tool: tool.into() })
            .inc();
    }

    /// A tool reported that its effect did not happen (nothing recorded); counted as the
    /// outcome `not_executed`.
    pub(crate) fn tool_not_executed(&self, tool: &str, ran: Duration) {
        self.tool_ended(tool, "not_executed", ran);
    }

    /// A tool run ended with `status` after `ran`.
    pub(crate) fn tool_finished(&self, tool: &str, status: ExecutionStatus, ran: Duration) {
        self.tool_ended(tool, status.as_str(), ran);
    }

    fn tool_ended(&self, tool: &str, status: &str, ran: Duration) {
        self.tool_outcomes
            .get_or_create(&OutcomeLabels {
                tool: tool.into(),
                status: status.into(),
            })
            .inc();
        self.tool_duration
            .get_or_create(&ToolLabels { tool: tool.into() })
            .observe(ran.as_secs_f64());
    }

    /// One `reserve` round trip took `took`.
    pub(crate) fn reserve_took(&self, took: Duration) {
        self.reserve_duration.observe(took.as_secs_f64());
    }

    /// One attempt to record an outcome took `took`.
    pub(crate) fn complete_took(&self, took: Duration) {
        self.complete_duration.observe(took.as_secs_f64());
    }

    /// Counts an execution of `tool` as running until the guard drops.
    pub(crate) fn running(&self, tool: &str) -> RunningGuard {
        let gauge = self
            .running
            .get_or_create(&ToolLabels { tool: tool.into() })
            .clone();
        gauge.inc();
        RunningGuard(gauge)
    }

    /// Retention (docs/semantics.md §12.9): this process pruned `count` finished records.
    pub fn records_pruned(&self, count: u64) {
        self.prunes.inc_by(count);
    }

    /// Hook for recovery (docs/semantics.md §12.1): one execution was resolved or released.
    pub fn resolved(&self, action: Resolution) {
        self.resolutions
            .get_or_create(&ResolutionLabels { action })
            .inc();
    }

    /// Hook for recovery (docs/semantics.md §12.1): an outcome arrived after its execution was
    /// decided by someone else, and was kept in the audit log instead of the record.
    pub fn late_arrival(&self) {
        self.late_arrivals.inc();
    }

    /// Counts one interrupted execution of `tool` taken over by this process
    /// (docs/semantics.md §12.7).
    pub(crate) fn taken_over(&self, tool: &str) {
        self.takeovers
            .get_or_create(&ToolLabels { tool: tool.into() })
            .inc();
    }

    /// How many times this process started `tool`'s body.
    pub fn tool_runs(&self, tool: &str) -> u64 {
        self.tool_runs
            .get_or_create(&ToolLabels { tool: tool.into() })
            .get()
    }

    /// How many calls over MCP of `tool` ran unprotected
    /// (`carmy_mcp_unprotected_calls_total{tool}`).
    pub fn mcp_unprotected_calls(&self, tool: &str) -> u64 {
        self.mcp_unprotected
            .get_or_create(&ToolLabels { tool: tool.into() })
            .get()
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }
}

/// Keeps one execution counted in `carmy_executions_running` while it lives.
pub(crate) struct RunningGuard(Gauge);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}
