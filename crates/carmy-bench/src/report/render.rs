//! The printed form of a [`Report`]: settings, the throughput table, notes, round trips and the
//! targets.

use super::{Report, NOISY_OTHER_PERCENT};
use crate::cpu;
use crate::format::{ms, rows, thousands};
use crate::load::RunResult;
use crate::load::Scenario;
use crate::pgbench::PgbenchResult;
use crate::wire::Counts;
use std::fmt::Write as _;

impl Report {
    /// The printed report: settings, the table, round trips, the targets.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_settings(&mut out);
        self.render_table(&mut out);
        self.render_phases(&mut out);
        self.render_cost(&mut out);
        self.render_notes(&mut out);
        self.render_memory_and_round_trips(&mut out);
        self.render_targets(&mut out);
        out
    }

    /// The machine, the server's settings and the run's settings.
    fn render_settings(&self, out: &mut String) {
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
    }

    /// The throughput table: the pgbench ceilings, every run, the flatness steps.
    fn render_table(&self, out: &mut String) {
        write_main_table(
            out,
            [
                &self.pgbench_new_identity,
                &self.pgbench_new_identity_c1,
                &self.pgbench_read_one,
            ],
            &self.runs,
            self.lone_caller.as_ref(),
        );
        self.render_flatness_rows(out);
        self.render_upstream_rows(out);
    }

    /// Where a new identity's time goes at each concurrency (`crate::phases`), beside pgbench's
    /// WAL flushes per two-statement transaction.
    fn render_phases(&self, out: &mut String) {
        let runs: Vec<_> = self
            .runs
            .iter()
            .filter(|run| run.scenario == Scenario::NewIdentity)
            .filter_map(|run| Some((run, run.phases.as_ref()?, run.mean_ms?)))
            .collect();
        if runs.is_empty() {
            return;
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "where a new identity's time goes (means; the rest is HTTP, the engine and the tool)"
        );
        let _ = writeln!(
            out,
            "{:<34} {:>4} {:>9} {:>8} {:>11} {:>12} {:>8} {:>8} {:>12} {:>6}",
            "scenario",
            "c",
            "calls/s",
            "mean ms",
            "reserve ms",
            "complete ms",
            "rest ms",
            "commits",
            "WAL flushes",
            "idle %"
        );
        for (run, phases, mean) in runs {
            let _ = writeln!(
                out,
                "{:<34} {:>4} {:>9.0} {:>8.3} {:>11.3} {:>12.3} {:>8.3} {:>8} {:>12.2} {:>6}",
                run.label(),
                run.concurrency,
                run.calls_per_second,
                mean,
                phases.reserve_ms,
                phases.complete_ms,
                mean - phases.reserve_ms - phases.complete_ms,
                run.commits_per_call
                    .map_or("-".to_owned(), |commits| format!("{commits:.2}")),
                phases.wal_syncs_per_call,
                run.cpu
                    .as_ref()
                    .map_or("-".to_owned(), |cpu| format!("{:.0}", cpu.idle)),
            );
        }
        for ceiling in [&self.pgbench_new_identity, &self.pgbench_new_identity_c1] {
            if let Some(flushes) = ceiling.wal_syncs_per_transaction {
                let _ = writeln!(
                    out,
                    "pgbench {} at c={}: {flushes:.2} WAL flushes per transaction (2 commits)",
                    ceiling.script.trim_end_matches(".sql"),
                    ceiling.clients
                );
            }
        }
    }

    /// The table's flatness steps (with `--large`): new identities on the small and the large
    /// table.
    fn render_flatness_rows(&self, out: &mut String) {
        if self.flatness.large.is_some() {
            for run in std::iter::once(&self.flatness.small).chain(&self.flatness.large) {
                TableRow {
                    label: format!("new identity @{} rows", rows(run.rows_before)),
                    versus: format!(
                        "{:.2} x new_identity",
                        run.calls_per_second / self.pgbench_new_identity.tps
                    ),
                    ..TableRow::of(run)
                }
                .write(out);
            }
        }
    }

    /// The table's upstream rows: the upstream called directly and as an HTTP tool through
    /// Carmy, the latter against the former.
    fn render_upstream_rows(&self, out: &mut String) {
        for run in self
            .upstream
            .direct
            .iter()
            .chain(&self.upstream.through_carmy)
        {
            let direct = self
                .upstream
                .direct
                .iter()
                .find(|direct| direct.concurrency == run.concurrency);
            TableRow {
                label: run.label(),
                versus: match (run.scenario, direct) {
                    (Scenario::HttpTool, Some(direct)) => format!(
                        "{:.2} x direct",
                        run.calls_per_second / direct.calls_per_second.max(f64::MIN_POSITIVE)
                    ),
                    _ => "(no database)".to_owned(),
                },
                ..TableRow::of(run)
            }
            .write(out);
        }
    }

    /// Warnings about noisy measurements and the errors seen.
    fn render_notes(&self, out: &mut String) {
        let noisy = self
            .runs
            .iter()
            .chain(std::iter::once(&self.flatness.small))
            .chain(&self.flatness.large)
            .filter_map(|run| run.cpu.as_ref())
            .chain(
                [
                    &self.pgbench_new_identity,
                    &self.pgbench_new_identity_c1,
                    &self.pgbench_read_one,
                ]
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
            .chain(&self.upstream.direct)
            .chain(&self.upstream.through_carmy)
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
    }

    /// The in-memory figure and the round trips per call.
    fn render_memory_and_round_trips(&self, out: &mut String) {
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
    }

    /// The targets with PASS/FAIL.
    fn render_targets(&self, out: &mut String) {
        let _ = writeln!(out, "\ntargets:");
        for target in &self.targets {
            let _ = writeln!(out, "{}", target.line());
        }
    }
}

impl super::Target {
    /// The target's line in the printed report: status, name, figure.
    pub fn line(&self) -> String {
        format!(
            "  {}  {:<72} {}",
            self.status.label(),
            self.name,
            self.figure
        )
    }
}

/// The head of the throughput table: the pgbench ceilings (`new_identity`, the same with one
/// client, `read_one`), every run and the lone caller's pair, each run beside its ceiling.
/// [`Report::render`] adds the flatness and upstream rows; `--only main` prints it alone.
pub fn write_main_table(
    out: &mut String,
    ceilings: [&PgbenchResult; 3],
    runs: &[RunResult],
    lone_caller: Option<&[RunResult; 2]>,
) {
    let [new_identity, _, read_one] = ceilings;
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<34} {:>4} {:>9} {:>8} {:>8} {:>7} {:>8}  {:<22} CPU in % of one core",
        "scenario", "c", "calls/s", "p50 ms", "p99 ms", "errors", "commits", "vs pgbench ceiling"
    );
    for ceiling in ceilings {
        let versus = if ceiling.clients == 1 {
            "(floor at c=1)"
        } else {
            "(ceiling)"
        };
        TableRow {
            label: format!("pgbench {}", ceiling.script.trim_end_matches(".sql")),
            concurrency: u64::from(ceiling.clients),
            per_second: ceiling.tps,
            p50_ms: ceiling.p50_ms,
            p99_ms: ceiling.p99_ms,
            errors: ceiling.failed,
            // The script is two autocommitted statements: two commits per transaction.
            commits: Some(2.0),
            versus: versus.to_owned(),
            cpu: ceiling.cpu.as_ref(),
        }
        .write(out);
    }
    for run in runs {
        let ceiling = match run.scenario {
            Scenario::NewIdentity
            | Scenario::McpNewIdentity
            | Scenario::UpstreamDirect
            | Scenario::HttpTool
            | Scenario::HeldNewIdentity => "new_identity",
            Scenario::Replay
            | Scenario::Conflict
            | Scenario::McpReplay
            | Scenario::McpPing
            | Scenario::HeldReplay => "read_one",
        };
        TableRow {
            label: run.label(),
            versus: format!(
                "{:.2} x {ceiling}",
                run.calls_per_second / super::ceiling_of(new_identity, read_one, run.scenario)
            ),
            ..TableRow::of(run)
        }
        .write(out);
    }
    for run in lone_caller.into_iter().flatten() {
        TableRow {
            label: format!("{}, alternating", run.label()),
            versus: format!(
                "{:.2} x new_identity",
                run.calls_per_second / super::ceiling_of(new_identity, read_one, run.scenario)
            ),
            ..TableRow::of(run)
        }
        .write(out);
    }
}

/// One line of the throughput table.
struct TableRow<'a> {
    label: String,
    concurrency: u64,
    per_second: f64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    errors: u64,
    /// PostgreSQL commits per call, where counted.
    commits: Option<f64>,
    /// The ratio to the ceiling, or "(ceiling)".
    versus: String,
    cpu: Option<&'a cpu::Split>,
}

impl<'a> TableRow<'a> {
    /// A run's figures; the label and ratio are the caller's.
    fn of(run: &'a crate::load::RunResult) -> Self {
        Self {
            label: String::new(),
            concurrency: run.concurrency as u64,
            per_second: run.calls_per_second,
            p50_ms: run.p50_ms,
            p99_ms: run.p99_ms,
            errors: run.error_count(),
            commits: run.commits_per_call,
            versus: String::new(),
            cpu: run.cpu.as_ref(),
        }
    }

    fn write(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "{:<34} {:>4} {:>9.0} {:>8} {:>8} {:>7} {:>8}  {:<22} {}",
            self.label,
            self.concurrency,
            self.per_second,
            ms(self.p50_ms),
            ms(self.p99_ms),
            self.errors,
            self.commits
                .map_or("-".to_owned(), |commits| format!("{commits:.2}")),
            self.versus,
            self.cpu.map_or(String::new(), cpu::Split::brief)
        );
    }
}
