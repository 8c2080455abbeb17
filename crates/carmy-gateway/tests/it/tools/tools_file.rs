//! Bad tools files stop the real gateway binary before it serves, each with its message naming
//! the file, line, tool and field, and a non-zero exit; `check-config` prints the tool table
//! with secrets masked (docs/semantics.md §10).

use carmy_test_support::replica::gateway_binary;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Writes `text` as `tools.toml` in a fresh directory and returns its path (the directory may
/// hold schema files next to it).
pub fn write_tools_file(text: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join("carmy-tools-files")
        .join(uuid::Uuid::new_v4().simple().to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tools.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs the gateway binary with `args` and `CARMY_TOOLS_FILE=file`; returns the exit code,
/// standard output and standard error.
pub(crate) fn run(
    file: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, String, String) {
    let mut command = Command::new(gateway_binary());
    command
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("CARMY_API_KEYS")
        .env("CARMY_LISTEN", "127.0.0.1:0")
        .env("CARMY_TOOLS_FILE", file);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().expect("run carmy-gateway");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

const GOOD_TOOL: &str = r#"
[[tools]]
name = "pay"
url = "http://127.0.0.1:9/pay"
"#;

#[test]
fn each_mistake_stops_the_gateway_naming_file_line_tool_and_field() {
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "TOML syntax",
            "[[tools]]\nname = \"pay\"\nurl = \"http://127.0.0.1:9/pay\n".into(),
            ", line 3, field `url`: invalid basic string",
        ),
        (
            "unknown key",
            "[[tools]]\nname = \"pay\"\nurl = \"http://127.0.0.1:9/pay\"\nmethd = \"POST\"\n".into(),
            ", line 4, tool \"pay\", field `methd`: unknown field `methd`",
        ),
        (
            "invalid JSON Schema",
            "[[tools]]\nname = \"pay\"\nurl = \"http://127.0.0.1:9/pay\"\ninput_schema = { type = \"strin\" }\n".into(),
            ", line 4, tool \"pay\", field `input_schema`: not a valid JSON Schema",
        ),
        (
            "duplicate name",
            format!("{GOOD_TOOL}{GOOD_TOOL}"),
            ", line 7, tool \"pay\", field `name`: the name is already used by another [[tools]] entry",
        ),
        (
            "name of an example tool",
            format!("example_tools = true\n{}", GOOD_TOOL.replace("\"pay\"", "\"echo\"")),
            ", line 4, tool \"echo\", field `name`: the name is already used by a built-in example tool",
        ),
        (
            "unset environment variable",
            format!("{GOOD_TOOL}[tools.headers]\nAuthorization = \"Bearer ${{CARMY_TEST_UNSET_TOKEN}}\"\n"),
            ", line 6, tool \"pay\", field `headers.Authorization`: environment variable CARMY_TEST_UNSET_TOKEN is not set",
        ),
        (
            "bad method",
            format!("{GOOD_TOOL}method = \"FETCH\"\n"),
            ", line 5, tool \"pay\", field `method`: \"FETCH\" is not one of GET, POST, PUT, PATCH, DELETE",
        ),
        (
            "placeholder in the host",
            "[[tools]]\nname = \"pay\"\nurl = \"http://{host}/pay\"\n".into(),
            ", line 3, tool \"pay\", field `url`: placeholder {host} in \"http://{host}/pay\" is outside the path",
        ),
        (
            "not a URL",
            "[[tools]]\nname = \"pay\"\nurl = \"payments/{id}\"\n".into(),
            ", line 3, tool \"pay\", field `url`: \"payments/{id}\" is not a URL",
        ),
        (
            "missing schema file",
            format!("{GOOD_TOOL}input_schema_file = \"schemas/none.json\"\n"),
            ", line 5, tool \"pay\", field `input_schema_file`: ",
        ),
        (
            "not-executed status that is a success",
            format!("{GOOD_TOOL}not_executed_statuses = [200]\n"),
            ", line 5, tool \"pay\", field `not_executed_statuses`: 200 is not an error status",
        ),
        (
            "rerun for a tool that may repeat its effect",
            format!("{GOOD_TOOL}idempotency_header = \"\"\non_interrupted = \"rerun\"\n"),
            ", line 6, tool \"pay\", field `on_interrupted`: \"rerun\" runs the tool a second time for one execution, so it needs an idempotency_header",
        ),
        (
            "unknown takeover policy",
            format!("{GOOD_TOOL}on_interrupted = \"retry\"\n"),
            ", line 5, tool \"pay\", field `on_interrupted`: \"retry\" is not a policy; use \"uncertain\"",
        ),
        (
            "unknown takeover policy of an MCP server",
            "[[mcp_servers]]\nname = \"files\"\nurl = \"http://127.0.0.1:9/mcp\"\non_interrupted = \"always\"\n".into(),
            ", line 4, mcp server \"files\", field `on_interrupted`: \"always\" is not a policy; use \"uncertain\"",
        ),
        (
            "unknown task policy",
            format!("{GOOD_TOOL}task = \"sometimes\"\n"),
            ", line 5, tool \"pay\", field `task`: \"sometimes\" is not a task policy: use \"auto\"",
        ),
        (
            "zero timeout",
            format!("{GOOD_TOOL}timeout_ms = 0\n"),
            ", line 5, tool \"pay\", field `timeout_ms`: must be at least 1",
        ),
        (
            "MCP server with both url and command",
            "[[mcp_servers]]\nname = \"files\"\nurl = \"http://127.0.0.1:9/mcp\"\ncommand = \"python3\"\n".into(),
            ", line 1, mcp server \"files\", field `url`: give exactly one of url",
        ),
    ];
    for (what, text, expected) in &cases {
        let file = write_tools_file(text);
        let (code, _, stderr) = run(&file, &[], &[]);
        assert_eq!(code, Some(1), "{what}: {stderr}");
        let message = format!("tools file {}{expected}", file.display());
        assert!(
            stderr.contains(&message),
            "{what}: expected {message:?} in {stderr}"
        );
        assert!(!stderr.contains("serving"), "{what}: {stderr}");
    }
}

#[test]
fn check_config_prints_the_table_with_secrets_masked() {
    let file = write_tools_file(
        r#"
example_tools = true

[[tools]]
name = "create_payment"
method = "POST"
url = "https://payments.example/v1/customers/{customer}/payments"
timeout_ms = 10000
input_schema_file = "payment.json"
[tools.headers]
Authorization = "Bearer ${CARMY_TEST_PAYMENTS_TOKEN}"

[[tools]]
name = "get_customer"
method = "GET"
url = "https://payments.example/v1/customers/{customer}"
idempotency_header = ""
input_schema = { type = "object", properties = { customer = { type = "string" } } }
"#,
    );
    std::fs::write(
        file.with_file_name("payment.json"),
        r#"{"type":"object","required":["customer"],"properties":{"customer":{"type":"string"}}}"#,
    )
    .unwrap();
    let secret = "tok_very_secret_4242";
    let (code, stdout, stderr) = run(
        &file,
        &["check-config"],
        &[("CARMY_TEST_PAYMENTS_TOKEN", secret), ("RUST_LOG", "trace")],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        !stdout.contains(secret) && !stderr.contains(secret),
        "{stdout}{stderr}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], format!("tools file {}: valid", file.display()));
    assert_eq!(
        lines[1],
        "example create_order, get_order, find_orders, echo, sleep, fail"
    );
    assert!(lines[2].starts_with("http  create_payment "), "{stdout}");
    assert!(lines[2].contains("POST   https://payments.example/v1/customers/{customer}/payments  timeout=10000ms  idempotency_header=idempotency-key  headers=[authorization: *** (from ${CARMY_TEST_PAYMENTS_TOKEN})]"), "{stdout}");
    assert!(lines[3].contains("GET    https://payments.example/v1/customers/{customer}  timeout=default  idempotency_header=(none)  headers=[]"), "{stdout}");
    assert_eq!(lines.len(), 4, "{stdout}");
}

#[test]
fn check_config_shows_what_each_tool_redacts_and_the_client_tools() {
    let file = write_tools_file(
        r#"
[[tools]]
name = "pay"
url = "https://payments.example/v1/pay"
redact_arguments = ["/card/number", "/cvc"]

[[client_tools]]
name = "charge"
redact_arguments = "all"

[[client_tools]]
name = "refund"
"#,
    );
    let (code, stdout, stderr) = run(&file, &["check-config"], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[1].starts_with("http  pay ")
            && lines[1].ends_with(r#"headers=[]  redact_arguments=["/card/number","/cvc"]"#),
        "{stdout}"
    );
    assert_eq!(
        lines[2..],
        [
            r#"client charge                  held by its caller (POST /v1/held)  redact_arguments="all""#,
            "client refund                  held by its caller (POST /v1/held)",
        ],
        "{stdout}"
    );
}

/// The last line of standard error: the CLI's own message (a fault-injection build logs a
/// warning first).
fn last_line(stderr: &str) -> &str {
    stderr.lines().last().unwrap_or_default()
}

#[test]
fn files_that_do_not_say_what_they_mean_are_refused_with_one_line() {
    let cases: Vec<(&str, String, String)> = vec![
        (
            "$NAME without braces",
            format!("{GOOD_TOOL}[tools.headers]\nAuthorization = \"Bearer $CARMY_TEST_TOKEN\"\n"),
            ", line 6, tool \"pay\", field `headers.Authorization`: $CARMY_TEST_TOKEN is not expanded: write ${CARMY_TEST_TOKEN} for the environment variable, or $$CARMY_TEST_TOKEN for a literal $".into(),
        ),
        (
            "placeholder the schema does not declare",
            "[[tools]]\nname = \"pay\"\nurl = \"http://127.0.0.1:9/customers/{customer}/pay\"\ninput_schema = { type = \"object\", properties = { amount = { type = \"integer\" } } }\n".into(),
            ", line 3, tool \"pay\", field `url`: placeholder {customer} is not declared in input_schema; add \"customer\" to its properties (and required), so agents know to send it".into(),
        ),
        (
            "empty file",
            String::new(),
            ": declares no tools: add [[tools]], [[mcp_servers]] or [[client_tools]] entries, or set example_tools = true to serve only the built-in example tools".into(),
        ),
        (
            "no tools",
            "example_tools = false\n".into(),
            ": declares no tools: add [[tools]], [[mcp_servers]] or [[client_tools]] entries, or set example_tools = true to serve only the built-in example tools".into(),
        ),
        (
            "[tools] for [[tools]]",
            "\n[tools]\nname = \"pay\"\nurl = \"http://127.0.0.1:9/pay\"\n".into(),
            ", line 2, field `tools`: [tools] is a single table; write [[tools]] (double brackets) before each entry".into(),
        ),
        (
            "[mcp_servers] for [[mcp_servers]]",
            "[mcp_servers]\nname = \"files\"\nurl = \"http://127.0.0.1:9/mcp\"\n".into(),
            ", line 1, field `mcp_servers`: [mcp_servers] is a single table; write [[mcp_servers]] (double brackets) before each entry".into(),
        ),
        (
            "a status in both lists",
            format!("{GOOD_TOOL}not_executed_statuses = [503]\neffect_unknown_statuses = [409, 503]\n"),
            ", line 6, tool \"pay\", field `effect_unknown_statuses`: 503 is also in not_executed_statuses; a status either proves that nothing happened or leaves the effect unknown, list it in one of them".into(),
        ),
        (
            "a number as text",
            format!("{GOOD_TOOL}timeout_ms = \"10\"\n"),
            ", line 5, tool \"pay\", field `timeout_ms`: invalid type: string \"10\", expected u64".into(),
        ),
        (
            "a flag as text",
            format!("example_tools = \"yes\"\n{GOOD_TOOL}"),
            ", line 1, field `example_tools`: invalid type: string \"yes\", expected a boolean".into(),
        ),
        (
            "a list as a number",
            format!("{GOOD_TOOL}not_executed_statuses = 429\n"),
            ", line 5, tool \"pay\", field `not_executed_statuses`: invalid type: integer `429`, expected a sequence".into(),
        ),
    ];
    for (what, text, expected) in &cases {
        let file = write_tools_file(text);
        let message = format!("carmy-gateway: tools file {}{expected}", file.display());
        for args in [&[][..], &["check-config"][..]] {
            let (code, stdout, stderr) = run(&file, args, &[]);
            assert_eq!(code, Some(1), "{what} {args:?}: {stderr}");
            assert_eq!(last_line(&stderr), message, "{what} {args:?}");
            assert!(!stdout.contains("valid"), "{what}: {stdout}");
        }
    }
    // Only the examples, said so: valid.
    let file = write_tools_file("example_tools = true\n");
    let (code, stdout, stderr) = run(&file, &["check-config"], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.starts_with(&format!("tools file {}: valid", file.display())),
        "{stdout}"
    );
}
