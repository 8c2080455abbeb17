//! Mistakes and failures of the operator CLI `carmy-gateway executions` (docs/semantics.md §12.5):
//! each exits with its documented code and says what to do next on standard error, each
//! subcommand's `--help` lists only what it reads, and a decision whose answer is lost on the
//! wire exits 7 while `show` tells that it was applied.

use crate::executions_cli::cli;
use crate::recovery_replicas::{audit_rows, env, interrupted_execution};
use carmy_test_support::replica::gateway_binary;
use carmy_test_support::{Replica, TestDb};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cli_mistakes_exit_with_their_code_and_say_what_to_do() {
    let db = TestDb::migrated().await;
    let url = Some(db.url.as_str());
    let unknown = "exec_00000000000000000000000000000000";
    let cases: Vec<(Option<&str>, Vec<&str>, i32, &str)> = vec![
        (url, vec!["show", unknown], 3, "NOT_FOUND"),
        (url, vec!["release", unknown, "--note", "x"], 3, "NOT_FOUND"),
        (
            url,
            vec![
                "resolve",
                unknown,
                "--status",
                "completed",
                "--data",
                "{",
                "--note",
                "x",
            ],
            2,
            "INVALID_REQUEST: --data is not valid JSON",
        ),
        (
            url,
            vec!["resolve", unknown, "--status", "failed", "--note", "x"],
            2,
            "INVALID_REQUEST: --status failed: status failed needs an error",
        ),
        (
            url,
            vec![
                "resolve",
                unknown,
                "--status",
                "failed",
                "--error",
                r#"{"code": 1}"#,
                "--note",
                "x",
            ],
            2,
            "INVALID_REQUEST: --error must be an object",
        ),
        (
            url,
            vec!["release", unknown, "--note", " "],
            2,
            "INVALID_REQUEST: --note: note is required",
        ),
        (url, vec!["list", "--request-id", ""], 2, "INVALID_REQUEST"),
        (
            url,
            vec!["list", "--arguments", "cus_42"],
            2,
            "INVALID_REQUEST: --arguments: arguments must be a JSON object",
        ),
        (None, vec!["list"], 2, "DATABASE_URL_MISSING"),
        (
            Some("postgres://postgres@127.0.0.1:1/nowhere"),
            vec!["list"],
            6,
            "STORE_UNAVAILABLE: cannot connect to PostgreSQL",
        ),
    ];
    for (database_url, args, code, message) in cases {
        let run = cli(database_url, &args).await;
        assert_eq!(run.code, code, "{args:?}: {}", run.stderr);
        assert!(
            run.message()
                .starts_with(&format!("carmy-gateway: {message}")),
            "{args:?}: {}",
            run.stderr
        );
        assert_eq!(run.stdout, "", "{args:?}");
    }
    let usage = cli(
        url,
        &["resolve", unknown, "--status", "succeeded", "--note", "x"],
    )
    .await;
    assert_eq!(
        usage.code, 2,
        "clap's usage errors exit 2: {}",
        usage.stderr
    );
    assert!(
        usage
            .stderr
            .contains("possible values: completed, failed, timed_out, cancelled"),
        "{}",
        usage.stderr
    );

    let empty = TestDb::create().await;
    let run = cli(Some(&empty.url), &["list"]).await;
    assert_eq!(run.code, 6, "{}", run.stderr);
    assert!(
        run.message()
            .starts_with("carmy-gateway: SCHEMA_NOT_MIGRATED: ")
            && run.stderr.contains("carmy-gateway migrate"),
        "{}",
        run.stderr
    );
    let none = cli(url, &["list"]).await;
    assert_eq!(
        (none.code, none.stdout.as_str()),
        (0, "No executions match.\n")
    );
}

#[test]
fn each_subcommand_help_lists_only_what_it_reads() {
    let cases: [(&str, &[&str]); 4] = [
        (
            "list",
            &[
                "state",
                "principal",
                "request-id",
                "session-id",
                "arguments",
                "limit",
                "database-url",
                "database-session-url",
                "json",
                "log-format",
            ],
        ),
        (
            "show",
            &[
                "database-url",
                "database-session-url",
                "json",
                "log-format",
                "retention",
            ],
        ),
        (
            "resolve",
            &[
                "status",
                "data",
                "error",
                "note",
                "actor",
                "database-url",
                "database-session-url",
                "force",
                "json",
                "log-format",
                "retention",
            ],
        ),
        (
            "release",
            &[
                "note",
                "actor",
                "database-url",
                "database-session-url",
                "force",
                "json",
                "log-format",
                "retention",
            ],
        ),
    ];
    for (subcommand, expected) in cases {
        let output = std::process::Command::new(gateway_binary())
            .args(["executions", subcommand, "--help"])
            .output()
            .expect("run carmy-gateway executions … --help");
        assert!(output.status.success());
        let help = String::from_utf8_lossy(&output.stdout);
        let mut options: Vec<&str> = help
            .lines()
            .filter_map(|line| line.trim_start().strip_prefix("--"))
            .map(|rest| rest.split_whitespace().next().unwrap_or_default())
            .collect();
        options.sort_unstable();
        let mut expected = expected.to_vec();
        expected.sort_unstable();
        assert_eq!(options, expected, "{subcommand}: {help}");
    }
}

/// A loopback proxy to `upstream` that, once a client sent `carmy.resolve_execution`, drops the
/// database's answer carrying the recorded `resolution` and closes the connection: the decision
/// was committed (PostgreSQL answers after the implicit commit), its answer is lost.
async fn answer_losing_proxy(upstream: String) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let contains = |chunk: &[u8], text: &[u8]| chunk.windows(text.len()).any(|w| w == text);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                continue;
            };
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            let armed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let arm = std::sync::Arc::clone(&armed);
            let upward = tokio::spawn(async move {
                let mut buffer = vec![0; 64 * 1024];
                while let Ok(n @ 1..) = client_read.read(&mut buffer).await {
                    if contains(&buffer[..n], b"resolve_execution") {
                        arm.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                    if server_write.write_all(&buffer[..n]).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                let mut buffer = vec![0; 64 * 1024];
                while let Ok(n @ 1..) = server_read.read(&mut buffer).await {
                    let answer = contains(&buffer[..n], b"resolution");
                    if answer && armed.load(std::sync::atomic::Ordering::SeqCst) {
                        break;
                    }
                    if client_write.write_all(&buffer[..n]).await.is_err() {
                        break;
                    }
                }
                upward.abort();
                let _ = client_write.shutdown().await;
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_decision_whose_answer_is_lost_exits_7_and_show_tells_what_happened() {
    let db = TestDb::migrated().await;
    let mut a = Replica::start("cli-lost-a", &env(&db));
    let b = Replica::start("cli-lost-b", &env(&db));
    let id = interrupted_execution(&mut a, &b, "cli-lost").await;
    let options: sqlx::postgres::PgConnectOptions = db.url.parse().unwrap();
    let upstream = format!("{}:{}", options.get_host(), options.get_port());
    let proxied = crate::round_trips::via_proxy(&db.url, answer_losing_proxy(upstream).await);

    let args = [
        "resolve",
        &id,
        "--status",
        "completed",
        "--data",
        "17",
        "--note",
        "found it",
    ];
    let lost = cli(Some(&proxied), &args).await;
    assert_eq!(lost.code, 7, "{}", lost.stderr);
    assert!(
        lost.message()
            .starts_with("carmy-gateway: DECISION_UNCERTAIN: ")
            && lost.message().contains("may or may not have been applied")
            && lost.message().contains(&format!("executions show {id} ")),
        "{}",
        lost.stderr
    );
    let shown = cli(Some(&db.url), &["show", &id, "--json"]).await.json();
    assert_eq!(
        (&shown["status"], &shown["record"]["data"]),
        (&json!("completed"), &json!(17)),
        "show tells that it was applied: {shown}"
    );
    assert_eq!(audit_rows(&db, &id).await.len(), 1);
}
