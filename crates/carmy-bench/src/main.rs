//! `carmy-bench`: the gateway over HTTP against PostgreSQL's own limit, on one machine.
//!
//! ```sh
//! cargo run --release -p carmy-bench -- --database-url postgres://postgres@127.0.0.1:5432/postgres
//! ```
//!
//! 1. creates a database `carmy_bench_<random>` on that server and starts the release-built
//!    `carmy-gateway` on it (building it first when run by cargo);
//! 2. preloads `--small-rows` completed reservations and completes the replay identities;
//! 3. measures pgbench with `bench/pgbench/new_identity.sql` (the ceiling for new identities)
//!    and `read_one.sql` (the ceiling for replays and conflicts);
//! 4. drives the gateway over HTTP at each concurrency: new identities, replays, conflicts; and
//!    new identities and replays through `/mcp` at the target concurrency;
//! 5. times the in-memory store in-process on one thread;
//! 6. counts round trips to PostgreSQL per call on the wire, through a counting proxy;
//! 7. with `--large`, compares new-identity latency on `--small-rows` and `--large-rows` rows;
//! 8. calls a small upstream API directly and as a configured HTTP tool through a gateway, at
//!    c=1 and the target concurrency (the latency Carmy adds, docs/semantics.md §10);
//! 9. compares new-identity p99 with retention pruning running in the background against
//!    without, on `--pruning-rows` expired rows (1 million; 100,000 with `--quick`);
//! 10. counts the gateway's instructions per call under callgrind (unless `--no-callgrind`);
//! 11. prints the table and the targets and writes `bench/results/latest.json` and `latest.png`.
//!
//! It exits 0 even when a target fails, unless `--strict` is given. `--only main` runs steps
//! 1-4 alone, `--only callgrind` step 10 alone; `--citus-workers` runs on a Citus cluster (the database distributed by
//! principal before the gateway starts). See `bench/README.md`.

mod callgrind;
mod chart;
mod cli;
mod cpu;
mod db;
mod format;
mod gateway;
mod load;
mod measure;
mod pgbench;
mod phases;
mod pruning;
mod report;
mod upstream;
mod wire;

use clap::Parser;
use cli::Args;
use db::BenchDb;
use report::{Report, Settings};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

/// mimalloc instead of the system allocator: the per-call work is mostly small allocations
/// (keys, records, JSON), which it serves faster (bench/results/2026-12-02-readme-notes.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if cfg!(debug_assertions) {
        eprintln!(
            "warning: carmy-bench is a debug build; its load generator is slow. Use cargo run \
             --release -p carmy-bench"
        );
    }
    let load_before = cpu::load_average();
    let gateway_binary = match gateway::locate(args.gateway.as_deref()) {
        Ok(path) => path,
        Err(error) => return fail(&error),
    };
    let pgbench_binary = match pgbench::locate(args.pgbench.as_deref()) {
        Ok(path) => path,
        Err(error) => return fail(&error),
    };
    let workers = match args.citus_workers() {
        Ok(workers) => workers,
        Err(error) => return fail(&error),
    };
    let database = match BenchDb::create(&args.database_url, &workers).await {
        Ok(database) => database,
        Err(error) => return fail(&error),
    };
    eprintln!("database {} created", database.name);
    if args.only == Some(cli::Only::Pruning) {
        let outcome = pruning_only(&args, &gateway_binary, &database).await;
        finish_database(&args, &database).await;
        return match outcome {
            Ok(failed) if failed && args.strict => ExitCode::FAILURE,
            Ok(_) => ExitCode::SUCCESS,
            Err(error) => fail(&error),
        };
    }
    if args.only == Some(cli::Only::Callgrind) {
        let outcome = callgrind_only(&args, &gateway_binary, &database).await;
        finish_database(&args, &database).await;
        return match outcome {
            Ok(failed) if failed && args.strict => ExitCode::FAILURE,
            Ok(_) => ExitCode::SUCCESS,
            Err(error) => fail(&error),
        };
    }
    if args.only == Some(cli::Only::Upstream) {
        let env = gateway_env(&args, false);
        let outcome =
            upstream::only(&args, &gateway_binary, &pgbench_binary, &database.url, &env).await;
        finish_database(&args, &database).await;
        return match outcome {
            Ok(failed) if failed && args.strict => ExitCode::FAILURE,
            Ok(_) => ExitCode::SUCCESS,
            Err(error) => fail(&error),
        };
    }
    if args.only == Some(cli::Only::Main) {
        let outcome = main_only(&args, &gateway_binary, &pgbench_binary, &database).await;
        finish_database(&args, &database).await;
        return match outcome {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => fail(&error),
        };
    }
    let outcome = run(
        &args,
        &gateway_binary,
        &pgbench_binary,
        &database,
        load_before,
    )
    .await;
    finish_database(&args, &database).await;
    let report = match outcome {
        Ok(report) => report,
        Err(error) => return fail(&error),
    };
    print!("{}", report.render());
    let out_dir = args.out_dir();
    if let Err(error) = write_results(&report, &out_dir) {
        return fail(&error);
    }
    println!(
        "\nwrote {} and {}",
        out_dir.join("latest.json").display(),
        out_dir.join("latest.png").display()
    );
    if args.strict && report.any_failed() {
        eprintln!("a target failed (--strict)");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Drops the benchmark's database, unless `--keep-database`.
async fn finish_database(args: &Args, database: &BenchDb) {
    if args.keep_database {
        eprintln!("database {} kept (--keep-database)", database.name);
    } else if let Err(error) = database.drop_db().await {
        eprintln!("warning: {error}");
    }
}

/// `--only main`: the main gateway's measurements alone (the pgbench ceilings, new identities,
/// replays and conflicts at each concurrency, the MCP rows); prints their table and writes
/// `main.json`.
async fn main_only(
    args: &Args,
    gateway_binary: &Path,
    pgbench_binary: &Path,
    database: &BenchDb,
) -> Result<(), String> {
    let has_cache = gateway::has_setting(gateway_binary, "CARMY_REPLAY_CACHE_ENTRIES");
    let has_ttl = gateway::has_setting(gateway_binary, "CARMY_REPLAY_CACHE_TTL_MS");
    let env = main_env(args, has_cache, has_ttl);
    let main = measure::main_gateway(args, gateway_binary, pgbench_binary, database, &env).await?;
    let server = if database.is_citus() {
        format!(
            "Citus coordinator with {} workers, PostgreSQL {}",
            args.citus_workers.len(),
            main.server.version
        )
    } else {
        format!("PostgreSQL {}", main.server.version)
    };
    let mut out = format!(
        "carmy-bench --only main: {} CPUs shared by gateway, {server} and load; fsync={} \
         synchronous_commit={} shared_buffers={}; gateway pool {} connections, replay cache {}, \
         {:.1} s per measurement after {:.1} s warm-up\n",
        cpu::cpus(),
        main.server.fsync,
        main.server.synchronous_commit,
        main.server.shared_buffers,
        args.pool_size,
        replay_cache_label(args, has_cache, has_ttl),
        args.measure().as_secs_f64(),
        args.warmup().as_secs_f64(),
    );
    report::write_main_table(
        &mut out,
        [&main.pgbench_new, &main.pgbench_new_c1, &main.pgbench_read],
        &main.runs,
        main.lone_caller.as_ref(),
    );
    print!("{out}");
    let out_dir = args.out_dir();
    std::fs::create_dir_all(&out_dir)
        .map_err(|error| format!("cannot create {}: {error}", out_dir.display()))?;
    let path = out_dir.join("main.json");
    let json = serde_json::json!({
        "command": command_line(),
        "server": main.server,
        "citus_workers": args.citus_workers,
        "pgbench_new_identity": main.pgbench_new,
        "pgbench_new_identity_c1": main.pgbench_new_c1,
        "pgbench_read_one": main.pgbench_read,
        "runs": main.runs,
        "lone_caller": main.lone_caller,
    });
    let text = serde_json::to_string_pretty(&json).map_err(|error| error.to_string())?;
    std::fs::write(&path, text + "\n")
        .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// The environment of the main gateway: [`gateway_env`] and the replay cache's long TTL.
fn main_env(args: &Args, has_cache: bool, has_ttl: bool) -> Vec<(&'static str, String)> {
    let mut env = gateway_env(args, has_cache);
    if has_cache && has_ttl {
        env.push((
            "CARMY_REPLAY_CACHE_TTL_MS",
            args.replay_cache_ttl_ms.to_string(),
        ));
    }
    env
}

/// `--only callgrind`: the instructions per call alone; prints the four counts against their
/// targets and writes `callgrind.json`. True when a target failed.
async fn callgrind_only(
    args: &Args,
    gateway_binary: &Path,
    database: &BenchDb,
) -> Result<bool, String> {
    let has_cache = gateway::has_setting(gateway_binary, "CARMY_REPLAY_CACHE_ENTRIES");
    let has_ttl = gateway::has_setting(gateway_binary, "CARMY_REPLAY_CACHE_TTL_MS");
    let env = main_env(args, has_cache, has_ttl);
    let counts = callgrind::measure(
        gateway_binary,
        &database.url,
        &env,
        args.callgrind_out.as_deref(),
    )
    .await?;
    let targets = report::instruction_targets(counts.as_ref());
    for target in &targets {
        println!("{}", target.line());
    }
    if let Some(value) = counts
        .as_ref()
        .and_then(|counts| counts.http_new_identity_unbatched)
    {
        println!("new identity over HTTP with group commit off: {value:.0} instructions per call");
    }
    let out_dir = args.out_dir();
    std::fs::create_dir_all(&out_dir)
        .map_err(|error| format!("cannot create {}: {error}", out_dir.display()))?;
    let path = out_dir.join("callgrind.json");
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "command": command_line(),
        "instructions": counts,
    }))
    .map_err(|error| error.to_string())?;
    std::fs::write(&path, json + "\n")
        .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(targets
        .iter()
        .any(|target| target.status == report::Status::Fail))
}

/// `--only pruning`: the pruning comparison alone, on a database a gateway migrated first;
/// prints its target and writes `pruning.json`. True when the target failed.
async fn pruning_only(
    args: &Args,
    gateway_binary: &Path,
    database: &BenchDb,
) -> Result<bool, String> {
    let has_cache = gateway::has_setting(gateway_binary, "CARMY_REPLAY_CACHE_ENTRIES");
    let mut env = gateway_env(args, has_cache);
    env.push(("CARMY_RETENTION", "0".to_owned()));
    // The gateway migrates the database as it starts.
    gateway::Gateway::start(gateway_binary, "migrate", &database.url, &env)?.stop();
    let pruning = measure::pruning(args, gateway_binary, database, has_cache).await?;
    let target = report::pruning_target(pruning.as_ref());
    println!("{}", target.line());
    let out_dir = args.out_dir();
    std::fs::create_dir_all(&out_dir)
        .map_err(|error| format!("cannot create {}: {error}", out_dir.display()))?;
    let path = out_dir.join("pruning.json");
    let json = serde_json::to_string_pretty(&pruning).map_err(|error| error.to_string())?;
    std::fs::write(&path, json + "\n")
        .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(target.status == report::Status::Fail)
}

fn fail(error: &str) -> ExitCode {
    eprintln!("carmy-bench: {error}");
    ExitCode::FAILURE
}

fn write_results(report: &Report, out_dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(out_dir)
        .map_err(|error| format!("cannot create {}: {error}", out_dir.display()))?;
    let json = serde_json::to_string_pretty(report).map_err(|error| error.to_string())?;
    let json_path = out_dir.join("latest.json");
    std::fs::write(&json_path, json + "\n")
        .map_err(|error| format!("cannot write {}: {error}", json_path.display()))?;
    let png_path = out_dir.join("latest.png");
    chart::draw(report, &png_path)
        .map_err(|error| format!("cannot draw {}: {error}", png_path.display()))
}

/// The environment of the gateway under test.
pub(crate) fn gateway_env(args: &Args, cache: bool) -> Vec<(&'static str, String)> {
    let mut env = vec![("CARMY_DB_POOL_SIZE", args.pool_size.to_string())];
    if let (true, Some(entries)) = (cache, args.replay_cache_entries) {
        env.push(("CARMY_REPLAY_CACHE_ENTRIES", entries.to_string()));
    }
    env
}

/// How the report describes the gateway's replay cache for these settings.
fn replay_cache_label(args: &Args, has_cache: bool, has_ttl: bool) -> String {
    let mut replay_cache = match (has_cache, args.replay_cache_entries) {
        (false, _) => "absent (gateway without CARMY_REPLAY_CACHE_ENTRIES)".to_owned(),
        (true, None) => "on (default entries)".to_owned(),
        (true, Some(0)) => "off (CARMY_REPLAY_CACHE_ENTRIES=0)".to_owned(),
        (true, Some(entries)) => format!("{entries} entries"),
    };
    if has_cache && has_ttl && args.replay_cache_entries != Some(0) {
        replay_cache.push_str(&format!(
            ", TTL {} s",
            Duration::from_millis(args.replay_cache_ttl_ms).as_secs_f64()
        ));
    }

    replay_cache
}

/// This program's command line, with database URLs redacted.
fn command_line() -> Vec<String> {
    std::env::args()
        .map(|arg| {
            if arg.contains("://") {
                db::redact(&arg)
            } else {
                arg
            }
        })
        .collect()
}

async fn run(
    args: &Args,
    gateway_binary: &Path,
    pgbench_binary: &Path,
    database: &BenchDb,
    load_before: Option<f64>,
) -> Result<Report, String> {
    let has_cache = gateway::has_setting(gateway_binary, "CARMY_REPLAY_CACHE_ENTRIES");
    let has_ttl = gateway::has_setting(gateway_binary, "CARMY_REPLAY_CACHE_TTL_MS");
    let main_env = main_env(args, has_cache, has_ttl);
    let main =
        measure::main_gateway(args, gateway_binary, pgbench_binary, database, &main_env).await?;
    let mut runs = main.runs;
    let lone_caller = main.lone_caller;
    if has_cache && args.replay_cache_entries != Some(0) {
        runs.extend(measure::measure_uncached(args, gateway_binary, database).await?);
    }
    if gateway::has_setting(gateway_binary, "CARMY_DB_BATCH_MAX_ROWS") {
        runs.extend(measure::measure_unbatched(args, gateway_binary, database, &main_env).await?);
    }
    let memory_store = measure::memory_store(args).await?;
    eprintln!("counting round trips on the wire");
    let round_trips = measure::count_round_trips(args, gateway_binary, database, has_cache).await?;
    let flatness =
        measure::measure_flatness(args, &runs, gateway_binary, database, has_cache).await?;
    eprintln!("an HTTP tool through Carmy against its upstream directly");
    let env = gateway_env(args, has_cache);
    let upstream = upstream::measure(
        gateway_binary,
        &database.url,
        &env,
        args.warmup(),
        args.measure(),
    )
    .await?;
    let pruning = measure::pruning(args, gateway_binary, database, has_cache).await?;
    let instructions = if args.no_callgrind {
        None
    } else {
        callgrind::measure(
            gateway_binary,
            &database.url,
            &main_env,
            args.callgrind_out.as_deref(),
        )
        .await?
    };
    let mut report = Report {
        finished_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        command: command_line(),
        cpus: cpu::cpus(),
        load_average: (load_before, cpu::load_average()),
        server: main.server,
        settings: settings(
            args,
            gateway_binary,
            replay_cache_label(args, has_cache, has_ttl),
        ),
        pgbench_new_identity: main.pgbench_new,
        pgbench_new_identity_c1: main.pgbench_new_c1,
        pgbench_read_one: main.pgbench_read,
        runs,
        lone_caller,
        memory_store,
        round_trips: Some(round_trips),
        flatness,
        upstream,
        pruning,
        instructions,
        targets: Vec::new(),
    };
    report.judge();
    Ok(report)
}

/// The settings of this run, as the report states them.
fn settings(args: &Args, gateway_binary: &Path, replay_cache: String) -> Settings {
    Settings {
        seconds: args.measure().as_secs_f64(),
        warmup_seconds: args.warmup().as_secs_f64(),
        quick: args.quick,
        large: args.large,
        pool_size: args.pool_size,
        replay_cache,
        replay_identities: args.replay_identities,
        pgbench_clients: args.pgbench_clients,
        gateway: gateway_binary.display().to_string(),
        small_rows: args.small_rows,
    }
}
