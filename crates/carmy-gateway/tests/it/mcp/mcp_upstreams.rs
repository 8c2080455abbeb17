//! Upstream MCP servers behind real `carmy-gateway` processes (docs/semantics.md §10): a stdio
//! server (`tests/mcp/stdio_server.py`, standard library only) started and supervised by the
//! gateway: its tools imported with prefix, schema and annotations; the execution id in
//! `_meta`; replay without a second call; `isError` recorded as `failed`; the list refreshed on
//! `tools/list_changed`; the child killed mid-call (recorded "outcome unknown") and restarted.
//! A server written with the official Python SDK over Streamable HTTP: imported, called,
//! replayed, and killed mid-call (recorded "outcome unknown", the retry replays). A Python SDK
//! server that answers with tasks (docs/semantics.md §10, "Upstream tasks"): the final result
//! recorded and replayed; a task still working at the deadline recorded `timed_out`, effect
//! unknown, with the upstream task id; an `input_required` answer refused, nothing recorded.

use crate::http_tools::replica;
use crate::tools_file::write_tools_file;
use carmy_test_support::{call, client, eventually, post, spawn_post};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn stdio_server() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/stdio_server.py")
}

/// The events the stdio server wrote.
fn events(state: &Path) -> Vec<Value> {
    std::fs::read_to_string(state)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn started_pids(state: &Path) -> Vec<u64> {
    events(state)
        .iter()
        .filter(|e| e["event"] == "started")
        .map(|e| e["pid"].as_u64().unwrap())
        .collect()
}

fn calls_of(state: &Path, tool: &str) -> Vec<Value> {
    events(state)
        .into_iter()
        .filter(|e| e["event"] == "call" && e["tool"] == tool)
        .collect()
}

async fn tool_names(http: &reqwest::Client, gateway: &carmy_test_support::Replica) -> Vec<String> {
    let listed: Value = http
        .get(gateway.url("/v1/tools"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

/// Waits (15 s at most) until `tool` called with `{"text": "after"}` as `request_id` completes
/// on `gateway`: the upstream behind it serves again.
async fn serves_again(
    http: &reqwest::Client,
    gateway: &carmy_test_support::Replica,
    what: &str,
    tool: &str,
    request_id: &str,
) {
    eventually(Duration::from_secs(15), what, || async {
        let (status, body) = post(
            http,
            gateway,
            &call(tool, json!({"text": "after"}), request_id),
        )
        .await;
        if status == 200 && body["status"] == "completed" {
            Ok(())
        } else {
            Err((status, body))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stdio_server_is_imported_called_replayed_refreshed_and_restarted() {
    let file = write_tools_file("");
    let state = file.with_file_name("state.jsonl");
    std::fs::write(
        &file,
        format!(
            "[[mcp_servers]]\nname = \"py\"\ncommand = \"python3\"\nargs = [{:?}]\nprefix = \"py.\"\nenv = {{ STATE_FILE = {:?} }}\n",
            stdio_server().display().to_string(),
            state.display().to_string()
        ),
    )
    .unwrap();
    let gateway = replica("mcp-stdio", &file, &[]);
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
    let writes = calls_of(&state, "write");
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
    assert_eq!(calls_of(&state, "fail").len(), 1);

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
        let n = calls_of(&state, "hang").len();
        if n == 1 {
            Ok(())
        } else {
            Err(n)
        }
    })
    .await;
    let first_pid = started_pids(&state)[0];
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
    assert_eq!(started_pids(&state).len(), 2);
    let (_, replayed) = post(&http, &gateway, &call("py.hang", json!({}), "h1")).await;
    assert_eq!(replayed["replayed"], true);
    assert_eq!(calls_of(&state, "hang").len(), 1);
}

/// The Python with the official MCP SDK: `CARMY_MCP_PYTHON`, which `scripts/test` sets from
/// `tests/mcp/python-venv.sh`.
fn sdk_python() -> String {
    std::env::var("CARMY_MCP_PYTHON").unwrap_or_else(|_| {
        panic!("CARMY_MCP_PYTHON is unset: run through scripts/test, or export CARMY_MCP_PYTHON=$(crates/carmy-gateway/tests/mcp/python-venv.sh)")
    })
}

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `tests/mcp/python_sdk_server.py` on `port` (writing its calls to `state`) and waits
/// until it listens.
async fn start_sdk_server(port: u16, state: &Path) -> Killed {
    start_sdk_script("python_sdk_server.py", port, state).await
}

/// Starts the Python SDK server `tests/mcp/<script>` on `port` (writing its calls to `state`)
/// and waits until it listens.
async fn start_sdk_script(script: &str, port: u16, state: &Path) -> Killed {
    let server = Killed(
        std::process::Command::new(sdk_python())
            .arg(
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/mcp")
                    .join(script),
            )
            .arg(port.to_string())
            .env("STATE_FILE", state)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the Python SDK server"),
    );
    eventually(
        Duration::from_secs(30),
        "the Python SDK server listens",
        || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .map(drop)
        },
    )
    .await;
    server
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
    let _server = start_sdk_server(port, &state).await;
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

/// The calls of `tool` that the Python SDK server recorded (one JSON line each).
fn sdk_calls(state: &Path, tool: &str) -> Vec<Value> {
    std::fs::read_to_string(state)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|call| call["tool"] == tool)
        .collect()
}

/// docs/semantics.md §10: a Streamable HTTP server that dies after it took a call leaves that
/// call "outcome unknown" (recorded, never re-sent); once the server is back, the retry replays
/// the record and new calls reach the new server.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_python_sdk_server_killed_mid_call_leaves_the_call_recorded_outcome_unknown() {
    let file = write_tools_file("");
    let state = file.with_file_name("state.jsonl");
    let port = free_port();
    let server = start_sdk_server(port, &state).await;
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
    let _server = start_sdk_server(port, &state).await;
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
    let file = write_tools_file("");
    let state = file.with_file_name("state.jsonl");
    let gate = file.with_file_name("gate");
    std::fs::write(
        &file,
        format!(
            "[[mcp_servers]]\nname = \"py\"\ncommand = \"python3\"\nargs = [{:?}]\nprefix = \"py.\"\nenv = {{ STATE_FILE = {:?}, GATE_FILE = {:?} }}\n",
            stdio_server().display().to_string(),
            state.display().to_string(),
            gate.display().to_string()
        ),
    )
    .unwrap();
    let gateway = replica("mcp-stdio-down", &file, &[]);
    let http = client();
    let pid = started_pids(&state)[0];
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    // Restarts are refused until the gate opens: the server stays down.
    eventually(Duration::from_secs(10), "a refused restart", || async {
        let refused = events(&state)
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
    assert!(calls_of(&state, "write").is_empty());
    std::fs::write(&gate, "open").unwrap();
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
    let writes = calls_of(&state, "write");
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(writes[0]["key"], done["execution_id"]);
}

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
    let _server = start_sdk_script("python_sdk_task_server.py", port, &state).await;
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
    let _server = start_sdk_script("python_sdk_task_server.py", port, &state).await;
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
    let _server = start_sdk_script("python_sdk_task_server.py", port, &state).await;
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
