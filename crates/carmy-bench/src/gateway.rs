//! The `carmy-gateway` process under test: found (or built), started on a free loopback port,
//! waited for until ready, stopped with SIGTERM.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Finds the release-built gateway: `explicit` if given; otherwise, when this program was started
/// by cargo (`cargo run`), builds it with `cargo build --release -p carmy-gateway` first (a no-op
/// when it is up to date, so the gateway measured is always the current source), then takes
/// `<target dir>/release/carmy-gateway`.
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = explicit {
        return if path.is_file() {
            Ok(path.to_owned())
        } else {
            Err(format!("--gateway {}: no such file", path.display()))
        };
    }
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    if let Ok(cargo) = std::env::var("CARGO") {
        eprintln!("building the gateway: cargo build --release -p carmy-gateway");
        let status = Command::new(cargo)
            .args(["build", "--release", "-p", "carmy-gateway"])
            .current_dir(&workspace)
            .stdout(Stdio::null())
            .status()
            .map_err(|error| format!("cannot run cargo: {error}"))?;
        if !status.success() {
            return Err("cargo build --release -p carmy-gateway failed".to_owned());
        }
    }
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.parent()?.to_owned()))
            .unwrap_or_else(|| workspace.join("target")),
    };
    let path = target.join("release").join("carmy-gateway");
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} not found: run `cargo build --release -p carmy-gateway` (or pass --gateway)",
            path.display()
        ))
    }
}

/// Whether the gateway binary has the setting `variable` (named in its `--help`), e.g.
/// `CARMY_REPLAY_CACHE_ENTRIES`.
pub fn has_setting(binary: &Path, variable: &str) -> bool {
    Command::new(binary)
        .arg("--help")
        .env_remove("DATABASE_URL")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).contains(variable))
        .unwrap_or(false)
}

/// A free loopback port (bound and released; another process could take it in between, which
/// the start then reports).
pub fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|error| format!("cannot find a free port: {error}"))
}

/// A running gateway.
pub struct Gateway {
    child: Option<Child>,
    /// Where it serves.
    pub address: SocketAddr,
    /// Where its standard error (JSON log lines, level warn) goes.
    pub log: PathBuf,
}

impl Gateway {
    /// Starts `binary` serving on a free loopback port, anonymous, with `DATABASE_URL` =
    /// `database_url`, JSON logs at level warn, and `env` on top; waits until `GET /readyz`
    /// answers 200 (at most 60 s).
    pub fn start(
        binary: &Path,
        name: &str,
        database_url: &str,
        env: &[(&str, String)],
    ) -> Result<Self, String> {
        Self::start_under(
            &[],
            Duration::from_secs(60),
            binary,
            name,
            database_url,
            env,
        )
    }

    /// As [`Gateway::start`], with `binary` run by the command `wrapper` (e.g. `valgrind
    /// --tool=callgrind`, which keeps the process id), waiting at most `ready_within`.
    pub fn start_under(
        wrapper: &[String],
        ready_within: Duration,
        binary: &Path,
        name: &str,
        database_url: &str,
        env: &[(&str, String)],
    ) -> Result<Self, String> {
        let port = free_port()?;
        let address: SocketAddr = ([127, 0, 0, 1], port).into();
        let log = std::env::temp_dir().join(format!("carmy-bench-{name}.log"));
        let log_file = std::fs::File::create(&log)
            .map_err(|error| format!("cannot create {}: {error}", log.display()))?;
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(binary);
                command
            }
            None => Command::new(binary),
        };
        command
            .env_remove("CARMY_API_KEYS")
            .env_remove("CARMY_API_KEYS_FILE")
            .env("DATABASE_URL", database_url)
            .env("CARMY_LISTEN", address.to_string())
            .env("CARMY_LOG_FORMAT", "json")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command
            .spawn()
            .map_err(|error| format!("cannot start {}: {error}", binary.display()))?;
        let mut gateway = Self {
            child: Some(child),
            address,
            log,
        };
        let deadline = Instant::now() + ready_within;
        loop {
            if gateway.ready() {
                return Ok(gateway);
            }
            if let Some(child) = gateway.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    gateway.child = None;
                    return Err(format!(
                        "the gateway exited ({status}) before it was ready; see {}",
                        gateway.log.display()
                    ));
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the gateway was not ready within {} s; see {}",
                    ready_within.as_secs(),
                    gateway.log.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `GET /readyz` answers 200.
    fn ready(&self) -> bool {
        self.get("/readyz").is_ok()
    }

    /// The body of `GET path` when it answers 200 (one connection, at most 5 s to read).
    ///
    /// # Errors
    /// When the gateway cannot be reached or answers another status.
    pub fn get(&self, path: &str) -> Result<String, String> {
        let mut stream = TcpStream::connect_timeout(&self.address, Duration::from_secs(1))
            .map_err(|error| format!("cannot reach the gateway: {error}"))?;
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let request = format!(
            "GET {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n",
            self.address
        );
        stream
            .write_all(request.as_bytes())
            .map_err(|error| format!("cannot send GET {path}: {error}"))?;
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        if !answer.starts_with("HTTP/1.1 200") {
            return Err(format!(
                "GET {path}: {}",
                answer.lines().next().unwrap_or("no answer")
            ));
        }
        Ok(answer
            .split_once("\r\n\r\n")
            .map_or(String::new(), |(_, body)| body.to_owned()))
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGTERM, then waits for the exit (SIGKILL after 15 s).
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
