//! New identities with retention pruning running in the background, against the same without
//! pruning (docs/semantics.md §12): the table holds `--pruning-rows` finished reservations (1
//! million; 100,000 with `--quick`, which the report says), all finished two days ago. The first
//! gateway keeps records forever (`CARMY_RETENTION=0`, nothing is pruned); the second one has a
//! retention of one day and prunes every 100 ms, so it deletes the backlog in steps of 1000 rows
//! throughout its measurement (the count of expired rows before and after shows it did).

use crate::db::BenchDb;
use crate::gateway::Gateway;
use crate::load::{self, RunResult};
use crate::report::TARGET_CONCURRENCY;
use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};

/// The comparison, as the report keeps it.
#[derive(Clone, Debug, Serialize)]
pub struct Pruning {
    /// Finished reservations, all expired under the pruning gateway's retention, before the
    /// measurements.
    pub rows: u64,
    /// Expired rows the pruning gateway deleted during its measurement.
    pub pruned_during: i64,
    /// New identities at the target concurrency with `CARMY_RETENTION=0`.
    pub without: RunResult,
    /// The same with `CARMY_RETENTION=1d` and pruning running.
    pub with: RunResult,
}

/// Runs both measurements on `database` (emptied first) with `env` for both gateways.
pub async fn measure(
    rows: u64,
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
    let mut gw = Gateway::start(gateway_binary, "keep-forever", &database.url, &forever)?;
    eprintln!("pruning: new identities at c={TARGET_CONCURRENCY} without pruning");
    let mut without = load::new_identities(&gw, identities, warmup, seconds).await;
    gw.stop();
    without.rows_before = database.reservations().await.ok();

    let mut pruning = env.to_vec();
    pruning.push(("CARMY_RETENTION", "1d".to_owned()));
    pruning.push(("CARMY_PRUNE_INTERVAL_MS", "100".to_owned()));
    let mut gw = Gateway::start(gateway_binary, "pruning", &database.url, &pruning)?;
    // Pruning has started once the first rows are gone.
    let started = Instant::now();
    while database.expired("1 day").await? >= i64::try_from(rows).unwrap_or(i64::MAX) {
        if started.elapsed() > Duration::from_secs(30) {
            gw.stop();
            return Err("pruning: the gateway pruned nothing within 30 s".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = database.expired("1 day").await?;
    eprintln!("pruning: new identities at c={TARGET_CONCURRENCY} while pruning ({before} expired rows left)");
    let mut with = load::new_identities(&gw, identities, warmup, seconds).await;
    let after = database.expired("1 day").await?;
    gw.stop();
    with.rows_before = Some(before);
    Ok(Pruning {
        rows,
        pruned_during: before - after,
        without,
        with,
    })
}
