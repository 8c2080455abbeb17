//! The MCP front (docs/semantics.md §11) through the official SDK's client: initialize, list,
//! call, replay, conflict, `EXECUTION_UNCERTAIN`, protocol mistakes, principals, a required
//! request id, a client that leaves mid-call or cancels (`notifications/cancelled`), and one
//! execution seen through both fronts.

use super::mcp_client::{
    call, call_raw, call_with_meta, completed, connect, execution, guidance, rpc_code, structured,
    text, try_connect, Served,
};
use carmy_test_support::{eventually, eventually_eq};
use rmcp::model::{ClientRequest, CustomRequest};
use rmcp::ServiceError;
use serde_json::{json, Value};
use std::time::Duration;

#[tokio::test]
async fn initialize_list_and_call() {
    let gateway = Served::start(&[]).await;
    let client = connect(&gateway.mcp(), None).await;
    let info = client.peer_info().expect("initialize answered");
    assert_eq!(
        info.server_info.as_ref().map(|server| server.name.as_str()),
        Some("carmy")
    );
    assert!(info.capabilities.tools.is_some());

    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "create_order",
            "echo",
            "fail",
            "find_orders",
            "get_order",
            "sleep"
        ]
    );
    let get_order = &tools[4];
    assert_eq!(
        get_order.description.as_deref(),
        Some("Reads one of the caller's orders.")
    );
    assert_eq!(get_order.input_schema["required"], json!(["order_id"]));
    let hints = get_order.annotations.as_ref().expect("annotations");
    assert_eq!(hints.read_only_hint, Some(true));
    let create = tools[0].annotations.as_ref().expect("annotations");
    assert_eq!(create.idempotent_hint, Some(false));

    let arguments = json!({"n": 12345678901234567890u64, "s": "é"});
    let result = client
        .call_tool(call("echo", arguments.clone(), "init-1"))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(false));
    assert_eq!(structured(&result), arguments);
    assert_eq!(text(&result), arguments.to_string());
    let meta = execution(&result);
    assert_eq!(meta["status"], "completed");
    assert_eq!(meta["replayed"], false);
    // The record's finished_at plus the default retention of 7 days (docs/semantics.md §12.9).
    let expires_at = chrono::DateTime::parse_from_rfc3339(meta["expires_at"].as_str().unwrap())
        .unwrap()
        .to_utc();
    let week = chrono::Duration::days(7);
    let now = chrono::Utc::now();
    assert!(
        expires_at <= now + week && expires_at > now + week - chrono::Duration::minutes(1),
        "{expires_at}"
    );
    assert!(meta["execution_id"].as_str().unwrap().starts_with("exec_"));
}

#[tokio::test]
async fn a_retry_with_the_same_key_replays_from_every_key_source() {
    let gateway = Served::start(&[]).await;
    let client = connect(&gateway.mcp(), None).await;
    let first = client
        .call_tool(call("create_order", json!({"sku": "R1"}), "rep-1"))
        .await
        .unwrap();
    let again = client
        .call_tool(call("create_order", json!({"sku": "R1"}), "rep-1"))
        .await
        .unwrap();
    assert_eq!(execution(&again)["replayed"], true);
    assert_eq!(
        execution(&again)["execution_id"],
        execution(&first)["execution_id"]
    );
    assert_eq!(structured(&again), structured(&first));
    assert_eq!(text(&again), text(&first));

    // params.idempotencyKey first, then Carmy's _meta key, then claudecode/toolUseId.
    let by_param = json!({"name": "create_order", "arguments": {"sku": "R2"},
                          "idempotencyKey": "rep-2", "_meta": {"io.carmy/request_id": "other"}});
    let one = call_raw(&client, by_param.clone()).await.unwrap();
    let two = call_raw(&client, by_param).await.unwrap();
    assert_eq!(execution(&two)["replayed"], true);
    assert_eq!(
        execution(&two)["execution_id"],
        execution(&one)["execution_id"]
    );
    let by_client_key = || {
        call_with_meta(
            "create_order",
            json!({"sku": "R3"}),
            json!({"claudecode/toolUseId": "toolu_01"}),
        )
    };
    let one = client.call_tool(by_client_key()).await.unwrap();
    let two = client.call_tool(by_client_key()).await.unwrap();
    assert_eq!(execution(&two)["replayed"], true);
    assert_eq!(
        execution(&two)["execution_id"],
        execution(&one)["execution_id"]
    );
    assert_eq!(gateway.runs("create_order"), 3, "each tool body ran once");

    // Without any key the call runs unprotected, every time.
    let bare = || call_with_meta("echo", json!({}), json!({}));
    client.call_tool(bare()).await.unwrap();
    let unprotected = client.call_tool(bare()).await.unwrap();
    assert_eq!(execution(&unprotected)["replayed"], false);
    assert_eq!(gateway.runs("echo"), 2);
}

#[tokio::test]
async fn a_changed_call_under_a_used_key_is_a_conflict() {
    let gateway = Served::start(&[]).await;
    let client = connect(&gateway.mcp(), None).await;
    let first = client
        .call_tool(call("create_order", json!({"sku": "C1"}), "con-1"))
        .await
        .unwrap();
    let changed = client
        .call_tool(call("create_order", json!({"sku": "C2"}), "con-1"))
        .await
        .unwrap();
    assert_eq!(changed.is_error, Some(true));
    let fields = structured(&changed);
    assert_eq!(fields["code"], "IDEMPOTENCY_CONFLICT");
    assert_eq!(fields["execution_id"], execution(&first)["execution_id"]);
    assert_eq!(fields["effect_may_have_happened"], false);
    let words = text(&changed);
    assert!(words.contains("This call did not run"), "{words}");
    assert!(
        words.contains("`find_orders`"),
        "names a read tool: {words}"
    );
    assert_eq!(gateway.runs("create_order"), 1);
}

#[tokio::test]
async fn the_same_call_while_it_runs_is_uncertain_running() {
    let gateway = Served::start(&[]).await;
    let url = gateway.mcp();
    let first = tokio::spawn(async move {
        let client = connect(&url, None).await;
        client
            .call_tool(call("sleep", json!({"ms": 1500}), "run-1"))
            .await
            .unwrap()
    });
    eventually_eq(Duration::from_secs(10), "sleep started", 1, || async {
        gateway.runs("sleep")
    })
    .await;
    let client = connect(&gateway.mcp(), None).await;
    let retry = client
        .call_tool(call("sleep", json!({"ms": 1500}), "run-1"))
        .await
        .unwrap();
    // Not an outcome yet: no error result (frameworks count those against a retry budget).
    assert_eq!(retry.is_error, Some(false));
    let fields = structured(&retry);
    assert_eq!(fields["code"], "EXECUTION_UNCERTAIN");
    assert_eq!(fields["state"], "running");
    assert_eq!(fields["effect_may_have_happened"], true);
    assert_eq!(execution(&retry)["status"], "running");
    assert!(text(&retry)
        .contains("Retry the same call unchanged to get its outcome; this answer is not an error"));
    let done = first.await.unwrap();
    assert_eq!(fields["execution_id"], execution(&done)["execution_id"]);
    let replay = client
        .call_tool(call("sleep", json!({"ms": 1500}), "run-1"))
        .await
        .unwrap();
    assert_eq!(execution(&replay)["replayed"], true);
    assert_eq!(gateway.runs("sleep"), 1);
}

#[tokio::test]
async fn input_errors_are_tool_results_and_protocol_mistakes_json_rpc_errors() {
    let gateway = Served::start(&[]).await;
    let client = connect(&gateway.mcp(), None).await;
    // Input errors (SEP-1303): tool results with the reason and what to send instead.
    let unknown = client
        .call_tool(call("no_such_tool", json!({}), "pm-1"))
        .await
        .unwrap();
    assert_eq!(unknown.is_error, Some(true));
    assert_eq!(structured(&unknown)["code"], "UNKNOWN_TOOL");
    let schema = client
        .call_tool(call("sleep", json!({"ms": "soon"}), "pm-2"))
        .await
        .unwrap();
    assert_eq!(schema.is_error, Some(true));
    assert_eq!(structured(&schema)["code"], "INVALID_REQUEST");
    assert!(
        text(&schema).starts_with("Carmy refused this call before running it: arguments do not match the tool's schema: /ms: \"soon\" is not of type \"integer\". Nothing ran; the effect did not happen. Correct what the message names"),
        "{}",
        text(&schema)
    );
    assert_eq!(guidance(&schema), text(&schema));
    let key = call_raw(
        &client,
        json!({"name": "echo", "arguments": {}, "idempotencyKey": 7}),
    )
    .await
    .unwrap();
    assert_eq!(structured(&key)["code"], "INVALID_REQUEST", "{key:?}");
    assert!(
        structured(&key)["message"]
            .as_str()
            .unwrap()
            .contains("params.idempotencyKey must be a string"),
        "{key:?}"
    );
    let empty = client.call_tool(call("echo", json!({}), "")).await.unwrap();
    assert_eq!(structured(&empty)["code"], "INVALID_REQUEST");
    // Params the SDK cannot read for a method Carmy serves: invalid params that name the
    // expected shape; a method Carmy does not serve: not found.
    for (method, params, code, says) in [
        (
            "tasks/get",
            json!({"taskId": 5}),
            -32602,
            "params.taskId must be a string",
        ),
        (
            "tasks/cancel",
            json!({}),
            -32602,
            "params.taskId must be a string",
        ),
        (
            "tools/call",
            json!({"name": 7, "arguments": {}}),
            -32602,
            "params.name must be a tool's name",
        ),
        (
            "tools/call",
            json!({"name": "echo", "arguments": "x"}),
            -32602,
            "params.arguments",
        ),
        ("orders/drop", json!({}), -32601, "orders/drop"),
    ] {
        let request =
            ClientRequest::CustomRequest(CustomRequest::new(method, Some(params.clone())));
        let error = client.send_request(request).await.unwrap_err();
        assert_eq!(rpc_code(&error), code, "{method} {params}: {error}");
        let ServiceError::McpError(data) = &error else {
            unreachable!()
        };
        assert!(
            data.message.contains(says),
            "{method} {params}: {}",
            data.message
        );
    }
    assert_eq!(gateway.runs("sleep") + gateway.runs("echo"), 0);
}

#[tokio::test]
async fn principals_never_share_records() {
    let gateway = Served::start(&["--api-keys", "ka=alice,kb=bob"]).await;
    assert!(try_connect(&gateway.mcp(), None).await.is_err(), "no key");
    assert!(
        try_connect(&gateway.mcp(), Some("kz")).await.is_err(),
        "unknown key"
    );
    let alice = connect(&gateway.mcp(), Some("ka")).await;
    let bob = connect(&gateway.mcp(), Some("kb")).await;
    let order = || call("create_order", json!({"sku": "P1"}), "shared-id");
    let hers = alice.call_tool(order()).await.unwrap();
    let his = bob.call_tool(order()).await.unwrap();
    assert_eq!(execution(&his)["replayed"], false);
    assert_ne!(
        execution(&his)["execution_id"],
        execution(&hers)["execution_id"]
    );
    let again = alice.call_tool(order()).await.unwrap();
    assert_eq!(
        execution(&again)["execution_id"],
        execution(&hers)["execution_id"]
    );
    assert_eq!(gateway.runs("create_order"), 2);
}

#[tokio::test]
async fn a_required_request_id_refuses_calls_without_one() {
    let gateway = Served::start(&["--mcp-require-request-id"]).await;
    let client = connect(&gateway.mcp(), None).await;
    let refused = client
        .call_tool(call_with_meta("echo", json!({}), json!({})))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true));
    assert_eq!(structured(&refused)["code"], "REQUEST_ID_REQUIRED");
    assert_eq!(gateway.runs("echo"), 0);
    let ran = client
        .call_tool(call("echo", json!({}), "req-1"))
        .await
        .unwrap();
    assert_eq!(ran.is_error, Some(false));
}

/// Retries `sleep {"ms": ms}` under `request_id` through a fresh client until it answers
/// without error (at most 10 s): the outcome of an execution the first caller stopped waiting for.
async fn sleep_outcome(gateway: &Served, ms: u64, request_id: &str) -> rmcp::model::CallToolResult {
    let client = connect(&gateway.mcp(), None).await;
    eventually(Duration::from_secs(10), "the outcome recorded", || async {
        let result = client
            .call_tool(call("sleep", json!({"ms": ms}), request_id))
            .await
            .unwrap();
        if completed(&result) {
            Ok(result)
        } else {
            Err(structured(&result))
        }
    })
    .await
}

#[tokio::test]
async fn a_client_that_leaves_mid_call_finds_the_record_on_retry() {
    let gateway = Served::start(&[]).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"ms": 400}, "_meta": {"io.carmy/request_id": "gone-1"}}});
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let left = http
        .post(gateway.mcp())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string())
        .send()
        .await;
    assert!(
        left.is_err(),
        "the client gave up before the answer: {left:?}"
    );
    let replay = sleep_outcome(&gateway, 400, "gone-1").await;
    assert_eq!(execution(&replay)["replayed"], true);
    assert_eq!(structured(&replay), json!({"slept_ms": 400}));
    assert_eq!(gateway.runs("sleep"), 1);
}

#[tokio::test]
async fn notifications_cancelled_stops_the_waiting_never_the_record() {
    let gateway = Served::start(&[]).await;
    let http = carmy_test_support::client();
    let post = |body: Value| {
        http.post(gateway.mcp())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string())
            .send()
    };
    let request = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"ms": 500}, "_meta": {"io.carmy/request_id": "cancel-1"}}});
    let waiting = tokio::spawn(post(request));
    eventually(Duration::from_secs(10), "the tool runs", || async {
        let runs = gateway.runs("sleep");
        (runs == 1).then_some(()).ok_or(runs)
    })
    .await;
    // The client cancels its request (MCP `notifications/cancelled`): accepted, nothing answered.
    let cancelled = post(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                "params": {"requestId": 7, "reason": "the user gave up"}}),
    )
    .await
    .unwrap();
    assert_eq!(cancelled.status().as_u16(), 202);
    waiting.abort();
    // The execution ran on and was recorded `completed`: the retry replays it.
    let replay = sleep_outcome(&gateway, 500, "cancel-1").await;
    assert_eq!(execution(&replay)["replayed"], true);
    assert_eq!(execution(&replay)["status"], "completed");
    assert_eq!(structured(&replay), json!({"slept_ms": 500}));
    assert_eq!(gateway.runs("sleep"), 1);
}

#[tokio::test]
async fn one_execution_through_both_fronts() {
    let gateway = Served::start(&[]).await;
    let client = connect(&gateway.mcp(), None).await;
    let http = carmy_test_support::client();
    let post = |request_id: &str| {
        let request = http
            .post(format!("{}/v1/executions", gateway.base))
            .header("content-type", "application/json")
            .body(
                json!({"tool": "create_order", "arguments": {"sku": "B1"},
                         "request_id": request_id})
                .to_string(),
            );
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let over_mcp = client
        .call_tool(call("create_order", json!({"sku": "B1"}), "both-1"))
        .await
        .unwrap();
    let over_http = post("both-1").await;
    assert_eq!(over_http["replayed"], true);
    assert_eq!(
        over_http["execution_id"],
        execution(&over_mcp)["execution_id"]
    );

    let first_http = post("both-2").await;
    let then_mcp = client
        .call_tool(call("create_order", json!({"sku": "B1"}), "both-2"))
        .await
        .unwrap();
    assert_eq!(execution(&then_mcp)["replayed"], true);
    assert_eq!(
        execution(&then_mcp)["execution_id"],
        first_http["execution_id"]
    );
    assert_eq!(structured(&then_mcp), first_http["data"]);
    assert_eq!(gateway.runs("create_order"), 2);
}
