//! The results: the printed table, the targets, and `latest.json`.

use crate::cpu;
use crate::db::ServerInfo;
use crate::load::{RunResult, Scenario};
use crate::pgbench::PgbenchResult;
use crate::wire::Counts;
use carmy_bench::memory::MemoryStoreResult;
use serde::Serialize;
use std::fmt::Write as _;

/// The concurrency the targets compare at.
pub const TARGET_CONCURRENCY: usize = 32;
/// New-identity calls/s at [`TARGET_CONCURRENCY`] ≥ this × pgbench `new_identity.sql` TPS.
pub const NEW_IDENTITY_RATIO: f64 = 0.6;
/// Replay calls/s at [`TARGET_CONCURRENCY`] ≥ this × pgbench `read_one.sql` TPS.
pub const REPLAY_RATIO: f64 = 1.0;
/// New-identity p99 with many rows ≤ this × p99 with few rows.
pub const FLAT_P99_RATIO: f64 = 1.5;
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
    /// The targets.
    pub targets: Vec<Target>,
}

impl Report {
    /// The ceiling a scenario is compared with (TPS).
    pub fn ceiling(&self, scenario: Scenario) -> f64 {
        match scenario {
            Scenario::NewIdentity => self.pgbench_new_identity.tps,
            Scenario::Replay | Scenario::Conflict => self.pgbench_read_one.tps,
        }
    }

    fn run(&self, scenario: Scenario, concurrency: usize, cache: bool) -> Option<&RunResult> {
        self.runs.iter().find(|run| {
            run.scenario == scenario && run.concurrency == concurrency && run.replay_cache == cache
        })
    }

    /// Judges the targets (fills [`Report::targets`]).
    pub fn judge(&mut self) {
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
        targets.push(match (&self.flatness.large, small.p99_ms) {
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
        });

        let rate = self.memory_store.pairs_per_second;
        targets.push(Target {
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
        });

        let name =
            format!("<= {ROUND_TRIPS_PER_NEW_IDENTITY} PostgreSQL round trips per new identity");
        targets.push(match &self.round_trips {
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
        });
        self.targets = targets;
    }

    /// Whether any target failed.
    pub fn any_failed(&self) -> bool {
        self.targets
            .iter()
            .any(|target| target.status == Status::Fail)
    }

    /// The printed report: settings, the table, round trips, the targets.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let s = &self.settings;
        let _ = writeln!(
            out,
            "carmy-bench: {} CPUs shared by gateway, PostgreSQL {} and load; fsync={} \
             synchronous_commit={} shared_buffers={}",
            self.cpus,
            self.server.version,
            self.server.fsync,
            self.server.synchronous_commit,
            self.server.shared_buffers
        );
        let _ = writeln!(
            out,
            "gateway pool {} connections, replay cache {}, {} replay identities; {:.1} s per \
             measurement after {:.1} s warm-up; {} rows preloaded; load average {} -> {}",
            s.pool_size,
            s.replay_cache,
            s.replay_identities,
            s.seconds,
            s.warmup_seconds,
            thousands(s.small_rows as f64),
            self.load_average
                .0
                .map_or("?".to_owned(), |l| format!("{l:.2}")),
            self.load_average
                .1
                .map_or("?".to_owned(), |l| format!("{l:.2}")),
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<26} {:>4} {:>9} {:>8} {:>8} {:>7}  {:<22} CPU in % of one core",
            "scenario", "c", "calls/s", "p50 ms", "p99 ms", "errors", "vs pgbench ceiling"
        );
        for ceiling in [&self.pgbench_new_identity, &self.pgbench_read_one] {
            let _ = writeln!(
                out,
                "{:<26} {:>4} {:>9.0} {:>8} {:>8} {:>7}  {:<22} {}",
                format!("pgbench {}", ceiling.script.trim_end_matches(".sql")),
                ceiling.clients,
                ceiling.tps,
                ms(ceiling.p50_ms),
                ms(ceiling.p99_ms),
                ceiling.failed,
                "(ceiling)",
                ceiling
                    .cpu
                    .as_ref()
                    .map_or(String::new(), cpu::Split::brief)
            );
        }
        for run in &self.runs {
            let ceiling = match run.scenario {
                Scenario::NewIdentity => "new_identity",
                Scenario::Replay | Scenario::Conflict => "read_one",
            };
            let _ = writeln!(
                out,
                "{:<26} {:>4} {:>9.0} {:>8} {:>8} {:>7}  {:<22} {}",
                run.label(),
                run.concurrency,
                run.calls_per_second,
                ms(run.p50_ms),
                ms(run.p99_ms),
                run.error_count(),
                format!(
                    "{:.2} x {ceiling}",
                    run.calls_per_second / self.ceiling(run.scenario)
                ),
                run.cpu.as_ref().map_or(String::new(), cpu::Split::brief)
            );
        }
        for run in std::iter::once(&self.flatness.small).chain(&self.flatness.large) {
            if self.flatness.large.is_none() {
                break;
            }
            let _ = writeln!(
                out,
                "{:<26} {:>4} {:>9.0} {:>8} {:>8} {:>7}  {:<22} {}",
                format!("new identity @{} rows", rows(run.rows_before)),
                run.concurrency,
                run.calls_per_second,
                ms(run.p50_ms),
                ms(run.p99_ms),
                run.error_count(),
                format!(
                    "{:.2} x new_identity",
                    run.calls_per_second / self.pgbench_new_identity.tps
                ),
                run.cpu.as_ref().map_or(String::new(), cpu::Split::brief)
            );
        }
        let noisy = self
            .runs
            .iter()
            .chain(std::iter::once(&self.flatness.small))
            .chain(&self.flatness.large)
            .filter_map(|run| run.cpu.as_ref())
            .chain(
                [&self.pgbench_new_identity, &self.pgbench_read_one]
                    .into_iter()
                    .filter_map(|ceiling| ceiling.cpu.as_ref()),
            )
            .any(|split| split.other > NOISY_OTHER_PERCENT);
        if noisy {
            let _ = writeln!(
                out,
                "
note: in some windows other processes took more than {NOISY_OTHER_PERCENT:.0}%                  of a CPU (column other): those figures are low; rerun on a quiet machine"
            );
        }
        let errors: Vec<String> = self
            .runs
            .iter()
            .chain(std::iter::once(&self.flatness.small))
            .chain(&self.flatness.large)
            .filter(|run| run.error_count() > 0)
            .map(|run| {
                format!(
                    "  {} c={}: {}",
                    run.label(),
                    run.concurrency,
                    run.errors
                        .iter()
                        .map(|(kind, count)| format!("{count} x {kind}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
            .collect();
        if !errors.is_empty() {
            let _ = writeln!(out, "\nerrors:\n{}", errors.join("\n"));
        }
        let _ = writeln!(
            out,
            "\nin-memory store: {} reserve+complete pairs/s on one thread",
            thousands(self.memory_store.pairs_per_second)
        );
        if let Some(trips) = &self.round_trips {
            let per = |counts: &Counts| {
                let n = trips.calls.max(1) as f64;
                format!(
                    "{:.2} (statements {:.2}, pool pings {:.2}, prepares {:.2})",
                    counts.round_trips() as f64 / n,
                    counts.statements as f64 / n,
                    counts.pings as f64 / n,
                    counts.prepares as f64 / n
                )
            };
            let _ = writeln!(
                out,
                "round trips to PostgreSQL per call ({} sequential calls each, on the wire):",
                trips.calls
            );
            let _ = writeln!(
                out,
                "  new identity:              {}",
                per(&trips.new_identity)
            );
            let _ = writeln!(
                out,
                "  replay, replay cache off:  {}",
                per(&trips.replay_cache_off)
            );
            if let Some(cached) = &trips.replay_cache_default {
                let _ = writeln!(out, "  replay, default cache:     {}", per(cached));
            }
        }
        let _ = writeln!(out, "\ntargets:");
        for target in &self.targets {
            let _ = writeln!(
                out,
                "  {}  {:<72} {}",
                target.status.label(),
                target.name,
                target.figure
            );
        }
        out
    }
}

fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.2}"))
}

/// `10000` → `10k`, `5000000` → `5M`, else the number.
fn rows(count: Option<i64>) -> String {
    match count {
        None => "?".to_owned(),
        Some(n) if n >= 1_000_000 => format!("{}M", round_to(n as f64 / 1e6, 1)),
        Some(n) if n >= 10_000 => format!("{}k", round_to(n as f64 / 1e3, 0)),
        Some(n) => n.to_string(),
    }
}

/// `value` with at most `decimals` decimals, without trailing zeros.
fn round_to(value: f64, decimals: usize) -> String {
    let text = format!("{value:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// `1234567.8` → `1,234,568`.
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats() {
        assert_eq!(super::thousands(1_234_567.8), "1,234,568");
        assert_eq!(super::thousands(500_000.0), "500,000");
        assert_eq!(super::thousands(12.0), "12");
        assert_eq!(super::rows(Some(10_000)), "10k");
        assert_eq!(super::rows(Some(5_000_000)), "5M");
        assert_eq!(super::rows(Some(10_123)), "10k");
        assert_eq!(super::rows(Some(304_143)), "304k");
        assert_eq!(super::rows(Some(5_004_000)), "5M");
        assert_eq!(super::rows(Some(1_250_000)), "1.2M");
        assert_eq!(super::rows(Some(999)), "999");
    }
}
