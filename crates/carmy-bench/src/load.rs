//! The HTTP load generator: `concurrency` workers, each with one kept-alive HTTP/1.1 connection
//! to the gateway, sending `POST /v1/executions` (or, for the MCP scenarios, an MCP `tools/call`
//! to `POST /mcp`, docs/semantics.md §11) of the `echo` tool back to back (closed loop); or,
//! for the upstream scenarios ([`crate::upstream`]), the configured HTTP tool `bench_charge`
//! and the upstream behind it.
//! Only answers of the expected status and kind count as successes; everything else is counted
//! by kind ([`check`]).

mod check;
pub mod paired;

use crate::cpu;
use bytes::Bytes;
use check::check;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// What the calls of a measurement are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    /// A fresh `request_id` every call: the tool runs; expect 200 with `"replayed":false`.
    NewIdentity,
    /// The request ids of completed calls, same arguments: expect 200 with `"replayed":true`.
    Replay,
    /// The request ids of completed calls, other arguments: expect 409
    /// `IDEMPOTENCY_CONFLICT`.
    Conflict,
    /// [`Scenario::NewIdentity`] as an MCP `tools/call` to `/mcp`: expect a result with
    /// `"replayed":false` in `_meta["io.carmy/execution"]`.
    McpNewIdentity,
    /// [`Scenario::Replay`] as an MCP `tools/call` (the request id in
    /// `_meta["io.carmy/request_id"]`): expect `"replayed":true`.
    McpReplay,
    /// An MCP `ping` to `/mcp`: the SDK's own cost of one stateless request with no tool call
    /// (the floor under [`Scenario::McpReplay`]); expect 200 with an empty result.
    McpPing,
    /// `POST /v1/charges` straight to the benchmark's upstream ([`crate::upstream`]): expect 200.
    UpstreamDirect,
    /// The upstream as the configured HTTP tool `bench_charge`, a fresh `request_id` every call:
    /// expect 200 with `"replayed":false`.
    HttpTool,
    /// A client-held execution of the client tool [`HELD_TOOL`] with a fresh `request_id`
    /// (docs/semantics.md §16): `POST /v1/held` (201), then its outcome `POST
    /// /v1/held/{id}/outcome` (200, `"replayed":false`); one call is both requests.
    HeldNewIdentity,
    /// `POST /v1/held` with the request ids of recorded held executions: expect 200 with
    /// `"replayed":true`.
    HeldReplay,
}

/// The client tool the held scenarios reserve (the bench's tools file declares it).
pub const HELD_TOOL: &str = "bench_held";

impl Scenario {
    /// The name in the table.
    pub fn label(self) -> &'static str {
        match self {
            Self::NewIdentity => "new identity",
            Self::Replay => "replay",
            Self::Conflict => "conflict",
            Self::McpNewIdentity => "new identity over /mcp",
            Self::McpReplay => "replay over /mcp",
            Self::McpPing => "ping over /mcp (no tool call)",
            Self::UpstreamDirect => "upstream directly",
            Self::HttpTool => "upstream through Carmy",
            Self::HeldNewIdentity => "held new identity (reserve + record)",
            Self::HeldReplay => "held replay",
        }
    }

    /// Whether the calls go to `/mcp`.
    pub fn is_mcp(self) -> bool {
        matches!(self, Self::McpNewIdentity | Self::McpReplay)
    }

    /// The path the calls are POSTed to.
    pub fn path(self) -> &'static str {
        match self {
            Self::McpNewIdentity | Self::McpReplay | Self::McpPing => "/mcp",
            Self::UpstreamDirect => crate::upstream::UPSTREAM_PATH,
            Self::HeldNewIdentity | Self::HeldReplay => "/v1/held",
            _ => "/v1/executions",
        }
    }

    /// The same calls through the HTTP API.
    pub fn over_http(self) -> Self {
        match self {
            Self::McpNewIdentity => Self::NewIdentity,
            Self::McpReplay | Self::McpPing => Self::Replay,
            other => other,
        }
    }
}

/// The request id of the `index`-th (1-based) completed identity the replay and conflict
/// scenarios use; `bench/pgbench/read_one.sql` reads the same rows.
pub fn replay_request_id(index: usize) -> String {
    format!("replay-{index}")
}

/// The request id of the `index`-th (1-based) recorded held execution of the held replays.
pub fn held_replay_request_id(index: usize) -> String {
    format!("held-replay-{index}")
}

/// The body of `POST /v1/held` for [`HELD_TOOL`] with `{}` under `request_id`.
pub fn held_body(request_id: &str) -> String {
    format!(r#"{{"tool":"{HELD_TOOL}","arguments":{{}},"request_id":"{request_id}"}}"#)
}

/// The outcome a held call records after its reservation answered `reserved` (the body of
/// `POST /v1/held`'s 201): the path and body of its `POST /v1/held/{id}/outcome`.
pub fn held_outcome(reserved: &[u8]) -> Result<(String, String), String> {
    let body: serde_json::Value =
        serde_json::from_slice(reserved).map_err(|_| "201 unreadable".to_owned())?;
    let (Some(id), Some(token)) = (
        body["execution_id"].as_str(),
        body["fencing_token"].as_str(),
    ) else {
        return Err("201 without a token".to_owned());
    };
    Ok((
        format!("/v1/held/{id}/outcome"),
        format!(r#"{{"fencing_token":"{token}","status":"completed","data":{{}}}}"#),
    ))
}

/// The body of a call of `echo`.
pub fn call_body(request_id: &str, conflicting: bool) -> String {
    let arguments = if conflicting {
        r#"{"conflict":true}"#
    } else {
        "{}"
    };
    format!(r#"{{"tool":"echo","arguments":{arguments},"request_id":"{request_id}"}}"#)
}

/// The body of an MCP `tools/call` of `echo` with `{}` under `request_id`.
pub fn mcp_call_body(request_id: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{}},"_meta":{{"io.carmy/request_id":"{request_id}"}}}}}}"#
    )
}

/// The body of an MCP `ping`.
pub const MCP_PING_BODY: &str = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;

/// One measurement's figures.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    /// What was called.
    pub scenario: Scenario,
    /// Workers (connections) calling at once.
    pub concurrency: usize,
    /// Length of the counted window (s).
    pub seconds: f64,
    /// Answers as expected, started in the window.
    pub successes: u64,
    /// Successes per second.
    pub calls_per_second: f64,
    /// Median latency of the successes (ms).
    pub p50_ms: Option<f64>,
    /// 99th percentile latency (ms).
    pub p99_ms: Option<f64>,
    /// Unexpected answers and failures, by kind (e.g. `503 STORE_UNAVAILABLE`).
    pub errors: BTreeMap<String, u64>,
    /// Reservations in the table when the measurement started, where known.
    pub rows_before: Option<i64>,
    /// False when the gateway ran with its replay cache off (`CARMY_REPLAY_CACHE_ENTRIES=0`)
    /// for this measurement only, to show the PostgreSQL path of replays and conflicts.
    pub replay_cache: bool,
    /// Where the CPUs went during the window.
    pub cpu: Option<cpu::Split>,
    /// False when the gateway ran with group commit off (`CARMY_DB_BATCH_MAX_ROWS=1`) for this
    /// measurement only, to compare with.
    pub group_commit: bool,
    /// PostgreSQL commits per new identity (`pg_stat_database.xact_commit` of the database over
    /// new rows in `carmy.reservations`, warm-up included), for new-identity runs.
    pub commits_per_call: Option<f64>,
    /// Mean latency of the successes (ms).
    pub mean_ms: Option<f64>,
    /// Where a new identity's time went (warm-up included), for new-identity runs.
    pub phases: Option<crate::phases::Phases>,
    /// CPU time per success over the window (µs): the gateway's and PostgreSQL's
    /// ([`cpu::Split::per_call`]).
    pub cpu_per_call: Option<cpu::PerCall>,
}

impl RunResult {
    /// The scenario's name, with `, cache off` for a measurement without the replay cache.
    pub fn label(&self) -> String {
        let mut label = self.scenario.label().to_owned();
        if !self.replay_cache {
            label.push_str(", cache off");
        }
        if !self.group_commit {
            label.push_str(", batching off");
        }
        label
    }

    /// All errors.
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }
}

/// The timing of one measurement, shared by its workers.
struct Window {
    /// Calls started before this are warm-up.
    counted_from: Instant,
    /// No call starts after this.
    end: Instant,
}

/// What one worker saw.
#[derive(Default)]
struct WorkerTally {
    latencies_us: Vec<u32>,
    errors: BTreeMap<String, u64>,
}

/// One kept-alive connection to the gateway.
struct Connection {
    sender: http1::SendRequest<Full<Bytes>>,
}

impl Connection {
    async fn open(address: SocketAddr) -> Result<Self, String> {
        let stream = TcpStream::connect(address)
            .await
            .map_err(|error| format!("connect: {}", error.kind()))?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|error| format!("handshake: {error}"))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Self { sender })
    }

    /// POSTs `body` to `path`; returns the status and the body.
    async fn post(&mut self, host: &str, body: String, path: &str) -> Result<(u16, Bytes), String> {
        self.sender
            .ready()
            .await
            .map_err(|error| format!("connection: {error}"))?;
        let request = hyper::Request::post(path)
            .header(hyper::header::HOST, host)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "application/json, text/event-stream")
            .body(Full::new(Bytes::from(body)))
            .map_err(|error| format!("request: {error}"))?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(|error| format!("send: {error}"))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|error| format!("body: {error}"))?
            .to_bytes();
        Ok((status, body))
    }
}

/// Makes the next call body of a worker.
struct Bodies {
    scenario: Scenario,
    worker: usize,
    concurrency: usize,
    identities: usize,
    sent: usize,
}

impl Bodies {
    fn next(&mut self) -> String {
        // Workers walk the replay identities in interleaved strides: all are used, none twice
        // in a row.
        let index = (self.worker + self.sent * self.concurrency) % self.identities + 1;
        let body = match self.scenario {
            Scenario::NewIdentity => {
                call_body(&format!("new-{}", uuid::Uuid::new_v4().simple()), false)
            }
            Scenario::Replay | Scenario::Conflict => call_body(
                &replay_request_id(index),
                self.scenario == Scenario::Conflict,
            ),
            Scenario::McpNewIdentity => {
                mcp_call_body(&format!("new-{}", uuid::Uuid::new_v4().simple()))
            }
            Scenario::McpReplay => mcp_call_body(&replay_request_id(index)),
            Scenario::McpPing => MCP_PING_BODY.to_owned(),
            Scenario::UpstreamDirect => r#"{"amount":1}"#.to_owned(),
            Scenario::HttpTool => format!(
                r#"{{"tool":"{}","arguments":{{"amount":1}},"request_id":"new-{}"}}"#,
                crate::upstream::TOOL_NAME,
                uuid::Uuid::new_v4().simple()
            ),
            Scenario::HeldNewIdentity => {
                held_body(&format!("held-{}", uuid::Uuid::new_v4().simple()))
            }
            Scenario::HeldReplay => held_body(&held_replay_request_id(index)),
        };
        self.sent += 1;
        body
    }
}

async fn worker(
    address: SocketAddr,
    scenario: Scenario,
    worker: usize,
    concurrency: usize,
    identities: usize,
    window: Arc<Window>,
) -> WorkerTally {
    let host = address.to_string();
    let mut tally = WorkerTally::default();
    let mut bodies = Bodies {
        scenario,
        worker,
        concurrency,
        identities: identities.max(1),
        sent: 0,
    };
    let mut connection: Option<Connection> = None;
    loop {
        let started = Instant::now();
        if started >= window.end {
            break;
        }
        let counted = started >= window.counted_from;
        let conn = match connection.as_mut() {
            Some(conn) => conn,
            None => match Connection::open(address).await {
                Ok(conn) => connection.insert(conn),
                Err(error) => {
                    if counted {
                        *tally.errors.entry(error).or_insert(0) += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let mut answer = conn.post(&host, bodies.next(), scenario.path()).await;
        if scenario == Scenario::HeldNewIdentity {
            answer = match answer {
                Ok((201, reserved)) => match held_outcome(&reserved) {
                    Ok((path, body)) => conn.post(&host, body, &path).await,
                    Err(kind) => Err(kind),
                },
                other => other,
            };
        }
        let latency = started.elapsed();
        let outcome = match answer {
            Ok((status, body)) => check(scenario, status, &body),
            Err(error) => {
                connection = None;
                Err(error)
            }
        };
        if !counted {
            continue;
        }
        match outcome {
            Ok(()) => tally
                .latencies_us
                .push(u32::try_from(latency.as_micros()).unwrap_or(u32::MAX)),
            Err(kind) => *tally.errors.entry(kind).or_insert(0) += 1,
        }
    }
    tally
}

/// Runs `scenario` at `concurrency` against the gateway at `address`: `warmup` of uncounted
/// calls, then `measure` of counted ones. `gateway_pid` is for the CPU split.
pub async fn run(
    address: SocketAddr,
    gateway_pid: Option<u32>,
    scenario: Scenario,
    concurrency: usize,
    identities: usize,
    warmup: Duration,
    measure: Duration,
) -> RunResult {
    let start = Instant::now();
    let window = Arc::new(Window {
        counted_from: start + warmup,
        end: start + warmup + measure,
    });
    let workers: Vec<_> = (0..concurrency)
        .map(|index| {
            tokio::spawn(worker(
                address,
                scenario,
                index,
                concurrency,
                identities,
                Arc::clone(&window),
            ))
        })
        .collect();
    tokio::time::sleep_until(window.counted_from).await;
    let before = cpu::snapshot(gateway_pid);
    tokio::time::sleep_until(window.end).await;
    let cpu = cpu::split(&before, &cpu::snapshot(gateway_pid));
    let mut latencies = Vec::new();
    let mut errors = BTreeMap::new();
    for handle in workers {
        match handle.await {
            Ok(tally) => {
                latencies.extend(tally.latencies_us);
                for (kind, count) in tally.errors {
                    *errors.entry(kind).or_insert(0) += count;
                }
            }
            Err(error) => *errors.entry(format!("worker: {error}")).or_insert(0) += 1,
        }
    }
    latencies.sort_unstable();
    let ms = |q| carmy_bench::percentile(&latencies, q).map(|us| f64::from(us) / 1000.0);
    let seconds = measure.as_secs_f64();
    RunResult {
        scenario,
        concurrency,
        seconds,
        successes: latencies.len() as u64,
        calls_per_second: latencies.len() as f64 / seconds,
        p50_ms: ms(0.50),
        p99_ms: ms(0.99),
        errors,
        rows_before: None,
        replay_cache: true,
        group_commit: true,
        commits_per_call: None,
        mean_ms: (!latencies.is_empty()).then(|| {
            latencies.iter().map(|&us| f64::from(us)).sum::<f64>() / latencies.len() as f64 / 1000.0
        }),
        phases: None,
        cpu_per_call: cpu
            .as_ref()
            .and_then(|split| split.per_call(seconds, latencies.len() as u64)),
        cpu,
    }
}

/// New identities at the target concurrency against `gateway`: the measurement the flatness
/// and pruning comparisons repeat on different tables.
pub async fn new_identities(
    gateway: &crate::gateway::Gateway,
    identities: usize,
    warmup: Duration,
    seconds: Duration,
) -> RunResult {
    let concurrency = crate::report::TARGET_CONCURRENCY;
    let (address, pid) = (gateway.address, gateway.pid());
    let scenario = Scenario::NewIdentity;
    run(
        address,
        pid,
        scenario,
        concurrency,
        identities,
        warmup,
        seconds,
    )
    .await
}

/// Calls `echo {}` with `replay-1` … `replay-<count>` (32 at a time): completes them the first
/// time, for the replay and conflict scenarios and `read_one.sql`; replays them later, which puts
/// them back into the gateway's replay cache (its entries expire after a time to live, and a
/// conflict answered by PostgreSQL does not refill it).
pub async fn call_replay_identities(address: SocketAddr, count: usize) -> Result<(), String> {
    let workers = 32.min(count.max(1));
    let host = address.to_string();
    let mut handles = Vec::new();
    for worker in 0..workers {
        let host = host.clone();
        handles.push(tokio::spawn(async move {
            let mut conn = Connection::open(address).await?;
            let mut index = worker + 1;
            while index <= count {
                let (status, body) = conn
                    .post(
                        &host,
                        call_body(&replay_request_id(index), false),
                        Scenario::Replay.path(),
                    )
                    .await?;
                if status != 200 {
                    return Err(format!(
                        "creating {}: {status} {}",
                        replay_request_id(index),
                        String::from_utf8_lossy(&body)
                    ));
                }
                index += workers;
            }
            Ok::<(), String>(())
        }));
    }
    for handle in handles {
        handle
            .await
            .map_err(|error| format!("creating identities: {error}"))??;
    }
    Ok(())
}

/// Reserves and records `held-replay-1` … `held-replay-<count>` of [`HELD_TOOL`] (32 at a
/// time) for [`Scenario::HeldReplay`]; a second time, they answer as replays (already recorded).
pub async fn call_held_identities(address: SocketAddr, count: usize) -> Result<(), String> {
    let workers = 32.min(count.max(1));
    let host = address.to_string();
    let mut handles = Vec::new();
    for worker in 0..workers {
        let host = host.clone();
        handles.push(tokio::spawn(async move {
            let mut conn = Connection::open(address).await?;
            let mut index = worker + 1;
            while index <= count {
                let id = held_replay_request_id(index);
                let (status, body) = conn.post(&host, held_body(&id), "/v1/held").await?;
                match status {
                    201 => {
                        let (path, outcome) = held_outcome(&body)?;
                        let (status, body) = conn.post(&host, outcome, &path).await?;
                        if status != 200 {
                            return Err(format!(
                                "recording {id}: {status} {}",
                                String::from_utf8_lossy(&body)
                            ));
                        }
                    }
                    200 => {}
                    _ => {
                        return Err(format!(
                            "holding {id}: {status} {}",
                            String::from_utf8_lossy(&body)
                        ))
                    }
                }
                index += workers;
            }
            Ok::<(), String>(())
        }));
    }
    for handle in handles {
        handle
            .await
            .map_err(|error| format!("creating held identities: {error}"))??;
    }
    Ok(())
}

/// Sends `bodies` one after the other on one connection and checks each answer against
/// `scenario` (for the round-trip count).
pub async fn sequential(
    address: SocketAddr,
    scenario: Scenario,
    bodies: &[String],
) -> Result<(), String> {
    let host = address.to_string();
    let mut conn = Connection::open(address).await?;
    for body in bodies {
        let (status, answer) = conn.post(&host, body.clone(), scenario.path()).await?;
        check(scenario, status, &answer).map_err(|kind| format!("{body}: {kind}"))?;
    }
    Ok(())
}
