//! Upstream MCP servers behind real `carmy-gateway` processes (docs/semantics.md §10): a stdio
//! server (`tests/mcp/stdio_server.py`, standard library only) started and supervised by the
//! gateway: its tools imported with prefix, schema and annotations; the execution id in
//! `_meta`; replay without a second call; `isError` recorded as `failed`; the list refreshed on
//! `tools/list_changed`; the child killed mid-call (recorded "outcome unknown") and restarted.
//! A server written with the official Python SDK over Streamable HTTP: imported, called,
//! replayed, and killed mid-call (recorded "outcome unknown", the retry replays). Servers that
//! answer with tasks are in `mcp_upstream_tasks.rs`; the servers themselves in
//! `upstream_servers.rs`. A server entry's `redact_arguments` hides values of every imported
//! tool's arguments before they are kept, and `check-config` shows it.

use super::upstream_servers::{
    free_port, sdk_calls, serves_again, tool_names, SdkServer, StdioServer,
};
use crate::http_tools::replica;
use crate::tools_file::write_tools_file;
use carmy_test_support::{call, client, eventually, post, spawn_post};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stdio_server_is_imported_called_replayed_refreshed_and_restarted() {
    let server = StdioServer::tools_file("", false);
    let gateway = replica("mcp-stdio", &server.file, &[]);
    let http = client();
    // Imported with prefix, schema and annotations.
    let listed: Value = http
        .get(gateway.url("/v1/tools"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let write = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "py.write")
        .cloned()
        .unwrap();
    assert_eq!(write["description"], "Writes a text");
    assert_eq!(
        write["input_schema"]["required"],
        json!(["text"]),
        "{write}"
    );
    assert_eq!(
        write["annotations"],
        json!({"readOnlyHint": false, "idempotentHint": true}),
        "{write}"
    );
    assert_eq!(
        tool_names(&http, &gateway).await,
        ["py.add_tool", "py.fail", "py.hang", "py.lookup", "py.write"]
    );

    // A call: the execution id in _meta; the replay does not call again.
    let body = call("py.write", json!({"text": "hello"}), "w1");
    let (status, first) = post(&http, &gateway, &body).await;
    assert_eq!(
        (status, first["status"].as_str()),
        (200, Some("completed")),
        "{first}"
    );
    assert_eq!(
        first["data"],
        json!({"text": "hello", "key": first["execution_id"]})
    );
    let (_, replay) = post(&http, &gateway, &body).await;
    assert_eq!(
        (replay["replayed"].as_bool(), &replay["data"]),
        (Some(true), &first["data"])
    );
    let writes = server.calls_of("write");
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(writes[0]["key"], first["execution_id"]);

    // isError is recorded as failed and replayed.
    let (_, failed) = post(&http, &gateway, &call("py.fail", json!({}), "f1")).await;
    assert_eq!(
        (failed["status"].as_str(), failed["error"]["code"].as_str()),
        (Some("failed"), Some("UPSTREAM_TOOL_ERROR")),
        "{failed}"
    );
    assert_eq!(
        failed["error"]["details"]["content"][0]["text"],
        "the disk is full"
    );
    let (_, again) = post(&http, &gateway, &call("py.fail", json!({}), "f1")).await;
    assert_eq!(again["replayed"], true);
    assert_eq!(server.calls_of("fail").len(), 1);

    // tools/list_changed refreshes the list.
    let (_, added) = post(&http, &gateway, &call("py.add_tool", json!({}), "a1")).await;
    assert_eq!(added["status"], "completed", "{added}");
    eventually(Duration::from_secs(10), "py.extra listed", || async {
        let names = tool_names(&http, &gateway).await;
        if names.contains(&"py.extra".to_owned()) {
            Ok(())
        } else {
            Err(names)
        }
    })
    .await;

    // The child killed mid-call: recorded "outcome unknown", never re-sent; then restarted.
    let hung = spawn_post(&http, &gateway, &call("py.hang", json!({}), "h1"));
    eventually(Duration::from_secs(10), "the hang call arrived", || async {
        let n = server.calls_of("hang").len();
        if n == 1 {
            Ok(())
        } else {
            Err(n)
        }
    })
    .await;
    let first_pid = server.started_pids()[0];
    std::process::Command::new("kill")
        .args(["-9", &first_pid.to_string()])
        .status()
        .unwrap();
    let (status, lost) = hung.await.unwrap();
    assert_eq!(
        (
            status,
            lost["status"].as_str(),
            &lost["error"]["code"],
            &lost["error"]["effect"]
        ),
        (
            200,
            Some("failed"),
            &json!("UPSTREAM_DISCONNECTED"),
            &json!("unknown")
        ),
        "{lost}"
    );
    serves_again(
        &http,
        &gateway,
        "the child restarted and serves",
        "py.write",
        "w2",
    )
    .await;
    assert_eq!(server.started_pids().len(), 2);
    let (_, replayed) = post(&http, &gateway, &call("py.hang", json!({}), "h1")).await;
    assert_eq!(replayed["replayed"], true);
    assert_eq!(server.calls_of("hang").len(), 1);
}

/// A gateway importing the Python SDK server on `port` as `sdk.*`.
fn sdk_gateway(name: &str, file: &Path, port: u16) -> carmy_test_support::Replica {
    std::fs::write(
        file,
        format!("[[mcp_servers]]\nname = \"sdk\"\nurl = \"http://127.0.0.1:{port}/mcp\"\nprefix = \"sdk.\"\n"),
    )
    .unwrap();
    replica(name, file, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_written_with_the_official_python_sdk_over_streamable_http() {
    let file = write_tools_file("");
    let state = file.with_file_name("state.jsonl");
    let port = free_port();
    let _server = SdkServer::start("python_sdk_server.py", port, &state).await;
    let gateway = sdk_gateway("mcp-python-sdk", &file, port);
    let http = client();
    assert_eq!(
        tool_names(&http, &gateway).await,
        ["sdk.broken", "sdk.hang", "sdk.note"]
    );
    let body = call("sdk.note", json!({"text": "hi"}), "n1");
    let (status, first) = post(&http, &gateway, &body).await;
    assert_eq!(
        (status, first["status"].as_str()),
        (200, Some("completed")),
        "{first}"
    );
    assert_eq!(
        first["data"],
        json!({"text": "hi", "key": first["execution_id"]}),
        "{first}"
    );
    let (_, replay) = post(&http, &gateway, &body).await;
    assert_eq!(
        (replay["replayed"].as_bool(), &replay["data"]),
        (Some(true), &first["data"])
    );
    let (_, failed) = post(&http, &gateway, &call("sdk.broken", json!({}), "b1")).await;
    assert_eq!(
        (failed["status"].as_str(), failed["error"]["code"].as_str()),
        (Some("failed"), Some("UPSTREAM_TOOL_ERROR")),
        "{failed}"
    );
    let seen: Vec<Value> = std::fs::read_to_string(&state)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0]["key"], first["execution_id"]);
    assert_eq!(seen[1]["key"], failed["execution_id"]);
}

/// docs/semantics.md §10: a Streamable HTTP server that dies after it took a call leaves that
/// call "outcome unknown" (recorded, never re-sent); once the server is back, the retry replays
/// the record and new calls reach the new server.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_python_sdk_server_killed_mid_call_leaves_the_call_recorded_outcome_unknown() {
    let file = write_tools_file("");
    let state = file.with_file_name("state.jsonl");
    let port = free_port();
    let server = SdkServer::start("python_sdk_server.py", port, &state).await;
    let gateway = sdk_gateway("mcp-python-sdk-killed", &file, port);
    let http = client();
    let hung = spawn_post(&http, &gateway, &call("sdk.hang", json!({}), "h1"));
    eventually(Duration::from_secs(10), "the hang call arrived", || async {
        let n = sdk_calls(&state, "hang").len();
        if n == 1 {
            Ok(())
        } else {
            Err(n)
        }
    })
    .await;
    drop(server);
    let (status, lost) = hung.await.unwrap();
    assert_eq!(
        (
            status,
            lost["status"].as_str(),
            &lost["error"]["code"],
            &lost["error"]["effect"]
        ),
        (
            200,
            Some("failed"),
            &json!("UPSTREAM_DISCONNECTED"),
            &json!("unknown")
        ),
        "{lost}"
    );
    let _server = SdkServer::start("python_sdk_server.py", port, &state).await;
    serves_again(
        &http,
        &gateway,
        "the restarted server takes new calls",
        "sdk.note",
        "n2",
    )
    .await;
    let (status, replayed) = post(&http, &gateway, &call("sdk.hang", json!({}), "h1")).await;
    assert_eq!(
        (status, &replayed["replayed"], &replayed["execution_id"]),
        (200, &json!(true), &lost["execution_id"]),
        "{replayed}"
    );
    assert_eq!(sdk_calls(&state, "hang").len(), 1);
    assert_eq!(sdk_calls(&state, "note").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn while_a_stdio_server_is_down_its_tools_answer_503_and_the_same_call_runs_once_it_is_back()
{
    let server = StdioServer::tools_file("", true);
    let gateway = replica("mcp-stdio-down", &server.file, &[]);
    let http = client();
    let pid = server.started_pids()[0];
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    // Restarts are refused until the gate opens: the server stays down.
    eventually(Duration::from_secs(10), "a refused restart", || async {
        let refused = server
            .events()
            .iter()
            .filter(|e| e["event"] == "refused")
            .count();
        if refused > 0 {
            Ok(())
        } else {
            Err(refused)
        }
    })
    .await;
    let body = call("py.write", json!({"text": "later"}), "d1");
    let response = http
        .post(gateway.url("/v1/executions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "1");
    let problem: Value = response.json().await.unwrap();
    assert_eq!(problem["code"], "UPSTREAM_UNAVAILABLE", "{problem}");
    assert!(server.calls_of("write").is_empty());
    std::fs::write(server.gate(), "open").unwrap();
    let done = eventually(
        Duration::from_secs(15),
        "the same call runs once the server is back",
        || async {
            let (status, answer) = post(&http, &gateway, &body).await;
            if status == 200 {
                Ok(answer)
            } else {
                Err((status, answer))
            }
        },
    )
    .await;
    assert_eq!(
        (done["status"].as_str(), done["replayed"].as_bool()),
        (Some("completed"), Some(false)),
        "{done}"
    );
    let writes = server.calls_of("write");
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(writes[0]["key"], done["execution_id"]);
}

/// docs/semantics.md §10: a Streamable HTTP server restarted with another tool list (`extra`
/// added, `broken` gone) is served with its new list within the refresh time
/// (`carmy_tools::mcp::TOOLS_REFRESH`, 10 s), although the SDK's transport joins the restarted
/// server under a new session without the connection ever reading as ended: the new tool is
/// listed and callable, the gone one answers `UNKNOWN_TOOL`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_python_sdk_server_restarted_with_another_tool_list_is_served_with_it() {
    let file = write_tools_file("");
    let state = file.with_file_name("state.jsonl");
    let port = free_port();
    let server = SdkServer::start("python_sdk_server.py", port, &state).await;
    let gateway = sdk_gateway("mcp-python-sdk-restarted", &file, port);
    let http = client();
    assert_eq!(
        tool_names(&http, &gateway).await,
        ["sdk.broken", "sdk.hang", "sdk.note"]
    );
    drop(server);
    let _server = SdkServer::start_with(
        "python_sdk_server.py",
        port,
        &state,
        &[("TOOLS_VARIANT", "restarted")],
    )
    .await;
    eventually(
        Duration::from_secs(10) + Duration::from_secs(10),
        "the restarted server's tool list",
        || async {
            let names = tool_names(&http, &gateway).await;
            (names == ["sdk.extra", "sdk.hang", "sdk.note"])
                .then_some(())
                .ok_or(names)
        },
    )
    .await;
    let (status, extra) = post(
        &http,
        &gateway,
        &call("sdk.extra", json!({"text": "new"}), "x1"),
    )
    .await;
    assert_eq!(
        (status, extra["status"].as_str()),
        (200, Some("completed")),
        "{extra}"
    );
    assert_eq!(
        extra["data"],
        json!({"text": "new", "key": extra["execution_id"]}),
        "{extra}"
    );
    let (status, gone) = post(&http, &gateway, &call("sdk.broken", json!({}), "b2")).await;
    assert_eq!(
        (status, gone["code"].as_str()),
        (404, Some("UNKNOWN_TOOL")),
        "{gone}"
    );
    assert!(
        gone["detail"].as_str().unwrap().contains("sdk.broken"),
        "{gone}"
    );
    assert!(sdk_calls(&state, "broken").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_servers_redact_arguments_hides_its_tools_values_before_they_are_kept() {
    let server = StdioServer::tools_file("", false);
    // The [[mcp_servers]] entry is the file's last table: this line belongs to it.
    let mut text = std::fs::read_to_string(&server.file).unwrap();
    text.push_str("redact_arguments = [\"/text\"]\n");
    std::fs::write(&server.file, text).unwrap();
    let (code, stdout, stderr) = crate::tools_file::run(&server.file, &["check-config"], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.lines().any(|line| line.starts_with("mcp   py ")
            && line.ends_with(r#"prefix="py."  redact_arguments=["/text"]"#)),
        "{stdout}"
    );

    let gateway = replica("mcp-redact", &server.file, &[]);
    let http = client();
    let (status, first) = post(
        &http,
        &gateway,
        &call("py.write", json!({"text": "card 4242"}), "redact-1"),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    // The upstream got the value; only what is kept hides it.
    assert_eq!(
        server.calls_of("write")[0]["arguments"]["text"],
        "card 4242"
    );
    let shown: Value = http
        .get(gateway.url(&format!(
            "/v1/executions/{}",
            first["execution_id"].as_str().unwrap()
        )))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(shown["arguments"], json!({"text": "[redacted]"}), "{shown}");
}
