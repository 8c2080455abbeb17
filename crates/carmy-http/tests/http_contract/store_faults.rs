//! What a store's failures do to a call through the HTTP stack (docs/semantics.md §4): a result
//! that would not read back is recorded as failed; a reservation whose answer was lost is freed,
//! not stuck; serving shuts the store down once after the drain; a caller that goes away during
//! `reserve` still gets its execution recorded.

use super::harness::{call, harness, post};
use axum::http::StatusCode;
use carmy_test_support::eventually;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::time::Duration;

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
