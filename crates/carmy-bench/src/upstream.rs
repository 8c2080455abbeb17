//! What Carmy adds in front of a real HTTP tool (docs/semantics.md §10): a small upstream API
//! served by this process, called directly and as the configured HTTP tool `bench_charge` of a
//! gateway on the PostgreSQL store, at c=1 and c=[`crate::report::TARGET_CONCURRENCY`].
//!
//! The upstream answers `POST /v1/charges` with `{"charged":true}` at once, on a runtime of its
//! own (one worker thread), so that both measurements pay for the same upstream and the
//! difference is Carmy: validation, fingerprint, reserve, the upstream call with its
//! `Idempotency-Key`, and complete.

use crate::gateway::Gateway;
use crate::load::{self, RunResult, Scenario};
use axum::routing::post;
use axum::Router;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The path the upstream serves and the tool calls.
pub const UPSTREAM_PATH: &str = "/v1/charges";

/// The name of the configured HTTP tool.
pub const TOOL_NAME: &str = "bench_charge";

/// The concurrencies measured: one caller (latency) and the target concurrency (throughput).
pub const CONCURRENCIES: [usize; 2] = [1, crate::report::TARGET_CONCURRENCY];

/// The upstream API, served until the process ends.
pub struct Upstream {
    /// Where it serves.
    pub address: SocketAddr,
}

impl Upstream {
    /// Starts the upstream on a free loopback port, on a thread of its own.
    ///
    /// # Errors
    /// When no port can be bound or the runtime cannot be built.
    pub fn start() -> Result<Self, String> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|error| format!("upstream: cannot bind: {error}"))?;
        listener
            .set_nonblocking(true)
            .map_err(|error| format!("upstream: {error}"))?;
        let address = listener
            .local_addr()
            .map_err(|error| format!("upstream: {error}"))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|error| format!("upstream runtime: {error}"))?;
        std::thread::spawn(move || {
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                let app = Router::new().route(
                    UPSTREAM_PATH,
                    post(|| async {
                        (
                            [("content-type", "application/json")],
                            r#"{"charged":true}"#,
                        )
                    }),
                );
                let _ = axum::serve(listener, app).await;
            });
        });
        Ok(Self { address })
    }

    /// Writes the tools file that puts this upstream behind a gateway as [`TOOL_NAME`], in
    /// `dir`; returns its path.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn tools_file(&self, dir: &Path) -> Result<PathBuf, String> {
        let path = dir.join("carmy-bench-tools.toml");
        let text = format!(
            "# Written by carmy-bench: the benchmark's upstream as an HTTP tool.\n\
             [[tools]]\n\
             name = \"{TOOL_NAME}\"\n\
             description = \"The benchmark's upstream\"\n\
             method = \"POST\"\n\
             url = \"http://{}{UPSTREAM_PATH}\"\n\
             timeout_ms = 10000\n\
             input_schema = {{ type = \"object\" }}\n",
            self.address
        );
        std::fs::write(&path, text)
            .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
        Ok(path)
    }
}

/// The upstream called directly and through Carmy, at each of [`CONCURRENCIES`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct UpstreamRuns {
    /// `POST /v1/charges` straight to the upstream.
    pub direct: Vec<RunResult>,
    /// The same call as the tool `bench_charge` through `POST /v1/executions`, a new identity
    /// every call.
    pub through_carmy: Vec<RunResult>,
}

/// Starts the upstream and a gateway (`env` on top of its settings) with the tool, and measures
/// both paths for `warmup` + `measure` each.
///
/// # Errors
/// When the upstream or the gateway does not start.
pub async fn measure(
    gateway_binary: &Path,
    database_url: &str,
    env: &[(&str, String)],
    warmup: Duration,
    measure: Duration,
) -> Result<UpstreamRuns, String> {
    let upstream = Upstream::start()?;
    let tools = upstream.tools_file(&std::env::temp_dir())?;
    let mut env = env.to_vec();
    env.push(("CARMY_TOOLS_FILE", tools.display().to_string()));
    let mut gateway = Gateway::start(gateway_binary, "upstream", database_url, &env)?;
    let mut runs = UpstreamRuns {
        direct: Vec::new(),
        through_carmy: Vec::new(),
    };
    for concurrency in CONCURRENCIES {
        for (scenario, address, pid) in [
            (Scenario::UpstreamDirect, upstream.address, None),
            (Scenario::HttpTool, gateway.address, gateway.pid()),
        ] {
            eprintln!(
                "{} at c={concurrency}, {:.1} s",
                scenario.label(),
                measure.as_secs_f64()
            );
            let result = load::run(address, pid, scenario, concurrency, 1, warmup, measure).await;
            match scenario {
                Scenario::UpstreamDirect => runs.direct.push(result),
                _ => runs.through_carmy.push(result),
            }
        }
    }
    gateway.stop();
    let _ = std::fs::remove_file(tools);
    Ok(runs)
}

/// `--only upstream`: [`measure`], then pgbench `new_identity.sql` with one client for the
/// floor; prints the target. True when it failed.
///
/// # Errors
/// When the upstream, the gateway or pgbench does not run.
pub async fn only(
    args: &crate::cli::Args,
    gateway_binary: &Path,
    pgbench_binary: &Path,
    database_url: &str,
    env: &[(&str, String)],
) -> Result<bool, String> {
    let runs = measure(
        gateway_binary,
        database_url,
        env,
        args.warmup(),
        args.measure(),
    )
    .await?;
    let seconds = args.measure().as_secs_f64().ceil().max(1.0) as u64;
    eprintln!("pgbench new_identity.sql with one client, {seconds} s");
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let floor = crate::pgbench::run(
        pgbench_binary,
        database_url,
        "new_identity.sql",
        1,
        seconds,
        &[("run", tag), ("n", "0".to_owned())],
    )
    .await?;
    let target = crate::report::upstream_target(floor.p50_ms, &runs);
    println!("{}", target.line());
    Ok(target.status == crate::report::Status::Fail)
}
