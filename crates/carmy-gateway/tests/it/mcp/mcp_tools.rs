//! Configured HTTP tools (docs/semantics.md §10) through the MCP front (§11): listed with their
//! annotations, run through the engine (an upstream that refused the connection is "not
//! executed": a tool result the model may retry, and the identity is free again).

use super::mcp_client::{call, connect, execution, structured, text, Served};
use crate::tools_file::write_tools_file;
use crate::upstream::Upstream;
use serde_json::json;

#[tokio::test]
async fn configured_tools_are_listed_and_called_over_mcp() {
    let upstream = Upstream::start().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let file = write_tools_file(&format!(
        r#"[[tools]]
name = "upstream_json"
description = "JSON from the test upstream"
url = "{base}/json"
annotations = {{ readOnlyHint = true, openWorldHint = true }}

[[tools]]
name = "unreachable"
url = "{refused}/nothing"
"#,
        base = upstream.base()
    ));
    let gateway = Served::start(&["--tools-file", file.to_str().unwrap()]).await;
    let client = connect(&gateway.mcp(), None).await;
    let tools = client.list_all_tools().await.unwrap();
    let listed = tools
        .iter()
        .find(|tool| tool.name == "upstream_json")
        .expect("the configured tool is listed");
    assert_eq!(
        listed.description.as_deref(),
        Some("JSON from the test upstream")
    );
    let hints = listed.annotations.as_ref().unwrap();
    assert_eq!(
        (hints.read_only_hint, hints.open_world_hint),
        (Some(true), Some(true))
    );

    let first = client
        .call_tool(call("upstream_json", json!({}), "cfg-1"))
        .await
        .unwrap();
    assert_eq!(first.is_error, Some(false), "{first:?}");
    let again = client
        .call_tool(call("upstream_json", json!({}), "cfg-1"))
        .await
        .unwrap();
    assert_eq!(execution(&again)["replayed"], true);
    assert_eq!(
        upstream.arrivals_at("/json").len(),
        1,
        "the upstream saw one call"
    );

    let not_run = client
        .call_tool(call("unreachable", json!({}), "cfg-2"))
        .await
        .unwrap();
    assert_eq!(not_run.is_error, Some(true));
    assert_eq!(structured(&not_run)["code"], "UPSTREAM_UNAVAILABLE");
    assert_eq!(structured(&not_run)["effect_may_have_happened"], false);
    let words = text(&not_run);
    assert!(words.contains("Its effect did not happen"), "{words}");
    assert!(words.contains("Retry the same call unchanged"), "{words}");
    let retried = client
        .call_tool(call("unreachable", json!({}), "cfg-2"))
        .await
        .unwrap();
    assert_eq!(
        structured(&retried)["code"],
        "UPSTREAM_UNAVAILABLE",
        "the identity was free"
    );
    assert_eq!(gateway.runs("unreachable"), 2);
}
