//! The measurements, one function each: HTTP load on the main gateway (with the pgbench
//! ceilings), the replay cache off, group commit off, the flatness steps, the in-memory store,
//! the round trips on the wire and the pruning comparison. [`crate::run`] calls them in order.

use crate::cli::Args;
use crate::db::{BenchDb, ServerInfo};
use crate::gateway::{self, Gateway};
use crate::load::{self, RunResult, Scenario};
use crate::pgbench::{self, PgbenchResult};
use crate::phases::{self, Phases};
use crate::pruning::{self, Pruning};
use crate::report::{self, Flatness, RoundTrips};
use crate::{db, gateway_env, wire};
use carmy_bench::memory::MemoryStoreResult;
use std::path::Path;

/// Sequential calls of each kind in the round-trip count.
const ROUND_TRIP_CALLS: usize = 50;

/// A lease long enough that no renewal falls into a measurement (ms).
const LONG_LEASE_MS: &str = "3600000";

/// What the main gateway measured: the server, both pgbench ceilings and the HTTP and MCP runs.
pub struct MainRuns {
    /// The PostgreSQL server measured against.
    pub server: ServerInfo,
    /// pgbench `new_identity.sql`: the ceiling for new identities.
    pub pgbench_new: PgbenchResult,
    /// pgbench `new_identity.sql` with one client: what the two statements (two commits) of a
    /// new identity cost alone, the floor under any call's latency at c=1.
    pub pgbench_new_c1: PgbenchResult,
    /// pgbench `read_one.sql`: the ceiling for replays and conflicts.
    pub pgbench_read: PgbenchResult,
    /// New identities, replays and conflicts at each concurrency, then the MCP scenarios.
    pub runs: Vec<RunResult>,
    /// The lone caller alternating between this gateway and one with group commit off
    /// ([`lone_caller`]), when the gateway has the setting.
    pub lone_caller: Option<[RunResult; 2]>,
}

/// Starts the main gateway with `env`, preloads the rows and the replay identities, and
/// measures pgbench and the gateway at each concurrency.
pub async fn main_gateway(
    args: &Args,
    gateway_binary: &Path,
    pgbench_binary: &Path,
    database: &BenchDb,
    env: &[(&'static str, String)],
) -> Result<MainRuns, String> {
    let pgbench_seconds = args.measure().as_secs_f64().ceil().max(1.0) as u64;
    eprintln!("starting {}", gateway_binary.display());
    // The example tools and the client tool of the held scenarios (docs/semantics.md §16).
    let held_tools = std::env::temp_dir().join(format!(
        "carmy-bench-held-{}.toml",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::write(
        &held_tools,
        format!(
            "example_tools = true\n\n[[client_tools]]\nname = \"{}\"\n",
            load::HELD_TOOL
        ),
    )
    .map_err(|error| format!("writing {}: {error}", held_tools.display()))?;
    let mut main_env = env.to_vec();
    main_env.push(("CARMY_TOOLS_FILE", held_tools.display().to_string()));
    let mut gw = Gateway::start(gateway_binary, "main", &database.url, &main_env)?;
    let server = database.server_info().await?;
    eprintln!("preloading {} reservations", args.small_rows);
    database.preload(1, args.small_rows).await?;
    eprintln!("completing {} replay identities", args.replay_identities);
    load::call_replay_identities(gw.address, args.replay_identities).await?;

    let run_tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    eprintln!("pgbench new_identity.sql, {pgbench_seconds} s");
    let wal_before = database.wal_syncs().await?;
    let mut pgbench_new = pgbench::run(
        pgbench_binary,
        &database.url,
        "new_identity.sql",
        args.pgbench_clients,
        pgbench_seconds,
        &[("run", run_tag.clone()), ("n", "0".to_owned())],
    )
    .await?;
    pgbench_new.count_wal_syncs(database.wal_syncs().await? - wal_before);
    eprintln!("pgbench new_identity.sql with one client, {pgbench_seconds} s");
    let wal_before = database.wal_syncs().await?;
    let mut pgbench_new_c1 = pgbench::run(
        pgbench_binary,
        &database.url,
        "new_identity.sql",
        1,
        pgbench_seconds,
        &[("run", format!("{run_tag}-c1")), ("n", "0".to_owned())],
    )
    .await?;
    pgbench_new_c1.count_wal_syncs(database.wal_syncs().await? - wal_before);

    let mut runs = Vec::new();
    let mut settled = None;
    for &concurrency in &args.concurrency {
        runs.push(measure_new_identities(args, concurrency, &gw, database, &mut settled).await?);
    }
    let lone_caller = if gateway::has_setting(gateway_binary, "CARMY_DB_BATCH_MAX_ROWS") {
        Some(lone_caller(args, gateway_binary, database, env, &gw).await?)
    } else {
        None
    };

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
    // The MCP front against the HTTP API: same gateway, same run (docs/semantics.md §11).
    // A `ping` shows what the SDK's stateless request costs before any tool call.
    for scenario in [
        Scenario::McpNewIdentity,
        Scenario::McpReplay,
        Scenario::McpPing,
    ] {
        load::call_replay_identities(gw.address, args.replay_identities).await?;
        let c = report::TARGET_CONCURRENCY;
        runs.push(measure_http(args, scenario, c, gw.pid(), gw.address).await);
    }
    // Executions held by a client beside the gateway-run ones (docs/semantics.md §16): new
    // identities (reserve and record, with the commits per call) and replays.
    let mut settled = None;
    runs.push(
        measure_new_identities_of(
            args,
            Scenario::HeldNewIdentity,
            report::TARGET_CONCURRENCY,
            &gw,
            database,
            &mut settled,
        )
        .await?,
    );
    load::call_held_identities(gw.address, args.replay_identities).await?;
    let c = report::TARGET_CONCURRENCY;
    runs.push(measure_http(args, Scenario::HeldReplay, c, gw.pid(), gw.address).await);
    gw.stop();
    let _ = std::fs::remove_file(&held_tools);
    Ok(MainRuns {
        server,
        pgbench_new,
        pgbench_new_c1,
        pgbench_read,
        runs,
        lone_caller,
    })
}

/// New identities from one caller alternating, call by call, between `main` (group commit
/// on) and a gateway started now with `CARMY_DB_BATCH_MAX_ROWS=1` (group commit off), both on
/// `database` ([`load::paired`]): the lone-caller comparison, with whatever else runs on the
/// machine falling on both alike. The results: on, then off.
pub async fn lone_caller(
    args: &Args,
    gateway_binary: &Path,
    database: &BenchDb,
    main_env: &[(&'static str, String)],
    main: &Gateway,
) -> Result<[RunResult; 2], String> {
    let mut env = main_env.to_vec();
    env.push(("CARMY_DB_BATCH_MAX_ROWS", "1".to_owned()));
    let mut unbatched = Gateway::start(gateway_binary, "lone-unbatched", &database.url, &env)?;
    // Each side gets about `measure` of calls.
    let measure = args.measure() * 2;
    eprintln!(
        "new identity at c=1, group commit on and off call by call, {:.1} s",
        measure.as_secs_f64()
    );
    let sides = [main, &unbatched].map(|gateway| load::paired::Side {
        address: gateway.address,
        pid: gateway.pid(),
    });
    let results = load::paired::alternate(
        sides,
        Scenario::NewIdentity,
        args.replay_identities,
        args.warmup(),
        measure,
    )
    .await;
    unbatched.stop();
    let [on, mut off] = results?;
    off.group_commit = false;
    Ok([on, off])
}

/// The in-memory store, timed in-process on one thread.
pub async fn memory_store(args: &Args) -> Result<MemoryStoreResult, String> {
    eprintln!(
        "in-memory store, {:.0} s on one thread",
        args.memory_time().as_secs_f64()
    );
    let memory_time = args.memory_time();
    tokio::task::spawn_blocking(move || carmy_bench::memory::measure(memory_time))
        .await
        .map_err(|error| format!("in-memory measurement: {error}"))?
        .map_err(|error| format!("in-memory measurement: {error}"))
}

/// New-identity latency with retention pruning running against without; `None` when the
/// gateway has no `CARMY_RETENTION`.
pub async fn pruning(
    args: &Args,
    gateway_binary: &Path,
    database: &BenchDb,
    has_cache: bool,
) -> Result<Option<Pruning>, String> {
    if !gateway::has_setting(gateway_binary, "CARMY_RETENTION") {
        eprintln!("pruning: skipped (the gateway has no CARMY_RETENTION)");
        return Ok(None);
    }
    let runs = pruning::measure(
        args.pruning_rows(),
        usize::try_from(args.pruning_rounds).unwrap_or(1),
        gateway_binary,
        database,
        &gateway_env(args, has_cache),
        args.warmup(),
        args.measure(),
        args.replay_identities,
    )
    .await?;
    Ok(Some(runs))
}

/// One HTTP load measurement of `scenario` at `concurrency` against the gateway at `address`.
pub async fn measure_http(
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

/// New identities at `concurrency` on `gateway`, with the rows before, the PostgreSQL commits
/// and the WAL flushes per new identity. `settled` carries the settled counts from one
/// measurement to the next on the same database (each reading waits for the server's counts to
/// settle, [`crate::db::STATS_SETTLE`] and more).
pub async fn measure_new_identities(
    args: &Args,
    concurrency: usize,
    gateway: &Gateway,
    database: &BenchDb,
    settled: &mut Option<Settled>,
) -> Result<RunResult, String> {
    measure_new_identities_of(
        args,
        Scenario::NewIdentity,
        concurrency,
        gateway,
        database,
        settled,
    )
    .await
}

/// [`measure_new_identities`] of `scenario`, a scenario that makes one new row per call
/// (gateway-run or held, docs/semantics.md §16).
pub async fn measure_new_identities_of(
    args: &Args,
    scenario: Scenario,
    concurrency: usize,
    gateway: &Gateway,
    database: &BenchDb,
    settled: &mut Option<Settled>,
) -> Result<RunResult, String> {
    let rows_before = database.reservations().await?;
    let before = match *settled {
        Some(counts) => counts,
        None => Settled::read(database).await?,
    };
    let phases_before = phases::Reading::of(&gateway.get("/metrics")?, before.wal_syncs);
    let mut result =
        measure_http(args, scenario, concurrency, gateway.pid(), gateway.address).await;
    let metrics_after = gateway.get("/metrics")?;
    let rows = database.reservations().await? - rows_before;
    let after = Settled::read(database).await?;
    *settled = Some(after);
    let phases_after = phases::Reading::of(&metrics_after, after.wal_syncs);
    result.phases = Phases::between(&phases_before, &phases_after, rows);
    result.rows_before = Some(rows_before);
    // The two counts and the settle readings commit too: at most a handful, against thousands.
    let commits = after.commits - before.commits;
    result.commits_per_call = (rows > 0).then(|| commits as f64 / rows as f64);
    Ok(result)
}

/// The server's counts once every backend reported them: commits of the bench database and WAL
/// flushes of the whole server.
#[derive(Clone, Copy, Debug)]
pub struct Settled {
    commits: i64,
    wal_syncs: i64,
}

impl Settled {
    /// Waits for the counts to settle ([`BenchDb::commits`]) and reads them.
    async fn read(database: &BenchDb) -> Result<Self, String> {
        let commits = database.commits().await?;
        Ok(Self {
            commits,
            wal_syncs: database.wal_syncs().await?,
        })
    }
}

/// New identities at c=1 and at the target concurrency with group commit off
/// (`CARMY_DB_BATCH_MAX_ROWS=1`), the figures batching is judged against.
pub async fn measure_unbatched(
    args: &Args,
    gateway_binary: &Path,
    database: &BenchDb,
    main_env: &[(&'static str, String)],
) -> Result<Vec<RunResult>, String> {
    let mut env = main_env.to_vec();
    env.push(("CARMY_DB_BATCH_MAX_ROWS", "1".to_owned()));
    let mut gateway = Gateway::start(gateway_binary, "unbatched", &database.url, &env)?;
    let mut runs = Vec::new();
    let mut settled = None;
    for concurrency in [1, report::TARGET_CONCURRENCY] {
        eprint!("group commit off: ");
        let mut result =
            measure_new_identities(args, concurrency, &gateway, database, &mut settled).await?;
        result.group_commit = false;
        runs.push(result);
    }
    gateway.stop();
    Ok(runs)
}

/// The PostgreSQL path of replays and conflicts: the same calls with the replay cache off.
pub async fn measure_uncached(
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
pub async fn measure_flatness(
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
    let mut result =
        load::new_identities(&gw, args.replay_identities, args.warmup(), args.measure()).await;
    gw.stop();
    result.rows_before = rows_before;
    Ok(result)
}

/// Sequential new identities and replays through the counting proxy, after a warm-up that
/// prepares every statement on the connections used.
pub async fn count_round_trips(
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
