//! The results: the printed table, the targets, and `latest.json`.

mod render;

use crate::db::ServerInfo;
use crate::format::{rows, thousands};
use crate::load::{RunResult, Scenario};
use crate::pgbench::PgbenchResult;
use crate::wire::Counts;
use carmy_bench::memory::MemoryStoreResult;
use serde::Serialize;

/// The concurrency the targets compare at.
pub const TARGET_CONCURRENCY: usize = 32;
/// New-identity calls/s at [`TARGET_CONCURRENCY`] ≥ this × pgbench `new_identity.sql` TPS.
pub const NEW_IDENTITY_RATIO: f64 = 0.6;
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
    /// New identities with retention pruning in the background against without.
    pub pruning: Option<crate::pruning::Pruning>,
    /// The targets.
    pub targets: Vec<Target>,
}

impl Report {
    /// The ceiling a scenario is compared with (TPS).
    pub fn ceiling(&self, scenario: Scenario) -> f64 {
        match scenario {
            Scenario::NewIdentity | Scenario::McpNewIdentity => self.pgbench_new_identity.tps,
            Scenario::Replay | Scenario::Conflict | Scenario::McpReplay => {
                self.pgbench_read_one.tps
            }
        }
    }

    fn run(&self, scenario: Scenario, concurrency: usize, cache: bool) -> Option<&RunResult> {
        self.runs.iter().find(|run| {
            run.scenario == scenario && run.concurrency == concurrency && run.replay_cache == cache
        })
    }

    /// Judges the targets (fills [`Report::targets`]).
    pub fn judge(&mut self) {
        let mut targets = self.throughput_targets();
        targets.extend(self.mcp_targets());
        targets.push(self.flatness_target());
        targets.push(self.pruning_target());
        targets.push(self.memory_target());
        targets.push(self.round_trip_target());
        self.targets = targets;
    }

    /// New identities and replays at the target concurrency against their pgbench ceilings.
    fn throughput_targets(&self) -> Vec<Target> {
        let mut targets = Vec::new();
        let c = TARGET_CONCURRENCY;
        for (scenario, ratio, ceiling) in [
            (
                Scenario::NewIdentity,
                NEW_IDENTITY_RATIO,
                "new_identity.sql",
            ),
            (Scenario::Replay, REPLAY_RATIO, "read_one.sql"),
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
                        let value =
                            mcp.calls_per_second / api.calls_per_second.max(f64::MIN_POSITIVE);
                        Target {
                            name,
                            figure: format!(
                                "{:.0} vs {:.0} calls/s = {value:.2} x",
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
