//! New identities with retention pruning running in the background, against the same without
//! pruning (docs/semantics.md §12.9): the table holds `--pruning-rows` finished reservations (1
//! million; 100,000 with `--quick`, which the report says), all finished two days ago. A round
//! is two measurements on that table: a gateway that keeps records forever
//! (`CARMY_RETENTION=0`, nothing is pruned), then one with a retention of one day that prunes
//! every 100 ms, so it deletes the backlog in steps throughout its measurement (the count of
//! expired rows before and after shows it did, and how fast). `--pruning-rounds` repeats the
//! round on the same table, interleaving the two kinds; the target is judged on the round with
//! the median ratio. Each measurement also records the WAL PostgreSQL wrote meanwhile
//! (`pg_stat_wal`, the whole server) and the checkpoints that started.

use crate::db::BenchDb;
use crate::gateway::Gateway;
use crate::load::{self, RunResult};
use crate::report::TARGET_CONCURRENCY;
use serde::Serialize;
use sqlx::Row;
use std::path::Path;
use std::time::{Duration, Instant};

/// The comparison, as the report keeps it.
#[derive(Clone, Debug, Serialize)]
pub struct Pruning {
    /// Finished reservations, all expired under the pruning gateway's retention, before the
    /// measurements.
    pub rows: u64,
    /// Expired rows the pruning gateway deleted during its measurement (of the judged round).
    pub pruned_during: i64,
    /// Those rows per second of the measurement, warm-up included (of the judged round).
    pub pruned_per_second: f64,
    /// New identities at the target concurrency with `CARMY_RETENTION=0` (judged round).
    pub without: RunResult,
    /// The same with `CARMY_RETENTION=1d` and pruning running (judged round).
    pub with: RunResult,
    /// Every round, in order (the judged one among them).
    pub rounds: Vec<Round>,
}

/// One round: without pruning, then with, on the same table.
#[derive(Clone, Debug, Serialize)]
pub struct Round {
    /// p99 without pruning (ms).
    pub p99_without_ms: Option<f64>,
    /// p99 with pruning (ms).
    pub p99_with_ms: Option<f64>,
    /// `p99_with_ms / p99_without_ms`.
    pub ratio: Option<f64>,
    /// Expired rows deleted during the measurement with pruning.
    pub pruned: i64,
    /// Those per second, warm-up included.
    pub pruned_per_second: f64,
    /// WAL written during the measurement without pruning.
    pub wal_without: Wal,
    /// WAL written during the measurement with pruning.
    pub wal_with: Wal,
    /// 1-minute load average when the round ended.
    pub load_average: Option<f64>,
    /// The whole runs.
    #[serde(skip)]
    pub runs: (RunResult, RunResult),
}

/// WAL the server wrote over an interval (`pg_stat_wal` differences, all databases), and the
/// checkpoints started (`pg_stat_bgwriter`).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Wal {
    /// WAL records.
    pub records: i64,
    /// Full-page images.
    pub fpi: i64,
    /// Bytes.
    pub bytes: i64,
    /// `XLogFlush`/`XLogWrite` writes.
    pub writes: i64,
    /// WAL file syncs.
    pub syncs: i64,
    /// Checkpoints started (timed and requested).
    pub checkpoints: i64,
    /// Seconds between the two readings.
    pub seconds: f64,
}

impl Wal {
    async fn read(database: &BenchDb) -> Result<(Self, Instant), String> {
        let mut conn = database.connect().await?;
        let row = sqlx::query(
            "SELECT w.wal_records, w.wal_fpi, w.wal_bytes::bigint AS wal_bytes, w.wal_write, \
                    w.wal_sync, b.checkpoints_timed + b.checkpoints_req AS checkpoints \
             FROM pg_stat_wal w, pg_stat_bgwriter b",
        )
        .fetch_one(&mut conn)
        .await
        .map_err(|error| format!("cannot read pg_stat_wal: {error}"))?;
        let get = |column: &str| row.try_get::<i64, _>(column).unwrap_or(0);
        Ok((
            Self {
                records: get("wal_records"),
                fpi: get("wal_fpi"),
                bytes: get("wal_bytes"),
                writes: get("wal_write"),
                syncs: get("wal_sync"),
                checkpoints: get("checkpoints"),
                seconds: 0.0,
            },
            Instant::now(),
        ))
    }

    fn since(self, (before, at): (Self, Instant)) -> Self {
        Self {
            records: self.records - before.records,
            fpi: self.fpi - before.fpi,
            bytes: self.bytes - before.bytes,
            writes: self.writes - before.writes,
            syncs: self.syncs - before.syncs,
            checkpoints: self.checkpoints - before.checkpoints,
            seconds: at.elapsed().as_secs_f64(),
        }
    }

    /// One line for the progress output.
    fn line(&self) -> String {
        let seconds = self.seconds.max(f64::EPSILON);
        format!(
            "WAL {:.1} MB/s, {:.0} full pages/s, {:.0} syncs/s, {} checkpoints",
            self.bytes as f64 / seconds / 1e6,
            self.fpi as f64 / seconds,
            self.syncs as f64 / seconds,
            self.checkpoints
        )
    }
}

/// Measures new identities on `gateway`, with the WAL written meanwhile.
async fn measured(
    gateway: &Gateway,
    database: &BenchDb,
    identities: usize,
    warmup: Duration,
    seconds: Duration,
) -> Result<(RunResult, Wal), String> {
    let before = Wal::read(database).await?;
    let run = load::new_identities(gateway, identities, warmup, seconds).await;
    let (after, _) = Wal::read(database).await?;
    Ok((run, after.since(before)))
}

/// Runs `rounds` rounds on `database` (emptied first) with `env` for both gateways.
#[allow(clippy::too_many_arguments)] // the settings of one comparison, each used once
pub async fn measure(
    rows: u64,
    rounds: usize,
    gateway_binary: &Path,
    database: &BenchDb,
    env: &[(&'static str, String)],
    warmup: Duration,
    seconds: Duration,
    identities: usize,
) -> Result<Pruning, String> {
    eprintln!("pruning: preloading {rows} finished rows, all finished two days ago");
    database.truncate().await?;
    database.preload(1, rows).await?;
    database.age_finished("2 days").await?;

    let mut forever = env.to_vec();
    forever.push(("CARMY_RETENTION", "0".to_owned()));
    let mut pruning = env.to_vec();
    pruning.push(("CARMY_RETENTION", "1d".to_owned()));
    pruning.push(("CARMY_PRUNE_INTERVAL_MS", "100".to_owned()));
    let mut done = Vec::new();
    for round in 1..=rounds.max(1) {
        let mut gw = Gateway::start(gateway_binary, "keep-forever", &database.url, &forever)?;
        eprintln!(
            "pruning {round}/{rounds}: new identities at c={TARGET_CONCURRENCY} without pruning"
        );
        let (mut without, wal_without) =
            measured(&gw, database, identities, warmup, seconds).await?;
        gw.stop();
        eprintln!("  {}", wal_without.line());
        without.rows_before = database.reservations().await.ok();

        let left = database.expired("1 day").await?;
        if left == 0 {
            return Err(format!(
                "pruning: nothing left to prune in round {round} (more --pruning-rows)"
            ));
        }
        let mut gw = Gateway::start(gateway_binary, "pruning", &database.url, &pruning)?;
        // Pruning has started once the first rows are gone.
        let started = Instant::now();
        while database.expired("1 day").await? >= left {
            if started.elapsed() > Duration::from_secs(30) {
                gw.stop();
                return Err("pruning: the gateway pruned nothing within 30 s".to_owned());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let before = database.expired("1 day").await?;
        let counted = Instant::now();
        eprintln!(
            "pruning {round}/{rounds}: new identities at c={TARGET_CONCURRENCY} while pruning ({before} expired rows left)"
        );
        let (mut with, wal_with) = measured(&gw, database, identities, warmup, seconds).await?;
        let after = database.expired("1 day").await?;
        let elapsed = counted.elapsed().as_secs_f64();
        gw.stop();
        with.rows_before = Some(before);
        let pruned = before - after;
        let ratio = match (without.p99_ms, with.p99_ms) {
            (Some(without), Some(with)) if without > 0.0 => Some(with / without),
            _ => None,
        };
        let round = Round {
            p99_without_ms: without.p99_ms,
            p99_with_ms: with.p99_ms,
            ratio,
            pruned,
            pruned_per_second: pruned as f64 / elapsed.max(f64::EPSILON),
            wal_without,
            wal_with,
            load_average: crate::cpu::load_average(),
            runs: (without, with),
        };
        eprintln!("  {}", wal_with.line());
        eprintln!(
            "  p99 {} -> {} ms = {} x; {:.0} -> {:.0} calls/s; {pruned} rows pruned, {:.0}/s; load {}",
            round.p99_without_ms.map_or("-".to_owned(), |p| format!("{p:.2}")),
            round.p99_with_ms.map_or("-".to_owned(), |p| format!("{p:.2}")),
            round.ratio.map_or("-".to_owned(), |r| format!("{r:.2}")),
            round.runs.0.calls_per_second,
            round.runs.1.calls_per_second,
            round.pruned_per_second,
            round.load_average.map_or("-".to_owned(), |l| format!("{l:.2}")),
        );
        done.push(round);
    }
    // The round with the median ratio (the upper one of an even count).
    let mut order: Vec<usize> = (0..done.len()).collect();
    order.sort_by(|&a, &b| {
        let ratio = |i: usize| done[i].ratio.unwrap_or(f64::INFINITY);
        ratio(a).total_cmp(&ratio(b))
    });
    let judged = &done[order[order.len() / 2]];
    Ok(Pruning {
        rows,
        pruned_during: judged.pruned,
        pruned_per_second: judged.pruned_per_second,
        without: judged.runs.0.clone(),
        with: judged.runs.1.clone(),
        rounds: done,
    })
}
