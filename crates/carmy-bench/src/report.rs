//! The results: the printed table, the targets, and `latest.json`.

mod render;

use crate::db::ServerInfo;
use crate::format::{rows, thousands};
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
/// New-identity p50 at c=1 with group commit ≤ this × the p50 with it off.
pub const IDLE_P50_RATIO: f64 = 1.1;
/// PostgreSQL commits per new identity at [`TARGET_CONCURRENCY`] at most this.
pub const COMMITS_PER_NEW_IDENTITY: f64 = 0.5;
/// Replay calls/s at [`TARGET_CONCURRENCY`] ≥ this × pgbench `read_one.sql` TPS.
pub const REPLAY_RATIO: f64 = 1.0;
/// Calls/s through `/mcp` at [`TARGET_CONCURRENCY`] ≥ this × the same calls through
/// `POST /v1/executions`, new identities and replays alike.
pub const MCP_RATIO: f64 = 0.8;
/// New-identity p99 with many rows ≤ this × p99 with few rows.
pub const FLAT_P99_RATIO: f64 = 1.5;

/// New-identity p99 with retention pruning in the background may be at most this many times
/// the p99 without it (docs/semantics.md §12).
pub const PRUNING_P99_RATIO: f64 = 1.2;
/// In-memory reserve + complete pairs per second on one core.
pub const MEMORY_PAIRS_PER_SECOND: f64 = 500_000.0;
/// Busy time of other processes (% of one CPU) above which a window is called noisy.
pub const NOISY_OTHER_PERCENT: f64 = 20.0;
/// Round trips to PostgreSQL per new identity on the happy path.
pub const ROUND_TRIPS_PER_NEW_IDENTITY: f64 = 2.0;
/// Latency Carmy adds to an HTTP tool at c=1 (p50 through Carmy − p50 direct), in ms.
pub const ADDED_P50_MS: f64 = 1.0;

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
    /// pgbench `read_one.sql`: the ceiling of replays and conflicts.
    pub pgbench_read_one: PgbenchResult,
    /// The HTTP measurements.
    pub runs: Vec<RunResult>,
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
    /// The targets.
    pub targets: Vec<Target>,
}

impl Report {
    /// The ceiling a scenario is compared with (TPS).
    pub fn ceiling(&self, scenario: Scenario) -> f64 {
        match scenario {
            Scenario::NewIdentity
            | Scenario::McpNewIdentity
            | Scenario::UpstreamDirect
            | Scenario::HttpTool => self.pgbench_new_identity.tps,
            Scenario::Replay | Scenario::Conflict | Scenario::McpReplay | Scenario::McpPing => {
                self.pgbench_read_one.tps
            }
        }
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

    /// Judges the targets (fills [`Report::targets`]).
    pub fn judge(&mut self) {
        let mut targets = self.throughput_targets();
        targets.extend(self.group_commit_targets());
        targets.extend(self.mcp_targets());
        targets.push(self.flatness_target());
        targets.push(self.pruning_target());
        targets.push(self.memory_target());
        targets.push(self.round_trip_target());
        targets.push(self.upstream_target());
        self.targets = targets;
    }

    /// The latency Carmy adds to an HTTP tool at c=1, with p99 and the throughput ratio at the
    /// target concurrency in the figure.
    fn upstream_target(&self) -> Target {
        let name = format!("HTTP tool through Carmy adds <= {ADDED_P50_MS} ms p50 at c=1");
        let at = |runs: &[RunResult], concurrency: usize| {
            runs.iter()
                .find(|run| run.concurrency == concurrency)
                .cloned()
        };
        let (direct, through) = (&self.upstream.direct, &self.upstream.through_carmy);
        match (at(direct, 1), at(through, 1)) {
            (Some(direct_1), Some(through_1)) => {
                let p50 = |run: &RunResult| run.p50_ms.unwrap_or(f64::INFINITY);
                let p99 = |run: &RunResult| run.p99_ms.unwrap_or(f64::INFINITY);
                let added = p50(&through_1) - p50(&direct_1);
                let c = TARGET_CONCURRENCY;
                let loaded = match (at(direct, c), at(through, c)) {
                    (Some(d), Some(t)) => format!(
                        "; at c={c}: p50 +{:.2} ms, p99 +{:.2} ms, {:.0} vs {:.0} calls/s = {:.2} x",
                        p50(&t) - p50(&d),
                        p99(&t) - p99(&d),
                        t.calls_per_second,
                        d.calls_per_second,
                        t.calls_per_second / d.calls_per_second.max(f64::MIN_POSITIVE)
                    ),
                    _ => String::new(),
                };
                Target {
                    name,
                    figure: format!(
                        "p50 {:.2} ms vs {:.2} ms direct = +{added:.2} ms, p99 +{:.2} ms{loaded}",
                        p50(&through_1),
                        p50(&direct_1),
                        p99(&through_1) - p99(&direct_1)
                    ),
                    value: Some(added),
                    bound: ADDED_P50_MS,
                    status: Status::of(
                        added <= ADDED_P50_MS
                            && through_1.error_count() == 0
                            && direct_1.error_count() == 0,
                    ),
                }
            }
            _ => Target {
                name,
                figure: "not measured".to_owned(),
                value: None,
                bound: ADDED_P50_MS,
                status: Status::Skip,
            },
        }
    }

    /// New identities and replays at the target concurrency against their pgbench ceilings.
    fn throughput_targets(&self) -> Vec<Target> {
        let mut targets = Vec::new();
        for (scenario, c, ratio, ceiling) in [
            (
                Scenario::NewIdentity,
                TARGET_CONCURRENCY,
                NEW_IDENTITY_RATIO,
                "new_identity.sql",
            ),
            (
                Scenario::NewIdentity,
                LOW_CONCURRENCY,
                NEW_IDENTITY_RATIO_LOW,
                "new_identity.sql",
            ),
            (
                Scenario::Replay,
                TARGET_CONCURRENCY,
                REPLAY_RATIO,
                "read_one.sql",
            ),
        ] {
            let name = format!(
                "{} calls/s at c={c} >= {ratio} x pgbench {ceiling}",
                scenario.label()
            );
            targets.push(match self.run(scenario, c, true) {
                Some(run) => {
                    let value = run.calls_per_second / self.ceiling(scenario);
                    let uncached = self.run(scenario, c, false).map_or(String::new(), |off| {
                        format!(
                            " (cache off: {:.2} x)",
                            off.calls_per_second / self.ceiling(scenario)
                        )
                    });
                    Target {
                        name,
                        figure: format!(
                            "{:.0} calls/s vs {:.0} tps = {value:.2} x{uncached}",
                            run.calls_per_second,
                            self.ceiling(scenario)
                        ),
                        value: Some(value),
                        bound: ratio,
                        status: Status::of(value >= ratio && run.error_count() == 0),
                    }
                }
                None => Target {
                    name,
                    figure: format!("not measured (c={c} not in --concurrency)"),
                    value: None,
                    bound: ratio,
                    status: Status::Skip,
                },
            });
        }
        targets
    }

    /// Group commit: the idle latency against batching off, and commits per new identity.
    fn group_commit_targets(&self) -> Vec<Target> {
        let idle_name =
            format!("new-identity p50 at c=1 <= {IDLE_P50_RATIO} x with group commit off");
        let idle = match (self.run(Scenario::NewIdentity, 1, true), self.unbatched(1)) {
            (Some(on), Some(off)) => match (on.p50_ms, off.p50_ms) {
                (Some(on_p50), Some(off_p50)) => {
                    let value = on_p50 / off_p50;
                    Target {
                        name: idle_name,
                        figure: format!("p50 {on_p50:.3} ms vs {off_p50:.3} ms = {value:.2} x"),
                        value: Some(value),
                        bound: IDLE_P50_RATIO,
                        status: Status::of(value <= IDLE_P50_RATIO && on.error_count() == 0),
                    }
                }
                _ => skipped(idle_name, IDLE_P50_RATIO, "no successful calls"),
            },
            _ => skipped(
                idle_name,
                IDLE_P50_RATIO,
                "not measured (c=1 not in --concurrency, or a gateway without \
                 CARMY_DB_BATCH_MAX_ROWS)",
            ),
        };
        let c = TARGET_CONCURRENCY;
        let commits_name =
            format!("PostgreSQL commits per new identity at c={c} <= {COMMITS_PER_NEW_IDENTITY}");
        let commits = match self
            .run(Scenario::NewIdentity, c, true)
            .and_then(|run| run.commits_per_call)
        {
            Some(value) => {
                let off = self
                    .unbatched(c)
                    .and_then(|run| run.commits_per_call)
                    .map_or(String::new(), |off| {
                        format!(" (group commit off: {off:.2})")
                    });
                Target {
                    name: commits_name,
                    figure: format!("{value:.2} commits per call{off}"),
                    value: Some(value),
                    bound: COMMITS_PER_NEW_IDENTITY,
                    status: Status::of(value <= COMMITS_PER_NEW_IDENTITY),
                }
            }
            None => skipped(
                commits_name,
                COMMITS_PER_NEW_IDENTITY,
                "not measured (c=32 not in --concurrency)",
            ),
        };
        vec![idle, commits]
    }

    /// The MCP front against the HTTP API, same gateway and run (docs/semantics.md §11).
    fn mcp_targets(&self) -> Vec<Target> {
        let c = TARGET_CONCURRENCY;
        [Scenario::McpNewIdentity, Scenario::McpReplay]
            .into_iter()
            .map(|scenario| {
                let http = scenario.over_http();
                let name = format!(
                    "{} calls/s at c={c} >= {MCP_RATIO} x {} over POST /v1/executions",
                    scenario.label(),
                    http.label()
                );
                match (self.run(scenario, c, true), self.run(http, c, true)) {
                    (Some(mcp), Some(api)) => {
                        let api_rate = api.calls_per_second.max(f64::MIN_POSITIVE);
                        let value = mcp.calls_per_second / api_rate;
                        // The SDK's floor: a `ping` over /mcp, no tool call at all.
                        let floor =
                            self.run(Scenario::McpPing, c, true)
                                .map_or_else(String::new, |ping| {
                                    format!(
                                        "; an MCP ping alone: {:.2} x",
                                        ping.calls_per_second / api_rate
                                    )
                                });
                        Target {
                            name,
                            figure: format!(
                                "{:.0} vs {:.0} calls/s = {value:.2} x{floor}",
                                mcp.calls_per_second, api.calls_per_second
                            ),
                            value: Some(value),
                            bound: MCP_RATIO,
                            status: Status::of(value >= MCP_RATIO && mcp.error_count() == 0),
                        }
                    }
                    _ => Target {
                        name,
                        figure: format!("not measured (c={c} not in --concurrency)"),
                        value: None,
                        bound: MCP_RATIO,
                        status: Status::Skip,
                    },
                }
            })
            .collect()
    }

    /// New-identity p99 flat from the small to the large table.
    fn flatness_target(&self) -> Target {
        let small = &self.flatness.small;
        let name = format!(
            "new-identity p99 at c={} flat (<= {FLAT_P99_RATIO} x) from {} to {} rows",
            small.concurrency,
            rows(small.rows_before),
            self.flatness
                .large
                .as_ref()
                .map_or_else(|| "millions of".to_owned(), |large| rows(large.rows_before))
        );
        match (&self.flatness.large, small.p99_ms) {
            (Some(large), Some(small_p99)) => {
                let large_p99 = large.p99_ms.unwrap_or(f64::INFINITY);
                let value = large_p99 / small_p99;
                Target {
                    name,
                    figure: format!("p99 {small_p99:.2} ms -> {large_p99:.2} ms = {value:.2} x"),
                    value: Some(value),
                    bound: FLAT_P99_RATIO,
                    status: Status::of(value <= FLAT_P99_RATIO),
                }
            }
            _ => Target {
                name,
                figure: format!(
                    "p99 {} ms with {} rows; the large step runs with --large",
                    small
                        .p99_ms
                        .map_or("-".to_owned(), |p99| format!("{p99:.2}")),
                    rows(small.rows_before)
                ),
                value: None,
                bound: FLAT_P99_RATIO,
                status: Status::Skip,
            },
        }
    }

    /// New-identity p99 with pruning running against without, on the preloaded table.
    fn pruning_target(&self) -> Target {
        let Some(pruning) = &self.pruning else {
            return Target {
                name: format!("new-identity p99 with pruning <= {PRUNING_P99_RATIO} x without"),
                figure: "not measured (the gateway has no CARMY_RETENTION)".to_owned(),
                value: None,
                bound: PRUNING_P99_RATIO,
                status: Status::Skip,
            };
        };
        let name = format!(
            "new-identity p99 at c={} with pruning <= {PRUNING_P99_RATIO} x without, {} rows{}",
            pruning.with.concurrency,
            pruning.rows,
            if self.settings.quick {
                " (--quick: a smaller table than the 1 million of the target)"
            } else {
                ""
            }
        );
        let without = pruning.without.p99_ms;
        let with = pruning.with.p99_ms.unwrap_or(f64::INFINITY);
        match without {
            Some(without) => {
                let value = with / without;
                let pruned = pruning.pruned_during;
                Target {
                    name,
                    figure: format!(
                        "p99 {without:.2} ms -> {with:.2} ms = {value:.2} x; {pruned} rows pruned meanwhile"
                    ),
                    value: Some(value),
                    bound: PRUNING_P99_RATIO,
                    status: Status::of(
                        value <= PRUNING_P99_RATIO
                            && pruned > 0
                            && pruning.with.error_count() == 0
                            && pruning.without.error_count() == 0,
                    ),
                }
            }
            None => Target {
                name,
                figure: "no successful call without pruning".to_owned(),
                value: None,
                bound: PRUNING_P99_RATIO,
                status: Status::Fail,
            },
        }
    }

    /// The in-memory store's reserve+complete pairs per second.
    fn memory_target(&self) -> Target {
        let rate = self.memory_store.pairs_per_second;
        Target {
            name: format!(
                "in-memory store >= {} reserve+complete pairs/s on one core",
                thousands(MEMORY_PAIRS_PER_SECOND)
            ),
            figure: format!(
                "{} pairs/s ({} pairs in {:.2} s)",
                thousands(rate),
                self.memory_store.pairs,
                self.memory_store.timed_seconds
            ),
            value: Some(rate),
            bound: MEMORY_PAIRS_PER_SECOND,
            status: Status::of(rate >= MEMORY_PAIRS_PER_SECOND),
        }
    }

    /// PostgreSQL round trips per new identity, on the wire.
    fn round_trip_target(&self) -> Target {
        let name =
            format!("<= {ROUND_TRIPS_PER_NEW_IDENTITY} PostgreSQL round trips per new identity");
        match &self.round_trips {
            Some(trips) if trips.calls > 0 => {
                let per_call = |count: u64| count as f64 / trips.calls as f64;
                let new = &trips.new_identity;
                let value = per_call(new.round_trips());
                Target {
                    name,
                    figure: format!(
                        "{value:.2} per call on the wire: {:.2} statements + {:.2} pool pings + \
                         {:.2} prepares",
                        per_call(new.statements),
                        per_call(new.pings),
                        per_call(new.prepares)
                    ),
                    value: Some(value),
                    bound: ROUND_TRIPS_PER_NEW_IDENTITY,
                    status: Status::of(value <= ROUND_TRIPS_PER_NEW_IDENTITY),
                }
            }
            _ => Target {
                name,
                figure: "not measured".to_owned(),
                value: None,
                bound: ROUND_TRIPS_PER_NEW_IDENTITY,
                status: Status::Skip,
            },
        }
    }

    /// Whether any target failed.
    pub fn any_failed(&self) -> bool {
        self.targets
            .iter()
            .any(|target| target.status == Status::Fail)
    }
}
