//! docs/semantics.md §3 row by row through the real HTTP stack (`Router::oneshot`), including the
//! rows that need a failing or interrupted store (case K21).

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use carmy::memory::InMemoryIdempotencyStore;
use carmy::outcome::RecordedResult;
use carmy::store::{
    Claim, ExecutionIntent, Existing, IdempotencyKey, IdempotencyStore, InFlightState, Reservation,
    StoreError, StoreFuture,
};
use carmy::tool::{FnTool, ToolError};
use carmy::ExecutionId;
use carmy_test_support::{eventually, eventually_eq};
use futures::FutureExt;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// The in-memory store with switches that make it fail or report an interrupted owner.
#[derive(Default)]
struct FaultyStore {
    inner: InMemoryIdempotencyStore,
    reserve_fails: AtomicBool,
    /// Reserve in the inner store, then answer as if the connection broke before the answer.
    reserve_indeterminate: AtomicBool,
    /// Reserve in the inner store, then hold the answer back for a while (an answer in transit).
    reserve_answer_delayed: AtomicBool,
    complete_failures_left: AtomicUsize,
    release_failures_left: AtomicUsize,
    report_interrupted: AtomicBool,
    shutdowns: AtomicUsize,
}

impl IdempotencyStore for FaultyStore {
    fn reserve<'a>(
        &'a self,
        claim: Claim<'a>,
        intent: &'a ExecutionIntent,
    ) -> StoreFuture<'a, Reservation> {
        Box::pin(async move {
            if self.reserve_fails.load(Ordering::SeqCst) {
                return Err(StoreError::Unavailable("switched off".into()));
            }
            let answer = self.inner.reserve(claim, intent).await?;
            if self.reserve_indeterminate.load(Ordering::SeqCst) {
                return Err(StoreError::Indeterminate("connection lost".into()));
            }
            if self.reserve_answer_delayed.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Ok(match answer {
                Reservation::Existing(Existing::Uncertain { execution_id, .. })
                    if self.report_interrupted.load(Ordering::SeqCst) =>
                {
                    Reservation::Existing(Existing::Uncertain {
                        execution_id,
                        state: InFlightState::Interrupted,
                    })
                }
                other => other,
            })
        })
    }

    fn complete<'a>(&'a self, claim: Claim<'a>, result: &'a RecordedResult) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let left = self.complete_failures_left.load(Ordering::SeqCst);
            if left > 0 {
                self.complete_failures_left
                    .store(left - 1, Ordering::SeqCst);
                return Err(StoreError::Unavailable("switched off".into()));
            }
            self.inner.complete(claim, result).await
        })
    }

    fn release<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        execution_id: &'a ExecutionId,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let left = self.release_failures_left.load(Ordering::SeqCst);
            if left > 0 {
                self.release_failures_left.store(left - 1, Ordering::SeqCst);
                return Err(StoreError::Unavailable("switched off".into()));
            }
            self.inner.release(key, execution_id).await
        })
    }

    carmy::forward_store!(inner =>
        lookup, find_execution, check_ready, resolve_execution, release_execution,
        list_executions, audit_trail, record_late_arrival, take_over, wait_for_outcome,
        prune_expired, lease_state, request_cancel, cancel_requests, record_changes, drop_cached,
    );

    fn shutdown(&self) -> StoreFuture<'_, ()> {
        self.shutdowns.fetch_add(1, Ordering::SeqCst);
        self.inner.shutdown()
    }
}

struct Harness {
    router: Router,
    store: Arc<FaultyStore>,
    app: carmy_http::App,
    release: Arc<tokio::sync::Notify>,
}

fn harness(capacity: usize) -> Harness {
    let store = Arc::new(FaultyStore {
        inner: InMemoryIdempotencyStore::new(capacity),
        ..FaultyStore::default()
    });
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = Arc::clone(&release);
    let app = carmy_http::app()
        .idempotency_store(store.clone())
        .tool(FnTool::new(
            "echo",
            json!({"type": "object"}),
            |_c, a| async move { Ok(a) },
        ))
        .tool(FnTool::new(
            "wait",
            json!({"type": "object"}),
            move |_c, _a| {
                let gate = Arc::clone(&gate);
                async move {
                    gate.notified().await;
                    Ok(json!("released"))
                }
            },
        ))
        .tool(FnTool::new(
            "typed",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
            |_c, a| async move { Ok(a) },
        ))
        .tool(FnTool::new(
            "fail",
            json!({"type": "object"}),
            |_c, _a| async move { Err(ToolError::new("TOOL_ERROR", "boom")) },
        ))
        .tool(FnTool::new(
            "reserved",
            json!({"type": "object"}),
            |_c, _a| async move {
                // A value serde_json would read back as the parsed text `[1]`.
                Ok(json!({"$serde_json::private::RawValue": "[1]"}))
            },
        ))
        .build()
        .unwrap();
    Harness {
        router: app.router(),
        store,
        app,
        release,
    }
}

async fn post(router: &Router, body: Value) -> (StatusCode, Value) {
    let request = Request::post("/v1/executions")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    if status.is_success() {
        assert_eq!(content_type, "application/json");
    } else {
        assert_eq!(content_type, "application/problem+json");
        assert_eq!(body["status"], json!(status.as_u16()));
        for member in ["type", "title", "detail", "code"] {
            assert!(
                body.get(member).is_some(),
                "problem body lacks {member}: {body}"
            );
        }
    }
    (status, body)
}

fn call(tool: &str, arguments: Value, request_id: &str) -> Value {
    json!({"tool": tool, "arguments": arguments, "request_id": request_id})
}

async fn wait_for_runs(app: &carmy_http::App, tool: &str, runs: u64) {
    eventually_eq(
        Duration::from_secs(10),
        "the tool to start",
        runs,
        || async { app.engine().metrics().tool_runs(tool) },
    )
    .await;
}

/// Runs the checks of one row of docs/semantics.md §3; a failure among them names the row.
async fn row<T>(name: &str, checks: impl Future<Output = T>) -> T {
    match AssertUnwindSafe(checks).catch_unwind().await {
        Ok(value) => value,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            panic!("docs/semantics.md §3 row \"{name}\" failed: {message}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_row_of_contract_section_3() {
    let h = harness(10);
    let r = &h.router;

    let first = row("new identity → 200, the tool runs", async {
        let (status, first) = post(r, call("echo", json!({"a": 1}), "new")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(first["status"], "completed");
        assert_eq!(first["data"], json!({"a": 1}));
        assert_eq!(first["replayed"], false);
        assert_eq!(first["request_id"], "new");
        assert_eq!(first["session_id"], "default");
        first
    })
    .await;

    row(
        "same identity, same fingerprint, finished → replay",
        async {
            let (status, again) = post(r, call("echo", json!({"a": 1}), "new")).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(again["execution_id"], first["execution_id"]);
            assert_eq!(again["replayed"], true);
            assert_eq!(h.app.engine().metrics().tool_runs("echo"), 1);
        },
    )
    .await;

    row("same identity, different fingerprint (finished) → 409 IDEMPOTENCY_CONFLICT, no data leaked", async {
        let (status, conflict) = post(r, call("echo", json!({"a": 2}), "new")).await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(conflict["code"], "IDEMPOTENCY_CONFLICT");
        assert_eq!(conflict["execution_id"], first["execution_id"]);
        assert!(conflict.get("data").is_none());
        // Which part differs, never its value (docs/semantics.md §12.8).
        assert_eq!(conflict["differs"], json!(["arguments"]));
        assert_eq!(
            conflict["detail"],
            "request_id was already used for a different call (its arguments differ); to get \
             that call's outcome, repeat it exactly; for a new call, use a new request_id"
        );
        let (_, other_tool) = post(r, call("wait", json!({"a": 2}), "new")).await;
        assert_eq!(other_tool["differs"], json!(["tool", "arguments"]));
    })
    .await;

    row(
        "same identity, same fingerprint, running → 409 EXECUTION_UNCERTAIN state running",
        async {
            let waiting = {
                let r = r.clone();
                tokio::spawn(async move { post(&r, call("wait", json!({}), "slow")).await })
            };
            wait_for_runs(&h.app, "wait", 1).await;
            let (status, running) = post(r, call("wait", json!({}), "slow")).await;
            assert_eq!(status, StatusCode::CONFLICT);
            assert_eq!(running["code"], "EXECUTION_UNCERTAIN");
            assert_eq!(running["state"], "running");
            // … and a different fingerprint while running → conflict
            let (status, conflict) = post(r, call("wait", json!({"x": 1}), "slow")).await;
            assert_eq!(status, StatusCode::CONFLICT);
            assert_eq!(conflict["code"], "IDEMPOTENCY_CONFLICT");
            h.release.notify_one();
            let (status, finished) = waiting.await.unwrap();
            assert_eq!(status, StatusCode::OK);
            assert_eq!(finished["execution_id"], running["execution_id"]);
        },
    )
    .await;

    row(
        "same identity, same fingerprint, interrupted → 409 EXECUTION_UNCERTAIN state interrupted",
        async {
            let waiting = {
                let r = r.clone();
                tokio::spawn(async move { post(&r, call("wait", json!({}), "lost")).await })
            };
            wait_for_runs(&h.app, "wait", 2).await;
            h.store.report_interrupted.store(true, Ordering::SeqCst);
            let (status, interrupted) = post(r, call("wait", json!({}), "lost")).await;
            h.store.report_interrupted.store(false, Ordering::SeqCst);
            assert_eq!(status, StatusCode::CONFLICT);
            assert_eq!(interrupted["code"], "EXECUTION_UNCERTAIN");
            assert_eq!(interrupted["state"], "interrupted");
            h.release.notify_one();
            assert_eq!(waiting.await.unwrap().0, StatusCode::OK);
        },
    )
    .await;

    row(
        "a tool error is a recorded outcome: 200 with status failed, replayed alike",
        async {
            let (status, failed) = post(r, call("fail", json!({}), "f")).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(failed["status"], "failed");
            assert_eq!(
                failed["error"],
                json!({"code": "TOOL_ERROR", "message": "boom"})
            );
            let (status, failed_again) = post(r, call("fail", json!({}), "f")).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(failed_again["replayed"], true);
            assert_eq!(h.app.engine().metrics().tool_runs("fail"), 1);
        },
    )
    .await;

    row(
        "store failing before the tool ran → 503 STORE_UNAVAILABLE, the tool does not run",
        async {
            h.store.reserve_fails.store(true, Ordering::SeqCst);
            let (status, unavailable) = post(r, call("echo", json!({}), "down")).await;
            h.store.reserve_fails.store(false, Ordering::SeqCst);
            assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(unavailable["code"], "STORE_UNAVAILABLE");
            assert_eq!(h.app.engine().metrics().tool_runs("echo"), 1);
        },
    )
    .await;

    row(
        "invalid request / unknown tool / schema rejection → 400 / 404, nothing reserved",
        async {
            let (status, invalid) = post(
                r,
                json!({"tool": "echo", "arguments": [], "request_id": "bad"}),
            )
            .await;
            assert_eq!(
                (status, invalid["code"].clone()),
                (StatusCode::BAD_REQUEST, json!("INVALID_REQUEST"))
            );
            let (status, unknown) = post(r, call("nope", json!({}), "bad")).await;
            assert_eq!(
                (status, unknown["code"].clone()),
                (StatusCode::NOT_FOUND, json!("UNKNOWN_TOOL"))
            );
            let (status, schema) = post(r, call("typed", json!({"n": "x"}), "bad")).await;
            assert_eq!(
                (status, schema["code"].clone()),
                (StatusCode::BAD_REQUEST, json!("INVALID_REQUEST"))
            );
            let (status, ok) = post(r, call("typed", json!({"n": 1}), "bad")).await;
            assert_eq!(
                (status, ok["replayed"].clone()),
                (StatusCode::OK, json!(false))
            );
        },
    )
    .await;

    row("recording fails after the tool ran → 503 EXECUTION_UNCERTAIN; the background retry records it and a later retry replays it (docs/semantics.md §4)", async {
        h.store.complete_failures_left.store(1, Ordering::SeqCst);
        let (status, pending) = post(r, call("echo", json!({"p": 1}), "rec")).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(pending["code"], "EXECUTION_UNCERTAIN");
        let execution_id = pending["execution_id"].clone();
        let replay = eventually(Duration::from_secs(10), "the outcome recorded", || async {
            let (status, body) = post(r, call("echo", json!({"p": 1}), "rec")).await;
            if status == StatusCode::OK {
                return Ok(body);
            }
            assert_eq!(body["code"], "EXECUTION_UNCERTAIN");
            Err((status, body))
        })
        .await;
        assert_eq!(replay["execution_id"], execution_id);
        assert_eq!(replay["replayed"], true);
        assert_eq!(replay["data"], json!({"p": 1}));
        assert_eq!(h.app.engine().metrics().tool_runs("echo"), 2);
    })
    .await;

    row(
        "without request_id: runs every time, never recorded",
        async {
            let (status, a) = post(r, json!({"tool": "echo", "arguments": {"z": 1}})).await;
            let (_, b) = post(r, json!({"tool": "echo", "arguments": {"z": 1}})).await;
            assert_eq!(status, StatusCode::OK);
            assert_ne!(a["execution_id"], b["execution_id"]);
            assert_eq!(a["request_id"], Value::Null);
            assert_eq!(h.app.engine().metrics().tool_runs("echo"), 4);
        },
    )
    .await;
}

#[tokio::test]
async fn full_memory_store_answers_507_for_new_identities_only() {
    let h = harness(1);
    let (status, _) = post(&h.router, call("echo", json!({}), "only")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, full) = post(&h.router, call("echo", json!({}), "second")).await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE);
    assert_eq!(full["code"], "IDEMPOTENCY_CAPACITY");
    let (status, replay) = post(&h.router, call("echo", json!({}), "only")).await;
    assert_eq!(
        (status, replay["replayed"].clone()),
        (StatusCode::OK, json!(true))
    );
    assert_eq!(h.store.inner.len(), 1);
    assert_eq!(h.app.engine().metrics().tool_runs("echo"), 1);
}

async fn post_path(router: &Router, path: &str) -> (StatusCode, Value) {
    let request = Request::post(path).body(Body::empty()).unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_records_cancelled_and_leaves_finished_records_alone() {
    let h = harness(10);
    let r = &h.router;
    let waiting = {
        let r = r.clone();
        tokio::spawn(async move { post(&r, call("wait", json!({}), "to-cancel")).await })
    };
    wait_for_runs(&h.app, "wait", 1).await;
    let (_, running) = post(r, call("wait", json!({}), "to-cancel")).await;
    let execution_id = running["execution_id"].as_str().unwrap().to_owned();
    let request = Request::get(format!("/v1/executions/{execution_id}"))
        .body(Body::empty())
        .unwrap();
    let response = r.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        std::str::from_utf8(&text).unwrap(),
        format!(
            "{{\"execution_id\":\"{execution_id}\",\"status\":\"running\",\"data\":null,\"error\":null,\"tool\":\"wait\",\"request_id\":\"to-cancel\",\"session_id\":\"default\",\"expires_at\":null}}\n"
        )
    );

    let (status, cancelled) = post_path(r, &format!("/v1/executions/{execution_id}/cancel")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(cancelled["execution_id"], execution_id.as_str());
    assert_eq!(cancelled["error"]["code"], "CANCELLED");
    // the waiting caller gets the recorded cancellation, and so does every retry
    let (status, first) = waiting.await.unwrap();
    assert_eq!(
        (status, first["status"].clone()),
        (StatusCode::OK, json!("cancelled"))
    );
    let (status, replay) = post(r, call("wait", json!({}), "to-cancel")).await;
    assert_eq!(
        (status, replay["status"].clone(), replay["replayed"].clone()),
        (StatusCode::OK, json!("cancelled"), json!(true))
    );

    // a finished execution is unchanged
    let (status, again) = post_path(r, &format!("/v1/executions/{execution_id}/cancel")).await;
    assert_eq!(
        (status, again["code"].clone()),
        (StatusCode::CONFLICT, json!("EXECUTION_FINISHED"))
    );
    let (status, done) = post(r, call("echo", json!({}), "done")).await;
    assert_eq!(status, StatusCode::OK);
    let done_id = done["execution_id"].as_str().unwrap();
    let (status, finished) = post_path(r, &format!("/v1/executions/{done_id}/cancel")).await;
    assert_eq!(
        (status, finished["code"].clone()),
        (StatusCode::CONFLICT, json!("EXECUTION_FINISHED"))
    );
    let (status, replay) = post(r, call("echo", json!({}), "done")).await;
    assert_eq!(
        (status, replay["status"].clone()),
        (StatusCode::OK, json!("completed"))
    );

    // unknown ids are 404
    let (status, missing) = post_path(
        r,
        "/v1/executions/exec_00000000000000000000000000000000/cancel",
    )
    .await;
    assert_eq!(
        (status, missing["code"].clone()),
        (StatusCode::NOT_FOUND, json!("NOT_FOUND"))
    );
    assert_eq!(h.app.engine().metrics().tool_runs("wait"), 1);
}

#[tokio::test]
async fn results_that_would_not_read_back_unchanged_are_recorded_as_failed() {
    let h = harness(10);
    let (status, first) = post(&h.router, call("reserved", json!({}), "unrecordable")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(first["status"], "failed");
    assert_eq!(first["error"]["code"], "RESULT_NOT_RECORDABLE");
    assert_eq!(first["data"], Value::Null);
    let (status, replay) = post(&h.router, call("reserved", json!({}), "unrecordable")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["error"], first["error"]);
    assert_eq!(h.app.engine().metrics().tool_runs("reserved"), 1);

    // 126 levels of nesting read back; 127 (one more inside the record) would not.
    let nest = |depth: usize| -> Value {
        let text = format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
        serde_json::from_str(&text).unwrap()
    };
    let (status, fits) = post(&h.router, call("echo", nest(126), "deep-126")).await;
    assert_eq!(
        (status, fits["status"].clone()),
        (StatusCode::OK, json!("completed")),
        "{fits}"
    );
    let (status, too_deep) = post(&h.router, call("echo", nest(127), "deep-127")).await;
    assert_eq!(
        (status, too_deep["error"]["code"].clone()),
        (StatusCode::OK, json!("RESULT_NOT_RECORDABLE"))
    );
}

#[tokio::test]
async fn a_reservation_whose_answer_was_lost_is_freed_not_stuck() {
    let h = harness(10);
    // The first two attempts to free it fail too: the engine keeps retrying.
    h.store.release_failures_left.store(2, Ordering::SeqCst);
    h.store.reserve_indeterminate.store(true, Ordering::SeqCst);
    let (status, problem) = post(&h.router, call("echo", json!({"n": 1}), "lost-ack")).await;
    h.store.reserve_indeterminate.store(false, Ordering::SeqCst);
    assert_eq!(
        (status, problem["code"].clone()),
        (StatusCode::SERVICE_UNAVAILABLE, json!("STORE_UNAVAILABLE"))
    );
    assert_eq!(h.app.engine().metrics().tool_runs("echo"), 0, "nothing ran");
    // The reservation the store did make is freed in the background; the retry then runs once.
    let ran = eventually(
        Duration::from_secs(10),
        "the lost reservation freed",
        || async {
            let (status, answer) = post(&h.router, call("echo", json!({"n": 1}), "lost-ack")).await;
            if status == StatusCode::OK {
                return Ok(answer);
            }
            assert_eq!(answer["state"], "running", "{answer}");
            Err((status, answer))
        },
    )
    .await;
    assert_eq!(ran["replayed"], false);
    assert_eq!(h.store.release_failures_left.load(Ordering::SeqCst), 0);
    assert_eq!(h.app.engine().metrics().tool_runs("echo"), 1);
    assert_eq!(h.store.inner.len(), 1);
}

#[tokio::test]
async fn serve_shuts_the_store_down_once_after_the_drain() {
    let h = harness(10);
    let (status, _) = post(&h.router, call("echo", json!({"n": 1}), "before-shutdown")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(h.store.shutdowns.load(Ordering::SeqCst), 0);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), h.app.serve(listener, async {}))
        .await
        .expect("serve returns once shutdown completes")
        .unwrap();
    assert_eq!(h.store.shutdowns.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_goes_away_during_reserve_still_gets_its_execution_recorded() {
    let h = harness(10);
    h.store.reserve_answer_delayed.store(true, Ordering::SeqCst);
    // The caller gives up while the reservation's answer is on its way (a client that
    // disconnected): the reservation exists, and the tool must still run and be recorded.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(50),
        post(&h.router, call("echo", json!({"n": 7}), "went-away")),
    )
    .await;
    assert!(gave_up.is_err(), "the call answered before the caller left");
    assert_eq!(h.store.inner.len(), 1, "the identity is reserved");
    h.store
        .reserve_answer_delayed
        .store(false, Ordering::SeqCst);
    let replay = eventually(
        Duration::from_secs(10),
        "the abandoned execution recorded",
        || async {
            let (status, answer) =
                post(&h.router, call("echo", json!({"n": 7}), "went-away")).await;
            if status == StatusCode::OK {
                return Ok(answer);
            }
            Err((status, answer))
        },
    )
    .await;
    assert_eq!(replay["replayed"], true, "{replay}");
    assert_eq!(replay["data"], json!({"n": 7}));
    assert_eq!(h.app.engine().metrics().tool_runs("echo"), 1);
}
