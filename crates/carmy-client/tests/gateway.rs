//! The client against a real `carmy-gateway` process (in-memory store), through a faulty TCP
//! proxy started by the test: dropped answers are retried with the same request_id and replayed,
//! the tool body runs once, conflicts come back at once, `Retry-After` is waited, and a running
//! duplicate is waited out.
//!
//! The gateway binary is `CARMY_GATEWAY_BIN`, or `target/debug/carmy-gateway` of this workspace
//! (build it first: `cargo build -p carmy-gateway`).

use carmy_client::{Call, Client, Error, Record, RetryPolicy, Status};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const API_KEY: &str = "client-test-key";

// ---------------------------------------------------------------------------------------------
// The gateway process

/// One `carmy-gateway` process on a free loopback port; killed on drop.
struct Gateway {
    child: Child,
    base: String,
}

fn gateway_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("CARMY_GATEWAY_BIN") {
        return PathBuf::from(path);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    target.join("debug").join("carmy-gateway")
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

impl Gateway {
    /// Starts a gateway and waits (at most 30 s) until `/healthz` answers 200. A port taken
    /// between choosing and binding makes the process exit; then another port is tried.
    async fn start() -> Self {
        let binary = gateway_binary();
        assert!(
            binary.exists(),
            "no gateway binary at {}: run `cargo build -p carmy-gateway` or set CARMY_GATEWAY_BIN",
            binary.display()
        );
        for _ in 0..3 {
            let port = free_port();
            let child = Command::new(&binary)
                .env_remove("DATABASE_URL")
                .env("CARMY_LISTEN", format!("127.0.0.1:{port}"))
                .env("CARMY_API_KEYS", format!("{API_KEY}=alice"))
                .env("RUST_LOG", "error")
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("the gateway starts");
            let mut gateway = Self {
                child,
                base: format!("http://127.0.0.1:{port}"),
            };
            if gateway.wait_healthy(Duration::from_secs(30)).await {
                return gateway;
            }
        }
        panic!("the gateway did not become healthy on three ports");
    }

    /// True once `/healthz` answers 200; false if the process exited first.
    async fn wait_healthy(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let http = reqwest::Client::new();
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            let url = format!("{}/healthz", self.base);
            if let Ok(answer) = http.get(url).send().await {
                if answer.status() == 200 {
                    return true;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no /healthz answer within {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `carmy_tool_runs_total{tool="<tool>"}` from `/metrics`: tool bodies started (0 if none).
    async fn tool_runs(&self, tool: &str) -> u64 {
        let text = reqwest::get(format!("{}/metrics", self.base))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let prefix = format!("carmy_tool_runs_total{{tool=\"{tool}\"}} ");
        text.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .map_or(0, |value| value.trim().parse().unwrap())
    }

    /// A client straight to the gateway, no proxy.
    fn direct_client(&self) -> Client {
        client(&self.base, RetryPolicy::default())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client(base: &str, policy: RetryPolicy) -> Client {
    Client::builder(base)
        .api_key(API_KEY)
        .retry_policy(policy)
        .build()
        .unwrap()
}

/// A quick policy for tests: short backoffs, room for many retries.
fn quick_policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 100,
        deadline: Duration::from_secs(20),
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
        attempt_timeout: Duration::from_secs(10),
        prefer_wait: None,
        ..RetryPolicy::default()
    }
}

// ---------------------------------------------------------------------------------------------
// The faulty proxy

/// What the proxy does to the first request carrying a given request_id.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    /// Nothing: forwards every request and answer.
    None,
    /// Forwards the request, reads the gateway's whole answer, then closes the client's
    /// connection without sending it.
    DropFirstAnswer,
    /// Answers it itself with 503 `STORE_UNAVAILABLE` and `Retry-After: 1`; never forwarded.
    RetryAfterFirst,
}

/// A request the proxy received.
#[derive(Clone, Debug)]
struct Seen {
    request_id: Option<String>,
    at: Instant,
}

/// A TCP proxy in front of the gateway that understands just enough HTTP/1.1 (Content-Length
/// bodies, keep-alive) to act per request.
struct Proxy {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Proxy {
    async fn start(upstream: &str, fault: Fault) -> Self {
        let upstream: SocketAddr = upstream.trim_start_matches("http://").parse().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let ids = Arc::new(Mutex::new(HashSet::new()));
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (log, ids) = (Arc::clone(&log), Arc::clone(&ids));
                tokio::spawn(relay(client, upstream, fault, log, ids));
            }
        });
        Self { base, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Reads one HTTP/1.1 message (head and Content-Length body) from `stream`; `buffer` keeps
/// bytes read past it. `None` at a clean end of stream.
async fn read_message(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<Vec<u8>> {
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            assert!(
                !head.contains("transfer-encoding"),
                "chunked bodies: {head}"
            );
            let length: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map_or(0, |value| value.trim().parse().unwrap());
            let total = end + 4 + length;
            while buffer.len() < total {
                let mut chunk = [0u8; 8192];
                let read = stream.read(&mut chunk).await.ok()?;
                if read == 0 {
                    return None;
                }
                buffer.extend_from_slice(&chunk[..read]);
            }
            return Some(buffer.drain(..total).collect());
        }
        let mut chunk = [0u8; 8192];
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

fn request_id_of(message: &[u8]) -> Option<String> {
    let start = message.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let body: Value = serde_json::from_slice(&message[start..]).ok()?;
    body.get("request_id")?.as_str().map(str::to_owned)
}

const RETRY_AFTER_ANSWER: &str = "{\"type\":\"urn:carmy:problem:store-unavailable\",\
    \"title\":\"Store unavailable\",\"status\":503,\"detail\":\"injected by the test proxy\",\
    \"code\":\"STORE_UNAVAILABLE\"}";

async fn relay(
    mut client: TcpStream,
    upstream: SocketAddr,
    fault: Fault,
    log: Arc<Mutex<Vec<Seen>>>,
    ids: Arc<Mutex<HashSet<String>>>,
) {
    let mut gateway = TcpStream::connect(upstream).await.unwrap();
    let (mut from_client, mut from_gateway) = (Vec::new(), Vec::new());
    while let Some(request) = read_message(&mut client, &mut from_client).await {
        let request_id = request_id_of(&request);
        let first = request_id
            .clone()
            .is_some_and(|id| ids.lock().unwrap().insert(id));
        log.lock().unwrap().push(Seen {
            request_id,
            at: Instant::now(),
        });
        if first && fault == Fault::RetryAfterFirst {
            let answer = format!(
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\n\
                 retry-after: 1\r\ncontent-length: {}\r\n\r\n{RETRY_AFTER_ANSWER}",
                RETRY_AFTER_ANSWER.len()
            );
            client.write_all(answer.as_bytes()).await.unwrap();
            continue;
        }
        gateway.write_all(&request).await.unwrap();
        let answer = read_message(&mut gateway, &mut from_gateway)
            .await
            .expect("the gateway answers");
        if first && fault == Fault::DropFirstAnswer {
            return; // drops both connections: the client never sees this answer
        }
        if client.write_all(&answer).await.is_err() {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tests

#[tokio::test]
async fn a_dropped_answer_is_retried_with_the_same_request_id_and_replayed() {
    let gateway = Gateway::start().await;
    let proxy = Proxy::start(&gateway.base, Fault::DropFirstAnswer).await;
    let through_proxy = client(&proxy.base, quick_policy());
    let call = Call::new("create_order", json!({"sku": "DROP-1", "quantity": 2}));

    let execution = through_proxy.execute(&call).await.unwrap();

    assert_eq!(execution.status, Status::Completed);
    assert!(
        execution.replayed,
        "the second attempt got the recorded outcome"
    );
    assert_eq!(execution.request_id.as_deref(), Some(call.request_id()));
    let ids: Vec<Option<String>> = proxy.seen().into_iter().map(|s| s.request_id).collect();
    assert_eq!(ids, vec![Some(call.request_id().to_owned()); 2]);
    assert_eq!(gateway.tool_runs("create_order").await, 1);
    let found = gateway
        .direct_client()
        .execute(&Call::new("find_orders", json!({"sku": "DROP-1"})))
        .await
        .unwrap();
    let orders = found.data["orders"].as_array().unwrap();
    assert_eq!(
        orders.len(),
        1,
        "one order despite two attempts: {orders:?}"
    );
    assert_eq!(orders[0]["order_id"], execution.data["order_id"]);
}

#[tokio::test]
async fn a_conflict_comes_back_at_once_without_a_retry() {
    let gateway = Gateway::start().await;
    let proxy = Proxy::start(&gateway.base, Fault::None).await;
    let through_proxy = client(&proxy.base, quick_policy());
    let first = Call::new("echo", json!({"n": 1}));
    let recorded = through_proxy.execute(&first).await.unwrap();
    assert!(!recorded.replayed);

    let other = Call::new("echo", json!({"n": 2})).with_request_id(first.request_id());
    let error = through_proxy.execute(&other).await.unwrap_err();

    let Error::Conflict {
        execution_id,
        differs,
    } = &error
    else {
        panic!("conflict expected, got {error:?}");
    };
    assert_eq!(execution_id, &recorded.execution_id);
    // Gateways that name the differing parts name exactly the arguments here.
    assert!(
        differs.is_empty() || differs == &["arguments"],
        "{differs:?}"
    );
    assert_eq!(
        proxy.seen().len(),
        2,
        "one request per call: the conflict was not retried"
    );
    assert_eq!(gateway.tool_runs("echo").await, 1);
}

#[tokio::test]
async fn retry_after_is_waited() {
    let gateway = Gateway::start().await;
    let proxy = Proxy::start(&gateway.base, Fault::RetryAfterFirst).await;
    let through_proxy = client(&proxy.base, quick_policy());
    let call = Call::new("create_order", json!({"sku": "LATER-1"}));

    let execution = through_proxy.execute(&call).await.unwrap();

    assert!(
        !execution.replayed,
        "the injected 503 never reached the gateway"
    );
    let seen = proxy.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].request_id, seen[1].request_id);
    let waited = seen[1].at - seen[0].at;
    assert!(waited >= Duration::from_secs(1), "waited only {waited:?}");
    assert_eq!(gateway.tool_runs("create_order").await, 1);
}

#[tokio::test]
async fn a_running_duplicate_is_waited_out_and_replayed() {
    let gateway = Gateway::start().await;
    let call = Call::new("sleep", json!({"ms": 1500}));
    let direct = gateway.direct_client();
    let first = tokio::spawn({
        let call = call.clone();
        async move { direct.execute(&call).await }
    });
    // The first attempt holds the identity once its tool body started.
    let deadline = Instant::now() + Duration::from_secs(10);
    while gateway.tool_runs("sleep").await == 0 {
        assert!(Instant::now() < deadline, "the sleep tool never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let proxy = Proxy::start(&gateway.base, Fault::None).await;

    let second = client(&proxy.base, quick_policy())
        .execute(&call)
        .await
        .unwrap();

    let first = first.await.unwrap().unwrap();
    assert!(!first.replayed);
    assert!(second.replayed);
    assert_eq!(second.execution_id, first.execution_id);
    assert_eq!(second.data, json!({"slept_ms": 1500}));
    assert!(
        proxy.seen().len() >= 2,
        "the running duplicate was answered 409 and retried"
    );
    assert_eq!(gateway.tool_runs("sleep").await, 1);
}

#[tokio::test]
async fn typed_answers_for_reads_and_refusals() {
    let gateway = Gateway::start().await;
    let client = gateway.direct_client();
    let names: Vec<String> = client
        .tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    for expected in ["create_order", "find_orders", "echo", "sleep", "fail"] {
        assert!(names.iter().any(|name| name == expected), "{names:?}");
    }

    let failed = client
        .execute(&Call::new("fail", json!({"message": "boom"})))
        .await
        .unwrap();
    assert_eq!(failed.status, Status::Failed);
    assert_eq!(failed.error.as_ref().unwrap().message, "boom");
    let Record::Finished(read) = client.get_execution(&failed.execution_id).await.unwrap() else {
        panic!("a finished record expected");
    };
    assert_eq!(read.execution_id, failed.execution_id);
    assert_eq!(read.error, failed.error);
    assert!(!read.replayed);

    let missing = client
        .get_execution("exec_00000000000000000000000000")
        .await;
    assert!(
        matches!(missing, Err(Error::NotFound { .. })),
        "{missing:?}"
    );
    let unknown = client.execute(&Call::new("no_such_tool", json!({}))).await;
    assert!(
        matches!(unknown, Err(Error::UnknownTool { .. })),
        "{unknown:?}"
    );
    let invalid = client
        .execute(&Call::new("sleep", json!({"ms": "x"})))
        .await;
    assert!(
        matches!(invalid, Err(Error::InvalidRequest { .. })),
        "{invalid:?}"
    );
    let stranger = Client::builder(&gateway.base)
        .api_key("wrong")
        .build()
        .unwrap();
    let refused = stranger.execute(&Call::new("echo", json!({}))).await;
    assert_eq!(refused, Err(Error::Unauthorized));
}

#[tokio::test]
async fn an_unreachable_gateway_is_unavailable_after_the_budget() {
    let policy = RetryPolicy {
        max_attempts: 3,
        ..quick_policy()
    };
    // Nothing listens on a port just released.
    let client = client(&format!("http://127.0.0.1:{}", free_port()), policy);
    let error = client
        .execute(&Call::new("echo", json!({})))
        .await
        .unwrap_err();
    let Error::Unavailable { attempts, last } = &error else {
        panic!("unavailable expected, got {error:?}");
    };
    assert_eq!(*attempts, 3);
    assert!(
        matches!(last, carmy_client::Failure::Transport(t) if t.kind == carmy_client::TransportKind::Connect),
        "{last:?}"
    );
}
