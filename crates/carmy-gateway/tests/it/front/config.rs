//! Configuration of the real binary: an out-of-range setting stops the gateway before it serves,
//! with a message naming the variable, its flag and the accepted range; `migrate --help` shows only
//! its own options; a taken address is named; logs written to a pipe carry no colour codes.

use carmy_test_support::replica::gateway_binary;
use std::process::Command;

/// Runs the gateway with `env` (nothing else from the test's environment that it reads) and
/// returns its exit code and standard error.
fn run_with(env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut command = Command::new(gateway_binary());
    command
        .env_remove("DATABASE_URL")
        .env_remove("CARMY_API_KEYS")
        .env("CARMY_LISTEN", "127.0.0.1:0");
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().expect("run carmy-gateway");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn out_of_range_settings_stop_the_gateway_naming_the_variable_and_the_range() {
    let max_lease = carmy_postgres::MAX_LEASE_TTL.as_millis();
    let too_long = (max_lease + 1).to_string();
    let cases: [(&str, &str, String); 10] = [
        ("CARMY_DB_POOL_SIZE", "0", "CARMY_DB_POOL_SIZE (--db-pool-size) must be at least 1, got \"0\"".to_owned()),
        ("CARMY_LEASE_TTL_MS", "0", format!("CARMY_LEASE_TTL_MS (--lease-ttl-ms) must be between 3 and {max_lease} (inclusive), got \"0\"")),
        // Too short for its renewal (a third of it, plus half of that for the connection).
        ("CARMY_LEASE_TTL_MS", "2", format!("CARMY_LEASE_TTL_MS (--lease-ttl-ms) must be between 3 and {max_lease} (inclusive), got \"2\"")),
        ("CARMY_LEASE_TTL_MS", &too_long, format!("CARMY_LEASE_TTL_MS (--lease-ttl-ms) must be between 3 and {max_lease} (inclusive), got \"{too_long}\"")),
        ("CARMY_TOOL_TIMEOUT_MS", "0", "CARMY_TOOL_TIMEOUT_MS (--tool-timeout-ms) must be at least 1, got \"0\"".to_owned()),
        ("CARMY_BODY_TIMEOUT_MS", "0", "CARMY_BODY_TIMEOUT_MS (--body-timeout-ms) must be at least 1, got \"0\"".to_owned()),
        ("CARMY_DB_ACQUIRE_TIMEOUT_MS", "0", "CARMY_DB_ACQUIRE_TIMEOUT_MS (--db-acquire-timeout-ms) must be at least 1, got \"0\"".to_owned()),
        ("CARMY_MEMORY_CAPACITY", "-3", "CARMY_MEMORY_CAPACITY (--memory-capacity) must be at least 1, got \"-3\"".to_owned()),
        ("CARMY_RETENTION", "soon", "CARMY_RETENTION (--retention) must be a duration such as 7d, 36h, 90min or 30s, or 0 to keep records forever, got \"soon\"".to_owned()),
        ("CARMY_REPLAY_CACHE_TTL_MS", "soon", "CARMY_REPLAY_CACHE_TTL_MS (--replay-cache-ttl-ms) must be at least 1, got \"soon\"".to_owned()),
    ];
    for (variable, value, message) in &cases {
        let (code, stderr) = run_with(&[(variable, value)]);
        assert_eq!(code, Some(2), "{variable}={value}: {stderr}");
        assert!(
            stderr.contains(message.as_str()),
            "{variable}={value}: expected {message:?} in {stderr:?}"
        );
    }
}

#[test]
fn the_help_shows_the_crates_defaults() {
    let output = Command::new(gateway_binary())
        .arg("--help")
        .output()
        .expect("run carmy-gateway --help");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for default in [
        format!("[default: {}]", carmy::memory::DEFAULT_MEMORY_CAPACITY),
        format!("[default: {}]", carmy::http::DEFAULT_MAX_BODY_BYTES),
        format!(
            "[default: {}]",
            carmy_postgres::DEFAULT_LEASE_TTL.as_millis()
        ),
        format!("[default: {}]", carmy_postgres::DEFAULT_MAX_CONNECTIONS),
    ] {
        assert!(help.contains(&default), "{default} missing from:\n{help}");
    }
}

#[test]
fn migrate_help_lists_only_the_options_migrate_reads() {
    let output = Command::new(gateway_binary())
        .args(["migrate", "--help"])
        .output()
        .expect("run carmy-gateway migrate --help");
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    let options: Vec<&str> = help
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("--"))
        .map(|rest| rest.split_whitespace().next().unwrap_or_default())
        .collect();
    assert_eq!(
        options,
        [
            "grant-runtime",
            "grant-reader",
            "distribute",
            "database-url",
            "database-session-url",
            "log-format"
        ],
        "{help}"
    );
}

#[test]
fn a_taken_address_is_named_and_logs_to_a_pipe_have_no_colour() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let (code, stderr) = run_with(&[("CARMY_LISTEN", &address), ("CARMY_LOG_FORMAT", "text")]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot listen on {address}: Address already in use"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "ANSI escapes in {stderr:?}");
}
