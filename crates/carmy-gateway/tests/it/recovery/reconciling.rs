//! The setting every reconciliation test shares (docs/semantics.md §12.10): a migrated
//! database, the real payments upstream, a tools file written for the upstream's address, and
//! `carmy-gateway` replicas on that database with a one-second lease and a reconciler that looks
//! every 100 ms; an owner killed mid-call ([`Reconciling::interrupt`]); and what the database
//! says of an execution (its audit trail, the probe's evidence).

use crate::payments::Payments;
use carmy_test_support::{client, eventually, request, spawn_post_unanswered, Replica, TestDb};
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::Row;
use std::path::PathBuf;
use std::time::Duration;

/// How long a test waits for what a replica or the reconciler does.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// A database, the payments upstream and a tools file, for replicas to share.
pub(crate) struct Reconciling {
    pub(crate) db: TestDb,
    pub(crate) payments: Payments,
    /// The tools file.
    pub(crate) file: PathBuf,
    pub(crate) http: reqwest::Client,
    /// Set on every replica (e.g. the secrets the tools file names).
    env: Vec<(String, String)>,
}

/// A call of `tool` paying 5 under `request_id`.
pub(crate) fn payment_call(tool: &str, request_id: &str) -> Value {
    json!({"tool": tool, "arguments": {"amount": 5}, "request_id": request_id})
}

impl Reconciling {
    /// A migrated database, the payments upstream, and the tools file `tools` writes for the
    /// upstream's base URL; `env` is set on every replica.
    pub(crate) async fn start(tools: impl FnOnce(&str) -> PathBuf, env: &[(&str, &str)]) -> Self {
        let db = TestDb::migrated().await;
        let payments = Payments::start().await;
        let file = tools(&payments.base());
        Self {
            db,
            payments,
            file,
            http: client(),
            env: env
                .iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
                .collect(),
        }
    }

    /// A replica on the database with the tools file, a 1 s lease and a reconciler that looks
    /// every 100 ms; `extra` comes last and so overrides (e.g. `CARMY_RECONCILE_INTERVAL_MS`).
    pub(crate) fn replica(&self, name: &str, extra: &[(&str, &str)]) -> Replica {
        let mut env: Vec<(&str, &str)> = vec![
            ("DATABASE_URL", self.db.url.as_str()),
            ("CARMY_LEASE_TTL_MS", "1000"),
            ("CARMY_TOOLS_FILE", self.file.to_str().unwrap()),
            ("CARMY_RECONCILE_INTERVAL_MS", "100"),
        ];
        env.extend(
            self.env
                .iter()
                .map(|(key, value)| (key.as_str(), value.as_str())),
        );
        env.extend_from_slice(extra);
        Replica::start(name, &env)
    }

    /// Sends `calls` to `owner`, waits until the upstream holds each at `path`, kills `owner`,
    /// and waits (through `reader`) until none reads `running` any more (interrupted, or already
    /// decided by a reconciler); their execution ids (the upstream's idempotency keys), in the
    /// order the upstream received them.
    pub(crate) async fn interrupt(
        &self,
        owner: &mut Replica,
        reader: &Replica,
        calls: &[Value],
        path: &str,
    ) -> Vec<String> {
        let (payments, http) = (&self.payments, &self.http);
        for call in calls {
            spawn_post_unanswered(http, owner, call);
        }
        eventually(WAIT, "the upstream holds every call", || async {
            let held = payments.posts_at(path).len();
            (held == calls.len()).then_some(()).ok_or(held)
        })
        .await;
        let ids: Vec<String> = payments
            .posts_at(path)
            .into_iter()
            .map(Option::unwrap)
            .collect();
        // A few reconciler rounds while the owner lives: none of its executions is probed.
        tokio::time::sleep(Duration::from_millis(500)).await;
        for id in &ids {
            assert_eq!(
                payments.lookups_of(id),
                0,
                "{id} was probed while its owner lived"
            );
        }
        owner.kill9();
        for id in &ids {
            let read = format!("/v1/executions/{id}");
            eventually(WAIT, "the owner's lease lapses", || async {
                let (status, body) = request(http, reader, Method::GET, &read, None, None).await;
                (status == 200 && body["status"] != "running")
                    .then_some(())
                    .ok_or(body)
            })
            .await;
        }
        ids
    }

    /// [`Reconciling::interrupt`] with one call: its execution id.
    pub(crate) async fn interrupt_one(
        &self,
        owner: &mut Replica,
        reader: &Replica,
        call: &Value,
        path: &str,
    ) -> String {
        self.interrupt(owner, reader, std::slice::from_ref(call), path)
            .await
            .remove(0)
    }

    /// `(action, actor)` of every audit row of `execution_id`.
    pub(crate) async fn audit(&self, execution_id: &str) -> Vec<(String, String)> {
        let mut connection = self.db.connect().await;
        sqlx::query("SELECT action, actor FROM carmy.audit_log WHERE execution_id = $1 ORDER BY id")
            .bind(execution_id)
            .fetch_all(&mut connection)
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect()
    }

    /// The evidence kept on `execution_id` and its claimed probes.
    pub(crate) async fn evidence(&self, execution_id: &str) -> (Value, i32) {
        let mut connection = self.db.connect().await;
        let row = sqlx::query(
            "SELECT reconcile_evidence::text, reconcile_attempts FROM carmy.reservations \
             WHERE execution_id = $1",
        )
        .bind(execution_id)
        .fetch_one(&mut connection)
        .await
        .unwrap();
        let text: Option<String> = row.get(0);
        (
            text.map_or(Value::Null, |text| serde_json::from_str(&text).unwrap()),
            row.get(1),
        )
    }

    /// Waits until the reconciler released `execution_id`: its audit trail is that one release.
    pub(crate) async fn until_released(&self, execution_id: &str) {
        eventually(WAIT, "the reconciler releases it", || async {
            let trail = self.audit(execution_id).await;
            (trail == [("release".to_owned(), "reconciler".to_owned())])
                .then_some(())
                .ok_or(trail)
        })
        .await;
    }

    /// Waits until `execution_id` reads `status` on `reader`; its body.
    pub(crate) async fn until_status(
        &self,
        reader: &Replica,
        execution_id: &str,
        status: &str,
    ) -> Value {
        let path = format!("/v1/executions/{execution_id}");
        eventually(WAIT, "the reconciler decides", || async {
            let (_, body) = request(&self.http, reader, Method::GET, &path, None, None).await;
            (body["status"] == status)
                .then_some(body.clone())
                .ok_or(body)
        })
        .await
    }
}
