//! The results: the printed table, the targets, and `latest.json`.

mod cost;
mod render;
mod targets;

pub use cost::instruction_targets;
pub use render::write_main_table;
pub use targets::{pruning_target, upstream_target};

use crate::db::ServerInfo;
use crate::load::{RunResult, Scenario};
use crate::pgbench::PgbenchResult;
use crate::upstream::UpstreamRuns;
use crate::wire::Counts;
use carmy_bench::memory::MemoryStoreResult;
use serde::Serialize;

/// The concurrency the targets compare at.
pub const TARGET_CONCURRENCY: usize = 32;
/// New-identity calls/s at [`TARGET_CONCURRENCY`] ≥ this × pgbench `new_identity.sql` TPS
/// (group commit: fewer commits per call than the two-statement script).
pub const NEW_IDENTITY_RATIO: f64 = 1.5;
/// The concurrency of the second new-identity throughput target.
pub const LOW_CONCURRENCY: usize = 8;
/// New-identity calls/s at [`LOW_CONCURRENCY`] ≥ this × pgbench `new_identity.sql` TPS.
pub const NEW_IDENTITY_RATIO_LOW: f64 = 1.2;
/// PostgreSQL commits per new identity at [`TARGET_CONCURRENCY`] at most this.
pub const COMMITS_PER_NEW_IDENTITY: f64 = 0.5;
/// Replay calls/s at [`TARGET_CONCURRENCY`] ≥ this × pgbench `read_one.sql` TPS.
pub const REPLAY_RATIO: f64 = 2.0;
/// Where the CPU is the limit (idle below [`CPU_LIMIT_IDLE_SHARE`] of the machine during the
/// row), new identities must reach at least this share of the CPU bound instead of the pgbench
/// ratio: the calls/s the CPU left to the gateway, PostgreSQL and the load would allow at the
/// CPU per call measured.
pub const CPU_BOUND_SHARE: f64 = 0.9;
/// The idle share of the machine's CPU (of all cores) below which a row is CPU-limited.
pub const CPU_LIMIT_IDLE_SHARE: f64 = 0.1;
/// Calls/s through `/mcp` at [`TARGET_CONCURRENCY`] ≥ this × the same calls through
/// `POST /v1/executions`, new identities and replays alike.
pub const MCP_RATIO: f64 = 0.8;
/// New-identity p99 with many rows ≤ this × p99 with few rows.
pub const FLAT_P99_RATIO: f64 = 1.5;

/// New-identity p99 with retention pruning in the background may be at most this many times
/// the p99 without it (docs/semantics.md §12.9).
pub const PRUNING_P99_RATIO: f64 = 1.2;
/// In-memory reserve + complete pairs per second on one core.
pub const MEMORY_PAIRS_PER_SECOND: f64 = 500_000.0;
/// Busy time of other processes (% of one CPU) above which a window is called noisy.
pub const NOISY_OTHER_PERCENT: f64 = 20.0;
/// Round trips to PostgreSQL per new identity on the happy path.
pub const ROUND_TRIPS_PER_NEW_IDENTITY: f64 = 2.0;
/// Latency Carmy adds to an HTTP tool at c=1 (p50 through Carmy − p50 direct) at most this ×
/// the two-commit floor of the same run (pgbench `new_identity.sql` p50 with one client).
pub const ADDED_P50_FLOOR_RATIO: f64 = 1.15;

/// How the benchmark was run.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    /// Seconds of each measurement.
    pub seconds: f64,
    /// Uncounted seconds before each HTTP measurement.
    pub warmup_seconds: f64,
    /// `--quick`.
    pub quick: bool,
    /// `--large`.
    pub large: bool,
    /// `CARMY_DB_POOL_SIZE` of the gateway.
    pub pool_size: u32,
    /// The replay cache setting: `absent` (gateway without one), `default`, or the entries.
    pub replay_cache: String,
    /// Completed identities the replay and conflict scenarios cycle through.
    pub replay_identities: usize,
    /// pgbench clients.
    pub pgbench_clients: u32,
    /// The gateway binary.
    pub gateway: String,
    /// Reservations present before the measurements.
    pub small_rows: u64,
}

/// The round-trip count of new identities and replays, sequential calls through the counting
/// proxy ([`crate::wire`]).
#[derive(Clone, Debug, Serialize)]
pub struct RoundTrips {
    /// Calls counted per kind.
    pub calls: u64,
    /// Round trips of all the new-identity calls.
    pub new_identity: Counts,
    /// Round trips of all the replays, replay cache off (`CARMY_REPLAY_CACHE_ENTRIES=0`; as it
    /// comes for a gateway without a cache).
    pub replay_cache_off: Counts,
    /// Round trips of all the replays with the gateway's default cache, when it has one.
    pub replay_cache_default: Option<Counts>,
}

/// The new-identity latency with few and with many existing reservations.
#[derive(Clone, Debug, Serialize)]
pub struct Flatness {
    /// The measurement on a table of `--small-rows` rows.
    pub small: RunResult,
    /// The measurement on a table of `--large-rows` rows (with `--large`).
    pub large: Option<RunResult>,
}

/// PASS, FAIL or SKIP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Status {
    /// Met.
    #[serde(rename = "PASS")]
    Pass,
    /// Missed.
    #[serde(rename = "FAIL")]
    Fail,
    /// Not measured in this run.
    #[serde(rename = "SKIP")]
    Skip,
}

impl Status {
    fn of(met: bool) -> Self {
        if met {
            Self::Pass
        } else {
            Self::Fail
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Fail => "FAIL",
            Self::Skip => "SKIP",
        }
    }
}

/// One target and how this run did.
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    /// What is required.
    pub name: String,
    /// The figure it is judged on, in words.
    pub figure: String,
    /// The judged value (a ratio or a rate), when measured.
    pub value: Option<f64>,
    /// The bound it must reach (≥) or stay within (≤).
    pub bound: f64,
    /// The verdict.
    pub status: Status,
}

/// A target that was not measured in this run, with why.
fn skipped(name: String, bound: f64, why: &str) -> Target {
    Target {
        name,
        figure: why.to_owned(),
        value: None,
        bound,
        status: Status::Skip,
    }
}

/// Everything a run produced; written as `latest.json`.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// When the run ended (UTC, RFC 3339).
    pub finished_at: String,
    /// The command line.
    pub command: Vec<String>,
    /// CPUs of the machine (gateway, PostgreSQL and load share them).
    pub cpus: usize,
    /// The 1-minute load average before and after the run (other work on the machine shows
    /// here).
    pub load_average: (Option<f64>, Option<f64>),
    /// The PostgreSQL server.
    pub server: ServerInfo,
    /// How it was run.
    pub settings: Settings,
    /// pgbench `new_identity.sql`: the ceiling of new identities.
    pub pgbench_new_identity: PgbenchResult,
    /// pgbench `new_identity.sql` with one client: the two commits of a new identity alone,
    /// the floor under the latency of any call at c=1.
    pub pgbench_new_identity_c1: PgbenchResult,
    /// pgbench `read_one.sql`: the ceiling of replays and conflicts.
    pub pgbench_read_one: PgbenchResult,
    /// The HTTP measurements.
    pub runs: Vec<RunResult>,
    /// New identities from one caller alternating between the main gateway (group commit on)
    /// and one with group commit off, call by call (`crate::load::paired`): on, then off.
    pub lone_caller: Option<[RunResult; 2]>,
    /// The in-memory store, in-process on one thread.
    pub memory_store: MemoryStoreResult,
    /// Round trips per call, counted on the wire.
    pub round_trips: Option<RoundTrips>,
    /// New-identity latency against table size.
    pub flatness: Flatness,
    /// An HTTP tool through Carmy against its upstream called directly.
    pub upstream: UpstreamRuns,
    /// New identities with retention pruning in the background against without.
    pub pruning: Option<crate::pruning::Pruning>,
    /// The gateway's instructions per call (callgrind), when counted.
    pub instructions: Option<crate::callgrind::Instructions>,
    /// The targets.
    pub targets: Vec<Target>,
}

/// The ceiling `scenario` is compared with (TPS): pgbench `new_identity.sql` for new
/// identities, `read_one.sql` for replays and conflicts.
pub fn ceiling_of(
    new_identity: &PgbenchResult,
    read_one: &PgbenchResult,
    scenario: Scenario,
) -> f64 {
    match scenario {
        Scenario::NewIdentity
        | Scenario::McpNewIdentity
        | Scenario::UpstreamDirect
        | Scenario::HttpTool
        | Scenario::HeldNewIdentity => new_identity.tps,
        Scenario::Replay
        | Scenario::Conflict
        | Scenario::McpReplay
        | Scenario::McpPing
        | Scenario::HeldReplay => read_one.tps,
    }
}

impl Report {
    /// The ceiling a scenario is compared with (TPS).
    pub fn ceiling(&self, scenario: Scenario) -> f64 {
        ceiling_of(&self.pgbench_new_identity, &self.pgbench_read_one, scenario)
    }

    /// The run of `scenario` at `concurrency` with the replay cache on or off, group commit on.
    fn run(&self, scenario: Scenario, concurrency: usize, cache: bool) -> Option<&RunResult> {
        self.runs.iter().find(|run| {
            run.scenario == scenario
                && run.concurrency == concurrency
                && run.replay_cache == cache
                && run.group_commit
        })
    }

    /// The new-identity run at `concurrency` with group commit off.
    fn unbatched(&self, concurrency: usize) -> Option<&RunResult> {
        self.runs.iter().find(|run| {
            run.scenario == Scenario::NewIdentity
                && run.concurrency == concurrency
                && !run.group_commit
        })
    }

    /// Whether any target failed.
    pub fn any_failed(&self) -> bool {
        self.targets
            .iter()
            .any(|target| target.status == Status::Fail)
    }
}
