//! Carmy behind a real PgBouncer (Debian's `pgbouncer`, 1.18; scripts/test installs it), on a
//! loopback port (docs/semantics.md §14.3): in session mode the store serves calls through it;
//! in transaction mode [`check_path`] refuses it, naming the pooler and what to do.
//! `CARMY_PGBOUNCER` names another binary.

use carmy::fingerprint::Fingerprint;
use carmy::outcome::{ExecutionId, ExecutionResult, ExecutionStatus};
use carmy::store::{Claim, ExecutionIntent, IdempotencyKey, IdempotencyStore, Reservation};
use carmy_postgres::{check_path, PathError, PostgresStore};
use carmy_test_support::{server_url, TestDb};
use chrono::Utc;
use sqlx::postgres::PgConnectOptions;
use sqlx::Connection;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A PgBouncer process in front of the test server, killed on drop.
struct Bouncer {
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
    /// Starts PgBouncer in `mode` (`session` or `transaction`) on a free loopback port, trusting
    /// the test server's user, and waits (10 s at most) until it accepts a session.
    async fn start(mode: &str) -> Self {
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
             max_client_conn = 200\ndefault_pool_size = 20\nlogfile = {}/pgbouncer.log\n",
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
    fn url(&self, database: &str) -> String {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_pgbouncer_in_session_mode_the_store_serves_calls() {
    let db = TestDb::migrated().await;
    let bouncer = Bouncer::start("session").await;
    let url = bouncer.url(&db.name);
    let connect: PgConnectOptions = url.parse().unwrap();
    // The startup options are ignored by PgBouncer: the server's own statement_timeout shows.
    assert_eq!(check_path(&connect).await.unwrap(), "0");
    let mut options = db.options();
    options.database_url = url;
    let store = PostgresStore::connect(options).await.unwrap();
    store.check_ready().await.unwrap();
    let key = IdempotencyKey::new("p", "s", "through-bouncer");
    let fingerprint = Fingerprint {
        version: "v1".to_owned(),
        digest: "c".repeat(64),
    };
    let claim = Claim {
        key: &key,
        fingerprint: &fingerprint,
    };
    for attempt in 0..3 {
        let intent = ExecutionIntent {
            execution_id: ExecutionId::generate(),
            tool: "create_order".to_owned(),
            parts: None,
            retention: None,
        };
        let reserved = store.reserve(claim, &intent).await.unwrap();
        if attempt > 0 {
            // The retry replays the recorded outcome.
            assert!(matches!(reserved, Reservation::Existing(_)), "{reserved:?}");
            continue;
        }
        assert!(matches!(reserved, Reservation::Reserved), "{reserved:?}");
        let result = ExecutionResult {
            execution_id: intent.execution_id.clone(),
            status: ExecutionStatus::Completed,
            data: serde_json::json!({ "order_id": 3 }),
            error: None,
            tool: intent.tool.clone(),
            request_id: Some("through-bouncer".to_owned()),
            session_id: "s".to_owned(),
            started_at: Utc::now(),
            finished_at: Utc::now(),
            resolution: None,
        };
        store.complete(claim, &result.into()).await.unwrap();
    }
    store.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbouncer_in_transaction_mode_is_refused_with_what_to_do() {
    let db = TestDb::migrated().await;
    let bouncer = Bouncer::start("transaction").await;
    let connect: PgConnectOptions = bouncer.url(&db.name).parse().unwrap();
    let refused = check_path(&connect).await.unwrap_err();
    assert!(
        matches!(refused, PathError::TransactionPooler(_)),
        "{refused}"
    );
    assert!(
        refused.to_string().ends_with(
            "use pool_mode = session or connect directly (docs/operations.md, Connection poolers)"
        ),
        "{refused}"
    );
    // Directly, the same check passes.
    let direct: PgConnectOptions = db.url.parse().unwrap();
    assert_eq!(check_path(&direct).await.unwrap(), "0");
}
