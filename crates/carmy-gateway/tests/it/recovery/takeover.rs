//! Takeover (docs/semantics.md §12.7, `on_interrupted = "rerun"`), across real `carmy-gateway`
//! processes on one PostgreSQL database with a real HTTP upstream: the owner of a `rerun`
//! tool's execution is killed while the upstream holds its request; the next attempt on the
//! other replica runs the tool again under the same execution id, so the upstream sees the same
//! idempotency key twice; one audit row, attempt 2, one taker among concurrent retries; a tool
//! with the default policy stays uncertain.

use crate::tools_file::write_tools_file;
use crate::upstream::Upstream;
use carmy_test_support::{
    client, eventually, post, request, spawn_post_unanswered, Replica, TestDb,
};
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::Row;
use std::path::Path;
use std::time::Duration;

/// Two tools on paths whose first request the upstream never answers: `rerun` takes over,
/// `stays` keeps the default policy.
fn tools(base: &str) -> std::path::PathBuf {
    write_tools_file(&format!(
        r#"[[tools]]
name = "rerun"
url = "{base}/stuck-once-rerun"
on_interrupted = "rerun"

[[tools]]
name = "rerun_raced"
url = "{base}/stuck-once-raced"
on_interrupted = "rerun"

[[tools]]
name = "rerun_busy"
url = "{base}/stuck-once-busy"
on_interrupted = "rerun"
not_executed_statuses = [429]

[[tools]]
name = "stays"
url = "{base}/stuck-once-stays"
"#
    ))
}

fn replica(name: &str, db: &TestDb, file: &Path) -> Replica {
    Replica::start(
        name,
        &[
            ("DATABASE_URL", db.url.as_str()),
            ("CARMY_LEASE_TTL_MS", "1000"),
            ("CARMY_TOOLS_FILE", file.to_str().unwrap()),
        ],
    )
}

/// Calls `tool` on `owner`, waits until the upstream holds the request at `path`, kills
/// `owner`, and waits (through `reader`) until the execution reads `interrupted`; returns its
/// id.
async fn interrupted(
    upstream: &Upstream,
    owner: &mut Replica,
    reader: &Replica,
    tool: &str,
    path: &str,
) -> String {
    let http = client();
    let call = json!({"tool": tool, "arguments": {"amount": 5}, "request_id": tool});
    spawn_post_unanswered(&http, owner, &call);
    eventually(
        Duration::from_secs(10),
        "the upstream holds the call",
        || async {
            let arrived = upstream.arrivals_at(path).len();
            (arrived == 1).then_some(()).ok_or(arrived)
        },
    )
    .await;
    owner.kill9();
    let lookup = format!("/v1/executions?request_id={tool}");
    eventually(
        Duration::from_secs(10),
        "the owner's lease lapses",
        || async {
            let (_, body) = request(&http, reader, Method::GET, &lookup, None, None).await;
            (body["status"] == "interrupted")
                .then(|| body["execution_id"].as_str().unwrap().to_owned())
                .ok_or(body)
        },
    )
    .await
}

/// The idempotency keys of the upstream's requests at `path`, in order of arrival.
fn keys_at(upstream: &Upstream, path: &str) -> Vec<Option<String>> {
    upstream
        .arrivals_at(path)
        .into_iter()
        .map(|arrival| arrival.idempotency_key)
        .collect()
}

/// The `(action, attempt after)` of every audit row of `execution_id`, and the row's attempt.
async fn takeover_trace(db: &TestDb, execution_id: &str) -> (Vec<(String, Value)>, i32) {
    let mut connection = db.connect().await;
    let audit = sqlx::query(
        "SELECT action, after::text FROM carmy.audit_log WHERE execution_id = $1 ORDER BY id",
    )
    .bind(execution_id)
    .fetch_all(&mut connection)
    .await
    .unwrap()
    .iter()
    .map(|row| {
        let after: String = row.get(1);
        (
            row.get(0),
            serde_json::from_str::<Value>(&after).unwrap()["attempt"].clone(),
        )
    })
    .collect();
    let attempt = sqlx::query("SELECT attempt FROM carmy.reservations WHERE execution_id = $1")
        .bind(execution_id)
        .fetch_one(&mut connection)
        .await
        .unwrap()
        .get(0);
    (audit, attempt)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rerun_tool_is_taken_over_with_the_same_key_and_the_default_stays_uncertain() {
    let db = TestDb::migrated().await;
    let upstream = Upstream::start().await;
    let file = tools(&upstream.base());
    let mut a = replica("takeover-a", &db, &file);
    let b = replica("takeover-b", &db, &file);
    let http = client();

    let id = interrupted(&upstream, &mut a, &b, "rerun", "/stuck-once-rerun").await;
    let call = json!({"tool": "rerun", "arguments": {"amount": 5}, "request_id": "rerun"});
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["execution_id"], id.as_str(), "{body}");
    assert_eq!(body["replayed"], false, "{body}");
    assert_eq!(body["status"], "completed", "{body}");
    assert_eq!(body["data"]["key"], id.as_str(), "{body}");
    // A rerun says so (docs/semantics.md §12.1): the interrupted attempt it took over.
    assert_eq!(
        body["rerun_of"],
        json!({"execution_id": id, "ended": "taken_over", "attempt": 2}),
        "{body}"
    );
    assert_eq!(
        keys_at(&upstream, "/stuck-once-rerun"),
        vec![Some(id.clone()), Some(id.clone())]
    );
    let (audit, attempt) = takeover_trace(&db, &id).await;
    assert_eq!(audit, vec![("takeover".to_owned(), json!(2))]);
    assert_eq!(attempt, 2);
    // From now on the record answers; the upstream is not called again.
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(
        (status, body["replayed"].clone()),
        (200, json!(true)),
        "{body}"
    );
    assert!(
        body.get("rerun_of").is_none(),
        "a replay is no rerun: {body}"
    );
    assert_eq!(upstream.arrivals_at("/stuck-once-rerun").len(), 2);

    // The default policy: still uncertain, never re-run.
    a.restart();
    let id = interrupted(&upstream, &mut a, &b, "stays", "/stuck-once-stays").await;
    let call = json!({"tool": "stays", "arguments": {"amount": 5}, "request_id": "stays"});
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "EXECUTION_UNCERTAIN", "{body}");
    assert_eq!(body["state"], "interrupted", "{body}");
    assert_eq!(body["execution_id"], id.as_str(), "{body}");
    assert_eq!(upstream.arrivals_at("/stuck-once-stays").len(), 1);
    assert_eq!(takeover_trace(&db, &id).await, (vec![], 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_concurrent_retries_over_two_replicas_one_takes_over() {
    let db = TestDb::migrated().await;
    let upstream = Upstream::start().await;
    let file = tools(&upstream.base());
    let mut a = replica("raced-a", &db, &file);
    let b = replica("raced-b", &db, &file);
    let id = interrupted(&upstream, &mut a, &b, "rerun_raced", "/stuck-once-raced").await;
    a.restart();
    let http = client();
    let call =
        json!({"tool": "rerun_raced", "arguments": {"amount": 5}, "request_id": "rerun_raced"});
    let replicas = [&a, &b];
    let answers =
        futures::future::join_all((0..12).map(|n| post(&http, replicas[n % 2], &call))).await;
    let mut ran = 0;
    for (status, body) in &answers {
        assert_eq!(body["execution_id"], id.as_str(), "{body}");
        match status {
            200 if body["replayed"] == false => ran += 1,
            200 => assert_eq!(body["replayed"], true, "{body}"),
            409 => {
                assert_eq!(body["code"], "EXECUTION_UNCERTAIN", "{body}");
                assert_eq!(body["state"], "running", "{body}");
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(ran, 1, "{answers:?}");
    assert_eq!(upstream.arrivals_at("/stuck-once-raced").len(), 2);
    let (audit, attempt) = takeover_trace(&db, &id).await;
    assert_eq!(audit, vec![("takeover".to_owned(), json!(2))]);
    assert_eq!(attempt, 2);
}

/// The first attempt may have acted upstream under the execution id (its owner died while the
/// upstream held it); the second attempt, taken over, meets a busy upstream that says nothing
/// happened. That says nothing of the first attempt: the identity must keep the execution, so
/// the next attempt sends the same idempotency key again (docs/semantics.md §12.7) instead of
/// running as a new execution under a new key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_taken_over_attempt_that_did_nothing_keeps_the_execution_and_its_key() {
    let db = TestDb::migrated().await;
    let upstream = Upstream::start().await;
    let file = tools(&upstream.base());
    let (mut a, b) = (replica("busy-a", &db, &file), replica("busy-b", &db, &file));
    let http = client();
    let id = interrupted(&upstream, &mut a, &b, "rerun_busy", "/stuck-once-busy").await;
    let call =
        json!({"tool": "rerun_busy", "arguments": {"amount": 5}, "request_id": "rerun_busy"});
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(
        (status, body["code"].clone()),
        (503, json!("UPSTREAM_UNAVAILABLE")),
        "{body}"
    );
    // The answer says only this attempt had no effect, and names the execution.
    assert_eq!(body["execution_id"], id.as_str(), "{body}");
    assert_eq!(body["state"], "interrupted", "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("This attempt had no effect, but it was a rerun of execution")
            && !detail.contains("The call had no effect"),
        "{detail}"
    );
    // The execution is handed back, not freed: it reads interrupted again, attempt 2 of it.
    let (_, body) = request(
        &http,
        &b,
        Method::GET,
        "/v1/executions?request_id=rerun_busy",
        None,
        None,
    )
    .await;
    assert_eq!(
        (body["execution_id"].as_str(), body["status"].as_str()),
        (Some(id.as_str()), Some("interrupted")),
        "{body}"
    );
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        keys_at(&upstream, "/stuck-once-busy"),
        vec![Some(id.clone()), Some(id.clone()), Some(id.clone())]
    );
    assert_eq!(body["execution_id"], id.as_str(), "{body}");
    let (audit, attempt) = takeover_trace(&db, &id).await;
    assert_eq!(
        audit,
        vec![
            ("takeover".to_owned(), json!(2)),
            ("hand_back".to_owned(), json!(2)),
            ("takeover".to_owned(), json!(3))
        ]
    );
    assert_eq!(attempt, 3);
}
