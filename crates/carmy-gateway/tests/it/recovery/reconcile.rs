//! Reconciliation (docs/semantics.md §12.10) across real `carmy-gateway`
//! processes on one PostgreSQL database, with a real HTTP payments upstream that can look a
//! payment up by its idempotency key: the owner is killed mid-call, and the tool's
//! `[tools.reconcile]` probe turns the interrupted execution into its true outcome (found →
//! resolved with the upstream's payment; absent and not_executed → released, or taken over
//! under the same key for `rerun`), or leaves it interrupted with the probe's evidence (absent
//! and unknown, a probe that fails or hangs) without ever holding a retry past its deadline.
//! Two replicas decide twenty interrupted executions once each; nothing is probed that has an
//! outcome, a live owner, or no probe.

use super::reconciling::{payment_call, Reconciling, WAIT};
use crate::executions_cli::cli;
use crate::tools_file::write_tools_file;
use carmy_test_support::{
    client, eventually, metric, post, request, spawn_post_unanswered, TestDb,
};
use reqwest::Method;
use serde_json::Value;
use sqlx::Row;
use std::time::{Duration, Instant};

/// The tools: each pays through `/pay/<mode>` and looks payments up by execution id.
pub(super) fn tools(base: &str) -> std::path::PathBuf {
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

/// The lookup token the probes send (`${CARMY_TEST_LOOKUP_TOKEN}`).
const LOOKUP_TOKEN: &str = "tok_lookup_secret";

async fn reconciling() -> Reconciling {
    Reconciling::start(tools, &[("CARMY_TEST_LOOKUP_TOKEN", LOOKUP_TOKEN)]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn found_and_absent_probes_decide_an_interrupted_payment() {
    let fixture = reconciling().await;
    let (db, payments, http) = (&fixture.db, &fixture.payments, fixture.http.clone());
    let mut a = fixture.replica("reconcile-a", &[]);
    let b = fixture.replica("reconcile-b", &[]);

    // Found: the retry gets the upstream's payment, replayed, decided by the reconciler.
    let call = payment_call("found", "found-1");
    let found = fixture
        .interrupt_one(&mut a, &b, &call, "/pay/commit-found")
        .await;
    let id = found.clone();
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["execution_id"], id.as_str(), "{body}");
    assert_eq!(body["replayed"], true, "{body}");
    assert_eq!(body["status"], "completed", "{body}");
    assert_eq!(body["data"], payments.payment(&id).unwrap(), "{body}");
    assert_eq!(body["resolution"]["by"], "reconciler", "{body}");
    assert_eq!(
        fixture.audit(&id).await,
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
    let id = fixture
        .interrupt_one(&mut a, &b, &call, "/pay/lost-released")
        .await;
    fixture.until_released(&id).await;
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["replayed"], false, "{body}");
    assert_ne!(body["execution_id"], id.as_str(), "{body}");
    // A rerun says so (docs/semantics.md §12.1): the released execution, by the reconciler.
    assert_eq!(body["rerun_of"]["execution_id"], id.as_str(), "{body}");
    assert_eq!(body["rerun_of"]["ended"], "released", "{body}");
    assert_eq!(body["rerun_of"]["by"], "reconciler", "{body}");
    assert!(body["rerun_of"]["note"].is_string(), "{body}");
    let again = body["execution_id"].as_str().unwrap().to_owned();
    assert_eq!(body["data"], payments.payment(&again).unwrap(), "{body}");
    assert_eq!(
        fixture.audit(&id).await,
        [("release".to_owned(), "reconciler".to_owned())]
    );
    assert_eq!(
        payments.posts_at("/pay/lost-released"),
        [Some(id.clone()), Some(again)]
    );

    // Absent, not_executed, rerun: taken over under the same upstream key.
    a.restart();
    let call = payment_call("absent_rerun", "rerun-1");
    let id = fixture
        .interrupt_one(&mut a, &b, &call, "/pay/lost-rerun")
        .await;
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
        fixture.audit(&id).await,
        [("takeover".to_owned(), b_instance(db, &id).await)]
    );

    // Absent, unknown: it stays interrupted, the probe's answer kept as evidence.
    a.restart();
    let call = payment_call("absent_unknown", "unknown-1");
    let id = fixture
        .interrupt_one(&mut a, &b, &call, "/pay/lost-unknown")
        .await;
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
    let (kept, _) = fixture.evidence(&id).await;
    assert_eq!(
        (kept["answer"].as_str(), kept["status"].as_u64()),
        (Some("absent"), Some(404)),
        "{kept}"
    );
    assert_eq!(fixture.audit(&id).await, []);
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
    let fixture = reconciling().await;
    let (payments, http) = (&fixture.payments, fixture.http.clone());
    let extra = [
        ("CARMY_RECONCILE_INLINE_MS", "300"),
        ("CARMY_RECONCILE_MAX_ATTEMPTS", "3"),
    ];
    let mut a = fixture.replica("probe-down-a", &extra);
    let b = fixture.replica("probe-down-b", &extra);

    let call = payment_call("down", "down-1");
    let id = fixture
        .interrupt_one(&mut a, &b, &call, "/pay/commit-down")
        .await;
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
        let (kept, attempts) = fixture.evidence(&id).await;
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
    assert_eq!(fixture.audit(&id).await, []);

    a.restart();
    let call = payment_call("slow", "slow-1");
    let id = fixture
        .interrupt_one(&mut a, &b, &call, "/pay/commit-slow")
        .await;
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
    assert_eq!(fixture.audit(&id).await, []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_decide_twenty_interrupted_executions_once_each() {
    let fixture = reconciling().await;
    let (payments, http) = (&fixture.payments, fixture.http.clone());
    let mut a = fixture.replica("twenty-a", &[]);
    let b = fixture.replica("twenty-b", &[]);
    let c = fixture.replica("twenty-c", &[]);

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
    let ids = fixture
        .interrupt(&mut a, &b, &calls, "/pay/commit-bulk")
        .await;
    for id in &ids {
        fixture.until_status(&c, id, "completed").await;
    }
    for id in &ids {
        assert_eq!(payments.lookups_of(id), 1, "{id}");
        assert_eq!(
            fixture.audit(id).await,
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
    assert_eq!(fixture.evidence(unprobed_id).await, (Value::Null, 0));
}
