//! [`Bouncer`]: a real PgBouncer (Debian's `pgbouncer`, 1.18; scripts/test installs it) in front
//! of the test server, on a free loopback port, killed on drop. `CARMY_PGBOUNCER` names another
//! binary.

use crate::db::server_url;
use sqlx::Connection;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A PgBouncer process in front of the test server (every database, trusting the server's
/// user, ignoring sqlx's `extra_float_digits` and `options` startup parameters), killed on drop.
pub struct Bouncer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        // SIGTERM, which runuser passes on to PgBouncer (a SIGKILL would orphan it).
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Bouncer {
    /// Starts PgBouncer with `pool_mode = mode` (`session` or `transaction`) and 20 server
    /// connections per database, and waits (10 s at most) until it accepts a session.
    ///
    /// # Panics
    /// When it cannot be started or does not accept a session in time.
    pub async fn start(mode: &str) -> Self {
        Self::start_with(mode, 20).await
    }

    /// As [`Bouncer::start`], with at most `pool_size` server connections per database and user
    /// (`default_pool_size`): 1 makes every client share one server process.
    ///
    /// # Panics
    /// As [`Bouncer::start`].
    pub async fn start_with(mode: &str, pool_size: u32) -> Self {
        let site = Site::new();
        let ini = format!(
            "[databases]\n{}\n[pgbouncer]\n{}\npool_mode = {mode}\n\
             ignore_startup_parameters = extra_float_digits, options\n\
             max_client_conn = 500\ndefault_pool_size = {pool_size}\n",
            site.databases(),
            site.settings().join("\n"),
        );
        Self::launch(site, &ini).await
    }

    /// Starts PgBouncer with the configuration file at `path` (e.g. `deploy/pgbouncer.ini`) as
    /// written, but for its site lines: every `[databases]` entry becomes the test server (any
    /// database name), and `listen_addr`, `listen_port`, `unix_socket_dir`, `auth_type`,
    /// `auth_file`, `logfile` and `pidfile` are this test's. Settings named in `without` are
    /// left out (to see what their absence does).
    ///
    /// # Panics
    /// As [`Bouncer::start`], or when the file cannot be read.
    pub async fn start_from_file(path: &std::path::Path, without: &[&str]) -> Self {
        const SITE_KEYS: [&str; 7] = [
            "listen_addr",
            "listen_port",
            "unix_socket_dir",
            "auth_type",
            "auth_file",
            "logfile",
            "pidfile",
        ];
        let site = Site::new();
        let written = std::fs::read_to_string(path).unwrap();
        let mut ini = Vec::new();
        let mut section = String::new();
        for line in written.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with('[') {
                section = trimmed.to_owned();
                ini.push(line.to_owned());
                match section.as_str() {
                    "[databases]" => ini.push(site.databases()),
                    "[pgbouncer]" => ini.extend(site.settings()),
                    _ => {}
                }
                continue;
            }
            let key = trimmed.split('=').next().unwrap_or_default().trim();
            let setting = !trimmed.is_empty() && !trimmed.starts_with(';') && trimmed.contains('=');
            let site_line = setting && (section == "[databases]" || SITE_KEYS.contains(&key));
            if site_line || (setting && without.contains(&key)) {
                continue;
            }
            ini.push(line.to_owned());
        }
        Self::launch(site, &(ini.join("\n") + "\n")).await
    }

    /// Runs PgBouncer with `ini` (written into `site`'s directory) and waits (10 s at most)
    /// until it answers a session (accepted, or refused by PgBouncer itself).
    async fn launch(site: Site, ini: &str) -> Self {
        let Site { dir, port, user } = site;
        std::fs::write(dir.join("pgbouncer.ini"), ini).unwrap();
        std::fs::write(dir.join("users.txt"), format!("\"{user}\" \"\"\n")).unwrap();
        let binary = std::env::var("CARMY_PGBOUNCER").unwrap_or_else(|_| "pgbouncer".to_owned());
        let ini = dir.join("pgbouncer.ini");
        // PgBouncer refuses to run as root: as root, run it as the `postgres` user.
        let child = if is_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&dir)
                .status()
                .unwrap();
            assert!(status.success(), "chown the PgBouncer directory");
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(which(&binary))
                .arg(&ini)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
        } else {
            Command::new(&binary)
                .arg(&ini)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
        }
        .unwrap_or_else(|error| {
            panic!("cannot start {binary} (scripts/test installs Debian's pgbouncer): {error}")
        });
        let bouncer = Self { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match sqlx::PgConnection::connect(&bouncer.url("postgres")).await {
                Ok(connection) => {
                    let _ = connection.close().await;
                    return bouncer;
                }
                // It answers, refusing the session (e.g. a startup parameter): it is up.
                Err(sqlx::Error::Database(_)) => return bouncer,
                Err(error) if Instant::now() > deadline => {
                    panic!("PgBouncer did not accept a session within 10 s: {error}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// The URL of `database` through this PgBouncer.
    ///
    /// # Panics
    /// When the test server's URL cannot be read.
    pub fn url(&self, database: &str) -> String {
        let mut url = url::Url::parse(&server_url()).unwrap();
        url.set_host(Some("127.0.0.1")).unwrap();
        url.set_port(Some(self.port)).unwrap();
        url.set_path(&format!("/{database}"));
        url.into()
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// `binary`'s path: as given when it has a slash, else found on `PATH` (or /usr/sbin).
fn which(binary: &str) -> PathBuf {
    if binary.contains('/') {
        return PathBuf::from(binary);
    }
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&format!("{path}:/usr/sbin"))
        .map(|dir| dir.join(binary))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| PathBuf::from(binary))
}

/// What differs between a site's PgBouncer and a test's: the server, the address, the
/// authentication and the files.
struct Site {
    dir: PathBuf,
    port: u16,
    user: String,
}

impl Site {
    fn new() -> Self {
        let server = url::Url::parse(&server_url()).unwrap();
        let dir =
            std::env::temp_dir().join(format!("carmy-pgbouncer-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&dir).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self {
            dir,
            port,
            user: server.username().to_owned(),
        }
    }

    /// The `[databases]` entry: every database of the test server.
    fn databases(&self) -> String {
        let server = url::Url::parse(&server_url()).unwrap();
        format!(
            "* = host={} port={}",
            server.host_str().unwrap_or("127.0.0.1"),
            server.port().unwrap_or(5432)
        )
    }

    /// The `[pgbouncer]` settings of the site.
    fn settings(&self) -> Vec<String> {
        let dir = self.dir.display();
        vec![
            "listen_addr = 127.0.0.1".to_owned(),
            format!("listen_port = {}", self.port),
            "unix_socket_dir =".to_owned(),
            "auth_type = trust".to_owned(),
            format!("auth_file = {dir}/users.txt"),
            format!("logfile = {dir}/pgbouncer.log"),
            format!("pidfile = {dir}/pgbouncer.pid"),
        ]
    }
}
