//! A late arrival that contradicts the reconciler (docs/semantics.md §12.10),
//! with real replicas and a real upstream: replica A is frozen (SIGSTOP) mid-call while the
//! upstream commits the payment where its lookup does not see it yet (a lookup that lags);
//! A's lease lapses, B's reconciler probes, reads absent and, `absent_means = "not_executed"`,
//! releases the execution once the attempt's deadline has passed as B counts it: B's default
//! tool timeout is shorter than A's (a configuration change rolling out), so B counts A's call
//! past its deadline while A, frozen, still holds it within its own. The upstream then answers the held call; A is continued (SIGCONT)
//! and records its real outcome, `completed` with the payment: it lands in
//! `carmy.late_arrivals`, flagged `contradicts_decision`, counted by A's
//! `carmy_late_arrivals_contradicting_total`; the record keeps the reconciler's decision. And
//! which late arrivals the gateway's own statement flags: those that contradict a decision the
//! reconciler took, never an operator's.

use super::reconciling::{Reconciling, WAIT};
use crate::recovery_replicas::signal;
use crate::tools_file::write_tools_file;
use carmy_test_support::{eventually, metric, spawn_post, TestDb};
use serde_json::{json, Value};
use sqlx::Row;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_owners_payment_after_the_reconcilers_release_is_flagged_as_contradicting() {
    let fixture = Reconciling::start(
        |base| {
            write_tools_file(&format!(
                "[[tools]]\nname = \"lagging\"\nurl = \"{base}/pay/hidden-lag\"\n[tools.reconcile]\nurl = \"{base}/lookup?idempotency_key={{execution_id}}\"\nabsent_means = \"not_executed\"\n"
            ))
        },
        &[],
    )
    .await;
    let (db, payments, http) = (&fixture.db, &fixture.payments, fixture.http.clone());
    let a = fixture.replica("contradiction-a", &[("CARMY_TOOL_TIMEOUT_MS", "30000")]);
    let b = fixture.replica("contradiction-b", &[("CARMY_TOOL_TIMEOUT_MS", "1000")]);

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
    fixture.until_released(&id).await;
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
    let trail = fixture.audit(&id).await;
    assert_eq!(trail.len(), 2, "{trail:?}");
    assert_eq!(trail[0], ("release".to_owned(), "reconciler".to_owned()));
    assert_eq!(trail[1].0, "late_arrival", "{trail:?}");
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
