//! PostgreSQL's own limit: pgbench running the repository's scripts (`bench/pgbench/*.sql`) on
//! the benchmark's database, with per-transaction logs for latency percentiles.

use crate::cpu;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The pgbench scripts of the repository.
pub fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../bench/pgbench")
        .join(name)
}

/// The pgbench binary: `explicit`, else `pgbench` on PATH, else the newest
/// `/usr/lib/postgresql/*/bin/pgbench`.
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = explicit {
        return Ok(path.to_owned());
    }
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("pgbench"))
            .find(|candidate| candidate.is_file())
    });
    if let Some(path) = on_path {
        return Ok(path);
    }
    let mut installed: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let path = entry.path().join("bin").join("pgbench");
            path.is_file().then_some((version, path))
        })
        .collect();
    installed.sort();
    installed.pop().map(|(_, path)| path).ok_or_else(|| {
        "pgbench not found: install PostgreSQL's client programs (Debian: postgresql-client or \
         postgresql) or pass --pgbench"
            .to_owned()
    })
}

/// One pgbench measurement.
#[derive(Clone, Debug, Serialize)]
pub struct PgbenchResult {
    /// The script, e.g. `new_identity.sql`.
    pub script: String,
    /// Clients (`-c`).
    pub clients: u32,
    /// Seconds (`-T`).
    pub seconds: u64,
    /// Transactions per second as pgbench reports it (without connection time).
    pub tps: f64,
    /// Transactions run.
    pub transactions: u64,
    /// Failed transactions.
    pub failed: u64,
    /// Median latency of a transaction (ms), from the transaction logs.
    pub p50_ms: Option<f64>,
    /// 99th percentile latency (ms).
    pub p99_ms: Option<f64>,
    /// Where the CPUs went while it ran.
    pub cpu: Option<cpu::Split>,
    /// PostgreSQL WAL flushes per transaction (`pg_stat_wal.wal_sync` over the run), where
    /// counted.
    pub wal_syncs_per_transaction: Option<f64>,
    /// CPU time per transaction of PostgreSQL's processes over the CPU window (µs, at the
    /// run's mean rate).
    pub postgres_cpu_us: Option<f64>,
}

impl PgbenchResult {
    /// Counts `wal_syncs` flushes over the run's transactions.
    pub fn count_wal_syncs(&mut self, wal_syncs: i64) {
        self.wal_syncs_per_transaction =
            (self.transactions > 0).then(|| wal_syncs as f64 / self.transactions as f64);
    }
}

/// Runs `pgbench -n -M prepared -c clients -j <CPUs> -T seconds -f script` with `defines`
/// (`-D name=value`) against `database_url`.
pub async fn run(
    binary: &Path,
    database_url: &str,
    script_name: &str,
    clients: u32,
    seconds: u64,
    defines: &[(&str, String)],
) -> Result<PgbenchResult, String> {
    let log_dir = std::env::temp_dir().join(format!(
        "carmy-bench-pgbench-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&log_dir)
        .map_err(|error| format!("cannot create {}: {error}", log_dir.display()))?;
    let threads = cpu::cpus().min(clients as usize).max(1);
    let mut command = tokio::process::Command::new(binary);
    command
        .args(["-n", "-M", "prepared"])
        .arg(format!("-c{clients}"))
        .arg(format!("-j{threads}"))
        .arg(format!("-T{seconds}"))
        .arg("-l")
        .arg(format!("--log-prefix={}", log_dir.join("tx").display()))
        .arg("-f")
        .arg(script(script_name));
    for (name, value) in defines {
        command.arg("-D").arg(format!("{name}={value}"));
    }
    command.arg(database_url).current_dir(&log_dir);
    let child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|error| format!("cannot run {}: {error}", binary.display()))?;
    // CPU split over the middle of the run: after connections are made, before they close.
    let window = async {
        let total = Duration::from_secs(seconds);
        let skip = Duration::from_secs_f64((total.as_secs_f64() * 0.15).min(1.0));
        tokio::time::sleep(skip).await;
        let before = cpu::snapshot(None);
        tokio::time::sleep(total.saturating_sub(skip * 2)).await;
        cpu::split(&before, &cpu::snapshot(None))
    };
    let (output, cpu) = tokio::join!(child.wait_with_output(), window);
    let output = output.map_err(|error| format!("pgbench failed: {error}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let mut latencies = read_logs(&log_dir);
    let _ = std::fs::remove_dir_all(&log_dir);
    if !output.status.success() {
        return Err(format!(
            "pgbench {script_name} failed ({}):\n{stdout}{stderr}",
            output.status
        ));
    }
    let tps = field(&stdout, "tps = ")
        .ok_or_else(|| format!("no tps in pgbench's output:\n{stdout}{stderr}"))?;
    let transactions = field(&stdout, "number of transactions actually processed: ").unwrap_or(0.0);
    let failed = field(&stdout, "number of failed transactions: ").unwrap_or(0.0);
    latencies.sort_unstable();
    let ms = |q| carmy_bench::percentile(&latencies, q).map(|us| f64::from(us) / 1000.0);
    Ok(PgbenchResult {
        script: script_name.to_owned(),
        clients,
        seconds,
        tps,
        transactions: transactions as u64,
        failed: failed as u64,
        p50_ms: ms(0.50),
        p99_ms: ms(0.99),
        postgres_cpu_us: cpu
            .as_ref()
            .filter(|_| tps > 0.0)
            .map(|split| split.postgres / 100.0 * 1e6 / tps),
        cpu,
        wal_syncs_per_transaction: None,
    })
}

/// The number after `prefix` on the first line that has it.
fn field(text: &str, prefix: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.trim().strip_prefix(prefix)?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Latencies (µs) from pgbench's transaction logs: `client_id transaction_no time script_no
/// time_epoch time_us`, `time` being the latency.
fn read_logs(dir: &Path) -> Vec<u32> {
    let mut latencies = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        latencies.extend(text.lines().filter_map(|line| {
            let micros: u64 = line.split_whitespace().nth(2)?.parse().ok()?;
            u32::try_from(micros).ok()
        }));
    }
    latencies
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_pgbench_output() {
        let out = "number of transactions actually processed: 9493\n\
                   number of failed transactions: 0 (0.000%)\n\
                   tps = 4752.145549 (without initial connection time)\n";
        assert_eq!(super::field(out, "tps = "), Some(4752.145549));
        assert_eq!(
            super::field(out, "number of transactions actually processed: "),
            Some(9493.0)
        );
        assert_eq!(
            super::field(out, "number of failed transactions: "),
            Some(0.0)
        );
    }
}
