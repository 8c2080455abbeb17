//! A Python SDK server that answers `tools/call` with tasks behind a real `carmy-gateway`
//! process (docs/semantics.md §10, "Upstream tasks"): the final result recorded and replayed; a
//! task still working at the deadline recorded `timed_out`, effect unknown, with the upstream
//! task id; an `input_required` answer refused, nothing recorded.

use super::upstream_servers::{free_port, sdk_calls, tool_names, SdkServer};
use crate::http_tools::replica;
use crate::tools_file::write_tools_file;
use carmy_test_support::{call, client, post};
use serde_json::{json, Value};
use std::path::Path;

/// A gateway importing the tasks server on `port` as `tasks.*`, its tools' deadline
/// `timeout_ms`.
fn task_gateway(
    name: &str,
    file: &Path,
    port: u16,
    timeout_ms: u64,
) -> carmy_test_support::Replica {
    std::fs::write(
        file,
        format!("[[mcp_servers]]\nname = \"tasks\"\nurl = \"http://127.0.0.1:{port}/mcp\"\nprefix = \"tasks.\"\ntimeout_ms = {timeout_ms}\n"),
    )
    .unwrap();
    replica(name, file, &[])
}

/// docs/semantics.md §10, "Upstream tasks": the server answers `tools/call` with a task; Carmy
/// polls `tasks/get` and records only the final result, which replays without a second call.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upstream_task_is_recorded_by_its_end() {
    let file = write_tools_file("");
    let state = file.with_file_name("state.jsonl");
    let port = free_port();
    let _server = SdkServer::start("python_sdk_task_server.py", port, &state).await;
    let gateway = task_gateway("mcp-upstream-task", &file, port, 10_000);
    let http = client();
    assert_eq!(
        tool_names(&http, &gateway).await,
        ["tasks.ask", "tasks.slow_note", "tasks.stuck"]
    );
    let body = call("tasks.slow_note", json!({"text": "hi"}), "t1");
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
    assert_eq!(sdk_calls(&state, "slow_note").len(), 1);
}

/// A task still `working` when the tool's deadline passes: `timed_out`, effect unknown, the
/// upstream task id kept in the record for reconciliation; the retry replays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upstream_task_working_past_the_deadline_is_timed_out_with_its_id() {
    let file = write_tools_file("");
    let state = file.with_file_name("state.jsonl");
    let port = free_port();
    let _server = SdkServer::start("python_sdk_task_server.py", port, &state).await;
    let gateway = task_gateway("mcp-upstream-task-stuck", &file, port, 1_500);
    let http = client();
    let body = call("tasks.stuck", json!({}), "s1");
    let (status, first) = post(&http, &gateway, &body).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["status"], "timed_out", "{first}");
    let error = &first["error"];
    assert_eq!(error["code"], "UPSTREAM_TASK_TIMEOUT", "{first}");
    assert_eq!(error["effect"], "unknown", "{first}");
    let task_id = error["details"]["upstream_task_id"].as_str().unwrap();
    assert!(task_id.starts_with("upstream-"), "{first}");
    assert_eq!(error["details"]["upstream_status"], "working");
    assert!(
        error["message"].as_str().unwrap().contains(task_id),
        "{first}"
    );
    let (_, stored) = http_get(&http, &gateway, first["execution_id"].as_str().unwrap()).await;
    assert_eq!(stored["status"], "timed_out");
    assert_eq!(stored["error"]["details"]["upstream_task_id"], task_id);
    let (_, replay) = post(&http, &gateway, &body).await;
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["error"]["details"]["upstream_task_id"], task_id);
    assert_eq!(sdk_calls(&state, "stuck").len(), 1);
}

/// An `input_required` answer: refused with a text saying the tool needs input Carmy cannot
/// give; nothing is recorded (the identity is free), and nothing as success.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upstream_input_required_is_refused_and_not_recorded() {
    let file = write_tools_file("");
    let state = file.with_file_name("state.jsonl");
    let port = free_port();
    let _server = SdkServer::start("python_sdk_task_server.py", port, &state).await;
    let gateway = task_gateway("mcp-upstream-task-ask", &file, port, 10_000);
    let http = client();
    let (status, answer) = post(&http, &gateway, &call("tasks.ask", json!({}), "a1")).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["code"], "UPSTREAM_INPUT_REQUIRED", "{answer}");
    assert!(
        answer["detail"]
            .as_str()
            .unwrap()
            .contains("asked for input that Carmy cannot give"),
        "{answer}"
    );
    // Nothing was recorded: the same call reaches the server again, and is refused again.
    let (again, _) = post(&http, &gateway, &call("tasks.ask", json!({}), "a1")).await;
    assert_eq!(again, 503);
    assert_eq!(sdk_calls(&state, "ask").len(), 2);
}

async fn http_get(
    http: &reqwest::Client,
    gateway: &carmy_test_support::Replica,
    execution_id: &str,
) -> (u16, Value) {
    let response = http
        .get(gateway.url(&format!("/v1/executions/{execution_id}")))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}
