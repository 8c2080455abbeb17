//! The MCP servers the tests put behind a gateway (docs/semantics.md §10): the stdio server
//! `tests/mcp/stdio_server.py` (standard library only), which the gateway starts and
//! supervises, with the events it writes; and the servers written with the official Python SDK
//! over Streamable HTTP (`tests/mcp/python_sdk_*.py`), which the test starts, with the calls
//! they record. Shared by the MCP upstream tests and the tool probes that call an MCP tool.

use crate::tools_file::write_tools_file;
use carmy_test_support::{call, eventually, post, Replica};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The stdio server behind a tools file: the file, and the file its events go to (one JSON
/// object a line: `started` with its `pid`, `call` with its `tool`, `arguments` and `key`,
/// `refused`).
pub(crate) struct StdioServer {
    /// The tools file.
    pub(crate) file: PathBuf,
    /// The events file, beside it.
    pub(crate) state: PathBuf,
}

impl StdioServer {
    /// Writes a tools file of `tools` (TOML, may be empty) and the stdio server as
    /// `[[mcp_servers]]` `py` with prefix `py.`. `gated`: a restart of the server exits at once
    /// until [`StdioServer::gate`] exists.
    pub(crate) fn tools_file(tools: &str, gated: bool) -> Self {
        let file = write_tools_file("");
        let server = Self::beside(file);
        let gate = if gated {
            format!(", GATE_FILE = {:?}", server.gate().display().to_string())
        } else {
            String::new()
        };
        std::fs::write(
            &server.file,
            format!(
                "{tools}[[mcp_servers]]\nname = \"py\"\ncommand = \"python3\"\nargs = [{:?}]\nprefix = \"py.\"\nenv = {{ STATE_FILE = {:?}{gate} }}\n",
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/mcp/stdio_server.py")
                    .display()
                    .to_string(),
                server.state.display().to_string(),
            ),
        )
        .unwrap();
        server
    }

    /// The server of a tools file [`StdioServer::tools_file`] wrote.
    pub(crate) fn beside(file: PathBuf) -> Self {
        let state = file.with_file_name("state.jsonl");
        Self { file, state }
    }

    /// The file whose existence lets a gated server start again.
    pub(crate) fn gate(&self) -> PathBuf {
        self.file.with_file_name("gate")
    }

    /// The events the server wrote.
    pub(crate) fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.state)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// The process ids the server started with, in order.
    pub(crate) fn started_pids(&self) -> Vec<u64> {
        self.events()
            .iter()
            .filter(|e| e["event"] == "started")
            .map(|e| e["pid"].as_u64().unwrap())
            .collect()
    }

    /// The calls of `tool` (unprefixed) the server received.
    pub(crate) fn calls_of(&self, tool: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["event"] == "call" && e["tool"] == tool)
            .collect()
    }
}

/// The Python with the official MCP SDK: `CARMY_MCP_PYTHON`, which `scripts/test` sets from
/// `tests/mcp/python-venv.sh`.
fn sdk_python() -> String {
    std::env::var("CARMY_MCP_PYTHON").unwrap_or_else(|_| {
        panic!("CARMY_MCP_PYTHON is unset: run through scripts/test, or export CARMY_MCP_PYTHON=$(crates/carmy-gateway/tests/mcp/python-venv.sh)")
    })
}

/// A Python SDK server the test started; killed when dropped.
pub(crate) struct SdkServer(std::process::Child);

impl Drop for SdkServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl SdkServer {
    /// Starts the Python SDK server `tests/mcp/<script>` on `port` (writing its calls to
    /// `state`) and waits until it listens.
    pub(crate) async fn start(script: &str, port: u16, state: &Path) -> Self {
        Self::start_with(script, port, state, &[]).await
    }

    /// [`SdkServer::start`] with `env` set on the server.
    pub(crate) async fn start_with(
        script: &str,
        port: u16,
        state: &Path,
        env: &[(&str, &str)],
    ) -> Self {
        let server = Self(
            std::process::Command::new(sdk_python())
                .envs(env.iter().copied())
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
}

/// The calls of `tool` that a Python SDK server recorded (one JSON line each) in `state`.
pub(crate) fn sdk_calls(state: &Path, tool: &str) -> Vec<Value> {
    std::fs::read_to_string(state)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|call| call["tool"] == tool)
        .collect()
}

/// A port nothing listens on now.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The names `GET /v1/tools` lists on `gateway`.
pub(crate) async fn tool_names(http: &reqwest::Client, gateway: &Replica) -> Vec<String> {
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
pub(crate) async fn serves_again(
    http: &reqwest::Client,
    gateway: &Replica,
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
