//! `/readyz` and the primary's replication (docs/semantics.md §14), on a real primary with a
//! streaming standby from `scripts/pg-replica-pair`: a warning while commits do not wait for
//! the standby, none once they do, and 503 `NOT_READY` with `CARMY_REQUIRE_SYNC_REPLICA=true`
//! when the standby stops being synchronous after the gateway started.

use carmy_test_support::{client, eventually_eq, Replica};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// A primary and its standby, stopped and removed on drop.
struct Pair {
    dir: PathBuf,
    primary: u16,
}

impl Pair {
    fn start() -> Self {
        let scripts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts");
        let dir =
            std::env::temp_dir().join(format!("carmy-pair-{}", uuid::Uuid::new_v4().simple()));
        let out = Command::new(scripts.join("pg-replica-pair"))
            .arg("start")
            .arg(&dir)
            .output()
            .unwrap();
        let mut pair = Self { dir, primary: 0 };
        assert!(
            out.status.success(),
            "scripts/pg-replica-pair start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ports = String::from_utf8(out.stdout).unwrap();
        pair.primary = ports.split_whitespace().next().unwrap().parse().unwrap();
        pair
    }

    /// Sets the primary's `synchronous_standby_names` and reloads its configuration.
    async fn synchronous_standby_names(&self, names: &str) {
        let url = format!("postgres://postgres@127.0.0.1:{}/postgres", self.primary);
        let mut connection = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
            .await
            .unwrap();
        for statement in [
            format!("ALTER SYSTEM SET synchronous_standby_names = '{names}'"),
            "SELECT pg_reload_conf()".to_owned(),
        ] {
            sqlx::raw_sql(&statement)
                .execute(&mut connection)
                .await
                .unwrap();
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let scripts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts");
        let _ = Command::new(scripts.join("pg-replica-pair"))
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

/// `/readyz` of `replica`: its status and body.
async fn readyz(replica: &Replica) -> (u16, Value) {
    let response = client().get(replica.url("/readyz")).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

const WARNING: &str = "the primary has 1 standby(s) but commits do not wait for a synchronous one (synchronous_standby_names = '', synchronous_commit = on): a failover can lose outcomes Carmy already reported, and their retries run the tools again; configure a synchronous standby (Patroni synchronous_mode: true; docs/operations.md)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_warns_of_an_asynchronous_standby_or_is_not_ready_when_sync_is_required() {
    let pair = Pair::start();
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", pair.primary);
    let warned = Replica::start("readyz-async", &[("DATABASE_URL", url.as_str())]);
    assert_eq!(
        readyz(&warned).await,
        (200, json!({"status": "ready", "warnings": [WARNING]}))
    );

    pair.synchronous_standby_names("*").await;
    eventually_eq(
        Duration::from_secs(10),
        "/readyz once commits wait for the standby",
        (200, json!({"status": "ready"})),
        || readyz(&warned),
    )
    .await;
    let strict = Replica::start(
        "readyz-strict",
        &[
            ("DATABASE_URL", url.as_str()),
            ("CARMY_REQUIRE_SYNC_REPLICA", "true"),
        ],
    );
    assert_eq!(readyz(&strict).await, (200, json!({"status": "ready"})));

    // The standby stops being synchronous after both started.
    pair.synchronous_standby_names("").await;
    eventually_eq(
        Duration::from_secs(10),
        "/readyz of the strict replica once commits stop waiting",
        (503, json!("NOT_READY")),
        || async {
            let (status, body) = readyz(&strict).await;
            (status, body["code"].clone())
        },
    )
    .await;
    let (_, body) = readyz(&strict).await;
    assert_eq!(
        body["detail"],
        format!("not ready: {WARNING} (not ready: CARMY_REQUIRE_SYNC_REPLICA=true)")
    );
    assert_eq!(
        readyz(&warned).await,
        (200, json!({"status": "ready", "warnings": [WARNING]}))
    );
    drop((warned, strict));
}
