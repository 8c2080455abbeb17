//! Throwaway PostgreSQL clusters started from the installed server binaries (`initdb`,
//! `pg_ctl`), that a test may stop and start again (outage tests) or serve over TLS. As root,
//! the cluster runs as the `postgres` user.

use crate::tls::certificates;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The names the TLS cluster's certificate is made for.
pub const CERTIFICATE_NAMES: [&str; 2] = ["localhost", "127.0.0.1"];

/// A loopback address the TLS cluster also listens on but that its certificate does not name:
/// connecting through it must fail `verify-full`.
pub const UNCERTIFIED_ADDRESS: &str = "127.0.0.2";

/// A PostgreSQL cluster of the test's own, stopped and removed on `Drop`.
pub struct Cluster {
    bindir: PathBuf,
    dir: PathBuf,
    /// Its TCP port on the loopback addresses.
    pub port: u16,
    tls: bool,
}

fn postgres_bindir() -> PathBuf {
    let from_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
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

/// Makes `path` the `postgres` user's when running as root (the server's files must be its own).
fn give_to_postgres(path: &Path) {
    if running_as_root() {
        let status = Command::new("chown")
            .arg("postgres")
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success(), "chown postgres {}", path.display());
    }
}

impl Cluster {
    /// initdb + start on a free loopback port, without TLS (`ssl = off`).
    pub fn start() -> Self {
        Self::init(false)
    }

    /// initdb + start with `ssl = on` and a certificate made now for [`CERTIFICATE_NAMES`],
    /// listening on 127.0.0.1 and [`UNCERTIFIED_ADDRESS`]; the CA is at [`Cluster::ca_path`].
    pub fn start_with_tls() -> Self {
        Self::init(true)
    }

    fn init(tls: bool) -> Self {
        let bindir = postgres_bindir();
        let dir =
            std::env::temp_dir().join(format!("carmy-cluster-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        give_to_postgres(&dir);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cluster = Self {
            bindir,
            dir,
            port,
            tls,
        };
        let status = cluster
            .as_owner("initdb")
            .arg("-D")
            .arg(cluster.dir.join("data"))
            .args(["-U", "postgres", "-A", "trust", "--no-sync"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "initdb failed");
        if tls {
            cluster.write_certificates();
        }
        cluster.start_again();
        cluster
    }

    fn write_certificates(&self) {
        let made = certificates(&CERTIFICATE_NAMES);
        for (file, pem) in [
            ("ca.crt", &made.ca_pem),
            ("server.crt", &made.server_cert_pem),
            ("server.key", &made.server_key_pem),
        ] {
            let path = self.dir.join(file);
            std::fs::write(&path, pem).unwrap();
            give_to_postgres(&path);
        }
        // The server refuses a private key that others may read.
        let key = self.dir.join("server.key");
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
    }

    /// The CA certificate that signed the TLS cluster's certificate (PEM file).
    pub fn ca_path(&self) -> PathBuf {
        assert!(self.tls, "only a TLS cluster has a CA");
        self.dir.join("ca.crt")
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
        let mut options = format!("-p {} -k {} -c fsync=off", self.port, self.dir.display());
        if self.tls {
            options.push_str(&format!(
                " -c listen_addresses=127.0.0.1,{UNCERTIFIED_ADDRESS} -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
                self.dir.join("server.crt").display(),
                self.dir.join("server.key").display()
            ));
        } else {
            options.push_str(" -c listen_addresses=127.0.0.1");
        }
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
        assert!(
            status.success(),
            "pg_ctl start failed; see {}",
            self.dir.join("server.log").display()
        );
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

    /// The URL of database `postgres` on this cluster (host 127.0.0.1).
    pub fn url(&self) -> String {
        self.url_via("127.0.0.1")
    }

    /// The URL of database `postgres` on this cluster through `host` (a name or an address the
    /// cluster listens on).
    pub fn url_via(&self, host: &str) -> String {
        format!("postgres://postgres@{host}:{}/postgres", self.port)
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
