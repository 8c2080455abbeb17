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
//! 10. prints the table and the targets and writes `bench/results/latest.json` and `latest.png`.
//!
//! It exits 0 even when a target fails, unless `--strict` is given. See `bench/README.md`.

mod chart;
mod cli;
mod cpu;
mod db;
mod format;
mod gateway;
mod load;
mod pgbench;
mod pruning;
mod report;
mod upstream;
mod wire;

use clap::Parser;
use cli::Args;
use db::BenchDb;
use gateway::Gateway;
use load::{RunResult, Scenario};
use report::{Flatness, Report, RoundTrips, Settings};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

/// Sequential calls of each kind in the round-trip count.
const ROUND_TRIP_CALLS: usize = 50;

/// A lease long enough that no renewal falls into a measurement (ms).
const LONG_LEASE_MS: &str = "3600000";

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
    let database = match BenchDb::create(&args.database_url).await {
        Ok(database) => database,
        Err(error) => return fail(&error),
    };
    eprintln!("database {} created", database.name);
    let outcome = run(
        &args,
        &gateway_binary,
        &pgbench_binary,
        &database,
        load_before,
    )
    .await;
    if args.keep_database {
        eprintln!("database {} kept (--keep-database)", database.name);
    } else if let Err(error) = database.drop_db().await {
        eprintln!("warning: {error}");
    }
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
fn gateway_env(args: &Args, cache: bool) -> Vec<(&'static str, String)> {
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

/// One HTTP load measurement of `scenario` at `concurrency` against the gateway at `address`.
async fn measure_http(
    args: &Args,
    scenario: Scenario,
    concurrency: usize,
    pid: Option<u32>,
    address: std::net::SocketAddr,
) -> RunResult {
    let measure = args.measure();
    eprintln!(
        "{} at c={concurrency}, {:.1} s",
        scenario.label(),
        measure.as_secs_f64()
    );
    load::run(
        address,
        pid,
        scenario,
        concurrency,
        args.replay_identities,
        args.warmup(),
        measure,
    )
    .await
}

/// New identities at `concurrency` on `gateway`, with the rows before and the PostgreSQL
/// commits per new identity.
async fn measure_new_identities(
    args: &Args,
    concurrency: usize,
    gateway: &Gateway,
    database: &BenchDb,
) -> Result<RunResult, String> {
    let rows_before = database.reservations().await?;
    let commits_before = database.commits().await?;
    let mut result = measure_http(
        args,
        Scenario::NewIdentity,
        concurrency,
        gateway.pid(),
        gateway.address,
    )
    .await;
    let commits = database.commits().await? - commits_before;
    let rows = database.reservations().await? - rows_before;
    result.rows_before = Some(rows_before);
    // The two counts and the settle readings commit too: at most a handful, against thousands.
    result.commits_per_call = (rows > 0).then(|| commits as f64 / rows as f64);
    Ok(result)
}

/// New identities at c=1 and at the target concurrency with group commit off
/// (`CARMY_DB_BATCH_MAX_ROWS=1`), the figures batching is judged against.
async fn measure_unbatched(
    args: &Args,
    gateway_binary: &Path,
    database: &BenchDb,
    main_env: &[(&'static str, String)],
) -> Result<Vec<RunResult>, String> {
    let mut env = main_env.to_vec();
    env.push(("CARMY_DB_BATCH_MAX_ROWS", "1".to_owned()));
    let mut gateway = Gateway::start(gateway_binary, "unbatched", &database.url, &env)?;
    let mut runs = Vec::new();
    for concurrency in [1, report::TARGET_CONCURRENCY] {
        eprint!("group commit off: ");
        let mut result = measure_new_identities(args, concurrency, &gateway, database).await?;
        result.group_commit = false;
        runs.push(result);
    }
    gateway.stop();
    Ok(runs)
}

/// The PostgreSQL path of replays and conflicts: the same calls with the replay cache off.
async fn measure_uncached(
    args: &Args,
    gateway_binary: &Path,
    database: &BenchDb,
) -> Result<Vec<RunResult>, String> {
    let mut runs = Vec::new();
    let mut env = gateway_env(args, false);
    env.push(("CARMY_REPLAY_CACHE_ENTRIES", "0".to_owned()));
    let mut uncached = Gateway::start(gateway_binary, "cache-off", &database.url, &env)?;
    for scenario in [Scenario::Replay, Scenario::Conflict] {
        let concurrency = report::TARGET_CONCURRENCY;
        eprint!("replay cache off: ");
        let mut result = measure_http(
            args,
            scenario,
            concurrency,
            uncached.pid(),
            uncached.address,
        )
        .await;
        result.replay_cache = false;
        runs.push(result);
    }
    uncached.stop();
    Ok(runs)
}

/// The flatness comparison: with `--large`, new identities on a small and on a large table;
/// otherwise the small step is the target-concurrency run already made.
async fn measure_flatness(
    args: &Args,
    runs: &[RunResult],
    gateway_binary: &Path,
    database: &BenchDb,
    has_cache: bool,
) -> Result<Flatness, String> {
    Ok(if args.large {
        Flatness {
            small: {
                eprintln!("flatness: {} rows", args.small_rows);
                database.truncate().await?;
                database.preload(1, args.small_rows).await?;
                flat_step(args, gateway_binary, database, has_cache).await?
            },
            large: {
                eprintln!("flatness: preloading up to {} rows", args.large_rows);
                // Top up to exactly --large-rows: the small step added rows of its own.
                let present = u64::try_from(database.reservations().await?).unwrap_or(0);
                let missing = args.large_rows.saturating_sub(present);
                database
                    .preload(args.small_rows + 1, args.small_rows + missing)
                    .await?;
                Some(flat_step(args, gateway_binary, database, has_cache).await?)
            },
        }
    } else {
        let small = runs
            .iter()
            .find(|run| {
                run.scenario == Scenario::NewIdentity
                    && run.concurrency == report::TARGET_CONCURRENCY
            })
            .or_else(|| {
                runs.iter()
                    .find(|run| run.scenario == Scenario::NewIdentity)
            })
            .cloned()
            .ok_or("no new-identity measurement")?;
        Flatness { small, large: None }
    })
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
    let measure = args.measure();
    let warmup = args.warmup();
    let pgbench_seconds = measure.as_secs_f64().ceil().max(1.0) as u64;
    let has_cache = gateway::has_setting(gateway_binary, "CARMY_REPLAY_CACHE_ENTRIES");
    let has_ttl = gateway::has_setting(gateway_binary, "CARMY_REPLAY_CACHE_TTL_MS");
    let replay_cache = replay_cache_label(args, has_cache, has_ttl);

    eprintln!("starting {}", gateway_binary.display());
    let mut main_env = gateway_env(args, has_cache);
    if has_cache && has_ttl {
        main_env.push((
            "CARMY_REPLAY_CACHE_TTL_MS",
            args.replay_cache_ttl_ms.to_string(),
        ));
    }
    let mut gw = Gateway::start(gateway_binary, "main", &database.url, &main_env)?;
    let server = database.server_info().await?;
    eprintln!("preloading {} reservations", args.small_rows);
    database.preload(1, args.small_rows).await?;
    eprintln!("completing {} replay identities", args.replay_identities);
    load::call_replay_identities(gw.address, args.replay_identities).await?;

    let run_tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    eprintln!("pgbench new_identity.sql, {pgbench_seconds} s");
    let pgbench_new = pgbench::run(
        pgbench_binary,
        &database.url,
        "new_identity.sql",
        args.pgbench_clients,
        pgbench_seconds,
        &[("run", run_tag), ("n", "0".to_owned())],
    )
    .await?;

    let mut runs = Vec::new();
    for &concurrency in &args.concurrency {
        runs.push(measure_new_identities(args, concurrency, &gw, database).await?);
    }

    eprintln!("pgbench read_one.sql, {pgbench_seconds} s");
    let pgbench_read = pgbench::run(
        pgbench_binary,
        &database.url,
        "read_one.sql",
        args.pgbench_clients,
        pgbench_seconds,
        &[("nrows", args.replay_identities.to_string())],
    )
    .await?;
    for scenario in [Scenario::Replay, Scenario::Conflict] {
        for &concurrency in &args.concurrency {
            // Every identity back in the cache, whatever it evicted since.
            load::call_replay_identities(gw.address, args.replay_identities).await?;
            runs.push(measure_http(args, scenario, concurrency, gw.pid(), gw.address).await);
        }
    }
    // The MCP front against the HTTP API: same gateway, same run (docs/semantics.md §11); a
    // `ping` shows what the SDK's stateless request costs before any tool call.
    for scenario in [
        Scenario::McpNewIdentity,
        Scenario::McpReplay,
        Scenario::McpPing,
    ] {
        load::call_replay_identities(gw.address, args.replay_identities).await?;
        let c = report::TARGET_CONCURRENCY;
        runs.push(measure_http(args, scenario, c, gw.pid(), gw.address).await);
    }
    gw.stop();

    if has_cache && args.replay_cache_entries != Some(0) {
        runs.extend(measure_uncached(args, gateway_binary, database).await?);
    }
    if gateway::has_setting(gateway_binary, "CARMY_DB_BATCH_MAX_ROWS") {
        runs.extend(measure_unbatched(args, gateway_binary, database, &main_env).await?);
    }

    eprintln!(
        "in-memory store, {:.0} s on one thread",
        args.memory_time().as_secs_f64()
    );
    let memory_time = args.memory_time();
    let memory_store =
        tokio::task::spawn_blocking(move || carmy_bench::memory::measure(memory_time))
            .await
            .map_err(|error| format!("in-memory measurement: {error}"))?
            .map_err(|error| format!("in-memory measurement: {error}"))?;

    eprintln!("counting round trips on the wire");
    let round_trips = Some(count_round_trips(args, gateway_binary, database, has_cache).await?);

    let flatness = measure_flatness(args, &runs, gateway_binary, database, has_cache).await?;

    eprintln!("an HTTP tool through Carmy against its upstream directly");
    let upstream = upstream::measure(
        gateway_binary,
        &database.url,
        &gateway_env(args, has_cache),
        warmup,
        measure,
    )
    .await?;
    let pruning = if gateway::has_setting(gateway_binary, "CARMY_RETENTION") {
        Some(
            pruning::measure(
                args.pruning_rows(),
                gateway_binary,
                database,
                &gateway_env(args, has_cache),
                warmup,
                measure,
                args.replay_identities,
            )
            .await?,
        )
    } else {
        eprintln!("pruning: skipped (the gateway has no CARMY_RETENTION)");
        None
    };

    let mut report = Report {
        finished_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        command: command_line(),
        cpus: cpu::cpus(),
        load_average: (load_before, cpu::load_average()),
        server,
        settings: Settings {
            seconds: measure.as_secs_f64(),
            warmup_seconds: warmup.as_secs_f64(),
            quick: args.quick,
            large: args.large,
            pool_size: args.pool_size,
            replay_cache,
            replay_identities: args.replay_identities,
            pgbench_clients: args.pgbench_clients,
            gateway: gateway_binary.display().to_string(),
            small_rows: args.small_rows,
        },
        pgbench_new_identity: pgbench_new,
        pgbench_read_one: pgbench_read,
        runs,
        memory_store,
        round_trips,
        flatness,
        upstream,
        pruning,
        targets: Vec::new(),
    };
    report.judge();
    Ok(report)
}

/// One new-identity measurement at the target concurrency on a fresh gateway, for the
/// flatness comparison.
async fn flat_step(
    args: &Args,
    gateway_binary: &Path,
    database: &BenchDb,
    has_cache: bool,
) -> Result<load::RunResult, String> {
    let rows_before = database.reservations().await.ok();
    let mut gw = Gateway::start(
        gateway_binary,
        "flat",
        &database.url,
        &gateway_env(args, has_cache),
    )?;
    eprintln!(
        "new identity at c={} with {} rows, {:.1} s",
        report::TARGET_CONCURRENCY,
        rows_before.unwrap_or(-1),
        args.measure().as_secs_f64()
    );
    let mut result = load::run(
        gw.address,
        gw.pid(),
        Scenario::NewIdentity,
        report::TARGET_CONCURRENCY,
        args.replay_identities,
        args.warmup(),
        args.measure(),
    )
    .await;
    gw.stop();
    result.rows_before = rows_before;
    Ok(result)
}

/// Sequential new identities and replays through the counting proxy, after a warm-up that
/// prepares every statement on the connections used.
async fn count_round_trips(
    args: &Args,
    gateway_binary: &Path,
    database: &BenchDb,
    has_cache: bool,
) -> Result<RoundTrips, String> {
    let proxy = wire::start(db::server_address(&database.url)?).await?;
    let url = db::through_proxy(&database.url, proxy.port)?;
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let new_bodies = |kind: &str| -> Vec<String> {
        (0..ROUND_TRIP_CALLS)
            .map(|index| load::call_body(&format!("rt-{tag}-{kind}-{index}"), false))
            .collect()
    };
    let mut env = vec![
        ("CARMY_DB_POOL_SIZE", args.pool_size.to_string()),
        ("CARMY_LEASE_TTL_MS", LONG_LEASE_MS.to_owned()),
    ];
    if has_cache {
        env.push(("CARMY_REPLAY_CACHE_ENTRIES", "0".to_owned()));
    }
    let mut gw = Gateway::start(gateway_binary, "round-trips", &url, &env)?;
    let warm_new = new_bodies("warm");
    load::sequential(gw.address, Scenario::NewIdentity, &warm_new).await?;
    load::sequential(gw.address, Scenario::Replay, &warm_new).await?;
    let measured = new_bodies("measured");
    let before = proxy.counters.read();
    load::sequential(gw.address, Scenario::NewIdentity, &measured).await?;
    let after_new = proxy.counters.read();
    load::sequential(gw.address, Scenario::Replay, &measured).await?;
    let after_replay = proxy.counters.read();
    gw.stop();

    let replay_cache_default = if has_cache {
        let env = vec![
            ("CARMY_DB_POOL_SIZE", args.pool_size.to_string()),
            ("CARMY_LEASE_TTL_MS", LONG_LEASE_MS.to_owned()),
        ];
        let mut gw = Gateway::start(gateway_binary, "round-trips-cache", &url, &env)?;
        // Warm: the replays fill the cache (and prepare the statements).
        load::sequential(gw.address, Scenario::Replay, &measured).await?;
        let before = proxy.counters.read();
        load::sequential(gw.address, Scenario::Replay, &measured).await?;
        let after = proxy.counters.read();
        gw.stop();
        Some(after.since(&before))
    } else {
        None
    };
    Ok(RoundTrips {
        calls: ROUND_TRIP_CALLS as u64,
        new_identity: after_new.since(&before),
        replay_cache_off: after_replay.since(&after_new),
        replay_cache_default,
    })
}
