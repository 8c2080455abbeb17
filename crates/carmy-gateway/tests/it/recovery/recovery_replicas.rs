//! Decisions across real `carmy-gateway` processes on one PostgreSQL database
//! (docs/semantics.md §12.1): one winner of 20 concurrent decisions over two replicas, and the DBA's
//! SQL functions answering exactly like the API.

use carmy_test_support::{
    client, eventually, post, request, spawn_post_unanswered, Replica, TestDb,
};
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::Row;
use std::time::Duration;

/// Replica settings: a short lease (so a killed owner reads interrupted quickly) and an operator.
pub(crate) fn env(db: &TestDb) -> Vec<(&str, &str)> {
    vec![
        ("DATABASE_URL", db.url.as_str()),
        ("CARMY_LEASE_TTL_MS", "1000"),
        ("CARMY_OPERATOR_KEYS", "ko=ops"),
    ]
}

/// Starts a long `create_order`-like call (a `sleep`) on `owner`, kills `owner` while it runs,
/// and waits (through `reader`) until the execution reads `interrupted`; returns its id.
pub(crate) async fn interrupted_execution(
    owner: &mut Replica,
    reader: &Replica,
    request_id: &str,
) -> String {
    let http = client();
    let call = json!({"tool": "sleep", "arguments": {"ms": 600_000}, "request_id": request_id});
    spawn_post_unanswered(&http, owner, &call);
    let path = format!("/v1/executions?request_id={request_id}");
    let id = eventually(Duration::from_secs(10), "the call is reserved", || async {
        let (status, body) = request(&http, reader, Method::GET, &path, None, None).await;
        (status == 200)
            .then(|| body["execution_id"].as_str().unwrap().to_owned())
            .ok_or(body)
    })
    .await;
    owner.kill9();
    eventually(
        Duration::from_secs(10),
        "the owner's lease lapses",
        || async {
            let (_, body) = request(&http, reader, Method::GET, &path, None, None).await;
            (body["status"] == "interrupted").then_some(()).ok_or(body)
        },
    )
    .await;
    id
}

pub(crate) async fn audit_rows(db: &TestDb, execution_id: &str) -> Vec<(String, String)> {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_decisions_over_two_replicas_have_one_winner() {
    let db = TestDb::migrated().await;
    let mut a = Replica::start("decide-a", &env(&db));
    let b = Replica::start("decide-b", &env(&db));
    let id = interrupted_execution(&mut a, &b, "race").await;
    a.restart();
    let http = client();
    let replicas = [&a, &b];
    let decisions = (0..20).map(|n| {
        let replica = replicas[n % 2];
        let (route, body) = if n % 4 < 2 {
            (
                "resolve",
                json!({"status": "completed", "data": {"n": n}, "note": format!("decision {n}")}),
            )
        } else {
            ("release", json!({"note": format!("decision {n}")}))
        };
        let path = format!("/v1/executions/{id}/{route}");
        let http = http.clone();
        async move { request(&http, replica, Method::POST, &path, Some("ko"), Some(&body)).await }
    });
    let answers = futures::future::join_all(decisions).await;
    let winners: Vec<&(u16, Value)> = answers
        .iter()
        .filter(|(status, _)| *status == 200)
        .collect();
    assert_eq!(winners.len(), 1, "exactly one decision wins: {answers:?}");
    for (status, body) in answers.iter().filter(|(status, _)| *status != 200) {
        assert_eq!(*status, 409, "{body}");
        assert_eq!(body["code"], "EXECUTION_FINISHED", "{body}");
        assert_eq!(body["execution_id"], json!(id));
    }
    let rows = audit_rows(&db, &id).await;
    assert_eq!(rows.len(), 1, "one audit row: {rows:?}");
    assert_eq!(rows[0].1, "operator:ops");
    let winner = &winners[0].1;
    for replica in replicas {
        let path = format!("/v1/executions/{id}");
        let (status, read) = request(&http, replica, Method::GET, &path, None, None).await;
        assert_eq!(status, 200);
        assert_eq!(
            read["resolution"], winner["resolution"],
            "every replica reads the winner"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_dba_functions_are_the_api_decisions() {
    let db = TestDb::migrated().await;
    let mut a = Replica::start("dba-a", &env(&db));
    let b = Replica::start("dba-b", &env(&db));
    let id = interrupted_execution(&mut a, &b, "dba").await;
    let mut connection = db.connect().await;
    let outcome: String = sqlx::query_scalar(
        "SELECT carmy.resolve_execution($1, 'completed', '{\"order_id\": 17}', NULL, \
         'order 17 exists', 'dba:carol')",
    )
    .bind(&id)
    .fetch_one(&mut connection)
    .await
    .unwrap();
    let outcome: Value = serde_json::from_str(&outcome).unwrap();
    assert_eq!(outcome["resolution"]["by"], "dba:carol");
    let http = client();
    let call = json!({"tool": "sleep", "arguments": {"ms": 600_000}, "request_id": "dba"});
    let (status, replay) = post(&http, &b, &call).await;
    assert_eq!(status, 200, "{replay}");
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["data"], json!({"order_id": 17}));
    assert_eq!(replay["resolution"], outcome["resolution"]);
    let path = format!("/v1/executions/{id}/release");
    let body = json!({"note": "too late"});
    let (status, refused) = request(&http, &b, Method::POST, &path, None, Some(&body)).await;
    assert_eq!(
        (status, &refused["code"]),
        (409, &json!("EXECUTION_FINISHED"))
    );
    let twice = sqlx::query("SELECT carmy.release_execution($1, 'again', 'dba:carol')")
        .bind(&id)
        .execute(&mut connection)
        .await
        .unwrap_err();
    let code = twice.as_database_error().and_then(|e| e.code()).unwrap();
    assert_eq!(code, "CR409", "{twice}");
    assert_eq!(
        audit_rows(&db, &id).await,
        vec![("resolve".into(), "dba:carol".into())]
    );

    // An interrupted execution is released by its owner (anonymous) without force; the next
    // attempt runs the tool again.
    let mut owner = a;
    owner.restart();
    let released_id = interrupted_execution(&mut owner, &b, "dba-release").await;
    let path = format!("/v1/executions/{released_id}/release");
    let body = json!({"note": "no order found"});
    let (status, released) = request(&http, &b, Method::POST, &path, None, Some(&body)).await;
    assert_eq!(
        (status, &released["status"]),
        (200, &json!("released")),
        "{released}"
    );
    let mut connection = db.connect().await;
    let kept: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM carmy.released_executions WHERE execution_id = $1 AND note = $2",
    )
    .bind(&released_id)
    .bind("no order found")
    .fetch_one(&mut connection)
    .await
    .unwrap();
    assert_eq!(kept, 1, "the released execution stays in history");
    let call = json!({"tool": "sleep", "arguments": {"ms": 600_000}, "request_id": "dba-release"});
    spawn_post_unanswered(&http, &b, &call);
    let lookup = "/v1/executions?request_id=dba-release";
    eventually(
        Duration::from_secs(10),
        "the next attempt runs anew",
        || async {
            let (_, body) = request(&http, &b, Method::GET, lookup, None, None).await;
            (body["status"] == "running" && body["execution_id"] != json!(released_id))
                .then_some(())
                .ok_or(body)
        },
    )
    .await;
}

/// POSTs `call` to `replica` with `Prefer: wait=<seconds>`; the status, body and time taken.
async fn post_waiting(replica: &Replica, call: &Value, seconds: u64) -> (u16, Value, Duration) {
    let started = std::time::Instant::now();
    let response = client()
        .post(replica.url("/v1/executions"))
        .header("content-type", "application/json")
        .header("prefer", format!("wait={seconds}"))
        .body(call.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.json().await.unwrap();
    (status, body, started.elapsed())
}

/// Waits until `replica` reads `request_id` as running; its execution id.
pub(crate) async fn reserved(replica: &Replica, request_id: &str) -> Value {
    let http = client();
    let path = format!("/v1/executions?request_id={request_id}");
    eventually(Duration::from_secs(10), "the call is reserved", || async {
        let (_, body) = request(&http, replica, Method::GET, &path, None, None).await;
        (body["status"] == "running")
            .then(|| body["execution_id"].clone())
            .ok_or(body)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiting_duplicate_on_another_replica_gets_the_outcome() {
    let db = TestDb::migrated().await;
    let a = Replica::start("wait-a", &env(&db));
    let b = Replica::start("wait-b", &env(&db));
    let call = json!({"tool": "sleep", "arguments": {"ms": 1500}, "request_id": "w5"});
    let first = carmy_test_support::spawn_post(&client(), &a, &call);
    let id = reserved(&b, "w5").await;
    let (status, body, _) = post_waiting(&b, &call, 5).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["execution_id"], id);
    assert_eq!(body["replayed"], true);
    assert_eq!(body["data"], json!({"slept_ms": 1500}));
    let (status, original) = first.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(original["data"], body["data"]);
    let runs = carmy_test_support::tool_runs(&client(), &a, "sleep").await
        + carmy_test_support::tool_runs(&client(), &b, "sleep").await;
    assert_eq!(runs, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wait_shorter_than_the_tool_ends_running_and_the_server_caps_it() {
    let db = TestDb::migrated().await;
    let a = Replica::start("short-a", &env(&db));
    let mut capped_env = env(&db);
    capped_env.push(("CARMY_MAX_WAIT_MS", "200"));
    let capped = Replica::start("short-capped", &capped_env);
    let call = json!({"tool": "sleep", "arguments": {"ms": 3000}, "request_id": "w1"});
    carmy_test_support::spawn_post_unanswered(&client(), &a, &call);
    let id = reserved(&a, "w1").await;
    let (status, body, took) = post_waiting(&a, &call, 1).await;
    assert_eq!(
        (status, &body["code"]),
        (409, &json!("EXECUTION_UNCERTAIN")),
        "{body}"
    );
    assert_eq!(
        (&body["state"], &body["execution_id"]),
        (&json!("running"), &id)
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(2900),
        "waited about a second, not the tool's 3 s: {took:?}"
    );
    let (status, body, took) = post_waiting(&capped, &call, 5).await;
    assert_eq!((status, &body["state"]), (409, &json!("running")), "{body}");
    assert!(
        took < Duration::from_millis(2500),
        "cut to CARMY_MAX_WAIT_MS: {took:?}"
    );
}

/// Sends `signal` (`STOP`, `CONT`) to `replica`'s process.
pub(crate) fn signal(replica: &Replica, signal: &str) {
    let pid = replica.pid().expect("running").to_string();
    let sent = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status();
    assert!(sent.unwrap().success(), "kill -{signal} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_owner_that_finishes_after_a_release_is_a_late_arrival() {
    let db = TestDb::migrated().await;
    let a = Replica::start("frozen-a", &env(&db));
    let b = Replica::start("frozen-b", &env(&db));
    let http = client();
    let call = json!({"tool": "sleep", "arguments": {"ms": 1500}, "request_id": "frozen"});
    let first = carmy_test_support::spawn_post(&http, &a, &call);
    let id = reserved(&b, "frozen").await;
    signal(&a, "STOP");
    let path = "/v1/executions?request_id=frozen";
    eventually(
        Duration::from_secs(10),
        "the frozen owner reads interrupted",
        || async {
            let (_, body) = request(&http, &b, Method::GET, path, None, None).await;
            (body["status"] == "interrupted").then_some(()).ok_or(body)
        },
    )
    .await;
    let release = json!({"note": "owner looks dead; nothing found"});
    let route = format!("/v1/executions/{}/release", id.as_str().unwrap());
    let (status, body) = request(&http, &b, Method::POST, &route, Some("ko"), Some(&release)).await;
    assert_eq!(status, 200, "{body}");
    let second = carmy_test_support::spawn_post(&http, &b, &call);
    let next = reserved(&b, "frozen").await;
    assert_ne!(next, id);
    signal(&a, "CONT");

    let (status, body) = first.await.unwrap();
    assert_eq!(
        (status, &body["code"]),
        (409, &json!("EXECUTION_SUPERSEDED")),
        "{body}"
    );
    assert_eq!(
        (&body["execution_id"], &body["current_execution_id"]),
        (&id, &next)
    );
    let (status, replay) = second.await.unwrap();
    assert_eq!((status, &replay["execution_id"]), (200, &next));
    let mut connection = db.connect().await;
    let late: (String, String, String) = sqlx::query_as(
        "SELECT current_execution_id, status, outcome::text FROM carmy.late_arrivals \
         WHERE execution_id = $1",
    )
    .bind(id.as_str().unwrap())
    .fetch_one(&mut connection)
    .await
    .unwrap();
    assert_eq!(late.0, next.as_str().unwrap());
    // Continued, the owner sees both its sleep over and its lease lapsed: the tool either
    // finished first, or was stopped for the lapse (docs/semantics.md §12.2) first.
    let outcome: Value = serde_json::from_str(&late.2).unwrap();
    match late.1.as_str() {
        "completed" => assert_eq!(outcome["data"]["slept_ms"], 1500, "{outcome}"),
        "cancelled" => assert_eq!(
            outcome["error"]["message"],
            "the execution was stopped because its replica lost its lease (cut off from the database); its effects are unknown",
            "{outcome}"
        ),
        other => panic!("late arrival {other}: {outcome}"),
    }
    let recorded: String = sqlx::query_scalar(
        "SELECT execution_id FROM carmy.reservations WHERE request_id = 'frozen'",
    )
    .fetch_one(&mut connection)
    .await
    .unwrap();
    assert_eq!(
        recorded,
        next.as_str().unwrap(),
        "the record is the second run's"
    );
}
