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
        let server = url::Url::parse(&server_url()).unwrap();
        let user = server.username().to_owned();
        let dir =
            std::env::temp_dir().join(format!("carmy-pgbouncer-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&dir).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let ini = format!(
            "[databases]\n* = host={} port={}\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
             listen_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {}/users.txt\n\
             pool_mode = {mode}\nignore_startup_parameters = extra_float_digits, options\n\
             max_client_conn = 500\ndefault_pool_size = {pool_size}\nlogfile = {}/pgbouncer.log\n",
            server.host_str().unwrap_or("127.0.0.1"),
            server.port().unwrap_or(5432),
            dir.display(),
            dir.display(),
        );
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
