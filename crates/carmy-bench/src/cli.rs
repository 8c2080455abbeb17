//! Command-line settings of `carmy-bench`.

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

/// `carmy-bench --database-url URL [OPTIONS]`: measures a release-built `carmy-gateway` over HTTP
/// against pgbench on the same PostgreSQL server, prints the table and the targets, and writes
/// `bench/results/latest.json` and `latest.png`.
#[derive(Clone, Debug, Parser)]
#[command(name = "carmy-bench", version)]
pub struct Args {
    /// A PostgreSQL server where the user may CREATE DATABASE; the benchmark creates and drops
    /// its own database `carmy_bench_<random>` there. The database named in the URL is only
    /// used to create and drop it.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,

    /// The workers (`host:port`, comma separated) of the Citus coordinator that
    /// `--database-url` names: the benchmark's database is then also created on each worker,
    /// with `CREATE EXTENSION citus` everywhere and the nodes registered, and migrated and
    /// distributed by principal (as `carmy-gateway migrate --distribute citus`) before the
    /// gateway starts. See bench/README.md.
    #[arg(long, value_delimiter = ',', value_name = "HOST:PORT")]
    pub citus_workers: Vec<String>,

    /// Seconds of each measurement (default 10; 2 with --quick). pgbench rounds up to whole
    /// seconds.
    #[arg(long)]
    pub seconds: Option<f64>,

    /// Seconds of load before each HTTP measurement that are not counted (default 1; 0.5 with
    /// --quick).
    #[arg(long)]
    pub warmup: Option<f64>,

    /// Short measurements for CI: 2 s each, 1 s for the in-memory store; well under two minutes
    /// in all.
    #[arg(long)]
    pub quick: bool,

    /// Also measure new-identity latency with `--large-rows` existing reservations (takes
    /// minutes: the rows are inserted first).
    #[arg(long)]
    pub large: bool,

    /// Reservations present before the measurements (and for the small step of --large).
    #[arg(long, default_value_t = 10_000)]
    pub small_rows: u64,

    /// Reservations for the large step of --large.
    #[arg(long, default_value_t = 5_000_000)]
    pub large_rows: u64,

    /// Expired finished reservations for the pruning comparison (new identities with retention
    /// pruning in the background against without). Default 1 million; 100,000 with --quick.
    #[arg(long)]
    pub pruning_rows: Option<u64>,

    /// Pairs of measurements (without pruning, then with) in the pruning comparison, on one
    /// preloaded table; the target is judged on the pair with the median ratio.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub pruning_rounds: u64,

    /// Run only this part: `pruning`, the pruning comparison alone (its target is printed and
    /// `pruning.json` written to the out dir), to iterate on that target in minutes; `main`
    /// and `callgrind` as [`Only`] says.
    #[arg(long, value_enum)]
    pub only: Option<Only>,

    /// Exit with status 1 when a target fails (by default the program only reports).
    #[arg(long)]
    pub strict: bool,

    /// Concurrencies of the HTTP scenarios, comma separated; the targets use 32.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,64")]
    pub concurrency: Vec<usize>,

    /// `CARMY_DB_POOL_SIZE` of the gateway under test (default: as many connections as pgbench
    /// has clients).
    #[arg(long, default_value_t = 32)]
    pub pool_size: u32,

    /// `CARMY_REPLAY_CACHE_ENTRIES` of the gateway under test; unset leaves the gateway's
    /// default. Ignored (with a note) by a gateway without a replay cache.
    #[arg(long)]
    pub replay_cache_entries: Option<u64>,

    /// `CARMY_REPLAY_CACHE_TTL_MS` of the gateway under test (when it has the setting): long by
    /// default, so that no cache entry expires in the middle of a replay or conflict measurement
    /// (entries live this long from when they were cached, however often they are hit, and a
    /// conflict answered by PostgreSQL does not cache its record).
    #[arg(long, default_value_t = 3_600_000)]
    pub replay_cache_ttl_ms: u64,

    /// Completed identities the replay and conflict scenarios cycle through.
    #[arg(long, default_value_t = 1_000)]
    pub replay_identities: usize,

    /// pgbench clients (`-c`); threads (`-j`) are the number of CPUs.
    #[arg(long, default_value_t = 32)]
    pub pgbench_clients: u32,

    /// The `carmy-gateway` binary to run. Default: when run by cargo, `cargo build --release
    /// -p carmy-gateway` first, then `<target dir>/release/carmy-gateway`; otherwise that path
    /// as it is.
    #[arg(long)]
    pub gateway: Option<PathBuf>,

    /// The pgbench binary. Default: `pgbench` on PATH, else the newest
    /// `/usr/lib/postgresql/*/bin/pgbench`.
    #[arg(long)]
    pub pgbench: Option<PathBuf>,

    /// Where `latest.json` and `latest.png` go (default: `bench/results` of the repository).
    #[arg(long)]
    pub out_dir: Option<PathBuf>,

    /// Keep the benchmark's database instead of dropping it at the end.
    #[arg(long)]
    pub keep_database: bool,

    /// Skip the instructions per call (callgrind, `crate::callgrind`; about a minute, and
    /// valgrind must be installed: `scripts/bench` installs it unless this is given).
    #[arg(long)]
    pub no_callgrind: bool,

    /// Keep the callgrind dumps in this directory (`callgrind.out.1` .. `.4`: new identity and
    /// replay over HTTP, new identity and replay over `/mcp`; `unbatched/callgrind.out.1`), for
    /// `callgrind_annotate`. By default they are deleted.
    #[arg(long, value_name = "DIR")]
    pub callgrind_out: Option<PathBuf>,
}

/// The parts `--only` runs alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Only {
    /// The pruning comparison.
    Pruning,
    /// The main gateway alone: the pgbench ceilings, then new identities, replays and conflicts
    /// at each `--concurrency` and the MCP rows; prints their table and writes `main.json`.
    Main,
    /// The instructions per call alone (callgrind, a few minutes): prints the four counts
    /// against their targets and writes `callgrind.json`.
    Callgrind,
    /// An HTTP tool's overhead alone: the upstream directly and through Carmy, then pgbench
    /// `new_identity.sql` with one client (the two-commit floor); prints that target.
    Upstream,
}

impl Args {
    /// Length of each measurement.
    pub fn measure(&self) -> Duration {
        Duration::from_secs_f64(self.seconds.unwrap_or(if self.quick { 2.0 } else { 10.0 }))
    }

    /// Uncounted load before each HTTP measurement.
    pub fn warmup(&self) -> Duration {
        Duration::from_secs_f64(self.warmup.unwrap_or(if self.quick { 0.5 } else { 1.0 }))
    }

    /// Store time of the in-memory measurement.
    pub fn memory_time(&self) -> Duration {
        if self.quick {
            Duration::from_secs(1)
        } else {
            Duration::from_secs(2)
        }
    }

    /// The `--citus-workers` as `(host, port)`.
    ///
    /// # Errors
    /// A text naming an entry that is not `host:port`.
    pub fn citus_workers(&self) -> Result<Vec<(String, u16)>, String> {
        self.citus_workers
            .iter()
            .map(|worker| {
                worker
                    .trim()
                    .rsplit_once(':')
                    .and_then(|(host, port)| Some((host.to_owned(), port.parse().ok()?)))
                    .ok_or_else(|| format!("--citus-workers: {worker:?} is not host:port"))
            })
            .collect()
    }

    /// Rows of the pruning comparison.
    pub fn pruning_rows(&self) -> u64 {
        self.pruning_rows
            .unwrap_or(if self.quick { 100_000 } else { 1_000_000 })
    }

    /// Where the results go.
    pub fn out_dir(&self) -> PathBuf {
        self.out_dir.clone().unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("..")
                .join("bench")
                .join("results")
        })
    }
}
