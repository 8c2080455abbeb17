//! A probe's configuration (docs/semantics.md §12.10): `check-config` shows every probe, an
//! HTTP probe or a tool probe (also one calling an MCP server's tool), with its secrets masked,
//! and refuses a bad one in one line naming the tool and the field. The tools files are those of
//! the reconciliation tests (`reconcile.rs`, `reconcile_tool_probe.rs`).

use super::reconcile::tools as http_probe_tools;
use super::reconcile_tool_probe::{
    mcp_tools, tools as tool_probe_tools, LOOKUP_TOKEN, PROBE_TOKEN,
};
use crate::tools_file::write_tools_file;
use carmy_test_support::replica::gateway_binary;
use std::path::Path;

#[test]
fn check_config_shows_each_probe_with_its_secrets_masked() {
    let file = http_probe_tools("http://127.0.0.1:9");
    let secret = "tok_lookup_secret";
    let output = std::process::Command::new(gateway_binary())
        .arg("check-config")
        .env_remove("DATABASE_URL")
        .env("CARMY_TOOLS_FILE", &file)
        .env("CARMY_TEST_LOOKUP_TOKEN", secret)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        !stdout.contains(secret) && !stderr.contains(secret),
        "{stdout}{stderr}"
    );
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains("reconcile GET"))
        .collect();
    assert_eq!(lines.len(), 8, "{stdout}");
    assert!(lines[0].ends_with("reconcile GET http://127.0.0.1:9/lookup?idempotency_key={execution_id}  found=[200] absent=[404] absent_means=unknown  timeout=2000ms  headers=[authorization: *** (from ${CARMY_TEST_LOOKUP_TOKEN})]"), "{stdout}");
    assert!(lines[1].contains("absent_means=not_executed"), "{stdout}");
}

#[test]
fn a_bad_probe_stops_the_gateway_naming_the_field() {
    let cases = [
        (
            "absent_means = \"maybe\"",
            "reconcile.absent_means",
            "\"maybe\" is not \"unknown\"",
        ),
        (
            "found_status = [200]\nabsent_status = [200]",
            "reconcile.absent_status",
            "200 is also in found_status",
        ),
        (
            "tool = \"get_payment\"",
            "reconcile.url",
            "does not go with tool",
        ),
        (
            "timeout_ms = 0",
            "reconcile.timeout_ms",
            "must be at least 1",
        ),
    ];
    for (keys, field, message) in cases {
        let file = write_tools_file(&format!(
            "[[tools]]\nname = \"pay\"\nurl = \"http://127.0.0.1:9/pay\"\n[tools.reconcile]\nurl = \"http://127.0.0.1:9/lookup?k={{execution_id}}\"\n{keys}\n"
        ));
        let output = std::process::Command::new(gateway_binary())
            .arg("check-config")
            .env_remove("DATABASE_URL")
            .env("CARMY_TOOLS_FILE", &file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{keys}: {stderr}");
        assert!(
            stderr.contains(field) && stderr.contains(message) && stderr.contains("tool \"pay\""),
            "{keys}: {stderr}"
        );
    }
}

/// Runs `check-config` on `file`: success, standard output, standard error.
fn check_config(file: &Path) -> (bool, String, String) {
    let output = std::process::Command::new(gateway_binary())
        .arg("check-config")
        .env_remove("DATABASE_URL")
        .env("CARMY_TOOLS_FILE", file)
        .env("CARMY_TEST_LOOKUP_TOKEN", LOOKUP_TOKEN)
        .env("CARMY_TEST_PROBE_TOKEN", PROBE_TOKEN)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn check_config_shows_tool_probes_and_refuses_a_bad_one_in_one_line() {
    let (ok, stdout, stderr) = check_config(&tool_probe_tools("http://127.0.0.1:9"));
    assert!(ok, "{stderr}");
    assert!(stdout.contains("reconcile tool get_payment arguments={\"idempotency_key\":\"{execution_id}\"}  found_pointer=/payment_id  absent=[404] absent_means=not_executed  timeout=2000ms"), "{stdout}");
    assert!(
        !stdout.contains(LOOKUP_TOKEN) && !stdout.contains(PROBE_TOKEN),
        "{stdout}"
    );

    let pay = "[[tools]]\nname = \"pay\"\nurl = \"http://127.0.0.1:9/pay\"\n";
    let read = "[[tools]]\nname = \"read\"\nmethod = \"GET\"\nurl = \"http://127.0.0.1:9/read\"\nannotations = { readOnlyHint = true }\n";
    let write = "[[tools]]\nname = \"write\"\nurl = \"http://127.0.0.1:9/write\"\nannotations = { readOnlyHint = false }\n";
    let cases = [
        (
            format!("{pay}[tools.reconcile]\ntool = \"pay\"\n"),
            "reconcile.tool",
            "names the tool itself",
        ),
        (
            format!("{pay}[tools.reconcile]\ntool = \"write\"\nfound_pointer = \"/x\"\n{write}"),
            "reconcile.tool",
            "\"write\" is not annotated read-only",
        ),
        (
            format!("{pay}[tools.reconcile]\ntool = \"nothing\"\nfound_pointer = \"/x\"\n{read}"),
            "reconcile.tool",
            "no [[tools]] entry is named \"nothing\"",
        ),
        (
            format!("{pay}[tools.reconcile]\ntool = \"read\"\nfound_status = [200]\n{read}"),
            "reconcile.found_status",
            "found is a value at found_pointer",
        ),
        (
            format!("{pay}[tools.reconcile]\ntool = \"read\"\n{read}"),
            "reconcile.found_pointer",
            "is required with tool",
        ),
        (
            format!("{pay}[tools.reconcile]\ntool = \"read\"\nfound_pointer = \"payment_id\"\n{read}"),
            "reconcile.found_pointer",
            "is not a JSON Pointer",
        ),
        (
            format!("{pay}[tools.reconcile]\nurl = \"http://127.0.0.1:9/l?k={{execution_id}}\"\nfound_pointer = \"/id\"\n"),
            "reconcile.found_pointer",
            "goes with tool",
        ),
        (
            format!("{pay}[tools.reconcile]\ntool = \"read\"\narguments = {{ k = \"{{execution_id\" }}\n{read}"),
            "reconcile.arguments",
            "without its }",
        ),
        (
            format!("{pay}[tools.reconcile]\nurl = \"http://127.0.0.1:9/l?k={{execution_id}}\"\narguments = {{ k = \"v\" }}\n"),
            "reconcile.arguments",
            "go with tool",
        ),
    ];
    for (text, field, message) in cases {
        let (ok, _, stderr) = check_config(&write_tools_file(&text));
        assert!(!ok, "{text}: {stderr}");
        assert!(
            stderr.contains(field) && stderr.contains(message) && stderr.contains("tool \"pay\""),
            "{text}: {stderr}"
        );
        let said: Vec<&str> = stderr
            .lines()
            .filter(|line| line.starts_with("carmy-gateway: "))
            .collect();
        assert_eq!(said.len(), 1, "{stderr}");
        assert!(said[0].contains(message), "{stderr}");
    }
}

#[test]
fn check_config_checks_a_probe_that_calls_an_mcp_tool() {
    let file = mcp_tools(
        "http://127.0.0.1:9",
        "tool = \"py.lookup\"\narguments = { key = \"{execution_id}\" }\nfound_pointer = \"/found\"",
    )
    .file;
    let (ok, stdout, stderr) = check_config(&file);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains(
            "reconcile tool py.lookup arguments={\"key\":\"{execution_id}\"}  found_pointer=/found"
        ),
        "{stdout}"
    );
    for (probe, message) in [
        (
            "tool = \"py.write\"\nfound_pointer = \"/found\"",
            "tool \"pay\": reconcile.tool names \"py.write\", which is not annotated read-only",
        ),
        (
            "tool = \"py.missing\"\nfound_pointer = \"/found\"",
            "tool \"pay\": reconcile.tool names \"py.missing\", which neither",
        ),
    ] {
        let file = mcp_tools("http://127.0.0.1:9", probe).file;
        let (ok, _, stderr) = check_config(&file);
        assert!(!ok, "{probe}: {stderr}");
        assert!(stderr.contains(message), "{probe}: {stderr}");
    }
}
