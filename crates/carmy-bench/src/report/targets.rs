//! The targets a [`Report`] is judged against (the bounds are the constants of
//! [`super`], e.g. [`NEW_IDENTITY_RATIO`]): one function per target or group of targets, each
//! skipping with a reason when its runs are missing.

use super::*;
use crate::format::{rows, thousands};

impl Report {
    /// Judges the targets (fills [`Report::targets`]).
    pub fn judge(&mut self) {
        let mut targets = self.throughput_targets();
        targets.extend(self.group_commit_targets());
        targets.extend(self.cost_targets());
        targets.extend(self.mcp_targets());
        targets.push(self.flatness_target());
        targets.push(pruning_target(self.pruning.as_ref()));
        targets.push(self.memory_target());
        targets.push(self.round_trip_target());
        targets.push(self.upstream_target());
        self.targets = targets;
    }

    /// The latency Carmy adds to an HTTP tool at c=1 ([`upstream_target`]).
    fn upstream_target(&self) -> Target {
        upstream_target(self.pgbench_new_identity_c1.p50_ms, &self.upstream)
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
            // A conflict with a cached record is answered from memory as a replay is
            // (docs/semantics.md §8.4), so it has the replay's bound (issue 39, item 2).
            (
                Scenario::Conflict,
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
                Some(run) if scenario == Scenario::NewIdentity && cpu_limited(run) => {
                    self.cpu_bound_target(run, name)
                }
                Some(run) => {
                    let value = run.calls_per_second / self.ceiling(scenario);
                    let uncached = self.run(scenario, c, false).map_or(String::new(), |off| {
                        format!(
                            " (cache off: {:.2} x)",
                            off.calls_per_second / self.ceiling(scenario)
                        )
                    });
                    let limit = if scenario == Scenario::NewIdentity {
                        "; the flush is the limit (idle CPU above 10%)"
                    } else {
                        ""
                    };
                    Target {
                        name,
                        figure: format!(
                            "{:.0} calls/s vs {:.0} tps = {value:.2} x{uncached}{limit}",
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

    /// A CPU-limited new-identity row: its calls/s against the CPU bound, the calls/s the CPU
    /// left to Carmy (everything but "other") would allow at the CPU per call measured.
    fn cpu_bound_target(&self, run: &RunResult, pgbench_name: String) -> Target {
        let split = run.cpu.as_ref().cloned().unwrap_or_default();
        let used = split.gateway + split.postgres + split.load_generator + split.pgbench;
        let available = 100.0 * split.cpus as f64 - split.other;
        let value = used / available.max(f64::MIN_POSITIVE);
        let bound = run.calls_per_second / value.max(f64::MIN_POSITIVE);
        let versus = run.calls_per_second / self.ceiling(Scenario::NewIdentity);
        Target {
            name: format!("{pgbench_name} (or, CPU-limited: >= {CPU_BOUND_SHARE} x the CPU bound)"),
            figure: format!(
                "CPU is the limit (idle {:.0}% of {} CPUs): {:.0} calls/s vs CPU bound {bound:.0} \
                 = {value:.2} x; vs pgbench {versus:.2} x",
                split.idle, split.cpus, run.calls_per_second
            ),
            value: Some(value),
            bound: CPU_BOUND_SHARE,
            status: Status::of(value >= CPU_BOUND_SHARE && run.error_count() == 0),
        }
    }

    /// Group commit: commits per new identity (the lone caller and the WAL flushes are in
    /// `cost`).
    fn group_commit_targets(&self) -> Vec<Target> {
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
        vec![commits]
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
                        // The SDK's floor under a replay: a `ping` over /mcp, no tool call.
                        let ping = (scenario == Scenario::McpReplay)
                            .then(|| self.run(Scenario::McpPing, c, true))
                            .flatten();
                        let floor = ping.map_or_else(String::new, |ping| {
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
}

/// Whether the CPU, not the flush, limited `run`: idle below [`CPU_LIMIT_IDLE_SHARE`] of the
/// machine during its window.
fn cpu_limited(run: &RunResult) -> bool {
    run.cpu
        .as_ref()
        .is_some_and(|split| split.idle < CPU_LIMIT_IDLE_SHARE * 100.0 * split.cpus as f64)
}

/// New-identity p99 with pruning running against without, on the preloaded table.
pub fn pruning_target(pruning: Option<&crate::pruning::Pruning>) -> Target {
    let Some(pruning) = pruning else {
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
        if pruning.rows < 1_000_000 {
            " (a smaller table than the 1 million of the target)"
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
            let rate = pruning.pruned_per_second;
            let calls = pruning.with.calls_per_second;
            let rounds = match pruning.rounds.len() {
                0 | 1 => String::new(),
                count => format!(", the median of {count} rounds"),
            };
            Target {
                name,
                figure: format!(
                    "p99 {without:.2} ms -> {with:.2} ms = {value:.2} x; {pruned} rows pruned \
                     meanwhile ({rate:.0}/s at {calls:.0} calls/s){rounds}"
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

/// The latency Carmy adds to an HTTP tool at c=1 against `floor` (the two commits alone: pgbench
/// `new_identity.sql` p50 with one client, ms), with p99 and the throughput ratio at the target
/// concurrency in the figure.
pub fn upstream_target(floor: Option<f64>, upstream: &UpstreamRuns) -> Target {
    let name = format!(
        "HTTP tool through Carmy adds <= {ADDED_P50_FLOOR_RATIO} x the two-commit floor (p50, \
         c=1)"
    );
    let at = |runs: &[RunResult], concurrency: usize| {
        runs.iter()
            .find(|run| run.concurrency == concurrency)
            .cloned()
    };
    let (direct, through) = (&upstream.direct, &upstream.through_carmy);
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
            // The two commits alone (pgbench, one client): what no call can do without.
            let floor = floor.unwrap_or(f64::INFINITY);
            let value = added / floor;
            let commits =
                format!(" = {value:.2} x the two commits alone (pgbench c=1, {floor:.2} ms)");
            Target {
                name,
                figure: format!(
                    "p50 {:.2} ms vs {:.2} ms direct = +{added:.2} ms, p99 +{:.2} ms{commits}{loaded}",
                    p50(&through_1),
                    p50(&direct_1),
                    p99(&through_1) - p99(&direct_1)
                ),
                value: Some(value),
                bound: ADDED_P50_FLOOR_RATIO,
                status: Status::of(
                    value <= ADDED_P50_FLOOR_RATIO
                        && through_1.error_count() == 0
                        && direct_1.error_count() == 0,
                ),
            }
        }
        _ => Target {
            name,
            figure: "not measured".to_owned(),
            value: None,
            bound: ADDED_P50_FLOOR_RATIO,
            status: Status::Skip,
        },
    }
}
