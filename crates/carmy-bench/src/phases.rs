//! Where a new identity's time goes, read around one measurement: the gateway's own timings of
//! `reserve` and `complete` (the `carmy_store_*_duration_seconds` histograms of its
//! `/metrics`), the calls' mean latency as the load generator saw it, and PostgreSQL's WAL
//! flushes (`pg_stat_wal.wal_sync`, cluster-wide: the benchmark's own server). What is left of
//! the latency beside the two store steps is the HTTP exchange, the engine and the tool.
//!
//! This is the latency profile the group-commit targets are explained with (bench/results/
//! 2026-12-02-readme-notes.md): a call waits for its reservation and then for its outcome, each durable
//! (one WAL flush) before the next step, so at a fixed concurrency throughput is at most
//! concurrency / latency however few commits a call costs.

use serde::Serialize;

/// The counters at one instant.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reading {
    /// `carmy_store_reserve_duration_seconds` sum (s) and count.
    reserve: (f64, f64),
    /// `carmy_store_complete_duration_seconds` sum (s) and count.
    complete: (f64, f64),
    /// `pg_stat_wal.wal_sync`.
    wal_syncs: i64,
}

impl Reading {
    /// The reading of the gateway's `/metrics` text `metrics` and `wal_syncs`.
    pub fn of(metrics: &str, wal_syncs: i64) -> Self {
        let pair = |name: &str| {
            (
                sample(metrics, &format!("{name}_sum")).unwrap_or(0.0),
                sample(metrics, &format!("{name}_count")).unwrap_or(0.0),
            )
        };
        Self {
            reserve: pair("carmy_store_reserve_duration_seconds"),
            complete: pair("carmy_store_complete_duration_seconds"),
            wal_syncs,
        }
    }
}

/// The phases of the calls between two readings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Phases {
    /// Mean time a call waited for its reservation (queue, statement, commit), ms.
    pub reserve_ms: f64,
    /// Mean time a call waited for its outcome to be recorded, ms.
    pub complete_ms: f64,
    /// PostgreSQL WAL flushes per call.
    pub wal_syncs_per_call: f64,
}

impl Phases {
    /// The phases between `before` and `after`, over `calls` new identities; `None` when no
    /// call was timed.
    pub fn between(before: &Reading, after: &Reading, calls: i64) -> Option<Self> {
        let mean = |a: (f64, f64), b: (f64, f64)| {
            let count = b.1 - a.1;
            (count > 0.0).then(|| (b.0 - a.0) / count * 1000.0)
        };
        Some(Self {
            reserve_ms: mean(before.reserve, after.reserve)?,
            complete_ms: mean(before.complete, after.complete)?,
            wal_syncs_per_call: if calls > 0 {
                (after.wal_syncs - before.wal_syncs) as f64 / calls as f64
            } else {
                0.0
            },
        })
    }
}

/// The value of the unlabelled sample `name` in Prometheus text.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix(' ')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = "# HELP carmy_store_reserve_duration_seconds one reserve\n\
        carmy_store_reserve_duration_seconds_sum 0.5\n\
        carmy_store_reserve_duration_seconds_count 250\n\
        carmy_store_reserve_duration_seconds_bucket{le=\"0.001\"} 100\n\
        carmy_store_complete_duration_seconds_sum 0.25\n\
        carmy_store_complete_duration_seconds_count 250\n";

    #[test]
    fn phases_are_means_between_two_readings() {
        let before = Reading::default();
        let after = Reading::of(METRICS, 300);
        assert_eq!(
            Phases::between(&before, &after, 250),
            Some(Phases {
                reserve_ms: 2.0,
                complete_ms: 1.0,
                wal_syncs_per_call: 1.2,
            })
        );
        assert_eq!(Phases::between(&after, &after, 0), None);
    }
}
