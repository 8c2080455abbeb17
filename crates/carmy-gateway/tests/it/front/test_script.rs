//! `scripts/test` passes any cargo selection to `cargo test` as it is (the crash-injection
//! target `crash` names its feature itself: it has `required-features`), and without a selection
//! runs every test with the crash target and the soak. Checked with `CARMY_TEST_PRINT=1`, which
//! prints the commands instead of running anything.

use std::path::Path;
use std::process::Command;

fn commands_for(arguments: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test");
    let output = Command::new("bash")
        .arg(script)
        .args(arguments)
        .env("CARMY_TEST_PRINT", "1")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[test]
fn a_selection_goes_to_cargo_as_it_is() {
    for arguments in [
        &["-p", "carmy"][..],
        &["-p", "carmy-http", "--test", "tool_errors"][..],
        &["--package=carmy-postgres", "--", "--skip", "carmy-gateway"][..],
        &["-p", "carmy-gateway", "--test", "it", "order_errors"][..],
        &[
            "-p",
            "carmy-gateway",
            "--features",
            "fault-injection",
            "--test",
            "crash",
        ][..],
        &["--workspace"][..],
    ] {
        assert_eq!(
            commands_for(arguments),
            format!("cargo test {}", arguments.join(" ")),
            "{arguments:?}"
        );
    }
}

#[test]
fn without_a_selection_every_test_runs_with_the_crash_target() {
    let commands = commands_for(&[]);
    let cargo: Vec<&str> = commands
        .lines()
        .filter(|line| line.starts_with("cargo "))
        .collect();
    assert_eq!(
        cargo,
        [
            "cargo test --workspace --features carmy-gateway/fault-injection -- --skip soak_under_faults",
            "cargo test -p carmy-gateway --features fault-injection --test crash soak_under_faults -- --nocapture",
        ],
        "{commands}"
    );
    assert_eq!(commands.lines().count(), 9, "{commands}");
    assert!(
        commands.contains("clients/mcp-oauth/run-tests.sh"),
        "the OAuth flow with oidc-provider and the MCP SDK runs: {commands}"
    );
    assert!(
        commands.contains("clients/typescript/run-tests.sh"),
        "the TypeScript client's tests run: {commands}"
    );
    assert!(
        commands.contains("examples/frameworks/run-tests.sh"),
        "the agent framework recipes run: {commands}"
    );
}
