//! docs/semantics.md §3 row by row through the real HTTP stack (`Router::oneshot`), including the
//! rows that need a failing or interrupted store (case K21). The harness is in
//! `http_contract/harness.rs`; what other store failures do to a call in
//! `http_contract/store_faults.rs`.

#[path = "http_contract/harness.rs"]
mod harness;
#[path = "http_contract/store_faults.rs"]
mod store_faults;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use carmy_test_support::eventually;
use futures::FutureExt;
use harness::{call, harness, post, post_path, wait_for_runs};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tower::ServiceExt;

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
            "{{\"execution_id\":\"{execution_id}\",\"status\":\"running\",\"data\":null,\"error\":null,\"tool\":\"wait\",\"request_id\":\"to-cancel\",\"session_id\":\"default\",\"expires_at\":null,\"arguments\":{{}}}}\n"
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
