//! One caller alternating its calls between two gateways, for comparisons where the machine's
//! state must not decide (issue 30, the lone caller with group commit on against off): the
//! two gateways' calls interleave one by one in the same window, so whatever else runs on the
//! machine (other builds, autovacuum, a checkpoint) falls on both alike. Two back-to-back
//! windows do not have that property: on a shared machine the idle CPU of two windows a minute
//! apart differed by 5 % against 41 %.
//!
//! Each gateway's figures are over the time spent in its own calls: `seconds` is the sum of
//! their latencies and `calls_per_second` the successes over it, i.e. a lone caller's rate
//! (1 / mean latency), not the rate of the interleaved loop. CPU per call: the gateway's own
//! process over the window, per its own call; PostgreSQL's over the window, per call of both.

use super::{check, Bodies, Connection, RunResult, Scenario, WorkerTally};
use crate::cpu;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::time::Instant;

/// One of the two gateways: where it serves and its pid (for its CPU time).
#[derive(Clone, Copy, Debug)]
pub struct Side {
    /// Where it serves.
    pub address: SocketAddr,
    /// Its process id, when known.
    pub pid: Option<u32>,
}

/// Calls of `scenario` with one caller, alternating between `sides[0]` and `sides[1]`:
/// `warmup` uncounted, then `measure` counted (about half of it in each side's calls). The
/// results, in the order of `sides`.
///
/// # Errors
/// When a connection to either gateway cannot be opened.
pub async fn alternate(
    sides: [Side; 2],
    scenario: Scenario,
    identities: usize,
    warmup: Duration,
    measure: Duration,
) -> Result<[RunResult; 2], String> {
    let mut connections = Vec::new();
    for side in &sides {
        connections.push(Connection::open(side.address).await?);
    }
    let hosts = sides.map(|side| side.address.to_string());
    let mut bodies = Bodies {
        scenario,
        worker: 0,
        concurrency: 1,
        identities: identities.max(1),
        sent: 0,
    };
    let mut tallies = [WorkerTally::default(), WorkerTally::default()];
    let start = Instant::now();
    let (counted_from, end) = (start + warmup, start + warmup + measure);
    let mut before = None;
    'calls: loop {
        for (index, connection) in connections.iter_mut().enumerate() {
            let started = Instant::now();
            if started >= end {
                break 'calls;
            }
            let counted = started >= counted_from;
            if counted && before.is_none() {
                before = Some(sides.map(|side| cpu::snapshot(side.pid)));
            }
            let answer = connection
                .post(&hosts[index], bodies.next(), scenario.path())
                .await;
            let latency = started.elapsed();
            let outcome = match answer {
                Ok((status, body)) => check(scenario, status, &body),
                Err(error) => return Err(format!("{}: {error}", sides[index].address)),
            };
            if !counted {
                continue;
            }
            match outcome {
                Ok(()) => tallies[index]
                    .latencies_us
                    .push(u32::try_from(latency.as_micros()).unwrap_or(u32::MAX)),
                Err(kind) => *tallies[index].errors.entry(kind).or_insert(0) += 1,
            }
        }
    }
    let window = end.saturating_duration_since(counted_from).as_secs_f64();
    let splits: [Option<cpu::Split>; 2] = match before {
        Some(before) => {
            let after = sides.map(|side| cpu::snapshot(side.pid));
            [0, 1].map(|index| cpu::split(&before[index], &after[index]))
        }
        None => [None, None],
    };
    let all_calls: u64 = tallies
        .iter()
        .map(|tally| tally.latencies_us.len() as u64)
        .sum();
    let [first, second] = tallies;
    let [first_split, second_split] = splits;
    Ok([
        side_result(scenario, first, first_split, window, all_calls),
        side_result(scenario, second, second_split, window, all_calls),
    ])
}

/// One side's figures (see the module docs): `window` is the counted window (s), `all_calls`
/// the successes of both sides.
fn side_result(
    scenario: Scenario,
    tally: WorkerTally,
    split: Option<cpu::Split>,
    window: f64,
    all_calls: u64,
) -> RunResult {
    let mut latencies = tally.latencies_us;
    latencies.sort_unstable();
    let calls = latencies.len() as u64;
    let busy_us: f64 = latencies.iter().map(|&us| f64::from(us)).sum();
    let seconds = busy_us / 1e6;
    let ms = |q| carmy_bench::percentile(&latencies, q).map(|us| f64::from(us) / 1000.0);
    let cpu_per_call = split.as_ref().and_then(|split| {
        let gateway = split.per_call(window, calls)?;
        let postgres = split.per_call(window, all_calls)?;
        Some(cpu::PerCall {
            gateway_us: gateway.gateway_us,
            postgres_us: postgres.postgres_us,
        })
    });
    RunResult {
        scenario,
        concurrency: 1,
        seconds,
        successes: calls,
        calls_per_second: if seconds > 0.0 {
            calls as f64 / seconds
        } else {
            0.0
        },
        p50_ms: ms(0.50),
        p99_ms: ms(0.99),
        errors: tally.errors,
        rows_before: None,
        replay_cache: true,
        group_commit: true,
        commits_per_call: None,
        mean_ms: (calls > 0).then(|| busy_us / calls as f64 / 1000.0),
        phases: None,
        cpu_per_call,
        cpu: split,
    }
}
