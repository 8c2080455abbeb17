//! `scripts/test` accepts any cargo selection: the gateway's feature `fault-injection` is added
//! only when the selection includes the gateway (a selection without it would be rejected by
//! cargo). Checked with `CARMY_TEST_PRINT=1`, which prints the command instead of running it.

use std::path::Path;
use std::process::Command;

fn command_for(arguments: &[&str]) -> String {
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
fn the_gateway_feature_is_added_only_when_the_gateway_is_selected() {
    let with = "cargo test --features carmy-gateway/fault-injection";
    for (arguments, expected) in [
        (&["-p", "carmy"][..], "cargo test -p carmy".to_owned()),
        (
            &["-p", "carmy", "--test", "tool_errors"][..],
            "cargo test -p carmy --test tool_errors".to_owned(),
        ),
        (
            &["--package=carmy-postgres", "--", "--skip", "carmy-gateway"][..],
            "cargo test --package=carmy-postgres -- --skip carmy-gateway".to_owned(),
        ),
        (
            &["-p", "carmy-gateway", "--test", "it", "order_errors"][..],
            format!("{with} -p carmy-gateway --test it order_errors"),
        ),
        (&["-pcarmy-gateway"][..], format!("{with} -pcarmy-gateway")),
        (
            &["-p", "carmy", "-p", "carmy-gateway"][..],
            format!("{with} -p carmy -p carmy-gateway"),
        ),
        (&["--workspace"][..], format!("{with} --workspace")),
        (&["--test", "it"][..], format!("{with} --test it")),
    ] {
        assert_eq!(command_for(arguments), expected, "{arguments:?}");
    }
}
