//! Reconciliation (docs/semantics.md §12.10) across real `carmy-gateway`
//! processes on one PostgreSQL database, with a real HTTP payments upstream that can look a
//! payment up by its idempotency key: the owner is killed mid-call, and the tool's
//! `[tools.reconcile]` probe turns the interrupted execution into its true outcome (found →
//! resolved with the upstream's payment; absent and not_executed → released, or taken over
//! under the same key for `rerun`), or leaves it interrupted with the probe's evidence (absent
//! and unknown, a probe that fails or hangs) without ever holding a retry past its deadline.
//! Two replicas decide twenty interrupted executions once each; nothing is probed that has an
//! outcome, a live owner, or no probe.

use crate::executions_cli::cli;
use crate::payments::Payments;
use crate::tools_file::write_tools_file;
use carmy_test_support::replica::gateway_binary;
use carmy_test_support::{
    client, eventually, metric, post, request, spawn_post_unanswered, Replica, TestDb,
};
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::Row;
use std::path::Path;
use std::time::{Duration, Instant};

pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// The tools: each pays through `/pay/<mode>` and looks payments up by execution id.
fn tools(base: &str) -> std::path::PathBuf {
    let probe = |means: &str, lookup: &str, timeout: u64| {
        format!(
            "[tools.reconcile]\nurl = \"{base}/{lookup}?idempotency_key={{execution_id}}\"\nabsent_means = \"{means}\"\ntimeout_ms = {timeout}\n[tools.reconcile.headers]\nAuthorization = \"Bearer ${{CARMY_TEST_LOOKUP_TOKEN}}\"\n"
        )
    };
    let tool = |name: &str, mode: &str, extra: &str, probe: String| {
        format!("[[tools]]\nname = \"{name}\"\nurl = \"{base}/pay/{mode}\"\n{extra}\n{probe}\n")
    };
    let text = [
        tool(
            "found",
            "commit-found",
            "",
            probe("unknown", "lookup", 2000),
        ),
        tool(
            "absent_released",
            "lost-released",
            "timeout_ms = 3000",
            probe("not_executed", "lookup", 2000),
        ),
        tool(
            "absent_rerun",
            "lost-rerun",
            "on_interrupted = \"rerun\"",
            probe("not_executed", "lookup", 2000),
        ),
        tool(
            "absent_unknown",
            "lost-unknown",
            "",
            probe("unknown", "lookup", 2000),
        ),
        tool(
            "down",
            "commit-down",
            "",
            probe("unknown", "lookup-down", 2000),
        ),
        tool(
            "slow",
            "commit-slow",
            "",
            probe("unknown", "lookup-slow", 30000),
        ),
        tool("bulk", "commit-bulk", "", probe("unknown", "lookup", 2000)),
        tool(
            "answers",
            "ok-answers",
            "",
            probe("unknown", "lookup", 2000),
        ),
        tool("unprobed", "commit-unprobed", "", String::new()),
    ]
    .concat();
    write_tools_file(&text)
}

fn replica(name: &str, db: &TestDb, file: &Path, extra: &[(&str, &str)]) -> Replica {
    let mut env = vec![
        ("DATABASE_URL", db.url.as_str()),
        ("CARMY_LEASE_TTL_MS", "1000"),
        ("CARMY_TOOLS_FILE", file.to_str().unwrap()),
        ("CARMY_TEST_LOOKUP_TOKEN", "tok_lookup_secret"),
        ("CARMY_RECONCILE_INTERVAL_MS", "100"),
    ];
    env.extend_from_slice(extra);
    Replica::start(name, &env)
}

fn payment_call(tool: &str, request_id: &str) -> Value {
    json!({"tool": tool, "arguments": {"amount": 5}, "request_id": request_id})
}

/// Sends `calls` to `owner`, waits until the upstream holds each at `path`, kills `owner`, and
/// waits (through `reader`) until none reads `running` any more (interrupted, or already
/// decided by a reconciler); their execution ids (the upstream's idempotency keys), in the
/// order the upstream received them.
pub(crate) async fn interrupt(
    payments: &Payments,
    owner: &mut Replica,
    reader: &Replica,
    calls: &[Value],
    path: &str,
) -> Vec<String> {
    let http = client();
    for call in calls {
        spawn_post_unanswered(&http, owner, call);
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
            let (status, body) = request(&http, reader, Method::GET, &read, None, None).await;
            (status == 200 && body["status"] != "running")
                .then_some(())
                .ok_or(body)
        })
        .await;
    }
    ids
}

/// `(action, actor)` of every audit row of `execution_id`.
pub(crate) async fn audit(db: &TestDb, execution_id: &str) -> Vec<(String, String)> {
    let mut connection = db.connect().await;
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
pub(crate) async fn evidence(db: &TestDb, execution_id: &str) -> (Value, i32) {
    let mut connection = db.connect().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn found_and_absent_probes_decide_an_interrupted_payment() {
    let db = TestDb::migrated().await;
    let payments = Payments::start().await;
    let file = tools(&payments.base());
    let mut a = replica("reconcile-a", &db, &file, &[]);
    let b = replica("reconcile-b", &db, &file, &[]);
    let http = client();

    // Found: the retry gets the upstream's payment, replayed, decided by the reconciler.
    let call = payment_call("found", "found-1");
    let found = interrupt(
        &payments,
        &mut a,
        &b,
        std::slice::from_ref(&call),
        "/pay/commit-found",
    )
    .await
    .remove(0);
    let id = found.clone();
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["execution_id"], id.as_str(), "{body}");
    assert_eq!(body["replayed"], true, "{body}");
    assert_eq!(body["status"], "completed", "{body}");
    assert_eq!(body["data"], payments.payment(&id).unwrap(), "{body}");
    assert_eq!(body["resolution"]["by"], "reconciler", "{body}");
    assert_eq!(
        audit(&db, &id).await,
        [("resolve".to_owned(), "reconciler".to_owned())]
    );
    assert_eq!(payments.posts_at("/pay/commit-found"), [Some(id.clone())]);
    assert_eq!(
        metric(
            &http,
            &b,
            "carmy_reconciliations_total{tool=\"found\",result=\"resolved\"}"
        )
        .await,
        1
    );

    // Absent, not_executed: once the interrupted attempt's deadline has passed (3 s and the
    // lease-loss grace; before, absent proves nothing, reconcile_deadline.rs), the identity is
    // released and the retry pays anew.
    a.restart();
    let call = payment_call("absent_released", "released-1");
    let id = interrupt(
        &payments,
        &mut a,
        &b,
        std::slice::from_ref(&call),
        "/pay/lost-released",
    )
    .await
    .remove(0);
    eventually(WAIT, "the reconciler releases it", || async {
        let trail = audit(&db, &id).await;
        (trail == [("release".to_owned(), "reconciler".to_owned())])
            .then_some(())
            .ok_or(trail)
    })
    .await;
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["replayed"], false, "{body}");
    assert_ne!(body["execution_id"], id.as_str(), "{body}");
    let again = body["execution_id"].as_str().unwrap().to_owned();
    assert_eq!(body["data"], payments.payment(&again).unwrap(), "{body}");
    assert_eq!(
        audit(&db, &id).await,
        [("release".to_owned(), "reconciler".to_owned())]
    );
    assert_eq!(
        payments.posts_at("/pay/lost-released"),
        [Some(id.clone()), Some(again)]
    );

    // Absent, not_executed, rerun: taken over under the same upstream key.
    a.restart();
    let call = payment_call("absent_rerun", "rerun-1");
    let id = interrupt(
        &payments,
        &mut a,
        &b,
        std::slice::from_ref(&call),
        "/pay/lost-rerun",
    )
    .await
    .remove(0);
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["execution_id"].as_str(), body["replayed"].as_bool()),
        (Some(id.as_str()), Some(false)),
        "{body}"
    );
    assert_eq!(
        payments.posts_at("/pay/lost-rerun"),
        [Some(id.clone()), Some(id.clone())]
    );
    assert_eq!(
        audit(&db, &id).await,
        [("takeover".to_owned(), b_instance(&db, &id).await)]
    );

    // Absent, unknown: it stays interrupted, the probe's answer kept as evidence.
    a.restart();
    let call = payment_call("absent_unknown", "unknown-1");
    let id = interrupt(
        &payments,
        &mut a,
        &b,
        std::slice::from_ref(&call),
        "/pay/lost-unknown",
    )
    .await
    .remove(0);
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        (body["code"].as_str(), body["state"].as_str()),
        (Some("EXECUTION_UNCERTAIN"), Some("interrupted")),
        "{body}"
    );
    assert!(
        !body["detail"]
            .as_str()
            .unwrap()
            .contains("being reconciled"),
        "{body}"
    );
    let (kept, _) = evidence(&db, &id).await;
    assert_eq!(
        (kept["answer"].as_str(), kept["status"].as_u64()),
        (Some("absent"), Some(404)),
        "{kept}"
    );
    assert_eq!(audit(&db, &id).await, []);
    assert_eq!(payments.posts_at("/pay/lost-unknown"), [Some(id.clone())]);

    // On demand: the API runs the probe now and says what it found; the CLI has a replica
    // probe it and shows the evidence, as `show` does.
    // The reconciler keeps probing this execution in the background (an inconclusive answer is
    // asked again, up to the attempts' limit), so the lookups are counted from below.
    let lookups = payments.lookups_of(&id);
    let path = format!("/v1/executions/{id}/reconcile");
    let (status, body) = request(&http, &b, Method::POST, &path, None, None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["result"].as_str(), body["evidence"]["answer"].as_str()),
        (Some("absent"), Some("absent")),
        "{body}"
    );
    assert_eq!(body["record"], Value::Null, "{body}");
    assert!(payments.lookups_of(&id) > lookups);
    let run = cli(Some(&db.url), &["reconcile", &id, "--json"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let shown: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(shown["reconcile_evidence"]["answer"], "absent", "{shown}");
    assert_eq!(shown["reconcile_evidence"]["status"], 404, "{shown}");
    assert!(payments.lookups_of(&id) >= lookups + 2);
    let run = cli(Some(&db.url), &["show", &id]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let probe_line = format!(
        "probe       absent: GET {}/lookup?idempotency_key={id} answered 404 at ",
        payments.base()
    );
    assert!(run.stdout.contains(&probe_line), "{}", run.stdout);
    assert!(!run.stdout.contains("tok_lookup_secret"), "{}", run.stdout);
    // An execution with an outcome is not probed on demand.
    let path = format!("/v1/executions/{found}/reconcile");
    let (status, body) = request(&http, &b, Method::POST, &path, None, None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("INVALID_REQUEST")),
        "{body}"
    );
}

/// The actor of a takeover: the instance id of the replica that took over.
async fn b_instance(db: &TestDb, execution_id: &str) -> String {
    let mut connection = db.connect().await;
    sqlx::query("SELECT owner_instance FROM carmy.reservations WHERE execution_id = $1")
        .bind(execution_id)
        .fetch_one(&mut connection)
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_probe_down_or_slow_leaves_it_interrupted_and_never_holds_a_retry() {
    let db = TestDb::migrated().await;
    let payments = Payments::start().await;
    let file = tools(&payments.base());
    let extra = [
        ("CARMY_RECONCILE_INLINE_MS", "300"),
        ("CARMY_RECONCILE_MAX_ATTEMPTS", "3"),
    ];
    let mut a = replica("probe-down-a", &db, &file, &extra);
    let b = replica("probe-down-b", &db, &file, &extra);
    let http = client();

    let call = payment_call("down", "down-1");
    let id = interrupt(
        &payments,
        &mut a,
        &b,
        std::slice::from_ref(&call),
        "/pay/commit-down",
    )
    .await
    .remove(0);
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(
        (status, body["state"].as_str()),
        (409, Some("interrupted")),
        "{body}"
    );
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("being reconciled"),
        "{body}"
    );
    // Retried with backoff until the attempts are used up; the last answer kept.
    let kept = eventually(WAIT, "three probes", || async {
        let (kept, attempts) = evidence(&db, &id).await;
        (attempts == 3 && kept["attempts"] == 3)
            .then_some(kept.clone())
            .ok_or((attempts, kept))
    })
    .await;
    assert_eq!(
        (kept["answer"].as_str(), kept["status"].as_u64()),
        (Some("error"), Some(503)),
        "{kept}"
    );
    assert!(payments.lookups_of(&id) >= 3);
    assert_eq!(audit(&db, &id).await, []);

    a.restart();
    let call = payment_call("slow", "slow-1");
    let id = interrupt(
        &payments,
        &mut a,
        &b,
        std::slice::from_ref(&call),
        "/pay/commit-slow",
    )
    .await
    .remove(0);
    let asked = Instant::now();
    let (status, body) = post(&http, &b, &call).await;
    // The probe hangs for a minute; the retry answers after its 300 ms deadline.
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(
        (status, body["state"].as_str()),
        (409, Some("interrupted")),
        "{body}"
    );
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("being reconciled"),
        "{body}"
    );
    assert_eq!(audit(&db, &id).await, []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_decide_twenty_interrupted_executions_once_each() {
    let db = TestDb::migrated().await;
    let payments = Payments::start().await;
    let file = tools(&payments.base());
    let mut a = replica("twenty-a", &db, &file, &[]);
    let b = replica("twenty-b", &db, &file, &[]);
    let c = replica("twenty-c", &db, &file, &[]);
    let http = client();

    // An outcome: never probed.
    let (status, body) = post(&http, &b, &payment_call("answers", "done-1")).await;
    assert_eq!(status, 200, "{body}");
    let finished = body["execution_id"].as_str().unwrap().to_owned();

    let calls: Vec<Value> = (0..20)
        .map(|n| payment_call("bulk", &format!("bulk-{n}")))
        .collect();
    let unprobed = payment_call("unprobed", "unprobed-1");
    spawn_post_unanswered(&http, &a, &unprobed);
    // While their owner lives, nothing is probed.
    eventually(WAIT, "the unprobed call is held", || async {
        let held = payments.posts_at("/pay/commit-unprobed").len();
        (held == 1).then_some(()).ok_or(held)
    })
    .await;
    let ids = interrupt(&payments, &mut a, &b, &calls, "/pay/commit-bulk").await;
    for id in &ids {
        eventually(WAIT, "every execution resolved", || async {
            let (_, body) = request(
                &http,
                &c,
                Method::GET,
                &format!("/v1/executions/{id}"),
                None,
                None,
            )
            .await;
            (body["status"] == "completed").then_some(()).ok_or(body)
        })
        .await;
    }
    for id in &ids {
        assert_eq!(payments.lookups_of(id), 1, "{id}");
        assert_eq!(
            audit(&db, id).await,
            [("resolve".to_owned(), "reconciler".to_owned())],
            "{id}"
        );
    }
    let resolved = |replica| async move {
        metric(
            &client(),
            replica,
            "carmy_reconciliations_total{tool=\"bulk\",result=\"resolved\"}",
        )
        .await
    };
    assert_eq!(resolved(&b).await + resolved(&c).await, 20);
    assert_eq!(payments.lookups_of(&finished), 0);
    let (_, body) = request(
        &http,
        &b,
        Method::GET,
        "/v1/executions?request_id=unprobed-1",
        None,
        None,
    )
    .await;
    assert_eq!(body["status"], "interrupted", "{body}");
    let unprobed_id = body["execution_id"].as_str().unwrap();
    assert_eq!(payments.lookups_of(unprobed_id), 0);
    assert_eq!(evidence(&db, unprobed_id).await, (Value::Null, 0));
}

#[tokio::test]
async fn late_arrivals_that_contradict_the_reconciler_are_flagged() {
    let db = TestDb::migrated().await;
    let mut connection = db.connect().await;
    let cases = [
        (
            "exec_1",
            "reconciler",
            "release",
            "released",
            "completed",
            Some(true),
        ),
        (
            "exec_2",
            "reconciler",
            "resolve",
            "completed",
            "failed",
            Some(true),
        ),
        (
            "exec_3",
            "reconciler",
            "resolve",
            "completed",
            "cancelled",
            Some(false),
        ),
        (
            "exec_4",
            "reconciler",
            "release",
            "released",
            "failed",
            Some(false),
        ),
        (
            "exec_5",
            "operator:ops",
            "release",
            "released",
            "completed",
            None,
        ),
    ];
    for (id, actor, action, state, late, expected) in cases {
        sqlx::query(
            "INSERT INTO carmy.audit_log (actor, principal, execution_id, action, before, after, \
                                         note) \
             VALUES ($1, 'alice', $2, $3, '{}', jsonb_build_object('state', $4::text), 'decided')",
        )
        .bind(actor)
        .bind(id)
        .bind(action)
        .bind(state)
        .execute(&mut connection)
        .await
        .unwrap();
        // The gateway's own statement keeps the late outcome and computes the flag.
        sqlx::query(carmy_postgres::sql::LATE_ARRIVAL_SQL)
            .bind("alice")
            .bind("default")
            .bind(format!("r-{id}"))
            .bind("inst_owner")
            .bind(id)
            .bind(late)
            .bind(format!(
                "{{\"execution_id\":\"{id}\",\"status\":\"{late}\"}}"
            ))
            .bind("late")
            .execute(&mut connection)
            .await
            .unwrap();
        let flagged: Option<bool> = sqlx::query(
            "SELECT contradicts_decision FROM carmy.late_arrivals WHERE execution_id = $1",
        )
        .bind(id)
        .fetch_one(&mut connection)
        .await
        .unwrap()
        .get(0);
        assert_eq!(flagged, expected, "{id}: {action} by {actor}, then {late}");
    }
}

#[test]
fn check_config_shows_each_probe_with_its_secrets_masked() {
    let file = tools("http://127.0.0.1:9");
    let secret = "tok_lookup_secret";
    let output = std::process::Command::new(gateway_binary())
        .arg("check-config")
        .env_remove("DATABASE_URL")
        .env("CARMY_TOOLS_FILE", &file)
        .env("CARMY_TEST_LOOKUP_TOKEN", secret)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        !stdout.contains(secret) && !stderr.contains(secret),
        "{stdout}{stderr}"
    );
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains("reconcile GET"))
        .collect();
    assert_eq!(lines.len(), 8, "{stdout}");
    assert!(lines[0].ends_with("reconcile GET http://127.0.0.1:9/lookup?idempotency_key={execution_id}  found=[200] absent=[404] absent_means=unknown  timeout=2000ms  headers=[authorization: *** (from ${CARMY_TEST_LOOKUP_TOKEN})]"), "{stdout}");
    assert!(lines[1].contains("absent_means=not_executed"), "{stdout}");
}

#[test]
fn a_bad_probe_stops_the_gateway_naming_the_field() {
    let cases = [
        (
            "absent_means = \"maybe\"",
            "reconcile.absent_means",
            "\"maybe\" is not \"unknown\"",
        ),
        (
            "found_status = [200]\nabsent_status = [200]",
            "reconcile.absent_status",
            "200 is also in found_status",
        ),
        (
            "tool = \"get_payment\"",
            "reconcile.url",
            "does not go with tool",
        ),
        (
            "timeout_ms = 0",
            "reconcile.timeout_ms",
            "must be at least 1",
        ),
    ];
    for (keys, field, message) in cases {
        let file = write_tools_file(&format!(
            "[[tools]]\nname = \"pay\"\nurl = \"http://127.0.0.1:9/pay\"\n[tools.reconcile]\nurl = \"http://127.0.0.1:9/lookup?k={{execution_id}}\"\n{keys}\n"
        ));
        let output = std::process::Command::new(gateway_binary())
            .arg("check-config")
            .env_remove("DATABASE_URL")
            .env("CARMY_TOOLS_FILE", &file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{keys}: {stderr}");
        assert!(
            stderr.contains(field) && stderr.contains(message) && stderr.contains("tool \"pay\""),
            "{keys}: {stderr}"
        );
    }
}
