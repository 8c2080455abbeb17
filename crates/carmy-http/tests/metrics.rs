//! `/metrics` after one call of each outcome: every counter read with its exact value, the
//! running gauge seen at 1 and back at 0, the histograms' counts, the recovery hooks at 0, and
//! every metric the Grafana dashboard (`deploy/grafana-dashboard.json`) queries present
//! (docs/semantics.md §13).

use axum::body::Body;
use axum::http::{Request, StatusCode};
use carmy::memory::InMemoryIdempotencyStore;
use carmy::outcome::{ExecutionId, RecordedResult};
use carmy::store::{
    Claim, ExecutionIntent, Existing, IdempotencyStore, InFlightState, Reservation, StoreError,
    StoreFuture,
};
use carmy::tool::{FnTool, ToolError};
use carmy_test_support::eventually;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// The in-memory store, with scripted answers for a few request ids: `interrupted` reads as an
/// interrupted execution, `unavailable` and `full` fail the reserve, `unrecorded` fails the first
/// attempt to record.
struct ScriptedStore {
    inner: InMemoryIdempotencyStore,
    failed_completes: std::sync::atomic::AtomicU32,
}

impl IdempotencyStore for ScriptedStore {
    fn reserve<'a>(
        &'a self,
        claim: Claim<'a>,
        intent: &'a ExecutionIntent,
    ) -> StoreFuture<'a, Reservation> {
        match claim.key.request_id.as_str() {
            "interrupted" => Box::pin(async {
                Ok(Reservation::Existing(Existing::Uncertain {
                    execution_id: ExecutionId::from_stored("exec_gone"),
                    state: InFlightState::Interrupted,
                }))
            }),
            "unavailable" => Box::pin(async { Err(StoreError::Unavailable("scripted".into())) }),
            "full" => Box::pin(async { Err(StoreError::Capacity) }),
            _ => self.inner.reserve(claim, intent),
        }
    }

    fn complete<'a>(&'a self, claim: Claim<'a>, result: &'a RecordedResult) -> StoreFuture<'a, ()> {
        use std::sync::atomic::Ordering;
        if claim.key.request_id == "unrecorded"
            && self.failed_completes.fetch_add(1, Ordering::SeqCst) == 0
        {
            return Box::pin(async { Err(StoreError::Unavailable("scripted".into())) });
        }
        self.inner.complete(claim, result)
    }

    carmy::forward_store!(inner =>
        release, lookup, find_execution, check_ready, resolve_execution, release_execution,
        list_executions, audit_trail, record_late_arrival, take_over, wait_for_outcome,
        prune_expired, request_cancel, cancel_requests, lease_state, record_changes,
        drop_cached, shutdown,
    );
}

/// The app, and the gate that the `wait` tool holds on (one permit lets one call finish).
fn app() -> (carmy_http::App, Arc<tokio::sync::Semaphore>) {
    let store = ScriptedStore {
        inner: InMemoryIdempotencyStore::default(),
        failed_completes: Default::default(),
    };
    let echo = FnTool::new(
        "echo",
        json!({"type": "object"}),
        |_, arguments| async move { Ok(arguments) },
    );
    // Holds until the test says so, through a semaphore permit.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let held = Arc::clone(&gate);
    let wait = FnTool::new("wait", json!({"type": "object"}), move |_, _| {
        let gate = Arc::clone(&held);
        async move {
            gate.acquire().await.unwrap().forget();
            Ok(json!("released"))
        }
    });
    let down = FnTool::new("down", json!({"type": "object"}), |_, _| async {
        Err(ToolError::not_executed("UPSTREAM_UNAVAILABLE", "refused"))
    });
    let app = carmy_http::app()
        .idempotency_store(Arc::new(store))
        .tool(echo)
        .tool(wait)
        .tool(down)
        .build()
        .unwrap();
    (app, gate)
}

async fn post(app: &carmy_http::App, tool: &str, arguments: Value, request_id: &str) -> StatusCode {
    let body = json!({"tool": tool, "arguments": arguments, "request_id": request_id});
    let request = Request::post("/v1/executions")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    app.router().oneshot(request).await.unwrap().status()
}

async fn metrics(app: &carmy_http::App) -> String {
    let request = Request::get("/metrics").body(Body::empty()).unwrap();
    let response = app.router().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

/// The value of the sample `name{labels}` (labels as exposed, e.g. `tool="echo"`), or `None`.
fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let series = if labels.is_empty() {
        name.to_owned()
    } else {
        format!("{name}{{{labels}}}")
    };
    text.lines().find_map(|line| {
        let value = line.strip_prefix(&series)?.strip_prefix(' ')?;
        Some(value.parse().unwrap())
    })
}

fn calls(text: &str, tool: &str, outcome: &str) -> Option<f64> {
    sample(
        text,
        "carmy_calls_total",
        &format!("tool=\"{tool}\",outcome=\"{outcome}\""),
    )
}

/// Calls the `wait` tool in a task of its own (it holds until the gate opens).
fn spawn_wait(app: &carmy_http::App, request_id: &str) -> tokio::task::JoinHandle<StatusCode> {
    let router = app.router();
    let body = json!({"tool": "wait", "arguments": {}, "request_id": request_id});
    tokio::spawn(async move {
        let request = Request::post("/v1/executions")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        router.oneshot(request).await.unwrap().status()
    })
}

/// Waits until `carmy_executions_running{tool}` reads `expected`.
async fn until_running(app: &carmy_http::App, tool: &str, expected: f64) {
    let labels = format!("tool=\"{tool}\"");
    eventually(Duration::from_secs(10), "the running gauge", || async {
        let running = sample(&metrics(app).await, "carmy_executions_running", &labels);
        if running == Some(expected) {
            Ok(())
        } else {
            Err(running)
        }
    })
    .await;
}

/// Makes one call of each outcome, with the gauge checked while one execution runs.
async fn one_call_of_each_outcome(app: &carmy_http::App, gate: &tokio::sync::Semaphore) {
    assert_eq!(
        post(app, "echo", json!({"a": 1}), "r1").await,
        StatusCode::OK
    );
    assert_eq!(
        post(app, "echo", json!({"a": 1}), "r1").await,
        StatusCode::OK
    );
    assert_eq!(
        post(app, "echo", json!({"a": 2}), "r1").await,
        StatusCode::CONFLICT
    );
    let running = spawn_wait(app, "w1");
    until_running(app, "wait", 1.0).await;
    assert_eq!(
        post(app, "wait", json!({}), "w1").await,
        StatusCode::CONFLICT
    );
    gate.add_permits(1);
    assert_eq!(running.await.unwrap(), StatusCode::OK);
    let statuses = [
        (
            post(app, "echo", json!({}), "interrupted").await,
            StatusCode::CONFLICT,
        ),
        (
            post(app, "echo", json!({}), "full").await,
            StatusCode::INSUFFICIENT_STORAGE,
        ),
        (
            post(app, "echo", json!({}), "unavailable").await,
            StatusCode::SERVICE_UNAVAILABLE,
        ),
        (
            post(app, "echo", json!({}), "unrecorded").await,
            StatusCode::SERVICE_UNAVAILABLE,
        ),
        (
            post(app, "down", json!({}), "d1").await,
            StatusCode::SERVICE_UNAVAILABLE,
        ),
        (
            post(app, "nope", json!({}), "n1").await,
            StatusCode::NOT_FOUND,
        ),
    ];
    for (got, expected) in statuses {
        assert_eq!(got, expected);
    }
}

#[tokio::test]
async fn every_outcome_is_counted_exactly() {
    let (app, gate) = app();
    one_call_of_each_outcome(&app, &gate).await;
    // The outcome of `unrecorded` is recorded by the background retry (the execution stops
    // counting as running then); the retry replays it.
    eventually(
        Duration::from_secs(10),
        "the retried outcome is recorded",
        || async {
            let text = metrics(&app).await;
            let running = sample(&text, "carmy_executions_running", "tool=\"echo\"");
            if running == Some(0.0) {
                Ok(())
            } else {
                Err(running)
            }
        },
    )
    .await;
    assert_eq!(
        post(&app, "echo", json!({}), "unrecorded").await,
        StatusCode::OK
    );
    let text = metrics(&app).await;
    let expected = [
        ("echo", "new", 1.0),
        ("echo", "replay", 2.0),
        ("echo", "conflict", 1.0),
        ("wait", "uncertain_running", 1.0),
        ("wait", "new", 1.0),
        ("echo", "uncertain_interrupted", 1.0),
        ("echo", "capacity", 1.0),
        ("echo", "unavailable", 1.0),
        ("echo", "recording_pending", 1.0),
        ("down", "not_executed", 1.0),
        ("_unregistered", "rejected", 1.0),
    ];
    for (tool, outcome, value) in expected {
        assert_eq!(
            calls(&text, tool, outcome),
            Some(value),
            "{tool} {outcome}\n{text}"
        );
    }
    let total: f64 = text
        .lines()
        .filter(|line| line.starts_with("carmy_calls_total{"))
        .map(|line| line.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(total, 12.0, "no other call was counted\n{text}");
    assert_eq!(
        sample(&text, "carmy_tool_runs_total", "tool=\"echo\""),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "carmy_tool_runs_total", "tool=\"down\""),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "carmy_tool_outcomes_total",
            "tool=\"down\",status=\"not_executed\""
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "carmy_executions_running", "tool=\"wait\""),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "carmy_tool_duration_seconds_count", "tool=\"echo\""),
        Some(2.0)
    );
    // Reserves that reached the store: r1 ×3, w1 ×2, interrupted, full, unavailable,
    // unrecorded ×2 (the second is the replay), d1.
    assert_eq!(
        sample(&text, "carmy_store_reserve_duration_seconds_count", ""),
        Some(11.0)
    );
    // Completes: r1, w1, unrecorded (failed once, then recorded).
    assert_eq!(
        sample(&text, "carmy_store_complete_duration_seconds_count", ""),
        Some(4.0)
    );
    assert_eq!(sample(&text, "carmy_prunes_total", ""), Some(0.0));
    assert_eq!(sample(&text, "carmy_late_arrivals_total", ""), Some(0.0));
    for action in ["resolve", "release"] {
        let labels = format!("action=\"{action}\"");
        assert_eq!(sample(&text, "carmy_resolutions_total", &labels), Some(0.0));
    }
}

/// The engine counts a call in its own task: a caller that stopped waiting is counted too.
#[tokio::test]
async fn a_call_whose_caller_left_is_counted() {
    let (app, gate) = app();
    let waiting = spawn_wait(&app, "left");
    until_running(&app, "wait", 1.0).await;
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    assert_eq!(calls(&metrics(&app).await, "wait", "new"), None);
    gate.add_permits(1);
    until_running(&app, "wait", 0.0).await;
    eventually(Duration::from_secs(10), "the call is counted", || async {
        let counted = calls(&metrics(&app).await, "wait", "new");
        if counted == Some(1.0) {
            Ok(())
        } else {
            Err(counted)
        }
    })
    .await;
    // It was recorded: the retry replays it.
    assert_eq!(post(&app, "wait", json!({}), "left").await, StatusCode::OK);
    assert_eq!(calls(&metrics(&app).await, "wait", "replay"), Some(1.0));
}

/// Metric names in the dashboard's PromQL: identifiers starting with `carmy_`.
fn dashboard_metrics() -> Vec<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana-dashboard.json"
    );
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut names = Vec::new();
    let panels = dashboard["panels"].as_array().unwrap();
    for target in panels
        .iter()
        .flat_map(|panel| panel["targets"].as_array().unwrap())
    {
        let expr = target["expr"].as_str().unwrap();
        let mut rest = expr;
        while let Some(at) = rest.find("carmy_") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            names.push(tail[..end].to_owned());
            rest = &tail[end..];
        }
    }
    names.sort();
    names.dedup();
    names
}

#[tokio::test]
async fn the_dashboard_queries_only_metrics_that_exist() {
    let (app, gate) = app();
    one_call_of_each_outcome(&app, &gate).await;
    let text = metrics(&app).await;
    let names = dashboard_metrics();
    assert!(names.len() >= 8, "the dashboard queries {names:?}");
    for name in names {
        let exposed = text.lines().any(|line| {
            line.strip_prefix(&name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        });
        assert!(
            exposed,
            "the dashboard queries {name}, which /metrics does not expose\n{text}"
        );
    }
}
