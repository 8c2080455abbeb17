//! Both fronts give the engine's hints alike (docs/semantics.md §5): a misspelled tool is
//! answered with the closest registered tool's name in the same words over HTTP (the detail of
//! 404 `UNKNOWN_TOOL`) and over MCP (the message of the JSON-RPC error), and nothing runs.

use super::mcp_client::{call, connect, structured, text, Served};
use serde_json::{json, Value};

/// The engine's text for the unknown tool `ecoh`, which every front quotes.
const HINT: &str = r#"no tool named "ecoh" (did you mean "echo"?)"#;

#[tokio::test]
async fn a_misspelled_tool_gets_the_same_hint_over_http_and_mcp() {
    let gateway = Served::start(&[]).await;
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/executions", gateway.base))
        .header("content-type", "application/json")
        .body(r#"{"tool":"ecoh","arguments":{"x":1},"request_id":"hint-http"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 404);
    let problem: Value = answer.json().await.unwrap();
    assert_eq!(problem["code"], "UNKNOWN_TOOL", "{problem}");
    assert_eq!(
        problem["detail"],
        format!("{HINT}; GET /v1/tools lists the tools"),
    );

    let client = connect(&gateway.mcp(), None).await;
    let refused = client
        .call_tool(call("ecoh", json!({"x": 1}), "hint-mcp"))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true));
    assert_eq!(structured(&refused)["code"], "UNKNOWN_TOOL");
    assert!(
        text(&refused).starts_with(&format!("Carmy refused this call: {HINT}. Nothing ran")),
        "{}",
        text(&refused)
    );
    assert_eq!(gateway.runs("echo"), 0);
}
