//! The command line of `carmy-gateway executions list|show|resolve|release`
//! (docs/semantics.md §12.5). Each subcommand reads `DATABASE_URL` (or `--database-url`) and its
//! own flags only, so its `--help` lists only those.

use crate::config::InRange;
use carmy::outcome::ExecutionStatus;
use carmy::store::InFlightState;
use carmy_postgres::StateFilter;
use clap::{Args, Subcommand, ValueEnum};

/// How many executions `executions list` shows when `--limit` is not given (as the API).
pub const DEFAULT_LIMIT: usize = 100;

/// `carmy-gateway executions …`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct ExecutionsArgs {
    /// What to do.
    #[command(subcommand)]
    pub action: ExecutionsAction,
}

/// The operator's commands on executions.
#[derive(Clone, Debug, PartialEq, Eq, Subcommand)]
pub enum ExecutionsAction {
    /// List executions of every principal, oldest reservation first (a table, or `--json`).
    List(ListArgs),
    /// Show one execution: identity, state, owner process, outcome and audit trail.
    Show(ShowArgs),
    /// Record the outcome that reconciliation found for an interrupted execution; every retry
    /// then replays it. One decision per execution; writes an audit row.
    Resolve(ResolveArgs),
    /// Free an interrupted execution's identity so the next attempt runs the tool again; the
    /// execution stays in history. One decision per execution; writes an audit row.
    Release(ReleaseArgs),
    /// Have a running replica probe an interrupted execution's upstream now (the tool's
    /// `[tools.reconcile]`), and show what the probe found and what came of it.
    Reconcile(ReconcileArgs),
}

/// `executions reconcile`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct ReconcileArgs {
    /// The execution's id (`exec_…`).
    pub execution_id: String,
    /// Print JSON (as `show --json`) instead of a readable block.
    #[arg(long)]
    pub json: bool,
    /// How long (ms) to wait for a replica's probe.
    #[arg(long, default_value_t = 10_000)]
    pub wait_ms: u64,
    /// The replicas' retention, for `expires_at`.
    #[command(flatten)]
    pub retention: RetentionArg,
}

/// `executions list`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct ListArgs {
    /// Only executions in this state (default: every held execution; `released` lists the
    /// released ones).
    #[arg(long, value_enum)]
    pub state: Option<StateArg>,
    /// Only this principal's executions.
    #[arg(long)]
    pub principal: Option<String>,
    /// Only executions with this request_id.
    #[arg(long)]
    pub request_id: Option<String>,
    /// Only executions of this session.
    #[arg(long)]
    pub session_id: Option<String>,
    /// Only executions whose kept arguments contain this JSON object, e.g.
    /// '{"customer":"cus_42"}' (docs/semantics.md §8.5).
    #[arg(long, value_name = "JSON")]
    pub arguments: Option<String>,
    /// At most this many (1 to 1000).
    #[arg(long, default_value_t = DEFAULT_LIMIT,
          value_parser = InRange::<usize>::new(1, carmy::engine::decide::MAX_LISTED as u64))]
    pub limit: usize,
    /// Print `{"executions": [...]}` as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `executions show`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct ShowArgs {
    /// The execution's id (`exec_…`).
    pub execution_id: String,
    /// Print JSON instead of a readable block.
    #[arg(long)]
    pub json: bool,
    /// The replicas' retention, for `expires_at`.
    #[command(flatten)]
    pub retention: RetentionArg,
}

/// `executions resolve`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct ResolveArgs {
    /// The execution's id (`exec_…`).
    pub execution_id: String,
    /// The outcome reconciliation found: `completed` (with `--data`) or `failed`, `timed_out`,
    /// `cancelled` (with `--error`).
    #[arg(long, value_enum)]
    pub status: StatusArg,
    /// The outcome's data, as JSON (for `completed`), e.g. '{"order_id": 17}'.
    #[arg(long, value_name = "JSON", conflicts_with = "error")]
    pub data: Option<String>,
    /// The outcome's error, as JSON (for the other statuses), e.g.
    /// '{"code": "ORDER_REJECTED", "message": "the shop refused it"}'.
    #[arg(long, value_name = "JSON")]
    pub error: Option<String>,
    /// The note, actor, force and output of the decision.
    #[command(flatten)]
    pub decision: DecisionArgs,
}

/// `executions release`.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct ReleaseArgs {
    /// The execution's id (`exec_…`).
    pub execution_id: String,
    /// The note, actor, force and output of the decision.
    #[command(flatten)]
    pub decision: DecisionArgs,
}

/// What every decision takes.
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct DecisionArgs {
    /// Why: what reconciliation found (required; kept in the audit log and the record).
    #[arg(long, value_name = "TEXT")]
    pub note: String,
    /// Who decides, as recorded (default `cli:<your OS user name>`).
    #[arg(long, value_name = "NAME")]
    pub actor: Option<String>,
    /// Also decide an execution that is still `running` (its owner holds a live lease): check
    /// first that the owner process is really gone.
    #[arg(long)]
    pub force: bool,
    /// Print the answer as JSON (the API's body for this decision).
    #[arg(long)]
    pub json: bool,
    /// The replicas' retention, for `expires_at`.
    #[command(flatten)]
    pub retention: RetentionArg,
}

/// `--retention` of `executions show`, `resolve` and `release`: the replicas' retention (the
/// same setting as theirs), for the `expires_at` they print (docs/semantics.md §12.9).
#[derive(Clone, Debug, PartialEq, Eq, Args)]
pub struct RetentionArg {
    /// The replicas' retention (the same setting as theirs), for the printed `expires_at`
    /// (docs/semantics.md §12.9); `0`: forever.
    #[arg(long, env = "CARMY_RETENTION", default_value = "7days",
          value_parser = crate::config::RetentionParser)]
    pub retention: crate::config::Retention,
}

impl RetentionArg {
    /// How long a finished record holds its identity; `None`: forever.
    pub fn duration(&self) -> Option<std::time::Duration> {
        self.retention.0
    }
}

/// `--state` of `executions list`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StateArg {
    /// No outcome yet; the owner holds its lease.
    Running,
    /// No outcome; the owner's lease lapsed (the outcome is unknown).
    Interrupted,
    /// Finished: completed.
    Completed,
    /// Finished: failed.
    Failed,
    /// Finished: timed out.
    #[value(name = "timed_out")]
    TimedOut,
    /// Finished: cancelled.
    Cancelled,
    /// Released by a decision (kept in carmy.released_executions).
    Released,
}

impl StateArg {
    /// The store's filter.
    pub fn filter(self) -> StateFilter {
        match self {
            Self::Running => StateFilter::InFlight(InFlightState::Running),
            Self::Interrupted => StateFilter::InFlight(InFlightState::Interrupted),
            Self::Completed => StateFilter::Finished(ExecutionStatus::Completed),
            Self::Failed => StateFilter::Finished(ExecutionStatus::Failed),
            Self::TimedOut => StateFilter::Finished(ExecutionStatus::TimedOut),
            Self::Cancelled => StateFilter::Finished(ExecutionStatus::Cancelled),
            Self::Released => StateFilter::Released,
        }
    }
}

/// `--status` of `executions resolve`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StatusArg {
    /// It happened: `--data` is what the tool would have returned.
    Completed,
    /// It failed for sure: `--error` says how.
    Failed,
    /// It timed out: `--error` says what is known.
    #[value(name = "timed_out")]
    TimedOut,
    /// It was cancelled: `--error` says what is known.
    Cancelled,
}

impl StatusArg {
    /// The record's status.
    pub fn status(self) -> ExecutionStatus {
        match self {
            Self::Completed => ExecutionStatus::Completed,
            Self::Failed => ExecutionStatus::Failed,
            Self::TimedOut => ExecutionStatus::TimedOut,
            Self::Cancelled => ExecutionStatus::Cancelled,
        }
    }
}
