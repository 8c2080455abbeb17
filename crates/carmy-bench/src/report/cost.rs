//! What a call costs, whatever the disk does: CPU time per call of the gateway and of
//! PostgreSQL (from `/proc`, per window), the gateway's instructions per call (callgrind), the
//! WAL flushes per new identity, and the targets judged on them against the baselines below.

use super::{skipped, Report, Status, Target, LOW_CONCURRENCY, TARGET_CONCURRENCY};
use crate::load::{RunResult, Scenario};
use std::fmt::Write as _;

/// WAL flushes per new identity at [`LOW_CONCURRENCY`] and [`TARGET_CONCURRENCY`] at most this
/// (`pg_stat_wal.wal_sync` over the row, settled; cluster-wide).
pub const WAL_FLUSHES_PER_NEW_IDENTITY: f64 = 0.4;
/// New-identity calls/s at c=1 with group commit ≥ this × with it off (same run).
pub const LONE_CALLER_RATIO: f64 = 0.95;
/// Commits per new identity at c=1 with group commit at most this many more than with it off
/// (the bench's own readings commit too).
pub const LONE_CALLER_EXTRA_COMMITS: f64 = 0.05;

/// Today's gateway CPU time per new identity over HTTP at c=32 (µs), the baseline of
/// [`Report::cost_targets`]: the first `--quick` run of 2026-12-03 on the 2-core CI machine
/// (bench/results/2026-12-03-flush.md), the first time it was measured.
pub const BASELINE_GATEWAY_US_NEW_IDENTITY: f64 = 98.0;
/// Today's gateway CPU time per replay over HTTP at c=32 (µs, replay cache on), as above.
pub const BASELINE_GATEWAY_US_REPLAY: f64 = 20.0;
/// Today's instructions per call (callgrind), as above: new identity and replay over
/// `POST /v1/executions`, new identity and replay over `/mcp`. Printed beside the counts, not
/// judged (a change that costs instructions shows here first).
pub const BASELINE_INSTRUCTIONS: [f64; 4] = [147_298.0, 79_154.0, 250_914.0, 183_107.0];
/// Instructions per call (callgrind) at most these, in the order of [`BASELINE_INSTRUCTIONS`]:
/// half of what a call cost at the start of the round of issue 39 (2026-12-06).
pub const INSTRUCTION_TARGETS: [f64; 4] = [100_000.0, 50_000.0, 180_000.0, 110_000.0];
/// The four kinds of call counted, in the order of [`INSTRUCTION_TARGETS`].
const INSTRUCTION_KINDS: [&str; 4] = [
    "new identity over HTTP",
    "replay over HTTP",
    "new identity over /mcp",
    "replay over /mcp",
];

/// The instructions per call of each kind against [`INSTRUCTION_TARGETS`] (skipped when not
/// counted): reported like every target, fatal only with `--strict`.
pub fn instruction_targets(counts: Option<&crate::callgrind::Instructions>) -> Vec<Target> {
    let values = counts.map(|counts| {
        [
            counts.http_new_identity,
            counts.http_replay,
            counts.mcp_new_identity,
            counts.mcp_replay,
        ]
    });
    (0..INSTRUCTION_KINDS.len())
        .map(|kind| {
            let bound = INSTRUCTION_TARGETS[kind];
            let name = format!(
                "instructions per {} <= {bound:.0} (callgrind)",
                INSTRUCTION_KINDS[kind]
            );
            match values {
                Some(values) => Target {
                    name,
                    figure: format!(
                        "{:.0} per call (baseline {:.0} on 2026-12-03)",
                        values[kind], BASELINE_INSTRUCTIONS[kind]
                    ),
                    value: Some(values[kind]),
                    bound,
                    status: Status::of(values[kind] <= bound),
                },
                None => skipped(name, bound, "not counted (--no-callgrind, or no valgrind)"),
            }
        })
        .collect()
}

/// A micro-second figure, or `-`.
fn us(value: Option<f64>) -> String {
    value.map_or("-".to_owned(), |value| format!("{value:.0}"))
}

impl Report {
    /// CPU per call of every run and pgbench, then the instructions per call.
    pub(super) fn render_cost(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\nCPU per call (µs of CPU time over each window, utime + stime from /proc; \
             PostgreSQL = every postgres process)"
        );
        let _ = writeln!(
            out,
            "{:<34} {:>4} {:>9} {:>11} {:>14}",
            "scenario", "c", "calls/s", "gateway µs", "PostgreSQL µs"
        );
        for ceiling in [
            &self.pgbench_new_identity,
            &self.pgbench_new_identity_c1,
            &self.pgbench_read_one,
        ] {
            let _ = writeln!(
                out,
                "{:<34} {:>4} {:>9.0} {:>11} {:>14}",
                format!("pgbench {}", ceiling.script.trim_end_matches(".sql")),
                ceiling.clients,
                ceiling.tps,
                "-",
                us(ceiling.postgres_cpu_us)
            );
        }
        for run in &self.runs {
            let per_call = run.cpu_per_call.as_ref();
            let _ = writeln!(
                out,
                "{:<34} {:>4} {:>9.0} {:>11} {:>14}",
                run.label(),
                run.concurrency,
                run.calls_per_second,
                us(per_call.map(|cost| cost.gateway_us)),
                us(per_call.map(|cost| cost.postgres_us))
            );
        }
        let _ = writeln!(
            out,
            "baseline (2026-12-03, bench/results/2026-12-03-flush.md): \
             {BASELINE_GATEWAY_US_NEW_IDENTITY:.0} µs per new identity, \
             {BASELINE_GATEWAY_US_REPLAY:.0} µs per replay at c={TARGET_CONCURRENCY}"
        );
        match &self.instructions {
            Some(counts) => {
                let _ = writeln!(
                    out,
                    "\ninstructions per call (callgrind, {} sequential calls each, PostgreSQL \
                     store, replay cache on; baseline of 2026-12-03):",
                    counts.calls
                );
                for (kind, value) in [
                    counts.http_new_identity,
                    counts.http_replay,
                    counts.mcp_new_identity,
                    counts.mcp_replay,
                ]
                .into_iter()
                .enumerate()
                {
                    let _ = writeln!(
                        out,
                        "  {:<24} {value:>10.0}  (target {:.0}, baseline {:.0})",
                        INSTRUCTION_KINDS[kind],
                        INSTRUCTION_TARGETS[kind],
                        BASELINE_INSTRUCTIONS[kind]
                    );
                }
                if let Some(value) = counts.http_new_identity_unbatched {
                    let _ = writeln!(
                        out,
                        "  {:<24} {value:>10.0}  (group commit off: the lone caller's \
                         comparison)",
                        "new identity over HTTP"
                    );
                }
            }
            None => {
                let _ = writeln!(
                    out,
                    "\ninstructions per call: not counted (--no-callgrind, or no valgrind)"
                );
            }
        }
    }

    /// WAL flushes per new identity, the lone caller against group commit off, the gateway's
    /// CPU per call against today's, and the instructions per call against their targets.
    pub(super) fn cost_targets(&self) -> Vec<Target> {
        let mut targets: Vec<Target> = [LOW_CONCURRENCY, TARGET_CONCURRENCY]
            .into_iter()
            .map(|c| self.flush_target(c))
            .collect();
        targets.push(self.lone_caller_target());
        for (scenario, baseline) in [
            (Scenario::NewIdentity, BASELINE_GATEWAY_US_NEW_IDENTITY),
            (Scenario::Replay, BASELINE_GATEWAY_US_REPLAY),
        ] {
            targets.push(self.gateway_cpu_target(scenario, baseline));
        }
        targets.extend(instruction_targets(self.instructions.as_ref()));
        targets
    }

    /// WAL flushes per new identity at `c`.
    fn flush_target(&self, c: usize) -> Target {
        let name =
            format!("WAL flushes per new identity at c={c} <= {WAL_FLUSHES_PER_NEW_IDENTITY}");
        let run = self.run(Scenario::NewIdentity, c, true);
        match run.and_then(|run| Some((run, run.phases.as_ref()?))) {
            Some((run, phases)) => {
                let value = phases.wal_syncs_per_call;
                let pgbench = self
                    .pgbench_new_identity
                    .wal_syncs_per_transaction
                    .map_or(String::new(), |flushes| {
                        format!(" (pgbench new_identity: {flushes:.2} per transaction)")
                    });
                Target {
                    name,
                    figure: format!(
                        "{value:.2} per call, {} commits per call{pgbench}",
                        run.commits_per_call
                            .map_or("-".to_owned(), |commits| format!("{commits:.2}"))
                    ),
                    value: Some(value),
                    bound: WAL_FLUSHES_PER_NEW_IDENTITY,
                    status: Status::of(value <= WAL_FLUSHES_PER_NEW_IDENTITY),
                }
            }
            None => skipped(
                name,
                WAL_FLUSHES_PER_NEW_IDENTITY,
                "not measured (c not in --concurrency)",
            ),
        }
    }

    /// New identities at c=1: group commit on against off. The rate and p50 are the lone
    /// caller's alternating calls ([`Report::lone_caller`], one window for both); without
    /// them, the two c=1 rows (separate windows). Commits per call are the c=1 rows' settled
    /// counts; the instructions per call (callgrind), when counted, are printed beside.
    fn lone_caller_target(&self) -> Target {
        let name = format!(
            "new-identity calls/s at c=1 >= {LONE_CALLER_RATIO} x with group commit off, no \
             more commits per call"
        );
        let (Some(on_row), Some(off_row)) =
            (self.run(Scenario::NewIdentity, 1, true), self.unbatched(1))
        else {
            return skipped(
                name,
                LONE_CALLER_RATIO,
                "not measured (c=1 not in --concurrency, or a gateway without \
                 CARMY_DB_BATCH_MAX_ROWS)",
            );
        };
        let (on, off, how) = match &self.lone_caller {
            Some([on, off]) => (on, off, "alternating calls, one window"),
            None => (on_row, off_row, "separate windows"),
        };
        let value = on.calls_per_second / off.calls_per_second.max(f64::MIN_POSITIVE);
        let commits = |run: &RunResult| run.commits_per_call.unwrap_or(f64::INFINITY);
        let p50 = |run: &RunResult| run.p50_ms.unwrap_or(f64::INFINITY);
        let instructions = self
            .instructions
            .as_ref()
            .and_then(|counts| {
                Some((
                    counts.http_new_identity,
                    counts.http_new_identity_unbatched?,
                ))
            })
            .map_or(String::new(), |(on, off)| {
                format!("; instructions per call {on:.0} vs {off:.0}")
            });
        Target {
            name,
            figure: format!(
                "{:.0} vs {:.0} calls/s = {value:.2} x ({how}); p50 {:.3} vs {:.3} ms; commits \
                 {:.2} vs {:.2}{instructions}",
                on.calls_per_second,
                off.calls_per_second,
                p50(on),
                p50(off),
                commits(on_row),
                commits(off_row),
            ),
            value: Some(value),
            bound: LONE_CALLER_RATIO,
            status: Status::of(
                value >= LONE_CALLER_RATIO
                    && commits(on_row) <= commits(off_row) + LONE_CALLER_EXTRA_COMMITS
                    && on.error_count() == 0,
            ),
        }
    }

    /// The gateway's CPU per call of `scenario` at the target concurrency against `baseline`.
    fn gateway_cpu_target(&self, scenario: Scenario, baseline: f64) -> Target {
        let c = TARGET_CONCURRENCY;
        let name = format!(
            "gateway CPU per {} at c={c} <= today's {baseline:.0} µs",
            scenario.label()
        );
        let cost = self
            .run(scenario, c, true)
            .and_then(|run| run.cpu_per_call.as_ref());
        match cost {
            Some(cost) => Target {
                name,
                figure: format!(
                    "{:.0} µs gateway, {:.0} µs PostgreSQL per call",
                    cost.gateway_us, cost.postgres_us
                ),
                value: Some(cost.gateway_us),
                bound: baseline,
                status: Status::of(cost.gateway_us <= baseline),
            },
            None => skipped(name, baseline, "not measured (no CPU split from /proc)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{instruction_targets, Status};
    use crate::callgrind::Instructions;

    /// Each count is judged against its own target, at most the bound passing; nothing counted
    /// skips all four.
    #[test]
    fn instruction_counts_are_judged_against_their_targets() {
        let counts = Instructions {
            calls: 200,
            http_new_identity: 100_000.0,
            http_replay: 50_001.0,
            mcp_new_identity: 179_999.0,
            mcp_replay: 213_097.0,
            http_new_identity_unbatched: None,
        };
        let judged: Vec<Status> = instruction_targets(Some(&counts))
            .iter()
            .map(|target| target.status)
            .collect();
        assert_eq!(
            judged,
            [Status::Pass, Status::Fail, Status::Pass, Status::Fail]
        );
        let skipped: Vec<Status> = instruction_targets(None)
            .iter()
            .map(|target| target.status)
            .collect();
        assert_eq!(skipped, [Status::Skip; 4]);
    }
}
