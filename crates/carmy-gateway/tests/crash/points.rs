//! Crash at every step (feature `fault-injection`): replica A aborts at one boundary of an
//! execution; the same call is then retried on replica B at once, after A's lease lapsed, and on
//! A after its restart. The tool body never runs a second time; an unrecorded outcome is
//! `EXECUTION_UNCERTAIN` (`interrupted` once the lease lapsed); a recorded one replays.

use carmy_test_support::{call, client, eventually, post, tool_runs, Replica, TestDb};
use serde_json::{json, Value};
use std::time::Duration;

const LEASE_TTL_MS: &str = "1500";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Expect {
    /// Nothing recorded; the tool never ran (0 orders).
    UncertainNoEffect,
    /// Nothing recorded; the tool may have run (at most 1 order).
    UncertainMaybeEffect,
    /// Nothing recorded; the tool ran (1 order).
    UncertainWithEffect,
    /// Recorded: every retry replays it (1 order).
    Replay,
}

async fn orders(db: &TestDb, sku: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM carmy.example_orders WHERE sku = $1")
        .bind(sku)
        .fetch_one(&mut db.connect().await)
        .await
        .unwrap()
}

async fn assert_answer(
    http: &reqwest::Client,
    replica: &Replica,
    body: &Value,
    expect: Expect,
    state: &str,
) -> Value {
    let (status, answer) = post(http, replica, body).await;
    if expect == Expect::Replay {
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["replayed"], true);
        assert_eq!(answer["status"], "completed");
    } else {
        assert_eq!(status, 409, "{answer}");
        assert_eq!(answer["code"], "EXECUTION_UNCERTAIN");
        if !state.is_empty() {
            assert_eq!(answer["state"], state, "{answer}");
        }
    }
    answer
}

async fn crash_at(point: &str, expect: Expect) {
    let db = TestDb::create().await;
    let failpoints = format!("{point}=return");
    let mut a = Replica::start(
        &format!("crash-a-{point}"),
        &[
            ("DATABASE_URL", &db.url),
            ("CARMY_LEASE_TTL_MS", LEASE_TTL_MS),
            ("FAILPOINTS", &failpoints),
        ],
    );
    let b = Replica::start(
        &format!("crash-b-{point}"),
        &[
            ("DATABASE_URL", &db.url),
            ("CARMY_LEASE_TTL_MS", LEASE_TTL_MS),
        ],
    );
    let http = client();
    let sku = format!("crash-{point}");
    let arguments = json!({"sku": sku, "note": "crash test"});
    let body = call("create_order", arguments, "crash");

    let died = http
        .post(a.url("/v1/executions"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await;
    assert!(
        died.is_err(),
        "A answered although it should have died at {point}: {died:?}"
    );
    a.kill9(); // reap the aborted process

    let first = assert_answer(&http, &b, &body, expect, "").await;
    if expect != Expect::Replay {
        eventually(Duration::from_secs(15), "A's lease lapsed", || async {
            let (status, answer) = post(&http, &b, &body).await;
            if answer["state"] == "interrupted" {
                Ok(())
            } else {
                Err((status, answer))
            }
        })
        .await;
        let later = assert_answer(&http, &b, &body, expect, "interrupted").await;
        assert_eq!(later["execution_id"], first["execution_id"]);
    }

    let mut a = Replica::start(
        &format!("crash-a2-{point}"),
        &[
            ("DATABASE_URL", &db.url),
            ("CARMY_LEASE_TTL_MS", LEASE_TTL_MS),
        ],
    );
    let state = if expect == Expect::Replay {
        ""
    } else {
        "interrupted"
    };
    let after_restart = assert_answer(&http, &a, &body, expect, state).await;
    assert_eq!(after_restart["execution_id"], first["execution_id"]);

    let made = orders(&db, &sku).await;
    match expect {
        Expect::UncertainNoEffect => assert_eq!(made, 0),
        Expect::UncertainMaybeEffect => assert!(made <= 1),
        Expect::UncertainWithEffect | Expect::Replay => assert_eq!(made, 1),
    }
    assert_eq!(
        tool_runs(&http, &b, "create_order").await,
        0,
        "B never ran the tool"
    );
    assert_eq!(
        tool_runs(&http, &a, "create_order").await,
        0,
        "restarted A never ran it"
    );
    let rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM carmy.reservations WHERE request_id = 'crash'")
            .fetch_one(&mut db.connect().await)
            .await
            .unwrap();
    assert_eq!(rows, 1);
    a.kill9();
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_after_reserve_before_the_tool() {
    crash_at(carmy::fault::AFTER_RESERVE, Expect::UncertainNoEffect).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_during_the_tool() {
    crash_at(carmy::fault::DURING_TOOL, Expect::UncertainMaybeEffect).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_after_the_tool_before_recording() {
    crash_at(carmy::fault::AFTER_TOOL, Expect::UncertainWithEffect).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_after_recording_before_the_response() {
    crash_at(carmy::fault::AFTER_COMPLETE, Expect::Replay).await;
}
