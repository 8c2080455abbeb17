//! What an MCP tool result says about the record behind it (docs/semantics.md §11): a full
//! store is a tool result and nothing runs, an outcome an operator's decision recorded is said
//! to be one, and a write with no request id says it is unprotected and is counted.

use super::mcp_client::{
    call, call_with_meta, connect, execution, guidance, structured, text, Served,
};
use carmy_test_support::eventually;
use serde_json::{json, Value};
use std::time::Duration;

#[tokio::test]
async fn a_full_store_is_a_tool_result_and_nothing_runs() {
    let gateway = Served::start(&["--memory-capacity", "1"]).await;
    let client = connect(&gateway.mcp(), None).await;
    let first = client
        .call_tool(call("echo", json!({}), "cap-1"))
        .await
        .unwrap();
    let full = client
        .call_tool(call("echo", json!({}), "cap-2"))
        .await
        .unwrap();
    assert_eq!(full.is_error, Some(true));
    assert_eq!(structured(&full)["code"], "IDEMPOTENCY_CAPACITY");
    assert_eq!(structured(&full)["effect_may_have_happened"], false);
    assert!(text(&full).contains("Nothing ran"), "{}", text(&full));
    assert_eq!(execution(&full)["execution_id"], Value::Null);
    let replay = client
        .call_tool(call("echo", json!({}), "cap-1"))
        .await
        .unwrap();
    assert_eq!(execution(&replay)["replayed"], true);
    assert_eq!(
        execution(&replay)["execution_id"],
        execution(&first)["execution_id"]
    );
    assert_eq!(gateway.runs("echo"), 1);
}

/// An outcome an operator recorded by a decision replays over MCP as such: `_meta` carries the
/// resolution and the text says the tool did not report it (docs/semantics.md §12.1); a
/// recorded failure is never "the tool reported the failure itself".
#[tokio::test]
async fn an_outcome_a_decision_recorded_is_said_to_be_one() {
    let gateway = Served::start(&["--api-keys", "ka=alice", "--operator-keys", "ko=ops"]).await;
    let client = connect(&gateway.mcp(), Some("ka")).await;
    let http = carmy_test_support::client();
    for (n, outcome) in [
        json!({"status": "completed", "data": {"slept": true}, "note": "seen in the log"}),
        json!({"status": "failed", "data": null, "error": {"code": "NO_SLEEP", "message": "it never slept"}, "note": "checked upstream"}),
    ]
    .into_iter()
    .enumerate()
    {
        let request_id = format!("decided-{n}-{}", uuid::Uuid::new_v4().simple());
        let running = {
            let client = connect(&gateway.mcp(), Some("ka")).await;
            let call = call("sleep", json!({"ms": 600_000}), &request_id);
            tokio::spawn(async move { client.call_tool(call).await })
        };
        let lookup = format!("{}/v1/executions?request_id={request_id}", gateway.base);
        let id = eventually(Duration::from_secs(10), "the call is reserved", || async {
            let body: Value = http
                .get(&lookup)
                .bearer_auth("ka")
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            body["execution_id"].as_str().map(str::to_owned).ok_or(body)
        })
        .await;
        let mut forced = outcome.clone();
        forced["force"] = json!(true);
        let resolved = http
            .post(format!("{}/v1/executions/{id}/resolve", gateway.base))
            .bearer_auth("ko")
            .json(&forced)
            .send()
            .await
            .unwrap();
        assert_eq!(resolved.status().as_u16(), 200);
        let again = client
            .call_tool(call("sleep", json!({"ms": 600_000}), &request_id))
            .await
            .unwrap();
        let meta = execution(&again);
        assert_eq!(meta["replayed"], true);
        assert_eq!(meta["resolution"]["by"], "operator:ops", "{meta}");
        assert_eq!(meta["resolution"]["note"], outcome["note"]);
        let words: Vec<String> = again
            .content
            .iter()
            .map(|block| serde_json::to_value(block).unwrap()["text"].as_str().unwrap().to_owned())
            .collect();
        let all = words.join("\n");
        if n == 0 {
            assert_eq!(again.is_error, Some(false));
            assert!(
                all.contains("This outcome was not reported by the tool: operator:ops recorded it by a decision at"),
                "{all}"
            );
        } else {
            assert_eq!(again.is_error, Some(true));
            assert!(
                all.contains("This failure was recorded by a decision of operator:ops, not reported by the tool.")
                    && !all.contains("reported the failure itself"),
                "{all}"
            );
        }
        running.abort();
    }
    assert_eq!(gateway.runs("sleep"), 2);
}

/// A write without any request id runs unprotected: its answer tells the model how to make a
/// retry safe (as a text block and in the guidance member) and the call is counted; a read
/// without one, or a write with one, gets no such line (docs/semantics.md §11).
#[tokio::test]
async fn an_unprotected_write_says_so_and_is_counted() {
    let gateway = Served::start(&[]).await;
    let client = connect(&gateway.mcp(), None).await;
    let metrics = gateway.engine.metrics();
    let line = "This call carried no `request_id`, so Carmy could not protect it: calling it again would do it again.";
    let bare = client
        .call_tool(call_with_meta(
            "create_order",
            json!({"sku": "U1"}),
            json!({}),
        ))
        .await
        .unwrap();
    assert_eq!(bare.is_error, Some(false));
    assert_eq!(structured(&bare)["order_id"], 1);
    let words: Vec<String> = bare
        .content
        .iter()
        .map(|block| block.as_text().unwrap().text.clone())
        .collect();
    assert!(words[1].starts_with(line), "{words:?}");
    assert!(guidance(&bare).as_str().unwrap().starts_with(line));
    assert_eq!(metrics.mcp_unprotected_calls("create_order"), 1);
    let read = client
        .call_tool(call_with_meta(
            "find_orders",
            json!({"sku": "U1"}),
            json!({}),
        ))
        .await
        .unwrap();
    assert_eq!(read.content.len(), 1);
    assert_eq!(guidance(&read), Value::Null);
    assert_eq!(metrics.mcp_unprotected_calls("find_orders"), 0);
    let protected = client
        .call_tool(call_with_meta(
            "create_order",
            json!({"sku": "U2", "request_id": uuid::Uuid::new_v4().to_string()}),
            json!({}),
        ))
        .await
        .unwrap();
    assert!(!text(&protected).contains("carried no"));
    assert!(!guidance(&protected)
        .as_str()
        .unwrap()
        .contains("carried no"));
    assert_eq!(metrics.mcp_unprotected_calls("create_order"), 1);
}
