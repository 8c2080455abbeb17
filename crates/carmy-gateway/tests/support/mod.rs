//! Test harness: throwaway databases and real `carmy-gateway` processes.
//!
//! `DATABASE_URL` names a server where the test user may create databases (the test script
//! provides one); each test gets its own database, dropped at the end.

#![allow(dead_code)]

use serde_json::Value;
use sqlx::{Connection, PgConnection};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The server the tests use.
pub fn server_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// `url` with its database name replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let prefix = base.rsplit_once('/').map_or(base, |(prefix, _)| prefix);
    match query {
        Some(query) => format!("{prefix}/{database}?{query}"),
        None => format!("{prefix}/{database}"),
    }
}

/// A database of its own for one test.
pub struct TestDb {
    pub url: String,
    name: String,
}

impl TestDb {
    pub async fn create() -> Self {
        let name = format!("carmy_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&server_url())
            .await
            .expect("DATABASE_URL must name a reachable PostgreSQL server");
        sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .expect("the test user may create databases");
        Self {
            url: with_database(&server_url(), &name),
            name,
        }
    }

    pub async fn connect(&self) -> PgConnection {
        PgConnection::connect(&self.url).await.unwrap()
    }

    /// Drops the database (terminating leftover connections).
    pub async fn drop_db(self) {
        let Ok(mut admin) = PgConnection::connect(&server_url()).await else {
            return;
        };
        let _ = sqlx::raw_sql(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ))
        .execute(&mut admin)
        .await;
    }
}

/// One running `carmy-gateway` process.
pub struct Replica {
    child: Option<Child>,
    pub base: String,
    pub name: String,
    env: Vec<(String, String)>,
}

pub fn gateway_binary() -> &'static str {
    env!("CARGO_BIN_EXE_carmy-gateway")
}

impl Replica {
    /// Starts a gateway on an ephemeral loopback port with `env` (plus JSON logs) and waits
    /// until it prints its address.
    pub fn start(name: &str, env: &[(&str, &str)]) -> Self {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let mut replica = Self {
            child: None,
            base: String::new(),
            name: name.to_owned(),
            env,
        };
        replica.spawn();
        replica
    }

    fn spawn(&mut self) {
        let mut command = Command::new(gateway_binary());
        command
            .env_remove("DATABASE_URL")
            .env_remove("CARMY_API_KEYS")
            .env("CARMY_LISTEN", "127.0.0.1:0")
            .env("CARMY_LOG_FORMAT", "json")
            .env("RUST_LOG", "info,tower_http=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (key, value) in &self.env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("spawn carmy-gateway");
        let stderr = child.stderr.take().unwrap();
        let (address_tx, address_rx) = mpsc::channel();
        let name = self.name.clone();
        std::thread::spawn(move || {
            let log_dir = std::env::temp_dir().join("carmy-test-logs");
            let _ = std::fs::create_dir_all(&log_dir);
            let mut log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log_dir.join(format!("{name}.log")))
                .ok();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(log) = log.as_mut() {
                    let _ = writeln!(log, "{line}");
                }
                if let Ok(entry) = serde_json::from_str::<Value>(&line) {
                    if entry["fields"]["message"] == "serving" {
                        if let Some(address) = entry["fields"]["address"].as_str() {
                            let _ = address_tx.send(address.to_owned());
                        }
                    }
                }
            }
        });
        let address = address_rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("replica {} did not start serving", self.name));
        self.base = format!("http://{address}");
        self.child = Some(child);
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL: the process dies without draining or ending its lease.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait for a clean exit; returns whether it exited successfully.
    pub fn terminate(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return false;
        };
        let pid = child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        child.wait().map(|status| status.success()).unwrap_or(false)
    }

    /// Starts the same configuration again (a new process, a new instance id, a new port).
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// Where this replica's standard error is copied (JSON log lines).
    pub fn log_path(&self) -> std::path::PathBuf {
        std::env::temp_dir()
            .join("carmy-test-logs")
            .join(format!("{}.log", self.name))
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A plain HTTP client (no TLS, no proxy).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// POSTs a call; returns the status and the JSON body.
pub async fn post(client: &reqwest::Client, replica: &Replica, body: &Value) -> (u16, Value) {
    let response = client
        .post(replica.url("/v1/executions"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    (status, value)
}

/// POSTs `body` to `replica` on a task of its own (so the test can act while the call runs);
/// the handle yields the status and JSON body, and panics on a transport error.
pub fn spawn_post(
    client: &reqwest::Client,
    replica: &Replica,
    body: &Value,
) -> tokio::task::JoinHandle<(u16, Value)> {
    let (client, url, body) = (
        client.clone(),
        replica.url("/v1/executions"),
        body.to_string(),
    );
    tokio::spawn(async move {
        let response = client
            .post(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request");
        let status = response.status().as_u16();
        (
            status,
            response.json::<Value>().await.expect("a JSON answer"),
        )
    })
}

/// POSTs `body` on a task of its own whose answer nobody waits for (the replica may die).
pub fn spawn_post_unanswered(client: &reqwest::Client, replica: &Replica, body: &Value) {
    let (client, url, body) = (
        client.clone(),
        replica.url("/v1/executions"),
        body.to_string(),
    );
    tokio::spawn(async move {
        let _ = client
            .post(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await;
    });
}

/// POSTs raw text; returns the status and the raw body text.
pub async fn post_text(client: &reqwest::Client, replica: &Replica, body: &str) -> (u16, String) {
    let response = client
        .post(replica.url("/v1/executions"))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("request");
    (response.status().as_u16(), response.text().await.unwrap())
}

/// How many times this replica's process started `tool` (from `/metrics`).
pub async fn tool_runs(client: &reqwest::Client, replica: &Replica, tool: &str) -> u64 {
    let text = client
        .get(replica.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let prefix = format!("carmy_tool_runs_total{{tool=\"{tool}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |count| count.trim().parse().unwrap())
}

/// Polls `condition` every 20 ms until it holds, failing after `limit`.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !condition().await {
        assert!(start.elapsed() < limit, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The body of a call with a request id.
pub fn call(tool: &str, arguments: Value, request_id: &str) -> Value {
    serde_json::json!({"tool": tool, "arguments": arguments, "request_id": request_id})
}

/// A PostgreSQL cluster of the test's own, started from the installed binaries, that the test
/// may stop and start again (outage tests). As root, it runs as the `postgres` user.
pub struct Cluster {
    bindir: std::path::PathBuf,
    dir: std::path::PathBuf,
    pub port: u16,
}

fn postgres_bindir() -> std::path::PathBuf {
    let from_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .map(|out| std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    let candidates = from_config.into_iter().chain(
        std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path().join("bin")),
    );
    for dir in candidates {
        if dir.join("initdb").exists() && dir.join("pg_ctl").exists() {
            return dir;
        }
    }
    panic!("no PostgreSQL server binaries (initdb, pg_ctl) found: install PostgreSQL (Debian: apt-get install postgresql)");
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

impl Cluster {
    /// initdb + start on a free loopback port.
    pub fn start() -> Self {
        let bindir = postgres_bindir();
        let dir =
            std::env::temp_dir().join(format!("carmy-cluster-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        if running_as_root() {
            assert!(Command::new("chown")
                .arg("postgres")
                .arg(&dir)
                .status()
                .unwrap()
                .success());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cluster = Self { bindir, dir, port };
        let data = cluster.dir.join("data");
        let status = cluster
            .as_owner("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "--no-sync"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "initdb failed");
        cluster.start_again();
        cluster
    }

    fn as_owner(&self, program: &str) -> Command {
        let path = self.bindir.join(program);
        if running_as_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            Command::new(path)
        }
    }

    /// Starts the (stopped) server and waits until it accepts connections.
    pub fn start_again(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.display()
        );
        let status = self
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.dir.join("server.log"))
            .args(["-w", "-o", &options, "start"])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "pg_ctl start failed");
    }

    /// Stops the server at once (`-m immediate`: like a crash; open connections break).
    pub fn stop(&self) {
        let status = self
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "pg_ctl stop failed");
    }

    /// The URL of database `postgres` on this cluster.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self
            .as_owner("pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
