//! Real `carmy-gateway` processes sharing one PostgreSQL database: the field cases K06, K09,
//! K10, K11, K12, K13, K14, K15 and K20, and restarts. Migrating (four replicas at once, the
//! `migrate` command) is in `migrations.rs`.

use carmy_test_support::{
    call, client, eventually, eventually_eq, post, post_text, spawn_post, spawn_post_unanswered,
    tool_runs, Replica, TestDb,
};
use serde_json::{json, Value};
use sqlx::Row;
use std::time::Duration;

/// Two replicas on one fresh database, with `extra` settings.
async fn two_replicas(db: &TestDb, extra: &[(&str, &str)]) -> (Replica, Replica) {
    let mut env = vec![("DATABASE_URL", db.url.as_str())];
    env.extend_from_slice(extra);
    let a = Replica::start("a", &env);
    let b = Replica::start("b", &env);
    (a, b)
}

async fn count(db: &TestDb, sql: &'static str, bind: &str) -> i64 {
    let mut connection = db.connect().await;
    sqlx::query(sql)
        .bind(bind)
        .fetch_one(&mut connection)
        .await
        .unwrap()
        .get(0)
}

async fn orders_for(db: &TestDb, sku: &str) -> i64 {
    count(
        db,
        "SELECT count(*) FROM carmy.example_orders WHERE sku = $1",
        sku,
    )
    .await
}

async fn rows_for(db: &TestDb, request_id: &str) -> i64 {
    count(
        db,
        "SELECT count(*) FROM carmy.reservations WHERE request_id = $1",
        request_id,
    )
    .await
}

/// The response without `replayed`, for comparing a replay with the first answer.
fn without_replayed(mut body: Value) -> Value {
    body.as_object_mut().unwrap().remove("replayed");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn k06_conflict_on_every_path() {
    let db = TestDb::migrated().await;
    let (mut a, b) = two_replicas(&db, &[]).await;
    let http = client();
    let (status, done) = post(&http, &a, &call("create_order", json!({"sku": "A"}), "r6")).await;
    assert_eq!(status, 200);
    let changed = call("create_order", json!({"sku": "B"}), "r6");
    let check = |status: u16, body: &Value| {
        assert_eq!(status, 409);
        assert_eq!(body["code"], "IDEMPOTENCY_CONFLICT");
        assert_eq!(body["execution_id"], done["execution_id"]);
        assert!(
            body.get("data").is_none(),
            "a conflict never shows the record: {body}"
        );
    };
    let (status, body) = post(&http, &a, &changed).await;
    check(status, &body);
    let (status, body) = post(&http, &b, &changed).await;
    check(status, &body);
    a.restart();
    let (status, body) = post(&http, &a, &changed).await;
    check(status, &body);

    // while running: r6b is a sleep still running on A, the changed call goes to B
    let running = spawn_post(&http, &a, &call("sleep", json!({"ms": 1500}), "r6b"));
    eventually_eq(Duration::from_secs(10), "sleep started on A", 1, || {
        tool_runs(&http, &a, "sleep")
    })
    .await;
    let (status, body) = post(&http, &b, &call("sleep", json!({"ms": 1501}), "r6b")).await;
    assert_eq!(
        (status, body["code"].clone()),
        (409, json!("IDEMPOTENCY_CONFLICT"))
    );
    assert_eq!(running.await.unwrap().0, 200);
    assert_eq!(orders_for(&db, "A").await, 1);
    assert_eq!(orders_for(&db, "B").await, 0);
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn k09_fifty_concurrent_duplicates_over_two_replicas_run_once() {
    let db = TestDb::migrated().await;
    let (a, b) = two_replicas(&db, &[]).await;
    let http = client();
    let body = call("create_order", json!({"sku": "K09"}), "r9");
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(50));
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let url = if i % 2 == 0 {
                a.url("/v1/executions")
            } else {
                b.url("/v1/executions")
            };
            let (http, body, barrier) = (http.clone(), body.to_string(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let response = http
                    .post(url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                let status = response.status().as_u16();
                (status, response.json::<Value>().await.unwrap())
            })
        })
        .collect();
    let mut execution_ids = std::collections::BTreeSet::new();
    for task in tasks {
        let (status, answer) = task.await.unwrap();
        match status {
            200 => assert_eq!(answer["status"], "completed"),
            409 => assert_eq!(answer["code"], "EXECUTION_UNCERTAIN", "{answer}"),
            other => panic!("unexpected {other}: {answer}"),
        }
        execution_ids.insert(answer["execution_id"].to_string());
    }
    assert_eq!(execution_ids.len(), 1);
    assert_eq!(orders_for(&db, "K09").await, 1);
    assert_eq!(rows_for(&db, "r9").await, 1);
    assert_eq!(
        tool_runs(&http, &a, "create_order").await + tool_runs(&http, &b, "create_order").await,
        1
    );
    for replica in [&a, &b] {
        let (status, replay) = post(&http, replica, &body).await;
        assert_eq!((status, replay["replayed"].clone()), (200, json!(true)));
    }
    drop((a, b));
}

/// Inserts the reservation a replica would make, inside a transaction the test controls.
async fn begin_foreign_reservation(
    db: &TestDb,
    request_id: &str,
    arguments: &Value,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&db.url)
        .await
        .unwrap();
    let fingerprint = carmy::fingerprint::fingerprint("create_order", arguments, None).unwrap();
    // A live owner: the lease outlasts the test. Committed before the reservation's
    // transaction, which then holds the row lock alone (on Citus an open write to the
    // reference table `carmy.instances` would also hold the replicas' lease renewals).
    sqlx::query("INSERT INTO carmy.instances (instance_id, lease_expires_at) VALUES ('inst_test_hook', now() + interval '1 hour') ON CONFLICT (instance_id) DO NOTHING")
        .execute(&pool)
        .await
        .unwrap();
    let mut transaction = pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO carmy.reservations (principal, session_id, request_id, tool, fingerprint, fingerprint_version, state, execution_id, owner_instance, started_at) \
         VALUES ('anonymous', 'default', $1, 'create_order', $2, $3, 'running', $4, 'inst_test_hook', now())",
    )
    .bind(request_id)
    .bind(&fingerprint.digest)
    .bind(&fingerprint.version)
    .bind(format!("exec_hook_{request_id}"))
    .execute(&mut *transaction)
    .await
    .unwrap();
    transaction
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn k10_losing_the_insert_race_waits_and_never_500s() {
    let db = TestDb::migrated().await;
    let (a, b) = two_replicas(&db, &[]).await;
    let http = client();
    let arguments = json!({"sku": "K10"});

    // The first "replica" holds its reservation's transaction open; B's identical call waits on
    // it, then answers UNCERTAIN once it commits.
    let held = begin_foreign_reservation(&db, "r10", &arguments).await;
    let waiting = spawn_post(&http, &b, &call("create_order", arguments.clone(), "r10"));
    db.until_lock_waiters(1, "B blocked on the held row").await;
    held.commit().await.unwrap();
    let (status, body) = waiting.await.unwrap();
    assert_eq!(
        (status, body["code"].clone()),
        (409, json!("EXECUTION_UNCERTAIN")),
        "{body}"
    );
    assert_eq!(body["execution_id"], "exec_hook_r10");
    assert_eq!(body["state"], "running");

    // Variant: the first transaction rolls back; B then reserves and runs exactly once.
    let held = begin_foreign_reservation(&db, "r10b", &arguments).await;
    let waiting = spawn_post(&http, &b, &call("create_order", arguments.clone(), "r10b"));
    db.until_lock_waiters(1, "B blocked on the held row").await;
    held.rollback().await.unwrap();
    let (status, body) = waiting.await.unwrap();
    assert_eq!(
        (status, body["replayed"].clone()),
        (200, json!(false)),
        "{body}"
    );
    assert_eq!(orders_for(&db, "K10").await, 1);
    let (status, replay) = post(&http, &a, &call("create_order", arguments, "r10b")).await;
    assert_eq!((status, replay["replayed"].clone()), (200, json!(true)));
    assert_eq!(replay["execution_id"], body["execution_id"]);
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn k11_process_death_is_uncertain_forever_and_never_reruns() {
    let db = TestDb::migrated().await;
    let settings = [("CARMY_LEASE_TTL_MS", "1500")];
    let (mut a, b) = two_replicas(&db, &settings).await;
    let http = client();
    let body = call("sleep", json!({"ms": 10000}), "r11");
    spawn_post_unanswered(&http, &a, &body);
    eventually_eq(Duration::from_secs(10), "sleep started on A", 1, || {
        tool_runs(&http, &a, "sleep")
    })
    .await;
    a.kill9();

    let (status, at_once) = post(&http, &b, &body).await;
    assert_eq!(
        (status, at_once["code"].clone()),
        (409, json!("EXECUTION_UNCERTAIN"))
    );
    assert_eq!(at_once["state"], "running", "A's lease has not lapsed yet");

    eventually(Duration::from_secs(15), "A's lease lapsed", || async {
        let (status, answer) = post(&http, &b, &body).await;
        if answer["state"] == "interrupted" {
            Ok(())
        } else {
            Err((status, answer))
        }
    })
    .await;
    let (status, later) = post(&http, &b, &body).await;
    assert_eq!(
        (status, later["code"].clone(), later["state"].clone()),
        (409, json!("EXECUTION_UNCERTAIN"), json!("interrupted"))
    );
    assert_eq!(later["execution_id"], at_once["execution_id"]);

    a.restart();
    let (status, after_restart) = post(&http, &a, &body).await;
    assert_eq!(
        (status, after_restart["state"].clone()),
        (409, json!("interrupted"))
    );
    assert_eq!(tool_runs(&http, &a, "sleep").await, 0);
    assert_eq!(tool_runs(&http, &b, "sleep").await, 0);
    let state: String = sqlx::query_scalar(
        "SELECT in_flight_state FROM carmy.uncertain_executions WHERE request_id = 'r11'",
    )
    .fetch_one(&mut db.connect().await)
    .await
    .unwrap();
    assert_eq!(state, "interrupted");
    drop((a, b));
}

async fn client_disconnect_is_replayed(replica: &Replica) {
    let http = client();
    let body = call("sleep", json!({"ms": 2000}), "r12");
    let aborted = http
        .post(replica.url("/v1/executions"))
        .header("content-type", "application/json")
        .timeout(Duration::from_millis(200))
        .body(body.to_string())
        .send()
        .await;
    assert!(aborted.is_err(), "the client gave up after 200 ms");
    let replay = eventually(
        Duration::from_secs(10),
        "the detached run to be recorded",
        || async {
            let (status, answer) = post(&http, replica, &body).await;
            if status == 200 {
                return Ok(answer);
            }
            assert_eq!((status, answer["state"].clone()), (409, json!("running")));
            Err((status, answer))
        },
    )
    .await;
    assert_eq!(replay["status"], "completed");
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["data"], json!({"slept_ms": 2000}));
    assert_eq!(tool_runs(&http, replica, "sleep").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn k12_client_disconnect_does_not_drop_the_work() {
    let db = TestDb::migrated().await;
    let (a, _b) = two_replicas(&db, &[]).await;
    client_disconnect_is_replayed(&a).await;
    let state: String =
        sqlx::query_scalar("SELECT state FROM carmy.reservations WHERE request_id = 'r12'")
            .fetch_one(&mut db.connect().await)
            .await
            .unwrap();
    assert_eq!(state, "completed");
    drop((a, _b));

    // The in-memory store, capacity 2: the slot is used once, not leaked.
    let memory = Replica::start("k12-memory", &[("CARMY_MEMORY_CAPACITY", "2")]);
    client_disconnect_is_replayed(&memory).await;
    let http = client();
    let (status, _) = post(&http, &memory, &call("echo", json!({}), "second")).await;
    assert_eq!(status, 200);
    let (status, full) = post(&http, &memory, &call("echo", json!({}), "third")).await;
    assert_eq!(
        (status, full["code"].clone()),
        (507, json!("IDEMPOTENCY_CAPACITY"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn k13_nul_characters_and_big_numbers_are_stored_losslessly() {
    let db = TestDb::migrated().await;
    let (a, b) = two_replicas(&db, &[]).await;
    let http = client();
    let body = r#"{"tool":"echo","request_id":"r13","arguments":{"note":"a\u0000b","big":123456789012345678901234567890,"f":1.5e300}}"#;
    let (status, first) = post_text(&http, &a, body).await;
    assert_eq!(status, 200, "{first}");
    assert!(first.contains(r#""note":"a\u0000b""#), "{first}");
    assert!(
        first.contains(r#""big":123456789012345678901234567890"#),
        "{first}"
    );
    let (status, replay) = post_text(&http, &b, body).await;
    assert_eq!(status, 200);
    assert_eq!(
        replay,
        first.replace(r#""replayed":false"#, r#""replayed":true"#)
    );
    let state: String =
        sqlx::query_scalar("SELECT state FROM carmy.reservations WHERE request_id = 'r13'")
            .fetch_one(&mut db.connect().await)
            .await
            .unwrap();
    assert_eq!(state, "completed");
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn k14_oversized_results_are_recorded_as_too_large_and_never_rerun() {
    let db = TestDb::migrated().await;
    // No arguments kept: an echo's arguments are as large as its result, and kept arguments
    // over the limit would refuse the call before it runs (ARGUMENTS_TOO_LARGE, semantics §8.5).
    let (a, b) = two_replicas(
        &db,
        &[
            ("CARMY_MAX_RESULT_BYTES", "1000"),
            ("CARMY_KEEP_ARGUMENTS", "none"),
        ],
    )
    .await;
    let http = client();
    // {"s":"xxx…"} is 8 bytes plus the string.
    let under = call("echo", json!({"s": "x".repeat(992)}), "r14-under");
    let over = call("echo", json!({"s": "x".repeat(993)}), "r14-over");
    let (status, first) = post_text(&http, &a, &under.to_string()).await;
    assert_eq!(status, 200);
    assert!(first.contains(r#""status":"completed""#));
    let (status, replay) = post_text(&http, &b, &under.to_string()).await;
    assert_eq!(
        (status, replay),
        (
            200,
            first.replace(r#""replayed":false"#, r#""replayed":true"#)
        )
    );

    let (status, too_large) = post(&http, &a, &over).await;
    assert_eq!(status, 200);
    assert_eq!(too_large["status"], "failed");
    assert_eq!(too_large["error"]["code"], "RESULT_TOO_LARGE");
    assert_eq!(too_large["data"], Value::Null);
    for replica in [&a, &b] {
        let (status, replay) = post(&http, replica, &over).await;
        assert_eq!(status, 200);
        assert_eq!(replay["replayed"], true);
        assert_eq!(
            without_replayed(replay),
            without_replayed(too_large.clone())
        );
    }
    assert_eq!(
        tool_runs(&http, &a, "echo").await + tool_runs(&http, &b, "echo").await,
        2
    );
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn k15_k20_replays_are_faithful_across_replicas_and_restarts() {
    let db = TestDb::migrated().await;
    let (mut a, mut b) = two_replicas(&db, &[]).await;
    let http = client();
    let calls = [
        call("echo", json!({}), "r15"),
        call("echo", json!({"v": []}), "r16"),
        call("echo", json!({"v": null}), "r17"),
        call("echo", json!({"v": ""}), "r17b"),
        call("fail", json!({"message": "no"}), "r17c"),
        call("create_order", json!({"sku": "K20"}), "r26"),
    ];
    let mut firsts = Vec::new();
    for body in &calls {
        let (status, first) = post_text(&http, &a, &body.to_string()).await;
        assert_eq!(status, 200, "{first}");
        firsts.push(first);
    }
    let expect_replays = |replica: &Replica| {
        let (http, calls, firsts) = (http.clone(), calls.clone(), firsts.clone());
        let url = replica.url("/v1/executions");
        async move {
            for (body, first) in calls.iter().zip(&firsts) {
                let response = http
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status().as_u16(), 200);
                let replay = response.text().await.unwrap();
                assert_eq!(
                    replay,
                    first.replace(r#""replayed":false"#, r#""replayed":true"#)
                );
            }
        }
    };
    expect_replays(&b).await;
    // Restart test: both replicas killed and restarted; every identity replays.
    a.kill9();
    b.kill9();
    a.restart();
    b.restart();
    expect_replays(&a).await;
    expect_replays(&b).await;
    assert_eq!(orders_for(&db, "K20").await, 1);
    drop((a, b));
}
