//! The seed scenario and the field cases of `shared/cases/` against the in-memory store, through
//! the gateway's real router with its example tools (`Router::oneshot`). Malformed requests,
//! the probes and schema bounds are in `memory_requests.rs`.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use carmy_test_support::InProcess;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::Arc;
use tower::ServiceExt;

/// The gateway in-process and its router.
pub(super) struct Gateway {
    pub(super) router: Router,
    inner: InProcess,
}

impl Gateway {
    /// How many times `tool` started.
    pub(super) fn runs(&self, tool: &str) -> u64 {
        self.inner.tool_runs(tool)
    }

    /// Entries of the in-memory store.
    pub(super) fn stored(&self) -> usize {
        self.inner.memory_store().len()
    }
}

/// The gateway built by `carmy_gateway::build` from `flags`, on the in-memory store.
async fn gateway_with(flags: &[&str]) -> Gateway {
    let inner = InProcess::start(flags).await;
    Gateway {
        router: inner.router(),
        inner,
    }
}

/// The gateway with its default flags.
pub(super) async fn gateway() -> Gateway {
    gateway_with(&[]).await
}

/// Sends a raw body with optional extra headers; returns the status and parsed JSON body.
pub(super) async fn send_raw(
    router: &Router,
    body: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, Value) {
    let mut request = Request::post("/v1/executions").header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = router
        .clone()
        .oneshot(request.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

async fn send(router: &Router, body: Value) -> (StatusCode, Value) {
    send_raw(router, &body.to_string(), &[]).await
}

fn call(tool: &str, arguments: Value, request_id: &str) -> Value {
    json!({"tool": tool, "arguments": arguments, "request_id": request_id})
}

async fn orders(router: &Router, headers: &[(&str, &str)], sku: &str) -> Vec<Value> {
    let body = json!({"tool": "find_orders", "arguments": {"sku": sku}}).to_string();
    let (status, found) = send_raw(router, &body, headers).await;
    assert_eq!(status, StatusCode::OK, "{found}");
    found["data"]["orders"].as_array().unwrap().clone()
}

#[tokio::test]
async fn seed_scenario_replays_the_first_order() {
    let g = gateway().await;
    let body = call("create_order", json!({"sku": "KB-01"}), "abc");
    let (status, first) = send(&g.router, body.clone()).await;
    assert_eq!(status, StatusCode::OK);
    let (status, second) = send(&g.router, body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(first["status"], "completed");
    assert_eq!(first["data"], json!({"order_id": 1}));
    assert_eq!(first["replayed"], false);
    assert_eq!(second["replayed"], true);
    assert_eq!(second["execution_id"], first["execution_id"]);
    assert!(first["execution_id"].as_str().unwrap().starts_with("exec_"));
    let mut without_flag = second.clone();
    without_flag["replayed"] = json!(false);
    assert_eq!(without_flag, first, "only `replayed` differs");
    assert_eq!(orders(&g.router, &[], "KB-01").await.len(), 1);
    assert_eq!(g.runs("create_order"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_identical_calls_run_the_tool_once() {
    let g = gateway().await;
    let barrier = Arc::new(tokio::sync::Barrier::new(50));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (router, barrier) = (g.router.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                send(&router, call("create_order", json!({"sku": "R9"}), "r9")).await
            })
        })
        .collect();
    let mut execution_ids = std::collections::BTreeSet::new();
    for task in tasks {
        let (status, body) = task.await.unwrap();
        match status {
            StatusCode::OK => assert_eq!(body["data"], json!({"order_id": 1})),
            StatusCode::CONFLICT => assert_eq!(body["code"], "EXECUTION_UNCERTAIN"),
            other => panic!("unexpected {other}: {body}"),
        }
        execution_ids.insert(body["execution_id"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        execution_ids.len(),
        1,
        "every answer names the one execution"
    );
    assert_eq!(g.runs("create_order"), 1);
    assert_eq!(orders(&g.router, &[], "R9").await.len(), 1);
    let (status, replay) = send(&g.router, call("create_order", json!({"sku": "R9"}), "r9")).await;
    assert_eq!(
        (status, replay["replayed"].clone()),
        (StatusCode::OK, json!(true))
    );
    assert_eq!(g.stored(), 1);
}

#[tokio::test]
async fn k01_member_order_and_whitespace_replay() {
    let g = gateway().await;
    let first = r#"{"tool":"create_order","request_id":"r1","arguments":{"sku":"A-1","quantity":2,"ship":{"city":"X","zip":"1"}}}"#;
    let reordered = "{ \"arguments\" : { \"ship\" : {\"zip\":\"1\" , \"city\":\"X\"},\n\t\"quantity\" : 2, \"sku\":\"A\\u002d1\" }, \"request_id\":\"r1\", \"tool\":\"create_order\" }";
    let (status, a) = send_raw(&g.router, first, &[]).await;
    assert_eq!(status, StatusCode::OK);
    let (status, b) = send_raw(&g.router, reordered, &[]).await;
    assert_eq!(status, StatusCode::OK, "{b}");
    assert_eq!(b["replayed"], true);
    assert_eq!(b["execution_id"], a["execution_id"]);
    assert_eq!(orders(&g.router, &[], "A-1").await.len(), 1);
}

#[tokio::test]
async fn k02_array_order_matters() {
    let g = gateway().await;
    let (status, _) = send(&g.router, call("echo", json!({"items": ["a", "b"]}), "r2")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = send(&g.router, call("echo", json!({"items": ["b", "a"]}), "r2")).await;
    assert_eq!(
        (status, body["code"].clone()),
        (StatusCode::CONFLICT, json!("IDEMPOTENCY_CONFLICT"))
    );
}

#[tokio::test]
async fn k03_number_value_not_text() {
    let g = gateway().await;
    let base = r#"{"tool":"create_order","request_id":"r3","arguments":{"sku":"A","quantity":"#;
    let (status, first) = send_raw(&g.router, &format!("{base}1}}}}"), &[]).await;
    assert_eq!(status, StatusCode::OK);
    let (status, same) = send_raw(&g.router, &format!("{base}1.0}}}}"), &[]).await;
    assert_eq!(
        (status, same["replayed"].clone()),
        (StatusCode::OK, json!(true))
    );
    assert_eq!(same["execution_id"], first["execution_id"]);
    let (status, text) = send_raw(&g.router, &format!("{base}\"1\"}}}}"), &[]).await;
    assert_eq!(
        (status, text["code"].clone()),
        (StatusCode::CONFLICT, json!("IDEMPOTENCY_CONFLICT"))
    );
    assert_eq!(g.runs("create_order"), 1);
}

/// After a 400, a capacity-1 store still takes the same identity: nothing was reserved.
async fn assert_nothing_reserved(g: &Gateway, request_id: &str) {
    assert_eq!(g.stored(), 0);
    let (status, body) = send(&g.router, call("echo", json!({}), request_id)).await;
    assert_eq!(
        (status, body["replayed"].clone()),
        (StatusCode::OK, json!(false))
    );
}

#[tokio::test]
async fn k04_unrepresentable_number_is_400() {
    let g = gateway_with(&["--memory-capacity", "1"]).await;
    let (status, body) = send_raw(
        &g.router,
        r#"{"tool":"echo","request_id":"r4","arguments":{"x":1e400}}"#,
        &[],
    )
    .await;
    assert_eq!(
        (status, body["code"].clone()),
        (StatusCode::BAD_REQUEST, json!("INVALID_REQUEST"))
    );
    assert_nothing_reserved(&g, "r4").await;
}

#[tokio::test]
async fn k05_duplicate_member_names_are_400() {
    let g = gateway_with(&["--memory-capacity", "1"]).await;
    for body in [
        r#"{"tool":"create_order","request_id":"r5","arguments":{"sku":"A","sku":"B"}}"#,
        r#"{"tool":"echo","request_id":"r5","arguments":{"o":{"k":1,"k":1}}}"#,
        r#"{"tool":"echo","request_id":"r5","request_id":"r5","arguments":{}}"#,
    ] {
        let (status, problem) = send_raw(&g.router, body, &[]).await;
        assert_eq!(
            (status, problem["code"].clone()),
            (StatusCode::BAD_REQUEST, json!("INVALID_REQUEST")),
            "{body}"
        );
    }
    assert_eq!(g.runs("create_order"), 0);
    assert_nothing_reserved(&g, "r5").await;
}

#[tokio::test]
async fn k07_identity_is_bound_to_the_tool() {
    let g = gateway().await;
    let (status, _) = send(&g.router, call("create_order", json!({"sku": "A"}), "r7")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = send(&g.router, call("find_orders", json!({"sku": "A"}), "r7")).await;
    assert_eq!(
        (status, body["code"].clone()),
        (StatusCode::CONFLICT, json!("IDEMPOTENCY_CONFLICT"))
    );
}

#[tokio::test]
async fn k08_principals_are_isolated() {
    let g = gateway_with(&["--api-keys", "key-1=P1,key-2=P2,key-3=P3"]).await;
    let body = json!({"tool": "create_order", "arguments": {"sku": "A"}, "request_id": "r8", "session_id": "s"}).to_string();
    let mut executions = std::collections::BTreeSet::new();
    let mut order_ids = std::collections::BTreeSet::new();
    for key in ["key-1", "key-2", "key-3"] {
        let auth = format!("Bearer {key}");
        let (status, first) = send_raw(&g.router, &body, &[("authorization", &auth)]).await;
        assert_eq!(
            (status, first["replayed"].clone()),
            (StatusCode::OK, json!(false))
        );
        executions.insert(first["execution_id"].clone().to_string());
        order_ids.insert(first["data"]["order_id"].to_string());
    }
    assert_eq!(executions.len(), 3);
    assert_eq!(order_ids.len(), 3);
    for key in ["key-1", "key-2", "key-3"] {
        let auth = format!("Bearer {key}");
        let (status, replay) = send_raw(&g.router, &body, &[("authorization", &auth)]).await;
        assert_eq!(
            (status, replay["replayed"].clone()),
            (StatusCode::OK, json!(true))
        );
        assert_eq!(
            orders(&g.router, &[("authorization", &auth)], "A")
                .await
                .len(),
            1
        );
        // another principal's execution id is not found
        let mine = replay["execution_id"].as_str().unwrap();
        for other in ["key-1", "key-2", "key-3"]
            .into_iter()
            .filter(|other| *other != key)
        {
            let request = Request::get(format!("/v1/executions/{mine}"))
                .header("authorization", format!("Bearer {other}"))
                .body(Body::empty())
                .unwrap();
            let response = g.router.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::NOT_FOUND);
        }
        let request = Request::get(format!("/v1/executions/{mine}"))
            .header("authorization", &auth)
            .body(Body::empty())
            .unwrap();
        let response = g.router.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert_eq!(g.runs("create_order"), 3);
    let (status, unauthorized) =
        send_raw(&g.router, &body, &[("authorization", "Bearer nope")]).await;
    assert_eq!(
        (status, unauthorized["code"].clone()),
        (StatusCode::UNAUTHORIZED, json!("UNAUTHORIZED"))
    );
    let (status, _) = send_raw(&g.router, &body, &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn k15_empty_and_null_results_replay_faithfully() {
    let g = gateway().await;
    for (request_id, arguments) in [
        ("r15", json!({})),
        ("r16", json!({"v": []})),
        ("r17", json!({"v": null})),
    ] {
        let (status, first) = send(&g.router, call("echo", arguments.clone(), request_id)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(first["data"], arguments);
        let (status, replay) = send(&g.router, call("echo", arguments.clone(), request_id)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(replay["data"], arguments);
        assert_eq!(replay["execution_id"], first["execution_id"]);
        assert_eq!(replay["replayed"], true);
    }
    assert_eq!(g.runs("echo"), 3);
}

#[tokio::test]
async fn k16_recorded_timeout_replays_and_does_not_rerun() {
    let g = gateway_with(&["--tool-timeout-ms", "100"]).await;
    let (status, first) = send(&g.router, call("sleep", json!({"ms": 1000}), "r18")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(first["status"], "timed_out");
    assert_eq!(first["error"]["code"], "TIMEOUT");
    let (status, replay) = send(&g.router, call("sleep", json!({"ms": 1000}), "r18")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(replay["status"], "timed_out");
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["execution_id"], first["execution_id"]);
    assert_eq!(g.runs("sleep"), 1);
    let (status, fresh) = send(&g.router, call("sleep", json!({"ms": 1000}), "r19")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (fresh["status"].clone(), fresh["replayed"].clone()),
        (json!("timed_out"), json!(false))
    );
    assert_eq!(g.runs("sleep"), 2);
}

#[tokio::test]
async fn k17_rejected_call_does_not_occupy_the_identity() {
    let g = gateway().await;
    let (status, problem) = send(&g.router, call("create_order", json!({"sku": 5}), "r20")).await;
    assert_eq!(
        (status, problem["code"].clone()),
        (StatusCode::BAD_REQUEST, json!("INVALID_REQUEST"))
    );
    let (status, ran) = send(&g.router, call("create_order", json!({"sku": "A"}), "r20")).await;
    assert_eq!(
        (status, ran["replayed"].clone()),
        (StatusCode::OK, json!(false))
    );
    assert_eq!(g.runs("create_order"), 1);
}

#[tokio::test]
async fn k18_lookup_comes_before_the_capacity_gate() {
    let g = gateway_with(&["--memory-capacity", "3"]).await;
    for request_id in ["r21", "r22", "r23"] {
        let (status, _) = send(
            &g.router,
            call("echo", json!({"id": request_id}), request_id),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
    }
    let (status, full) = send(&g.router, call("echo", json!({}), "r24")).await;
    assert_eq!(
        (status, full["code"].clone()),
        (
            StatusCode::INSUFFICIENT_STORAGE,
            json!("IDEMPOTENCY_CAPACITY")
        )
    );
    let (status, replay) = send(&g.router, call("echo", json!({"id": "r21"}), "r21")).await;
    assert_eq!(
        (status, replay["replayed"].clone()),
        (StatusCode::OK, json!(true))
    );
    let (status, conflict) = send(&g.router, call("echo", json!({"id": "changed"}), "r21")).await;
    assert_eq!(
        (status, conflict["code"].clone()),
        (StatusCode::CONFLICT, json!("IDEMPOTENCY_CONFLICT"))
    );
    assert_eq!(g.stored(), 3);
    assert_eq!(g.runs("echo"), 3);
}

#[tokio::test]
async fn k19_headers_are_not_in_the_fingerprint() {
    let g = gateway().await;
    let body = call("create_order", json!({"sku": "H"}), "r25").to_string();
    let (status, first) = send_raw(
        &g.router,
        &body,
        &[
            (
                "traceparent",
                "00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb-01",
            ),
            ("user-agent", "a/1"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, replay) = send_raw(
        &g.router,
        &body,
        &[
            (
                "traceparent",
                "00-cccccccccccccccccccccccccccccccc-dddddddddddddddd-01",
            ),
            ("user-agent", "b/2"),
            ("x-retry-count", "3"),
        ],
    )
    .await;
    assert_eq!(
        (status, replay["replayed"].clone()),
        (StatusCode::OK, json!(true))
    );
    assert_eq!(replay["execution_id"], first["execution_id"]);
}

#[tokio::test]
async fn k22_oversized_or_malformed_identifiers_are_400() {
    let g = gateway_with(&["--memory-capacity", "1"]).await;
    let random: String = (0..100_000)
        .map(|i| char::from_u32(0x4e00 + (i * 7919) % 0x5000).unwrap())
        .collect();
    let long = "a".repeat(256);
    let bodies = [
        json!({"tool": "echo", "arguments": {}, "request_id": long}),
        json!({"tool": "echo", "arguments": {}, "request_id": random}),
        json!({"tool": "echo", "arguments": {}, "request_id": ""}),
        json!({"tool": "echo", "arguments": {}, "request_id": "a\u{7}b"}),
        json!({"tool": "echo", "arguments": {}, "request_id": "ok", "session_id": "s".repeat(300)}),
        json!({"tool": "echo", "arguments": {}, "request_id": 7}),
    ];
    for body in bodies {
        let (status, problem) = send(&g.router, body).await;
        assert_eq!(
            (status, problem["code"].clone()),
            (StatusCode::BAD_REQUEST, json!("INVALID_REQUEST"))
        );
        assert!(
            problem["detail"].as_str().unwrap().len() < 400,
            "the detail never echoes the id"
        );
    }
    assert_eq!(g.runs("echo"), 0);
    assert_nothing_reserved(&g, "ok").await;
}
