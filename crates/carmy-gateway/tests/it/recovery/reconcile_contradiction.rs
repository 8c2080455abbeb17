//! A late arrival that contradicts the reconciler (docs/semantics.md §12.10),
//! with real replicas and a real upstream: replica A is frozen (SIGSTOP) mid-call while the
//! upstream commits the payment where its lookup does not see it yet (a lookup that lags);
//! A's lease lapses, B's reconciler probes, reads absent and, `absent_means = "not_executed"`,
//! releases the execution once the attempt's deadline has passed as B counts it: B's default
//! tool timeout is shorter than A's (a configuration change rolling out), so B counts A's call
//! past its deadline while A, frozen, still holds it within its own. The upstream then answers the held call; A is continued (SIGCONT)
//! and records its real outcome, `completed` with the payment: it lands in
//! `carmy.late_arrivals`, flagged `contradicts_decision`, counted by A's
//! `carmy_late_arrivals_contradicting_total`; the record keeps the reconciler's decision.

use super::reconcile::{audit, WAIT};
use crate::payments::Payments;
use crate::recovery_replicas::signal;
use crate::tools_file::write_tools_file;
use carmy_test_support::{client, eventually, metric, spawn_post, Replica, TestDb};
use serde_json::{json, Value};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_owners_payment_after_the_reconcilers_release_is_flagged_as_contradicting() {
    let db = TestDb::migrated().await;
    let payments = Payments::start().await;
    let base = payments.base();
    let file = write_tools_file(&format!(
        "[[tools]]\nname = \"lagging\"\nurl = \"{base}/pay/hidden-lag\"\n[tools.reconcile]\nurl = \"{base}/lookup?idempotency_key={{execution_id}}\"\nabsent_means = \"not_executed\"\n"
    ));
    let env = |name, tool_timeout_ms| {
        Replica::start(
            name,
            &[
                ("DATABASE_URL", db.url.as_str()),
                ("CARMY_LEASE_TTL_MS", "1000"),
                ("CARMY_TOOLS_FILE", file.to_str().unwrap()),
                ("CARMY_RECONCILE_INTERVAL_MS", "100"),
                ("CARMY_TOOL_TIMEOUT_MS", tool_timeout_ms),
            ],
        )
    };
    let a = env("contradiction-a", "30000");
    let b = env("contradiction-b", "1000");
    let http = client();

    let call = json!({"tool": "lagging", "arguments": {"amount": 7}, "request_id": "lag-1"});
    let first = spawn_post(&http, &a, &call);
    let id = eventually(WAIT, "the upstream holds the call", || async {
        let held = payments.posts_at("/pay/hidden-lag");
        match held.as_slice() {
            [Some(id)] => Ok(id.clone()),
            _ => Err(held),
        }
    })
    .await;
    // While A lives, nothing is probed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(payments.lookups_of(&id), 0);
    signal(&a, "STOP");

    // A's lease lapses; B's reconciler reads absent and releases the execution.
    eventually(WAIT, "the reconciler releases it", || async {
        let trail = audit(&db, &id).await;
        (trail == [("release".to_owned(), "reconciler".to_owned())])
            .then_some(())
            .ok_or(trail)
    })
    .await;
    assert!(payments.lookups_of(&id) >= 1);
    assert_eq!(payments.payment(&id), None);

    // The upstream answers the frozen replica's call: the payment did happen.
    payments.open_gate();
    let payment = eventually(WAIT, "the upstream answers", || async {
        payments.payment(&id).ok_or(())
    })
    .await;
    signal(&a, "CONT");
    let (status, body) = first.await.unwrap();
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("EXECUTION_SUPERSEDED")),
        "{body}"
    );

    let pool = db.pool().await;
    let (late, outcome, flagged): (String, String, Option<bool>) =
        eventually(WAIT, "A's late arrival", || async {
            sqlx::query_as(
                "SELECT status, outcome::text, contradicts_decision FROM carmy.late_arrivals \
                 WHERE execution_id = $1",
            )
            .bind(&id)
            .fetch_optional(&pool)
            .await
            .unwrap()
            .ok_or(())
        })
        .await;
    let outcome: Value = serde_json::from_str(&outcome).unwrap();
    assert_eq!(
        (late.as_str(), &outcome["data"], flagged),
        ("completed", &payment, Some(true)),
        "{outcome}"
    );
    assert_eq!(
        metric(&http, &a, "carmy_late_arrivals_contradicting_total").await,
        1
    );
    assert_eq!(
        metric(&http, &b, "carmy_late_arrivals_contradicting_total").await,
        0
    );
    // The record keeps the reconciler's decision; the late arrival is only evidence.
    let trail = audit(&db, &id).await;
    assert_eq!(trail.len(), 2, "{trail:?}");
    assert_eq!(trail[0], ("release".to_owned(), "reconciler".to_owned()));
    assert_eq!(trail[1].0, "late_arrival", "{trail:?}");
}
