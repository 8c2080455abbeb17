//! A real partition, not a kill (docs/semantics.md §12.2): replica A reaches PostgreSQL through a
//! TCP proxy the test cuts while a slow tool runs on A, once with a link that resets and once
//! with one that drops everything (statements hang). The other replica reports the execution
//! `interrupted`; A refuses new calls and stops its tool; an operator resolves the execution on
//! B; once the link is back, A's late outcome (`cancelled`) lands in `carmy.late_arrivals`, not
//! in the record, which keeps the operator's decision.

use carmy_test_support::{
    client, eventually, metric, post, request, spawn_post, CutProxy, Replica, TestDb,
};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;

/// Long enough for a renewal or two on a busy machine, short enough for a quick test.
const LEASE_TTL_MS: &str = "1500";

fn replica(name: &str, database_url: &str) -> Replica {
    Replica::start(
        name,
        &[
            ("DATABASE_URL", database_url),
            ("CARMY_LEASE_TTL_MS", LEASE_TTL_MS),
            ("CARMY_DB_ACQUIRE_TIMEOUT_MS", "500"),
            ("CARMY_OPERATOR_KEYS", "ko=ops"),
        ],
    )
}

/// The record of `request_id` as `reader` reports it, once its status is `status`.
async fn until_status(reader: &Replica, request_id: &str, status: &str) -> Value {
    let http = client();
    let path = format!("/v1/executions?request_id={request_id}");
    eventually(
        Duration::from_secs(15),
        &format!("{request_id} reads {status}"),
        || async {
            let (_, body) = request(&http, reader, Method::GET, &path, None, None).await;
            (body["status"] == status)
                .then_some(body.clone())
                .ok_or(body)
        },
    )
    .await
}

/// How the link between A and PostgreSQL fails.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Partition {
    /// Connections are closed and new ones refused: statements fail at once.
    Resets,
    /// Nothing gets through and nothing is closed: statements hang until the link is back.
    Drops,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_whose_link_resets_stops_its_tool_and_its_late_outcome_keeps_the_decision() {
    partitioned(Partition::Resets).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_whose_link_drops_stops_its_tool_and_its_late_outcome_keeps_the_decision() {
    partitioned(Partition::Drops).await;
}

async fn partitioned(partition: Partition) {
    let db = TestDb::create().await;
    let proxy = CutProxy::start(&db.url).await;
    let name = format!("{partition:?}").to_lowercase();
    let a = replica(&format!("partition-{name}-a"), &proxy.url(&db.url));
    let b = replica(&format!("partition-{name}-b"), &db.url);
    let http = client();
    let slow = json!({"tool": "sleep", "arguments": {"ms": 600_000}, "request_id": "cut-off"});
    let mut first = Some(spawn_post(&http, &a, &slow));
    let running = until_status(&b, "cut-off", "running").await;
    let id = running["execution_id"].as_str().unwrap().to_owned();

    match partition {
        Partition::Resets => proxy.cut(),
        Partition::Drops => proxy.freeze(),
    }
    until_status(&b, "cut-off", "interrupted").await;
    // A refuses new calls: nothing runs, nothing is reserved.
    let fresh = json!({"tool": "echo", "arguments": {"n": 1}, "request_id": "while-cut"});
    let (status, body) = post(&http, &a, &fresh).await;
    assert_eq!(
        (status, &body["code"]),
        (503, &json!("STORE_UNAVAILABLE")),
        "{body}"
    );
    // A stops its tool: the sleep ends as cancelled on A, long before its 600 s.
    let cancelled = "carmy_tool_outcomes_total{tool=\"sleep\",status=\"cancelled\"}";
    eventually(Duration::from_secs(15), "A stops its tool", || async {
        let count = metric(&http, &a, cancelled).await;
        (count == 1).then_some(()).ok_or(count)
    })
    .await;
    if partition == Partition::Resets {
        let (status, body) = first.take().unwrap().await.unwrap();
        assert_eq!(
            (status, &body["code"], &body["state"]),
            (503, &json!("EXECUTION_UNCERTAIN"), &json!("running")),
            "A's caller: the outcome could not be recorded yet: {body}"
        );
    }

    // An operator resolves it on B.
    let decision = json!({"status": "failed", "error": {"code": "NOT_DONE", "message": "checked: no effect"}, "note": "partitioned owner; nothing found"});
    let route = format!("/v1/executions/{id}/resolve");
    let (status, body) =
        request(&http, &b, Method::POST, &route, Some("ko"), Some(&decision)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["resolution"]["by"], "operator:ops", "{body}");

    // The link comes back: A's late outcome goes to carmy.late_arrivals, not to the record.
    proxy.restore();
    if partition == Partition::Drops {
        // The hung recording resumes, is refused, and A's caller learns the decision's id.
        let (status, body) = first.take().unwrap().await.unwrap();
        assert_eq!(
            (status, &body["code"], &body["current_execution_id"]),
            (409, &json!("EXECUTION_SUPERSEDED"), &json!(id)),
            "{body}"
        );
    }
    let late: (String, String, String) = eventually(
        Duration::from_secs(20),
        "A's late outcome in carmy.late_arrivals",
        || async {
            let mut connection = db.connect().await;
            sqlx::query_as(
                "SELECT current_execution_id, status, outcome->'error'->>'message' \
                 FROM carmy.late_arrivals WHERE execution_id = $1",
            )
            .bind(&id)
            .fetch_optional(&mut connection)
            .await
            .unwrap()
            .ok_or("none yet")
        },
    )
    .await;
    assert_eq!(
        late,
        (
            id.clone(),
            "cancelled".to_owned(),
            "the execution was stopped because its replica lost its lease (cut off from the database); its effects are unknown".to_owned()
        )
    );
    let (status, record) = request(
        &http,
        &b,
        Method::GET,
        &format!("/v1/executions/{id}"),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(
        (
            &record["status"],
            &record["error"]["code"],
            &record["resolution"]["note"]
        ),
        (
            &json!("failed"),
            &json!("NOT_DONE"),
            &json!("partitioned owner; nothing found")
        ),
        "the record keeps the operator's decision: {record}"
    );
    assert_eq!(metric(&http, &a, "carmy_late_arrivals_total").await, 1);

    // A holds a lease again and takes calls.
    let again = json!({"tool": "echo", "arguments": {"n": 2}, "request_id": "after-cut"});
    let (status, body) = eventually(Duration::from_secs(15), "A takes calls again", || async {
        let (status, body) = post(&http, &a, &again).await;
        (status == 200)
            .then_some((status, body.clone()))
            .ok_or(body)
    })
    .await;
    assert_eq!(
        (status, &body["status"]),
        (200, &json!("completed")),
        "{body}"
    );
    let (status, body) = post(&http, &b, &fresh).await;
    assert_eq!(status, 200, "the refused call was never reserved: {body}");
    assert_eq!(body["replayed"], false, "{body}");
}
