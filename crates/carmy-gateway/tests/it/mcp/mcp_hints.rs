//! Both fronts give the engine's hints alike (docs/semantics.md §5): a misspelled tool is
//! answered with the closest registered tool's name in the same words over HTTP (the detail of
//! 404 `UNKNOWN_TOOL`) and over MCP (the message of the JSON-RPC error), and nothing runs.
//! Arguments too large to keep are `ARGUMENTS_TOO_LARGE` on both (docs/semantics.md §8.5).

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

#[tokio::test]
async fn oversized_arguments_are_arguments_too_large_over_http_and_mcp() {
    let gateway = Served::start(&["--max-result-bytes", "300"]).await;
    let arguments = json!({"customer": "c".repeat(400)});
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/executions", gateway.base))
        .json(&json!({"tool": "echo", "arguments": arguments, "request_id": "big-http"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 413);
    let problem: Value = answer.json().await.unwrap();
    assert_eq!(problem["code"], "ARGUMENTS_TOO_LARGE", "{problem}");

    let client = connect(&gateway.mcp(), None).await;
    let refused = client
        .call_tool(call("echo", arguments, "big-mcp"))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true));
    let fields = structured(&refused);
    assert_eq!(fields["code"], "ARGUMENTS_TOO_LARGE", "{refused:?}");
    assert_eq!(fields["message"], problem["detail"]);
    assert_eq!(fields["effect_may_have_happened"], false);
    assert!(
        text(&refused).starts_with(
            "Carmy refused this call before running it: the arguments take 415 bytes as kept \
             with the execution, over the 300 a record may keep"
        ),
        "{}",
        text(&refused)
    );
    assert!(text(&refused).contains("Nothing ran; the effect did not happen."));
    assert_eq!(gateway.runs("echo"), 0);
}
