//! OpenTelemetry traces (docs/operations.md "Traces") into a real OTLP receiver: a Python server
//! that decodes OTLP/HTTP protobuf with the official `opentelemetry-proto` package from PyPI
//! (tests/otlp/receiver.py, its venv from tests/otlp/python-venv.sh, `CARMY_OTLP_PYTHON` as
//! scripts/test sets it). One call over HTTP and one over MCP give `carmy.call` with
//! `carmy.reserve`, `carmy.tool` (with `carmy.upstream`, whose span the upstream's `traceparent`
//! names) and `carmy.complete`, children of the incoming `traceparent`; a replay says
//! `replayed`; the spans are flushed at SIGTERM. Without `OTEL_EXPORTER_OTLP_ENDPOINT` nothing
//! reaches a receiver on the default endpoint and the caller's `traceparent` is handed on as is.

use crate::http_tools::{replica, tools_for};
use crate::mcp_client::{call_with_meta, connect, execution};
use crate::upstream::Upstream;
use carmy_test_support::{call, client, TestDb};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The incoming trace contexts of the calls: trace id, parent span id.
const HTTP_TRACE: (&str, &str) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
const REPLAY_TRACE: (&str, &str) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
const MCP_TRACE: (&str, &str) = ("5c0e3b4f1a2d49e6b8c7d6e5f4a3b2c1", "1122334455667788");

fn traceparent((trace_id, parent_id): (&str, &str)) -> String {
    format!("00-{trace_id}-{parent_id}-01")
}

/// The Python with `opentelemetry-proto`: `CARMY_OTLP_PYTHON`, which scripts/test sets.
fn otlp_python() -> String {
    std::env::var("CARMY_OTLP_PYTHON").unwrap_or_else(|_| {
        panic!("CARMY_OTLP_PYTHON is unset: run through scripts/test, or export CARMY_OTLP_PYTHON=$(crates/carmy-gateway/tests/otlp/python-venv.sh)")
    })
}

/// A running receiver.py; killed when dropped.
struct Receiver {
    child: Child,
    port: u16,
    output: PathBuf,
}

impl Receiver {
    /// Starts the receiver on `port` (0: a free one) and waits for it to listen.
    fn start(name: &str, port: u16) -> Self {
        let output = std::env::temp_dir().join(format!(
            "carmy-otlp-{name}-{}.jsonl",
            uuid::Uuid::new_v4().simple()
        ));
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/receiver.py");
        let mut child = Command::new(otlp_python())
            .arg(script)
            .arg(&output)
            .arg(port.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the OTLP receiver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| {
            panic!("the OTLP receiver did not start (port {port} in use?): {line:?}")
        });
        Self {
            child,
            port,
            output,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every line written so far.
    fn lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.output)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// The export requests received so far.
    fn requests(&self) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter_map(|line| line.get("request").cloned())
            .collect()
    }

    /// The spans received so far.
    fn spans(&self) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter_map(|line| line.get("span").cloned())
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.output);
    }
}

/// The one span of `trace_id` named `name`.
fn one<'a>(spans: &'a [Value], trace_id: &str, name: &str) -> &'a Value {
    let found: Vec<&Value> = spans
        .iter()
        .filter(|span| span["trace_id"] == trace_id && span["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "one {name} in trace {trace_id}: {spans:#?}");
    found[0]
}

/// The names of the spans of `trace_id`, sorted.
fn names(spans: &[Value], trace_id: &str) -> Vec<String> {
    let mut names: Vec<String> = spans
        .iter()
        .filter(|span| span["trace_id"] == trace_id)
        .map(|span| span["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// Checks the span tree of a call that ran `item` as `execution_id` under `incoming`, and
/// that the upstream request's `traceparent` (`sent`) names the upstream span.
fn assert_new_call_tree(spans: &[Value], incoming: (&str, &str), execution_id: &str, sent: &str) {
    let (trace_id, parent_id) = incoming;
    assert_eq!(
        names(spans, trace_id),
        [
            "carmy.call",
            "carmy.complete",
            "carmy.reserve",
            "carmy.tool",
            "carmy.upstream"
        ]
    );
    let call = one(spans, trace_id, "carmy.call");
    assert_eq!(call["parent_span_id"], parent_id, "{call}");
    assert_eq!(call["service"], "carmy-gateway");
    let attributes = &call["attributes"];
    assert_eq!(attributes["tool"], "item", "{call}");
    assert_eq!(attributes["outcome"], "new", "{call}");
    assert_eq!(attributes["execution_id"], execution_id, "{call}");
    assert_eq!(attributes["principal"], "anonymous", "{call}");
    let call_id = call["span_id"].as_str().unwrap();
    for name in ["carmy.reserve", "carmy.tool", "carmy.complete"] {
        let child = one(spans, trace_id, name);
        assert_eq!(child["parent_span_id"], call_id, "{child}");
        assert_eq!(child["attributes"]["execution_id"], execution_id, "{child}");
    }
    let tool = one(spans, trace_id, "carmy.tool");
    assert_eq!(tool["attributes"]["tool"], "item");
    let upstream = one(spans, trace_id, "carmy.upstream");
    assert_eq!(upstream["parent_span_id"], tool["span_id"], "{upstream}");
    assert_eq!(upstream["attributes"]["http.request.method"], "POST");
    assert_eq!(upstream["attributes"]["http.response.status_code"], 200);
    assert_eq!(upstream["attributes"]["server.address"], "127.0.0.1");
    assert_eq!(
        sent,
        format!("00-{trace_id}-{}-01", upstream["span_id"].as_str().unwrap()),
        "the upstream's traceparent names the upstream span"
    );
}

/// The `traceparent` the upstream received with the request at `target`.
fn sent_traceparent(upstream: &Upstream, target: &str) -> String {
    let arrivals: Vec<_> = upstream
        .arrivals()
        .into_iter()
        .filter(|arrival| arrival.target == target)
        .collect();
    assert_eq!(arrivals.len(), 1, "{arrivals:?}");
    arrivals[0].traceparent.clone().expect("a traceparent")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_over_http_and_mcp_export_their_span_trees_under_the_incoming_traceparent() {
    export_span_trees(None).await;
}

/// As on the memory store: store reads log through sqlx, which once cost the next span its
/// export (a call's trace had no `carmy.call`, telemetry.rs `AskEveryTime`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgresql_calls_export_the_same_span_trees() {
    let db = TestDb::create().await;
    export_span_trees(Some(&db)).await;
}

/// One new call and its replay over HTTP and one new call over MCP, on the memory store
/// (`None`) or on `db`; checks the exported span trees.
async fn export_span_trees(db: Option<&TestDb>) {
    let name = if db.is_some() { "postgres" } else { "memory" };
    let receiver = Receiver::start(name, 0);
    let upstream = Upstream::start().await;
    let endpoint = receiver.endpoint();
    // Batches are sent only at shutdown: the spans below arrive by the SIGTERM flush.
    let mut env = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
    ];
    if let Some(db) = db {
        env.push(("DATABASE_URL", db.url.as_str()));
    }
    let mut gateway = replica(
        &format!("traces-export-{name}"),
        &tools_for(&upstream.base(), ""),
        &env,
    );
    let http = client();

    // Over HTTP, then its replay under another trace.
    let body = call("item", json!({"id": "t1", "amount": 5}), "trace-k1");
    let first: Value = http
        .post(gateway.url("/v1/executions"))
        .header("traceparent", traceparent(HTTP_TRACE))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(first["status"], "completed", "{first}");
    let execution_id = first["execution_id"].as_str().unwrap().to_owned();
    let replay: Value = http
        .post(gateway.url("/v1/executions"))
        .header("traceparent", traceparent(REPLAY_TRACE))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(replay["replayed"], true, "{replay}");

    // Over MCP, the trace context in `_meta` as MCP clients carry it.
    let mcp = connect(&gateway.url("/mcp"), None).await;
    let result = mcp
        .call_tool(call_with_meta(
            "item",
            json!({"id": "t2", "amount": 6}),
            json!({"io.carmy/request_id": "trace-m1", "traceparent": traceparent(MCP_TRACE)}),
        ))
        .await
        .unwrap();
    let mcp_execution = execution(&result)["execution_id"]
        .as_str()
        .expect("the execution id")
        .to_owned();
    mcp.cancel().await.unwrap();

    assert!(
        receiver.requests().is_empty(),
        "nothing is sent before the batch is due or the gateway stops: {:?}",
        receiver.requests()
    );
    assert!(gateway.terminate(), "the gateway exits cleanly");
    // The exporter answered before the gateway exited; the lines are written before the answer.
    let deadline = Instant::now() + Duration::from_secs(10);
    while receiver.spans().len() < 12 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let requests = receiver.requests();
    assert!(!requests.is_empty());
    for request in &requests {
        assert_eq!(request["path"], "/v1/traces", "{request}");
        assert_eq!(
            request["content_type"], "application/x-protobuf",
            "{request}"
        );
        assert!(request.get("error").is_none(), "{request}");
    }
    let spans = receiver.spans();
    assert_eq!(spans.len(), 12, "5 + 2 + 5 spans: {spans:#?}");

    assert_new_call_tree(
        &spans,
        HTTP_TRACE,
        &execution_id,
        &sent_traceparent(&upstream, "/items/t1/detail"),
    );
    assert_new_call_tree(
        &spans,
        MCP_TRACE,
        &mcp_execution,
        &sent_traceparent(&upstream, "/items/t2/detail"),
    );

    // The replay: the call and its reservation, no tool run.
    let (trace_id, parent_id) = REPLAY_TRACE;
    assert_eq!(names(&spans, trace_id), ["carmy.call", "carmy.reserve"]);
    let replayed = one(&spans, trace_id, "carmy.call");
    assert_eq!(replayed["parent_span_id"], parent_id);
    assert_eq!(replayed["attributes"]["outcome"], "replayed", "{replayed}");
    assert_eq!(
        replayed["attributes"]["execution_id"],
        execution_id.as_str()
    );
    assert_eq!(
        one(&spans, trace_id, "carmy.reserve")["parent_span_id"],
        replayed["span_id"]
    );
}

/// The exporter's default endpoint (OTLP/HTTP), where a receiver listens to catch an export
/// that should not happen.
const DEFAULT_OTLP_HTTP_PORT: u16 = 4318;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_endpoint_variable_nothing_is_exported_and_the_traceparent_is_handed_on() {
    let receiver = Receiver::start("unset", DEFAULT_OTLP_HTTP_PORT);
    let upstream = Upstream::start().await;
    // The other standard variables alone do not turn export on.
    let mut gateway = replica(
        "traces-unset",
        &tools_for(&upstream.base(), ""),
        &[
            ("OTEL_SERVICE_NAME", "carmy-should-not-export"),
            ("OTEL_BSP_SCHEDULE_DELAY", "10"),
        ],
    );
    let http = client();
    let incoming = traceparent(HTTP_TRACE);
    let (status, first) = {
        let response = http
            .post(gateway.url("/v1/executions"))
            .header("traceparent", &incoming)
            .json(&call("item", json!({"id": "u1", "amount": 5}), "trace-u1"))
            .send()
            .await
            .unwrap();
        (
            response.status().as_u16(),
            response.json::<Value>().await.unwrap(),
        )
    };
    assert_eq!((status, &first["status"]), (200, &json!("completed")));
    let mcp = connect(&gateway.url("/mcp"), None).await;
    mcp.call_tool(call_with_meta(
        "item",
        json!({"id": "u2", "amount": 6}),
        json!({"io.carmy/request_id": "trace-u2", "traceparent": traceparent(MCP_TRACE)}),
    ))
    .await
    .unwrap();
    mcp.cancel().await.unwrap();
    assert!(gateway.terminate(), "the gateway exits cleanly");
    // The caller's own value reaches the upstream: no span of the gateway's is in between.
    assert_eq!(sent_traceparent(&upstream, "/items/u1/detail"), incoming);
    assert_eq!(
        sent_traceparent(&upstream, "/items/u2/detail"),
        traceparent(MCP_TRACE)
    );
    // The gateway has exited: whatever it would have exported (at the latest by the flush at
    // shutdown) has been sent by now.
    assert_eq!(receiver.requests(), Vec::<Value>::new());
}
