//! The operator CLI `carmy-gateway executions list|show|resolve|release` (docs/semantics.md
//! §12.5) as a real process against real replicas on one PostgreSQL database: it lists an
//! interrupted execution, decides once with one audit row, the next API attempt replays the
//! decision (or, after a release, runs new), a second decision fails with its exit code, and CLI
//! processes racing API decisions leave one winner. Its mistakes and failures are in
//! `executions_cli_failures`.

use crate::recovery_replicas::{audit_rows, env, interrupted_execution};
use carmy_test_support::replica::gateway_binary;
use carmy_test_support::{
    client, eventually, post, request, spawn_post_unanswered, Replica, TestDb,
};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;

/// What one CLI run printed, and how it ended.
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    /// The CLI's own message: the last line of standard error that is not a log line (a build
    /// with fault injection logs a warning before it).
    pub(crate) fn message(&self) -> &str {
        self.stderr
            .lines()
            .rfind(|line| line.starts_with("carmy-gateway: ") || line.starts_with('{'))
            .unwrap_or_default()
    }

    /// Standard output as JSON.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {} / {}", self.stdout, self.stderr))
    }
}

/// Runs `carmy-gateway executions <args>` with `database_url` (none: `DATABASE_URL` unset).
pub(crate) async fn cli(database_url: Option<&str>, args: &[&str]) -> Run {
    let mut command = tokio::process::Command::new(gateway_binary());
    command
        .arg("executions")
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("RUST_LOG")
        .kill_on_drop(true);
    if let Some(url) = database_url {
        command.env("DATABASE_URL", url);
    }
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("the CLI answers within 60 s")
        .expect("the CLI starts");
    Run {
        code: output.status.code().expect("the CLI exits, not killed"),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// The long call `interrupted_execution` makes for `request_id`.
fn sleep_call(request_id: &str) -> Value {
    json!({"tool": "sleep", "arguments": {"ms": 600_000}, "request_id": request_id})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cli_lists_resolves_once_and_the_next_attempt_replays_it() {
    let db = TestDb::migrated().await;
    let url = Some(db.url.as_str());
    let mut a = Replica::start("cli-resolve-a", &env(&db));
    let b = Replica::start("cli-resolve-b", &env(&db));
    let id = interrupted_execution(&mut a, &b, "cli-resolve").await;

    let table = cli(url, &["list", "--state", "interrupted"]).await;
    assert_eq!(table.code, 0, "{}", table.stderr);
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "a header and one row: {}", table.stdout);
    let header = lines[0].split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(
        header,
        "EXECUTION STATUS PRINCIPAL SESSION REQUEST_ID TOOL RESERVED OWNER"
    );
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        row[..6],
        [
            id.as_str(),
            "interrupted",
            "anonymous",
            "default",
            "cli-resolve",
            "sleep"
        ]
    );

    let listed = cli(url, &["list", "--state", "interrupted", "--json"]).await;
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let listed = listed.json();
    let executions = listed["executions"].as_array().unwrap();
    assert_eq!(executions.len(), 1, "{listed}");
    let execution = &executions[0];
    for (field, expected) in [
        ("execution_id", json!(id)),
        ("status", json!("interrupted")),
        ("principal", json!("anonymous")),
        ("session_id", json!("default")),
        ("request_id", json!("cli-resolve")),
        ("tool", json!("sleep")),
        ("finished_at", Value::Null),
        ("resolution", Value::Null),
    ] {
        assert_eq!(execution[field], expected, "{field}: {execution}");
    }
    assert!(
        execution["owner_instance"]
            .as_str()
            .unwrap()
            .starts_with("inst_"),
        "{execution}"
    );
    assert!(
        execution["owner"]["pid"].is_u64(),
        "the killed owner's row stays: {execution}"
    );
    let running = cli(url, &["list", "--state", "running", "--json"]).await;
    assert_eq!(running.json(), json!({"executions": []}));

    let resolve = [
        "resolve",
        id.as_str(),
        "--status",
        "completed",
        "--data",
        r#"{"order_id": 17}"#,
        "--note",
        "order 17 exists",
        "--json",
    ];
    let resolved = cli(url, &resolve).await;
    assert_eq!(resolved.code, 0, "{}", resolved.stderr);
    let resolved = resolved.json();
    assert_eq!(
        (
            &resolved["execution_id"],
            &resolved["status"],
            &resolved["data"]
        ),
        (&json!(id), &json!("completed"), &json!({"order_id": 17})),
        "{resolved}"
    );
    assert_eq!(resolved["error"], Value::Null);
    assert_eq!(resolved["resolution"]["note"], "order 17 exists");
    let actor = resolved["resolution"]["by"].as_str().unwrap().to_owned();
    assert!(
        actor.starts_with("cli:") && actor.len() > "cli:".len(),
        "the default actor names the OS user: {actor}"
    );
    assert_eq!(
        audit_rows(&db, &id).await,
        vec![("resolve".to_owned(), actor.clone())]
    );

    let (status, replay) = post(&client(), &b, &sleep_call("cli-resolve")).await;
    assert_eq!(status, 200, "{replay}");
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["execution_id"], json!(id));
    assert_eq!(replay["data"], json!({"order_id": 17}));
    assert_eq!(replay["resolution"], resolved["resolution"]);

    let again = cli(url, &resolve[..resolve.len() - 1]).await;
    assert_eq!(again.code, 4, "{}", again.stderr);
    assert!(
        again
            .message()
            .starts_with("carmy-gateway: EXECUTION_FINISHED: ")
            && again.stderr.contains("nothing was changed")
            && again.stderr.contains(&format!("executions show {id}")),
        "{}",
        again.stderr
    );
    assert_eq!(again.stdout, "");
    let release = cli(url, &["release", &id, "--note", "too late", "--json"]).await;
    assert_eq!(release.code, 4, "{}", release.stderr);
    let problem: Value = serde_json::from_str(release.message()).unwrap();
    assert_eq!(
        (&problem["code"], &problem["exit"]),
        (&json!("EXECUTION_FINISHED"), &json!(4))
    );
    assert_eq!(
        audit_rows(&db, &id).await.len(),
        1,
        "refusals write no audit row"
    );

    let shown = cli(url, &["show", &id, "--json"]).await;
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    let shown = shown.json();
    assert_eq!(shown["status"], "completed");
    assert_eq!(
        shown["record"], resolved,
        "the record as the API replays it"
    );
    let audit = shown["audit"].as_array().unwrap();
    assert_eq!(audit.len(), 1, "{shown}");
    assert_eq!(
        (&audit[0]["action"], &audit[0]["actor"], &audit[0]["note"]),
        (&json!("resolve"), &json!(actor), &json!("order 17 exists"))
    );
    assert_eq!(audit[0]["before"]["in_flight_state"], "interrupted");
    let block = cli(url, &["show", &id]).await;
    assert_eq!(block.code, 0, "{}", block.stderr);
    assert!(
        block.stdout.contains(&format!("execution   {id}\n"))
            && block
                .stdout
                .contains("status      completed (recorded; every retry replays it)\n")
            && block.stdout.contains("data        {\"order_id\":17}\n")
            && block
                .stdout
                .contains(&format!("decided     by {actor} at "))
            && block.stdout.contains("audit       1 row\n"),
        "{}",
        block.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_release_from_the_cli_lets_the_next_attempt_run_new() {
    let db = TestDb::migrated().await;
    let url = Some(db.url.as_str());
    let mut a = Replica::start("cli-release-a", &env(&db));
    let b = Replica::start("cli-release-b", &env(&db));
    let id = interrupted_execution(&mut a, &b, "cli-release").await;

    let shown = cli(url, &["show", &id]).await;
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert!(
        shown.stdout.contains("status      interrupted (")
            && shown
                .stdout
                .contains(&format!("carmy-gateway executions release {id} --note")),
        "an interrupted execution's block says what to do next: {}",
        shown.stdout
    );
    let args = [
        "release",
        id.as_str(),
        "--note",
        "no order found",
        "--actor",
        "dba:carol",
        "--json",
    ];
    let released = cli(url, &args).await;
    assert_eq!(released.code, 0, "{}", released.stderr);
    let released = released.json();
    assert_eq!(
        (
            &released["execution_id"],
            &released["status"],
            &released["tool"]
        ),
        (&json!(id), &json!("released"), &json!("sleep"))
    );
    assert_eq!(
        (&released["request_id"], &released["session_id"]),
        (&json!("cli-release"), &json!("default"))
    );
    assert_eq!(
        (
            &released["resolution"]["by"],
            &released["resolution"]["note"]
        ),
        (&json!("dba:carol"), &json!("no order found"))
    );
    assert_eq!(
        audit_rows(&db, &id).await,
        vec![("release".into(), "dba:carol".into())]
    );
    let http = client();
    let (status, read) = request(
        &http,
        &b,
        Method::GET,
        &format!("/v1/executions/{id}"),
        None,
        None,
    )
    .await;
    // The API adds what the call asked (docs/semantics.md §8.5).
    let mut read = read;
    let asked = read.as_object_mut().unwrap().remove("arguments");
    assert_eq!(asked, Some(json!({"ms": 600_000})));
    assert_eq!(
        (status, &read),
        (200, &released),
        "the API reads what the CLI answered"
    );
    let listed = cli(url, &["list", "--state", "released", "--json"])
        .await
        .json();
    assert_eq!(
        listed["executions"][0]["execution_id"],
        json!(id),
        "{listed}"
    );
    assert_eq!(
        listed["executions"][0]["resolution"],
        released["resolution"]
    );

    spawn_post_unanswered(&http, &b, &sleep_call("cli-release"));
    let lookup = "/v1/executions?request_id=cli-release";
    let next = eventually(
        Duration::from_secs(10),
        "the next attempt runs new",
        || async {
            let (_, body) = request(&http, &b, Method::GET, lookup, None, None).await;
            (body["status"] == "running" && body["execution_id"] != json!(id))
                .then(|| body["execution_id"].as_str().unwrap().to_owned())
                .ok_or(body)
        },
    )
    .await;
    let twice = cli(url, &["release", &id, "--note", "again"]).await;
    assert_eq!(twice.code, 4, "{}", twice.stderr);
    let running = cli(url, &["release", &next, "--note", "owner is alive"]).await;
    assert_eq!(running.code, 5, "{}", running.stderr);
    assert!(
        running
            .message()
            .starts_with("carmy-gateway: EXECUTION_RUNNING: ")
            && running.stderr.contains("--force"),
        "{}",
        running.stderr
    );
    assert_eq!(
        audit_rows(&db, &next).await,
        vec![],
        "a refusal changes nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_decisions_from_cli_and_api_have_one_winner() {
    let db = TestDb::migrated().await;
    let url = db.url.clone();
    let mut a = Replica::start("cli-race-a", &env(&db));
    let b = Replica::start("cli-race-b", &env(&db));
    let id = interrupted_execution(&mut a, &b, "cli-race").await;
    let clis = (0..8).map(|n| {
        let (url, id) = (url.clone(), id.clone());
        tokio::spawn(async move {
            let note = format!("cli decision {n}");
            let args: Vec<&str> = if n % 2 == 0 {
                vec![
                    "resolve",
                    &id,
                    "--status",
                    "completed",
                    "--data",
                    "1",
                    "--note",
                    &note,
                ]
            } else {
                vec!["release", &id, "--note", &note]
            };
            cli(Some(&url), &args).await.code
        })
    });
    let http = client();
    let apis = (0..4).map(|n| {
        let (http, path) = (http.clone(), format!("/v1/executions/{id}/release"));
        let replica = &b;
        async move {
            let body = json!({"note": format!("api decision {n}")});
            request(&http, replica, Method::POST, &path, Some("ko"), Some(&body))
                .await
                .0
        }
    });
    let (clis, apis) = tokio::join!(
        futures::future::join_all(clis),
        futures::future::join_all(apis)
    );
    let clis: Vec<i32> = clis.into_iter().map(Result::unwrap).collect();
    let cli_wins = clis.iter().filter(|code| **code == 0).count();
    let api_wins = apis.iter().filter(|status| **status == 200).count();
    assert_eq!(
        cli_wins + api_wins,
        1,
        "one winner: cli {clis:?}, api {apis:?}"
    );
    assert!(clis.iter().all(|code| [0, 4].contains(code)), "{clis:?}");
    assert!(
        apis.iter().all(|status| [200, 409].contains(status)),
        "{apis:?}"
    );
    assert_eq!(audit_rows(&db, &id).await.len(), 1, "one audit row");
}
