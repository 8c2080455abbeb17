//! An upstream's "absent" proves nothing while the interrupted attempt may still land
//! (docs/semantics.md §12.10), across real `carmy-gateway` processes on one PostgreSQL
//! database and the real payments upstream. The owner is killed while the upstream still
//! processes its request (it records the payment only later, and its lookup answers 404 until
//! then); the tool's probe says absent with `absent_means = "not_executed"`. Before the attempt's
//! deadline (its start, plus the tool's `timeout_ms`, plus the lease-loss grace) that decides
//! nothing: neither the retry's inline probe, nor the on-demand endpoint, nor the reconciler
//! releases the execution; the retry is answered `EXECUTION_UNCERTAIN` (being reconciled) and
//! never runs the tool again, and once the request lands the next probe finds the payment, so
//! it is paid once. The reconciler probes again at the deadline, and then absent releases the
//! execution as before.

use super::reconciling::{payment_call, Reconciling, WAIT};
use crate::tools_file::write_tools_file;
use carmy_test_support::{eventually, metric, post, request};
use reqwest::Method;
use serde_json::Value;
use std::time::{Duration, Instant};

/// The tools' deadline; the owner is killed well within it.
const TIMEOUT_MS: u64 = 5000;
/// The engine's lease-loss grace, the margin after the deadline (`EngineConfig`'s default).
const MARGIN_MS: u64 = 2000;

/// `landing` pays through `/pay/hidden-landing` (the payment is recorded, where the lookup sees
/// it, only when the test opens the gate); `lost` through `/pay/lost-deadline` (the first
/// request is never answered and keeps nothing). Both look payments up by execution id, and
/// absent means not executed.
fn tools(base: &str) -> std::path::PathBuf {
    let tool = |name: &str, path: &str| {
        format!(
            "[[tools]]\nname = \"{name}\"\nurl = \"{base}/pay/{path}\"\ntimeout_ms = {TIMEOUT_MS}\n[tools.reconcile]\nurl = \"{base}/lookup?idempotency_key={{execution_id}}\"\nabsent_means = \"not_executed\"\n"
        )
    };
    write_tools_file(
        &[
            tool("landing", "hidden-landing"),
            tool("lost", "lost-deadline"),
        ]
        .concat(),
    )
}

/// Waits until a probe of `id` answered absent too early; its evidence. Fails at once when
/// the execution was decided instead.
async fn too_early(fixture: &Reconciling, id: &str) -> Value {
    eventually(WAIT, "a probe asked before the deadline", || async {
        let trail = fixture.audit(id).await;
        assert_eq!(trail, [], "decided before the attempt's deadline");
        let (kept, _) = fixture.evidence(id).await;
        (kept["answer"] == "absent" && kept["conclusive_at"].is_string())
            .then_some(kept.clone())
            .ok_or(kept)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_absent_answer_before_the_attempts_deadline_releases_nothing() {
    let fixture = Reconciling::start(tools, &[]).await;
    let (payments, http) = (&fixture.payments, fixture.http.clone());
    // The background reconciler stays out of the way: the retry and the operator probe.
    let quiet = [("CARMY_RECONCILE_INTERVAL_MS", "60000")];
    let mut a = fixture.replica("deadline-a", &quiet);
    let b = fixture.replica("deadline-b", &quiet);
    let window = Duration::from_millis(TIMEOUT_MS + MARGIN_MS);

    // The owner dies while the upstream still processes its payment.
    let call = payment_call("landing", "landing-1");
    let sent = Instant::now();
    let id = fixture
        .interrupt_one(&mut a, &b, &call, "/pay/hidden-landing")
        .await;

    // The retry's inline probe reads absent, which proves nothing yet: uncertain, being
    // reconciled, retry when the deadline has passed; the tool is not run again.
    let (status, body) = post(&http, &b, &call).await;
    assert!(
        sent.elapsed() < window,
        "too slow to retry within the attempt's deadline: {:?}",
        sent.elapsed()
    );
    assert_eq!(
        (
            status,
            body["code"].as_str(),
            body["state"].as_str(),
            body["execution_id"].as_str()
        ),
        (
            409,
            Some("EXECUTION_UNCERTAIN"),
            Some("interrupted"),
            Some(id.as_str())
        ),
        "{body}"
    );
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("being reconciled") && detail.contains("retry the same call in "),
        "{body}"
    );
    assert_eq!(payments.posts_at("/pay/hidden-landing"), [Some(id.clone())]);
    assert_eq!(fixture.audit(&id).await, []);
    let (kept, _) = fixture.evidence(&id).await;
    assert_eq!(
        (kept["answer"].as_str(), kept["status"].as_u64()),
        (Some("absent"), Some(404)),
        "{kept}"
    );
    assert!(kept["conclusive_at"].is_string(), "{kept}");
    assert!(
        kept["detail"]
            .as_str()
            .unwrap()
            .contains("before the interrupted attempt's deadline"),
        "{kept}"
    );

    // On demand: the same, nothing decided.
    let path = format!("/v1/executions/{id}/reconcile");
    let (status, body) = request(&http, &b, Method::POST, &path, None, None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["result"].as_str(), body["evidence"]["answer"].as_str()),
        (Some("too_early"), Some("absent")),
        "{body}"
    );
    assert!(body["evidence"]["conclusive_at"].is_string(), "{body}");
    assert!(sent.elapsed() < window, "{:?}", sent.elapsed());
    assert_eq!(fixture.audit(&id).await, []);
    assert_eq!(
        metric(
            &http,
            &b,
            "carmy_reconciliations_total{tool=\"landing\",result=\"too_early\"}"
        )
        .await,
        2
    );

    // The interrupted request lands; a found answer is proof at once, deadline or not: the
    // retry gets the payment, made once.
    payments.open_gate();
    let payment = eventually(WAIT, "the upstream records the payment", || async {
        payments.payment(&id).ok_or(())
    })
    .await;
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["execution_id"].as_str(), body["replayed"].as_bool()),
        (Some(id.as_str()), Some(true)),
        "{body}"
    );
    assert_eq!(body["data"], payment, "{body}");
    assert_eq!(body["resolution"]["by"], "reconciler", "{body}");
    assert_eq!(
        fixture.audit(&id).await,
        [("resolve".to_owned(), "reconciler".to_owned())]
    );
    assert_eq!(payments.posts_at("/pay/hidden-landing"), [Some(id.clone())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_absent_answer_after_the_attempts_deadline_releases_it() {
    let fixture = Reconciling::start(tools, &[]).await;
    let (payments, http) = (&fixture.payments, fixture.http.clone());
    let mut a = fixture.replica("deadline-late-a", &[]);
    let b = fixture.replica("deadline-late-b", &[]);

    let call = payment_call("lost", "lost-1");
    let id = fixture
        .interrupt_one(&mut a, &b, &call, "/pay/lost-deadline")
        .await;
    // Probed as soon as the lease lapsed: absent, too early, nothing decided; probed again at
    // the deadline: released.
    let kept = too_early(&fixture, &id).await;
    assert_eq!(kept["status"], 404, "{kept}");
    fixture.until_released(&id).await;
    // Not before the deadline: the release came at least the window after the attempt began.
    let pool = fixture.db.pool().await;
    let after: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM a.at - coalesce(r.started_at, r.created_at))::float8 \
         FROM carmy.audit_log a JOIN carmy.released_executions r USING (principal, execution_id) \
         WHERE a.execution_id = $1 AND a.action = 'release'",
    )
    .bind(&id)
    .fetch_one(&pool)
    .await
    .unwrap();
    let window = Duration::from_millis(TIMEOUT_MS + MARGIN_MS).as_secs_f64();
    assert!(
        after >= window,
        "released {after} s after the attempt began"
    );
    let series =
        |result: &str| format!("carmy_reconciliations_total{{tool=\"lost\",result=\"{result}\"}}");
    assert!(metric(&http, &b, &series("too_early")).await >= 1);
    assert_eq!(metric(&http, &b, &series("released")).await, 1);

    // The retry pays anew, under a new execution id.
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(
        (status, body["replayed"].as_bool()),
        (200, Some(false)),
        "{body}"
    );
    let again = body["execution_id"].as_str().unwrap().to_owned();
    assert_ne!(again, id);
    assert_eq!(
        payments.posts_at("/pay/lost-deadline"),
        [Some(id.clone()), Some(again)]
    );
}
