//! Where the machine's CPU time went during a measurement, from `/proc` (Linux): the gateway
//! process, PostgreSQL's processes, pgbench, this program (the load generator), everything
//! else, and idle. Shown in percent of one CPU, so the parts add up to 100 × CPUs.

use serde::Serialize;
use std::collections::BTreeMap;

/// CPU counters at one instant.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Sum of all fields of the `cpu` line of `/proc/stat` (clock ticks, all CPUs).
    total: u64,
    /// `idle` + `iowait` of that line.
    idle: u64,
    /// utime + stime per group.
    groups: BTreeMap<&'static str, u64>,
    /// Whether `/proc` could be read at all.
    available: bool,
}

/// How the CPUs were used between two snapshots, in percent of one CPU.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Split {
    /// The `carmy-gateway` process under test.
    pub gateway: f64,
    /// Every process named `postgres` on the machine (the server's backends).
    pub postgres: f64,
    /// Every process named `pgbench`.
    pub pgbench: f64,
    /// This program: the HTTP load generator.
    pub load_generator: f64,
    /// Busy time of everything else.
    pub other: f64,
    /// Idle (and I/O wait) time.
    pub idle: f64,
    /// Number of CPUs: the parts above add up to 100 × this.
    pub cpus: usize,
}

impl Split {
    /// E.g. `gw 96% pg 71% pgb 0% load 21% other 3% idle 9%`.
    pub fn brief(&self) -> String {
        format!(
            "gw {:.0}% pg {:.0}% pgb {:.0}% load {:.0}% other {:.0}% idle {:.0}%",
            self.gateway, self.postgres, self.pgbench, self.load_generator, self.other, self.idle
        )
    }
}

/// CPU time per call over a window, in µs: utime + stime of the processes (`/proc/<pid>/stat`)
/// over the window, divided by the calls counted in it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PerCall {
    /// The gateway process (0 when no gateway ran, e.g. pgbench).
    pub gateway_us: f64,
    /// Every `postgres` process: the backends serving the calls, and the server's own
    /// processes (WAL writer, checkpointer), which the calls make work too.
    pub postgres_us: f64,
}

impl Split {
    /// The CPU time per call of `calls` over a window of `seconds` (`None` without calls).
    pub fn per_call(&self, seconds: f64, calls: u64) -> Option<PerCall> {
        let per_call = |percent: f64| percent / 100.0 * seconds * 1e6 / calls as f64;
        (calls > 0).then(|| PerCall {
            gateway_us: per_call(self.gateway),
            postgres_us: per_call(self.postgres),
        })
    }
}

/// Number of CPUs of the machine.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// Reads the counters now; `gateway` is the gateway's pid, if one runs.
pub fn snapshot(gateway: Option<u32>) -> Snapshot {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return Snapshot::default();
    };
    let Some(line) = stat.lines().find(|line| line.starts_with("cpu ")) else {
        return Snapshot::default();
    };
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|field| field.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest times are already in user).
    let total = fields.iter().take(8).sum();
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    let mut groups = BTreeMap::new();
    let own = std::process::id();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<u32>().ok())
            else {
                continue;
            };
            let Some((comm, ticks)) = process_ticks(pid) else {
                continue;
            };
            let group = if Some(pid) == gateway {
                "gateway"
            } else if pid == own {
                "load_generator"
            } else if comm == "postgres" {
                "postgres"
            } else if comm == "pgbench" {
                "pgbench"
            } else {
                continue;
            };
            *groups.entry(group).or_insert(0) += ticks;
        }
    }
    Snapshot {
        total,
        idle,
        groups,
        available: true,
    }
}

/// The command name and utime + stime (all threads) of a process.
fn process_ticks(pid: u32) -> Option<(String, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_owned();
    let rest: Vec<&str> = stat.get(close + 2..)?.split_whitespace().collect();
    // After the command: state is field 3, utime field 14, stime field 15.
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    Some((comm, utime + stime))
}

/// The split between two snapshots (`None` without `/proc`).
pub fn split(before: &Snapshot, after: &Snapshot) -> Option<Split> {
    if !before.available || !after.available || after.total <= before.total {
        return None;
    }
    let cpus = cpus();
    // One CPU's worth of ticks over the interval.
    let per_cpu = (after.total - before.total) as f64 / cpus as f64;
    let percent = |ticks: u64| ticks as f64 / per_cpu * 100.0;
    let group = |name: &str| {
        let end = after.groups.get(name).copied().unwrap_or(0);
        let start = before.groups.get(name).copied().unwrap_or(0);
        // A process that exited in between takes its ticks with it: never negative.
        percent(end.saturating_sub(start))
    };
    let idle = percent(after.idle.saturating_sub(before.idle));
    let busy = 100.0 * cpus as f64 - idle;
    let gateway = group("gateway");
    let postgres = group("postgres");
    let pgbench = group("pgbench");
    let load_generator = group("load_generator");
    let other = (busy - gateway - postgres - pgbench - load_generator).max(0.0);
    Some(Split {
        gateway,
        postgres,
        pgbench,
        load_generator,
        other,
        idle,
        cpus,
    })
}

/// The 1-minute load average, for the report.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
