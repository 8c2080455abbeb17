//! The request id a model holds (docs/semantics.md §11) through the MCP front: configured HTTP
//! tools and an MCP upstream's tools get the `request_id` property, which never reaches the
//! upstream; an adopted own argument is forwarded unchanged; a colliding schema stops the
//! gateway naming the ways out; the precedence of the id's sources and `source`; a required
//! argument; a call still running answered before the client gives up; `GET /v1/tools`.

use super::mcp_client::{
    call_raw, call_with_meta, completed, connect, execution, structured, text, Served,
};
use crate::tools_file::write_tools_file;
use crate::upstream::Upstream;
use rmcp::model::CallToolResult;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn random_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn stdio_server() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/stdio_server.py")
}

/// The `arguments` of the stdio server's calls of `tool` (its state file).
fn upstream_arguments(state: &std::path::Path, tool: &str) -> Vec<Value> {
    std::fs::read_to_string(state)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|event| event["event"] == "call" && event["tool"] == tool)
        .map(|event| event["arguments"].clone())
        .collect()
}

fn properties(tools: &[rmcp::model::Tool], name: &str) -> Value {
    let tool = tools.iter().find(|tool| tool.name == name).unwrap();
    tool.input_schema
        .get("properties")
        .cloned()
        .unwrap_or(Value::Null)
}

async fn call_twice(
    client: &super::mcp_client::Client,
    tool: &str,
    arguments: Value,
) -> [CallToolResult; 2] {
    let mut results = Vec::new();
    for n in 0..2 {
        // A new tool-use block each time, as a model's retry is.
        let meta = json!({"claudecode/toolUseId": format!("toolu_{n}_{}", random_id())});
        let result = client
            .call_tool(call_with_meta(tool, arguments.clone(), meta))
            .await
            .unwrap();
        assert_eq!(result.is_error, Some(false), "{result:?}");
        assert_eq!(execution(&result)["source"], "argument");
        results.push(result);
    }
    let [first, again] = <[CallToolResult; 2]>::try_from(results).unwrap();
    assert_eq!(execution(&again)["replayed"], true);
    assert_eq!(
        execution(&again)["execution_id"],
        execution(&first)["execution_id"]
    );
    [first, again]
}

#[tokio::test]
async fn configured_http_and_mcp_upstream_tools_get_the_argument_and_never_forward_it() {
    let upstream = Upstream::start().await;
    let file = write_tools_file("");
    let state = file.with_file_name("state.jsonl");
    std::fs::write(
        &file,
        format!(
            r#"[[tools]]
name = "pay"
url = "{base}/pay"
input_schema = {{ type = "object", properties = {{ amount = {{ type = "integer" }} }}, additionalProperties = false }}

[[tools]]
name = "lookup"
url = "{base}/lookup"
annotations = {{ readOnlyHint = true }}

[[tools]]
name = "adopt"
url = "{base}/adopt"
key_argument = "op_id"
input_schema = {{ type = "object", properties = {{ op_id = {{ type = "string" }}, amount = {{ type = "integer" }} }} }}

[[mcp_servers]]
name = "py"
command = "python3"
args = [{server:?}]
prefix = "py."
env = {{ STATE_FILE = {state:?} }}
"#,
            base = upstream.base(),
            server = stdio_server().display().to_string(),
            state = state.display().to_string(),
        ),
    )
    .unwrap();
    let gateway = Served::start(&["--tools-file", file.to_str().unwrap()]).await;
    let client = connect(&gateway.mcp(), None).await;
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(properties(&tools, "pay")["request_id"]["type"], "string");
    assert_eq!(
        properties(&tools, "py.write")["request_id"]["type"],
        "string"
    );
    assert_eq!(properties(&tools, "lookup").get("request_id"), None);
    assert_eq!(
        properties(&tools, "adopt"),
        json!({"op_id": {"type": "string"}, "amount": {"type": "integer"}}),
        "an adopted argument is listed as the tool wrote it"
    );

    let id = random_id();
    call_twice(&client, "pay", json!({"amount": 5, "request_id": id})).await;
    let paid = upstream.arrivals_at("/pay");
    assert_eq!(paid.len(), 1, "the upstream saw one call");
    assert_eq!(
        paid[0].body, r#"{"amount":5}"#,
        "the request id never reaches it"
    );

    let op = random_id();
    call_twice(&client, "adopt", json!({"op_id": op, "amount": 2})).await;
    let adopted = upstream.arrivals_at("/adopt");
    assert_eq!(adopted.len(), 1);
    let body: Value = serde_json::from_str(&adopted[0].body).unwrap();
    assert_eq!(
        body,
        json!({"op_id": op, "amount": 2}),
        "forwarded unchanged"
    );

    call_twice(
        &client,
        "py.write",
        json!({"text": "hi", "request_id": random_id()}),
    )
    .await;
    assert_eq!(upstream_arguments(&state, "write"), [json!({"text": "hi"})]);

    let listed: Value = reqwest::Client::new()
        .get(format!("{}/v1/tools", gateway.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let marked = |name: &str| {
        listed["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|tool| tool["name"] == name)
            .unwrap()["request_id_argument"]
            .clone()
    };
    assert_eq!(
        marked("pay"),
        json!({"name": "request_id", "required": false, "adopted": false,
               "description": carmy::key_argument::DESCRIPTION})
    );
    assert_eq!(
        marked("adopt"),
        json!({"name": "op_id", "required": false, "adopted": true,
               "description": carmy::key_argument::DESCRIPTION})
    );
    assert_eq!(marked("lookup"), Value::Null);
    assert_eq!(marked("py.write")["name"], "request_id");
}

#[test]
fn a_colliding_schema_stops_the_gateway_naming_the_tool_and_the_ways_out() {
    let file = write_tools_file(
        r#"[[tools]]
name = "pay"
url = "http://127.0.0.1:9/pay"
input_schema = { type = "object", properties = { request_id = { type = "string" } } }
"#,
    );
    // Serving and check-config both stop.
    for args in [&[][..], &["check-config"][..]] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_carmy-gateway"))
            .args(args)
            .env_remove("DATABASE_URL")
            .env_remove("CARMY_API_KEYS")
            .env("CARMY_LISTEN", "127.0.0.1:0")
            .env("CARMY_TOOLS_FILE", &file)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        for part in [
            r#"tool "pay" already has an argument named "request_id""#,
            r#"key_argument = "<another name>""#,
            r#"key_argument = "request_id" to use the tool's own argument"#,
        ] {
            assert!(stderr.contains(part), "{part} not in {stderr}");
        }
    }
}

#[tokio::test]
async fn explicit_keys_win_over_the_argument_and_the_source_says_which_gave_the_id() {
    let gateway = Served::start(&[]).await;
    let client = connect(&gateway.mcp(), None).await;
    let explicit = random_id();
    let meta = json!({"io.carmy/request_id": explicit, "claudecode/toolUseId": "toolu_a"});
    let first = client
        .call_tool(call_with_meta(
            "echo",
            json!({"a": 1, "request_id": random_id()}),
            meta.clone(),
        ))
        .await
        .unwrap();
    assert_eq!(execution(&first)["source"], "carmy_meta");
    assert_eq!(
        structured(&first),
        json!({"a": 1}),
        "the argument is taken out"
    );
    // Another model id, the same explicit key: the explicit key is the identity.
    let again = client
        .call_tool(call_with_meta(
            "echo",
            json!({"a": 1, "request_id": random_id()}),
            meta,
        ))
        .await
        .unwrap();
    assert_eq!(execution(&again)["replayed"], true);
    let keyed = call_raw(
        &client,
        json!({"name": "echo", "arguments": {"a": 2, "request_id": random_id()},
               "idempotencyKey": random_id()}),
    )
    .await
    .unwrap();
    assert_eq!(execution(&keyed)["source"], "idempotency_key");
    let client_only = client
        .call_tool(call_with_meta(
            "echo",
            json!({"a": 3}),
            json!({"claudecode/toolUseId": "toolu_b"}),
        ))
        .await
        .unwrap();
    assert_eq!(execution(&client_only)["source"], "client_meta");
    let none = client
        .call_tool(call_with_meta("echo", json!({"a": 4}), json!({})))
        .await
        .unwrap();
    assert_eq!(execution(&none)["source"], Value::Null);
    let refused = client
        .call_tool(call_with_meta("echo", json!({"request_id": 7}), json!({})))
        .await
        .unwrap();
    assert_eq!(structured(&refused)["code"], "REQUEST_ID_INVALID");
    assert!(
        text(&refused).contains("must be a string"),
        "{}",
        text(&refused)
    );
}

#[tokio::test]
async fn a_required_argument_is_listed_required_and_its_absence_refused() {
    let gateway = Served::start(&["--mcp-key-required", "--mcp-key-argument", "op_key"]).await;
    let client = connect(&gateway.mcp(), None).await;
    let info = client.peer_info().expect("initialize answered");
    let instructions = info.instructions.as_deref().unwrap_or_default();
    assert!(
        instructions.contains("call the tool again with the same arguments and the same `op_key`"),
        "{instructions}"
    );
    let tools = client.list_all_tools().await.unwrap();
    let create = tools
        .iter()
        .find(|tool| tool.name == "create_order")
        .unwrap();
    assert_eq!(create.input_schema["required"], json!(["sku", "op_key"]));
    let refused = client
        .call_tool(call_with_meta(
            "create_order",
            json!({"sku": "A1"}),
            json!({"claudecode/toolUseId": "toolu_c"}),
        ))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true));
    assert_eq!(structured(&refused)["code"], "REQUEST_ID_ARGUMENT_REQUIRED");
    assert!(
        text(&refused).contains("Retry this call with `op_key` set to a new random UUID"),
        "{}",
        text(&refused)
    );
    assert_eq!(gateway.runs("create_order"), 0);
}

#[tokio::test]
async fn a_call_still_running_is_answered_before_the_client_gives_up() {
    let gateway = Served::start(&["--mcp-answer-within-ms", "500"]).await;
    let client = connect(&gateway.mcp(), None).await;
    let arguments = json!({"ms": 3000, "request_id": random_id()});
    let began = Instant::now();
    let first = client
        .call_tool(call_with_meta("sleep", arguments.clone(), json!({})))
        .await
        .unwrap();
    let took = began.elapsed();
    assert!(
        took < Duration::from_millis(2000),
        "answered after {took:?}"
    );
    assert_eq!(first.is_error, Some(false));
    let fields = structured(&first);
    assert_eq!(fields["code"], "EXECUTION_UNCERTAIN");
    assert_eq!(fields["state"], "running");
    let words = text(&first);
    assert!(
        words.contains("still running as execution exec_"),
        "{words}"
    );
    assert!(
        words.contains("Call the tool again now with the same arguments and the same `request_id` to get its outcome (Carmy holds that call open"),
        "{words}"
    );
    let execution_id = fields["execution_id"].clone();
    assert!(execution_id.is_string(), "{fields}");
    let deadline = Instant::now() + Duration::from_secs(15);
    let outcome = loop {
        let again = client
            .call_tool(call_with_meta("sleep", arguments.clone(), json!({})))
            .await
            .unwrap();
        if completed(&again) {
            break again;
        }
        assert_eq!(structured(&again)["code"], "EXECUTION_UNCERTAIN");
        assert!(Instant::now() < deadline, "no outcome by the deadline");
    };
    assert_eq!(execution(&outcome)["execution_id"], execution_id);
    assert_eq!(execution(&outcome)["replayed"], true);
    assert_eq!(gateway.runs("sleep"), 1);
}

/// `echo {"a": a}` under the client's tool-use id `tool_use`: the result and its second text
/// block (the note after the data).
async fn echo_note(
    client: &super::mcp_client::Client,
    a: u32,
    tool_use: &str,
) -> (CallToolResult, String) {
    let done = client
        .call_tool(call_with_meta(
            "echo",
            json!({ "a": a }),
            json!({"claudecode/toolUseId": tool_use}),
        ))
        .await
        .unwrap();
    let note = serde_json::to_value(&done.content[1]).unwrap()["text"]
        .as_str()
        .unwrap()
        .to_owned();
    (done, note)
}

/// A model whose client sent the id (`claudecode/toolUseId`) never saw it: its next tool call
/// has a new tool-use id, so "the same call unchanged" would be a new action. The texts name
/// the id to add as the argument, and a retry that does so gets the first outcome; the tool
/// runs once. A client id the argument would refuse is never named.
#[tokio::test]
async fn a_client_chosen_id_is_named_so_that_the_models_retry_repeats_it() {
    let gateway = Served::start(&["--mcp-answer-within-ms", "300"]).await;
    let client = connect(&gateway.mcp(), None).await;
    let tool_use = format!("toolu_01{}", uuid::Uuid::new_v4().simple());
    let running = client
        .call_tool(call_with_meta(
            "sleep",
            json!({"ms": 1500}),
            json!({"claudecode/toolUseId": tool_use}),
        ))
        .await
        .unwrap();
    assert_eq!(execution(&running)["source"], "client_meta");
    assert_eq!(structured(&running)["state"], "running");
    let words = text(&running);
    let named = format!("and `request_id` set to \"{tool_use}\"");
    assert!(words.contains(&named), "{words}");
    assert!(!words.contains("the same `request_id`"), "{words}");

    // The model's retry: a new tool-use block, the id added as the argument.
    let mut outcome = None;
    for _ in 0..40 {
        let retry = client
            .call_tool(call_with_meta(
                "sleep",
                json!({"ms": 1500, "request_id": tool_use}),
                json!({"claudecode/toolUseId": format!("toolu_01{}", uuid::Uuid::new_v4().simple())}),
            ))
            .await
            .unwrap();
        assert_eq!(execution(&retry)["source"], "argument");
        if completed(&retry) {
            outcome = Some(retry);
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let outcome = outcome.expect("the outcome within 10 s");
    assert_eq!(
        execution(&outcome)["execution_id"],
        execution(&running)["execution_id"]
    );
    assert_eq!(execution(&outcome)["replayed"], true);
    assert_eq!(gateway.runs("sleep"), 1);

    // A fresh client-chosen call that finishes at once: its Done text names the id too.
    let tool_use = format!("toolu_01{}", uuid::Uuid::new_v4().simple());
    let (done, note) = echo_note(&client, 1, &tool_use).await;
    assert!(
        note.contains(&format!(
            "calling again with `request_id` set to \"{tool_use}\" returns this same result"
        )),
        "{note}"
    );
    // Until the record expires (seven days by default), and not after.
    let expires = execution(&done)["expires_at"].as_str().unwrap().to_owned();
    assert!(
        note.ends_with(&format!(
            "without doing it again until {}Z.",
            &expires[..19]
        )),
        "{note}"
    );

    // A client id the argument would refuse (too short to be random): no id is named and no
    // repeat under an id is promised.
    let (done, note) = echo_note(&client, 2, "toolu_b").await;
    assert_eq!(
        note,
        format!(
            "Done (execution {}). Nothing more is needed for this action.",
            execution(&done)["execution_id"].as_str().unwrap()
        )
    );
}

/// A model's retry of a call whose tool the gateway no longer serves (a new tools file, an
/// upstream that dropped it) gets the call's record, as over HTTP (docs/semantics.md §3); a
/// call under an id with no record is still an unknown tool.
#[tokio::test]
async fn a_retry_after_the_tool_was_removed_replays_its_record() {
    let db = carmy_test_support::TestDb::create().await;
    let id = random_id();
    let arguments = json!({"a": 1, "request_id": id});
    let first = {
        let gateway = Served::start(&["--database-url", &db.url]).await;
        let client = connect(&gateway.mcp(), None).await;
        let first = client
            .call_tool(call_with_meta("echo", arguments.clone(), json!({})))
            .await
            .unwrap();
        assert_eq!(first.is_error, Some(false), "{first:?}");
        first
    };
    // The next deployment serves another tool only: `echo` is gone.
    let file = write_tools_file("[[tools]]\nname = \"pay\"\nurl = \"http://127.0.0.1:9/pay\"\n");
    let gateway = Served::start(&[
        "--database-url",
        &db.url,
        "--tools-file",
        file.to_str().unwrap(),
    ])
    .await;
    let client = connect(&gateway.mcp(), None).await;
    let again = client
        .call_tool(call_with_meta("echo", arguments, json!({})))
        .await
        .unwrap();
    assert_eq!(again.is_error, Some(false), "{again:?}");
    assert_eq!(execution(&again)["replayed"], true);
    assert_eq!(
        execution(&again)["execution_id"],
        execution(&first)["execution_id"]
    );
    assert_eq!(structured(&again), json!({"a": 1}));
    let unknown = client
        .call_tool(call_with_meta(
            "echo",
            json!({"a": 1, "request_id": random_id()}),
            json!({}),
        ))
        .await
        .unwrap();
    assert_eq!(structured(&unknown)["code"], "UNKNOWN_TOOL");
    assert_eq!(gateway.runs("echo"), 0);
}
