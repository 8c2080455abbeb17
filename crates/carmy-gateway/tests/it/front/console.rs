//! The operator console (`/console`, docs/operations.md) in a real browser: headless Chromium
//! (Debian's `chromium` and `chromium-driver`) driven by Selenium from PyPI
//! (tests/console/browser.py, its venv from tests/console/python-venv.sh). A replica is killed
//! mid-call; the operator logs in on the other, finds the interrupted execution, is refused a
//! forged post and one over the body limit (413), resolves it with a note and sees the audit
//! row; the agent's retry then replays the resolved outcome, and the refused posts left no audit
//! row. Screenshots go to `$CARGO_TARGET_DIR/console-screenshots` (or `target/`), or
//! `CARMY_CONSOLE_SHOTS`.

use carmy_test_support::{client, eventually, Replica, TestDb};
use serde_json::{json, Value};
use sqlx::Row;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const OPERATOR_KEY: &str = "console-operator-key";
const AGENT_KEY: &str = "console-agent-key";

fn env(db: &TestDb) -> Vec<(&str, &str)> {
    vec![
        ("DATABASE_URL", db.url.as_str()),
        ("CARMY_LEASE_TTL_MS", "1000"),
        ("CARMY_OPERATOR_KEYS", "console-operator-key=ops"),
        ("CARMY_API_KEYS", "console-agent-key=agent"),
        ("CARMY_MAX_BODY_BYTES", "65536"),
    ]
}

/// The replicas' body limit (`CARMY_MAX_BODY_BYTES` in [`env`]).
const MAX_BODY_BYTES: usize = 65536;

/// The venv's python with Selenium: `CARMY_CONSOLE_PYTHON`, else built by python-venv.sh.
pub(crate) fn python() -> String {
    if let Ok(python) = std::env::var("CARMY_CONSOLE_PYTHON") {
        return python;
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/console/python-venv.sh");
    let output = Command::new("bash")
        .arg(script)
        .output()
        .expect("python-venv.sh runs");
    assert!(
        output.status.success(),
        "python-venv.sh failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

pub(crate) fn screenshots() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARMY_CONSOLE_SHOTS") {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    target.join("console-screenshots")
}

/// The agent's call, as its retry sends it again.
fn call(request_id: &str) -> Value {
    json!({"tool": "sleep", "arguments": {"ms": 600_000}, "request_id": request_id})
}

async fn agent_post(http: &reqwest::Client, replica: &Replica, body: &Value) -> (u16, Value) {
    let response = http
        .post(replica.url("/v1/executions"))
        .bearer_auth(AGENT_KEY)
        .json(body)
        .send()
        .await
        .expect("the call is answered");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON answer"))
}

async fn agent_lookup(http: &reqwest::Client, replica: &Replica, request_id: &str) -> Value {
    http.get(replica.url("/v1/executions"))
        .query(&[("request_id", request_id)])
        .bearer_auth(AGENT_KEY)
        .send()
        .await
        .expect("the lookup is answered")
        .json()
        .await
        .expect("a JSON answer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_resolves_an_interrupted_execution_in_the_browser() {
    let db = TestDb::create().await;
    let mut owner = Replica::start("console-owner", &env(&db));
    let reader = Replica::start("console-reader", &env(&db));
    let http = client();
    // Markup in the request id: the console must show it as text.
    let request_id = "order-<i>17</i>&co";
    let (spawned_http, url, body) = (http.clone(), owner.url("/v1/executions"), call(request_id));
    tokio::spawn(async move {
        let _ = spawned_http
            .post(url)
            .bearer_auth(AGENT_KEY)
            .json(&body)
            .send()
            .await;
    });
    let id = eventually(Duration::from_secs(30), "the call is reserved", || async {
        let found = agent_lookup(&http, &reader, request_id).await;
        found["execution_id"]
            .as_str()
            .map(str::to_owned)
            .ok_or(found)
    })
    .await;
    owner.kill9();
    eventually(
        Duration::from_secs(30),
        "the owner's lease lapses",
        || async {
            let found = agent_lookup(&http, &reader, request_id).await;
            (found["status"] == "interrupted")
                .then_some(())
                .ok_or(found)
        },
    )
    .await;
    // Before the decision the agent's retry is uncertain, not run again.
    let (status, body) = agent_post(&http, &reader, &call(request_id)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("EXECUTION_UNCERTAIN"))
    );

    let shots = screenshots();
    let output = Command::new(python())
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/console/browser.py"))
        .args(["--base", &reader.base])
        .args(["--operator-key", OPERATOR_KEY, "--agent-key", AGENT_KEY])
        .args(["--execution", &id, "--request-id", request_id])
        .args(["--max-body-bytes", &MAX_BODY_BYTES.to_string()])
        .arg("--shots")
        .arg(&shots)
        .output()
        .expect("the browser script runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "the browser checks failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("browser checks passed"));
    for name in [
        "01-login",
        "02-agent-key-refused",
        "03-executions-interrupted",
        "04-execution-interrupted",
        "05-execution-resolved",
        "06-executions-all",
        "07-execution-phone",
    ] {
        assert!(shots.join(format!("{name}.png")).exists(), "{name}.png");
    }

    // The decision went through the API's path: one audit row, by the operator, with the note.
    let mut connection = db.connect().await;
    let rows = sqlx::query(
        "SELECT action, actor, note FROM carmy.audit_log WHERE execution_id = $1 ORDER BY id",
    )
    .bind(&id)
    .fetch_all(&mut connection)
    .await
    .unwrap();
    let rows: Vec<(String, String, String)> = rows
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    assert_eq!(
        rows,
        vec![(
            "resolve".to_owned(),
            "operator:ops".to_owned(),
            "order 17 exists upstream; created by this call (browser test)".to_owned()
        )]
    );

    // The agent's retry replays the resolved outcome on both replicas; the tool does not run.
    owner.restart();
    for replica in [&reader, &owner] {
        let (status, body) = agent_post(&http, replica, &call(request_id)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["replayed"], true);
        assert_eq!(body["execution_id"], id.as_str());
        assert_eq!(body["status"], "completed");
        assert_eq!(body["data"], json!({"order_id": 17, "via": "console"}));
        assert_eq!(body["resolution"]["by"], "operator:ops");
    }
}

#[tokio::test]
async fn console_pages_refuse_without_an_operator_session() {
    let db = TestDb::create().await;
    let replica = Replica::start("console-refusals", &env(&db));
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for path in ["/console/executions", "/console/executions/x"] {
        // No cookie, an agent's bearer key, an unknown session cookie: to the login form.
        for (header, value) in [
            ("x-none", "-"),
            ("authorization", "Bearer console-agent-key"),
            ("authorization", "Bearer console-operator-key"),
            ("cookie", "carmy_console=0123"),
        ] {
            let response = http
                .get(replica.url(path))
                .header(header, value)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), 303, "{path} with {header}");
            assert_eq!(response.headers()["location"], "/console/login");
            assert!(response.headers()["content-security-policy"]
                .to_str()
                .unwrap()
                .starts_with("default-src 'none'"));
        }
    }
    // A decision posted without a session changes nothing and leaves no audit row.
    let response = http
        .post(replica.url("/console/executions/x/release"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("note=forged")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 303);
    let mut connection = db.connect().await;
    let count: i64 = sqlx::query("SELECT count(*) FROM carmy.audit_log")
        .fetch_one(&mut connection)
        .await
        .unwrap()
        .get(0);
    assert_eq!(count, 0);
}

/// A client of the console at `local` (a loopback address of its own): the login form's
/// cookie and its latest token.
struct LoginClient {
    http: reqwest::Client,
    cookie: String,
    token: String,
}

impl LoginClient {
    async fn open(replica: &Replica, local: [u8; 4]) -> Self {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .local_address(std::net::IpAddr::from(local))
            .build()
            .unwrap();
        let response = http
            .get(replica.url("/console/login"))
            .send()
            .await
            .unwrap();
        let cookie = response.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_owned();
        let mut client = Self {
            http,
            cookie,
            token: String::new(),
        };
        client.keep_token(&response.text().await.unwrap());
        client
    }

    fn keep_token(&mut self, html: &str) {
        if let Some(at) = html.find("name=\"csrf\" value=\"") {
            let rest = &html[at + 19..];
            self.token = rest[..rest.find('"').unwrap()].to_owned();
        }
    }

    /// Posts the login form with `key`: the status.
    async fn login(&mut self, replica: &Replica, key: &str) -> u16 {
        let response = self
            .http
            .post(replica.url("/console/login"))
            .header("cookie", &self.cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("key={key}&csrf={}", self.token))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        self.keep_token(&response.text().await.unwrap());
        status
    }
}

/// The served gateway counts logins by each connection's peer address: wrong keys from
/// 127.0.0.2 are refused after ten, the operator's key from 127.0.0.1 still logs in.
#[tokio::test]
async fn console_logins_are_limited_per_client_address() {
    let db = TestDb::create().await;
    let replica = Replica::start("console-login-limits", &env(&db));
    let mut guesser = LoginClient::open(&replica, [127, 0, 0, 2]).await;
    let mut statuses = Vec::new();
    for n in 0..12 {
        statuses.push(guesser.login(&replica, &format!("{n:04}-guess")).await);
    }
    assert_eq!(statuses, [[401; 10].as_slice(), &[429, 429]].concat());
    let mut operator = LoginClient::open(&replica, [127, 0, 0, 1]).await;
    assert_eq!(operator.login(&replica, OPERATOR_KEY).await, 303);
}
