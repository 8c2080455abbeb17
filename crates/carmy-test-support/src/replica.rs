//! Real `carmy-gateway` processes: started on an ephemeral loopback port with JSON logs, killed
//! (SIGKILL), terminated (SIGTERM, waiting for the exit) or restarted by the tests.

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// One running `carmy-gateway` process.
pub struct Replica {
    child: Option<Child>,
    /// `http://<address>` of the running process.
    pub base: String,
    /// The name given at start (also its log file's).
    pub name: String,
    env: Vec<(String, String)>,
}

/// The `carmy-gateway` executable that cargo built for the running test: `CARMY_GATEWAY_BIN`
/// if set, else `carmy-gateway` in the directory above the test executable's `deps/`.
///
/// # Panics
/// When there is no such file (the gateway's own tests make cargo build it).
pub fn gateway_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("CARMY_GATEWAY_BIN") {
        return PathBuf::from(path);
    }
    let test_executable = std::env::current_exe().expect("the test executable's path");
    let profile_dir = test_executable
        .parent()
        .and_then(Path::parent)
        .expect("a test executable under target/<profile>/deps");
    let path = profile_dir.join(format!("carmy-gateway{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} not found: run the test through cargo test -p carmy-gateway",
        path.display()
    );
    path
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
            .env_remove("CARMY_OPERATOR_KEYS")
            // Traces are exported only by the tests that ask for it (tests/it/front/traces.rs).
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
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
        let address = match address_rx.recv_timeout(Duration::from_secs(60)) {
            Ok(address) => address,
            Err(why) => {
                let _ = child.kill();
                let status = child.wait().ok();
                panic!(
                    "replica {} did not start serving ({why}; exit status {status:?}); \
                     the last lines of {}:\n{}",
                    self.name,
                    self.log_path().display(),
                    self.log_tail(20)
                )
            }
        };
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
    pub fn log_path(&self) -> PathBuf {
        std::env::temp_dir()
            .join("carmy-test-logs")
            .join(format!("{}.log", self.name))
    }

    /// The last `lines` lines of this replica's log (for a failure's message).
    fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The URL of `path` on this replica.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill9();
    }
}
