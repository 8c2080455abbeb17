//! Executions held by a client (docs/semantics.md §16), across two real `carmy-gateway`
//! processes on one PostgreSQL database: reserve, replay, conflict and uncertain as for a
//! gateway-run call; renew and record with the fencing token on any replica; a holder that
//! stops renewing leaves the execution interrupted, decided like any other, and its late
//! record is refused and kept as a late arrival. A client tool's `redact_arguments` hides
//! values before the arguments are kept.

use crate::tools_file::write_tools_file;
use carmy_test_support::{client, eventually, metric, request, Replica, TestDb};
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::Row;
use std::path::Path;
use std::time::Duration;

fn tools() -> std::path::PathBuf {
    write_tools_file(
        r#"[[client_tools]]
name = "charge"
description = "Charge a customer (run by the agent's own code)"
input_schema = { type = "object", required = ["amount"], properties = { amount = { type = "integer" } } }
"#,
    )
}

fn replica(name: &str, db: &TestDb, file: &Path) -> Replica {
    Replica::start(
        name,
        &[
            ("DATABASE_URL", db.url.as_str()),
            ("CARMY_TOOLS_FILE", file.to_str().unwrap()),
        ],
    )
}

fn hold_body(request_id: &str, amount: i64, lease_ms: u64) -> Value {
    json!({"tool": "charge", "arguments": {"amount": amount}, "request_id": request_id,
           "lease_ms": lease_ms})
}

async fn post(replica: &Replica, path: &str, body: &Value) -> (u16, Value) {
    request(&client(), replica, Method::POST, path, None, Some(body)).await
}

/// The actions of `execution_id`'s audit rows, oldest first.
async fn audit(db: &TestDb, execution_id: &str) -> Vec<String> {
    sqlx::query("SELECT action FROM carmy.audit_log WHERE execution_id = $1 ORDER BY id")
        .bind(execution_id)
        .fetch_all(&mut db.connect().await)
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// Waits until `request_id`'s execution reads `interrupted` on `reader`.
async fn until_interrupted(reader: &Replica, request_id: &str) {
    let lookup = format!("/v1/executions?request_id={request_id}");
    eventually(
        Duration::from_secs(10),
        "the holder's lease lapses",
        || async {
            let (_, body) = request(&client(), reader, Method::GET, &lookup, None, None).await;
            (body["status"] == "interrupted").then_some(()).ok_or(body)
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_execution_is_reserved_renewed_recorded_and_replayed_on_any_replica() {
    let db = TestDb::migrated().await;
    let file = tools();
    let a = replica("held-a", &db, &file);
    let b = replica("held-b", &db, &file);
    let http = client();

    let (status, listed) = request(&http, &a, Method::GET, "/v1/tools", None, None).await;
    assert_eq!(status, 200);
    assert_eq!(listed["tools"][0]["name"], "charge");
    assert_eq!(listed["tools"][0]["held_by_client"], true);

    // The gateway never runs a client-held tool.
    let (status, body) = post(
        &a,
        "/v1/executions",
        &json!({"tool": "charge", "arguments": {"amount": 5}, "request_id": "gw"}),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("INVALID_REQUEST"))
    );
    // Bad calls reserve nothing.
    let (status, body) = post(
        &a,
        "/v1/held",
        &json!({"tool": "charge", "arguments": {"amount": 5}}),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("INVALID_REQUEST"))
    );
    let (status, _) = post(
        &a,
        "/v1/held",
        &json!({"tool": "charge", "arguments": {"amount": "5"}, "request_id": "bad"}),
    )
    .await;
    assert_eq!(status, 400);
    let (status, _) = post(&a, "/v1/held", &hold_body("lease", 5, 10)).await;
    assert_eq!(status, 400);

    let (status, held) = post(&a, "/v1/held", &hold_body("c-1", 5, 30_000)).await;
    assert_eq!(status, 201, "{held}");
    assert_eq!(held["state"], "reserved");
    assert_eq!(held["lease_ms"], 30_000);
    let id = held["execution_id"].as_str().unwrap().to_owned();
    let token = held["fencing_token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("hold_"), "{token}");

    // The same identity elsewhere: running; other arguments: a conflict.
    let (status, body) = post(&b, "/v1/held", &hold_body("c-1", 5, 30_000)).await;
    assert_eq!(status, 409);
    assert_eq!(body["code"], "EXECUTION_UNCERTAIN");
    assert_eq!(body["state"], "running");
    let (status, body) = post(&b, "/v1/held", &hold_body("c-1", 6, 30_000)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("IDEMPOTENCY_CONFLICT"))
    );

    // Renew on the other replica; a token that never held it is no owner.
    let renew = format!("/v1/held/{id}/renew");
    let (status, body) = post(
        &b,
        &renew,
        &json!({"fencing_token": token, "lease_ms": 20_000}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["lease_ms"], 20_000);
    let stranger = format!("hold_{}", uuid::Uuid::new_v4().simple());
    let (status, _) = post(&b, &renew, &json!({"fencing_token": stranger})).await;
    assert_eq!(status, 404);
    let outcome = format!("/v1/held/{id}/outcome");
    let (status, _) = post(
        &b,
        &outcome,
        &json!({"fencing_token": stranger, "status": "completed", "data": {"charge": 1}}),
    )
    .await;
    assert_eq!(status, 404);
    // An outcome that does not fit its status records nothing.
    let (status, _) = post(
        &b,
        &outcome,
        &json!({"fencing_token": token, "status": "failed", "data": null}),
    )
    .await;
    assert_eq!(status, 400);

    let recorded = json!({"fencing_token": token, "status": "completed",
                          "data": {"charge": 1, "big": 18446744073709551615u64}});
    let (status, first) = post(&b, &outcome, &recorded).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["execution_id"], id);
    assert_eq!(first["replayed"], false);
    assert_eq!(
        first["data"],
        json!({"charge": 1, "big": 18446744073709551615u64})
    );
    // A repeated record (a lost acknowledgement) answers the record.
    let (status, again) = post(&a, &outcome, &recorded).await;
    assert_eq!((status, &again["data"]), (200, &first["data"]));

    // Every retry replays it, on both doors.
    let (status, replay) = post(&a, "/v1/held", &hold_body("c-1", 5, 30_000)).await;
    assert_eq!(status, 200);
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["execution_id"], id);
    assert_eq!(replay["data"], first["data"]);
    assert_eq!(replay["started_at"], first["started_at"]);
    let (status, replay) = post(
        &b,
        "/v1/executions",
        &json!({"tool": "charge", "arguments": {"amount": 5}, "request_id": "c-1"}),
    )
    .await;
    assert_eq!((status, &replay["data"]), (200, &first["data"]));

    // The holder has nothing left to renew.
    let (status, body) = post(&a, &renew, &json!({"fencing_token": token})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("EXECUTION_FINISHED"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_holder_that_stops_renewing_is_interrupted_decided_and_its_late_record_kept() {
    let db = TestDb::migrated().await;
    let file = tools();
    let a = replica("held-lapse-a", &db, &file);
    let b = replica("held-lapse-b", &db, &file);
    let http = client();

    let (status, held) = post(&a, "/v1/held", &hold_body("lapse", 7, 500)).await;
    assert_eq!(status, 201, "{held}");
    let id = held["execution_id"].as_str().unwrap().to_owned();
    let token = held["fencing_token"].as_str().unwrap().to_owned();
    until_interrupted(&b, "lapse").await;
    let (status, body) = post(&b, "/v1/held", &hold_body("lapse", 7, 500)).await;
    assert_eq!(status, 409);
    assert_eq!(body["state"], "interrupted");

    // Listed for operators like any interrupted execution.
    let (status, listed) = request(
        &http,
        &b,
        Method::GET,
        "/v1/executions?state=interrupted",
        None,
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(listed["executions"][0]["execution_id"], id);

    // Reconciled and resolved by someone else while the holder was away.
    let (status, resolved) = post(
        &b,
        &format!("/v1/executions/{id}/resolve"),
        &json!({"status": "completed", "data": {"charge": "found"}, "note": "found at the bank"}),
    )
    .await;
    assert_eq!(status, 200, "{resolved}");

    // The holder comes back: its renewal and its record are refused; the record is kept.
    let (status, body) = post(
        &a,
        &format!("/v1/held/{id}/renew"),
        &json!({"fencing_token": token}),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("EXECUTION_FINISHED"))
    );
    let (status, body) = post(
        &a,
        &format!("/v1/held/{id}/outcome"),
        &json!({"fencing_token": token, "status": "completed", "data": {"charge": "mine"}}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "EXECUTION_SUPERSEDED");
    assert_eq!(audit(&db, &id).await, ["resolve", "late_arrival"]);
    assert_eq!(metric(&http, &a, "carmy_late_arrivals_total").await, 1);

    // The decision stands.
    let (status, replay) = post(&a, "/v1/held", &hold_body("lapse", 7, 500)).await;
    assert_eq!(status, 200);
    assert_eq!(replay["data"], json!({"charge": "found"}));
    assert_eq!(replay["resolution"]["note"], "found at the bank");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_released_held_execution_is_held_anew_and_the_old_holder_superseded() {
    let db = TestDb::migrated().await;
    let file = tools();
    let a = replica("held-release-a", &db, &file);

    let (_, old) = post(&a, "/v1/held", &hold_body("again", 3, 500)).await;
    assert!(old.get("rerun_of").is_none(), "{old}");
    let old_id = old["execution_id"].as_str().unwrap().to_owned();
    until_interrupted(&a, "again").await;
    let (status, _) = post(
        &a,
        &format!("/v1/executions/{old_id}/release"),
        &json!({"note": "the bank has no such charge"}),
    )
    .await;
    assert_eq!(status, 200);

    let (status, new) = post(&a, "/v1/held", &hold_body("again", 3, 30_000)).await;
    assert_eq!(status, 201, "{new}");
    assert_ne!(new["execution_id"], old_id);
    // It says whose place it took, as a gateway-run call's first answer does (§12.1).
    let (_, released) = request(
        &client(),
        &a,
        Method::GET,
        &format!("/v1/executions/{old_id}"),
        None,
        None,
    )
    .await;
    assert_eq!(
        new["rerun_of"],
        json!({"execution_id": old_id, "ended": "released",
               "by": released["resolution"]["by"], "note": "the bank has no such charge"}),
        "{new}"
    );
    assert!(released["resolution"]["by"].is_string(), "{released}");
    let (status, body) = post(
        &a,
        &format!("/v1/held/{old_id}/outcome"),
        &json!({"fencing_token": old["fencing_token"], "status": "completed", "data": 1}),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("EXECUTION_SUPERSEDED"))
    );
    assert_eq!(body["current_execution_id"], new["execution_id"]);
    let (status, recorded) = post(
        &a,
        &format!("/v1/held/{}/outcome", new["execution_id"].as_str().unwrap()),
        &json!({"fencing_token": new["fencing_token"], "status": "completed", "data": 2}),
    )
    .await;
    assert_eq!((status, &recorded["data"]), (200, &json!(2)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_memory_store_refuses_client_holds() {
    let file = tools();
    let gateway = Replica::start(
        "held-memory",
        &[("CARMY_TOOLS_FILE", file.to_str().unwrap())],
    );
    let (status, body) = post(&gateway, "/v1/held", &hold_body("m", 1, 30_000)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("INVALID_REQUEST"))
    );
    assert!(
        body["detail"].as_str().unwrap().contains("PostgreSQL"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_outcome_holding_nul_characters_is_recorded_and_replayed_losslessly() {
    let db = TestDb::migrated().await;
    let file = tools();
    let a = replica("held-nul-a", &db, &file);
    let b = replica("held-nul-b", &db, &file);

    // As a gateway-run tool's result is (semantics §4): text, so U+0000 and big numbers survive.
    let data = json!({"note": "a\u{0}b", "big": 123_456_789_012_345_678_901_234_567_890_u128});
    let (_, held) = post(&a, "/v1/held", &hold_body("nul", 9, 30_000)).await;
    let id = held["execution_id"].as_str().unwrap().to_owned();
    let outcome = format!("/v1/held/{id}/outcome");
    let body = json!({"fencing_token": held["fencing_token"], "status": "completed", "data": data});
    let (status, first) = post(&a, &outcome, &body).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["data"], data);
    let (status, again) = post(&b, &outcome, &body).await;
    assert_eq!((status, &again["data"]), (200, &data));
    let (status, replay) = post(&b, "/v1/held", &hold_body("nul", 9, 30_000)).await;
    assert_eq!((status, &replay["data"]), (200, &data));
    assert_eq!(replay["execution_id"], id);

    // A failure's error may hold one too.
    let (_, held) = post(&a, "/v1/held", &hold_body("nul-failed", 9, 30_000)).await;
    let error = json!({"code": "BANK_ERROR", "message": "bank said a\u{0}b", "effect": "unknown"});
    let (status, first) = post(
        &b,
        &format!(
            "/v1/held/{}/outcome",
            held["execution_id"].as_str().unwrap()
        ),
        &json!({"fencing_token": held["fencing_token"], "status": "failed", "error": error}),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let (status, replay) = post(&a, "/v1/held", &hold_body("nul-failed", 9, 30_000)).await;
    assert_eq!(status, 200);
    assert_eq!(replay["error"], first["error"]);
    assert_eq!(replay["error"]["message"], "bank said a\u{0}b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_tools_redact_arguments_hides_values_before_they_are_kept() {
    let db = TestDb::migrated().await;
    let file = write_tools_file(
        "[[client_tools]]\nname = \"charge\"\nredact_arguments = [\"/card/number\"]\n",
    );
    let a = replica("held-redact", &db, &file);
    let body = json!({"tool": "charge", "request_id": "redact", "lease_ms": 30_000,
                      "arguments": {"amount": 5, "card": {"number": "4242424242424242"}}});
    let (status, held) = post(&a, "/v1/held", &body).await;
    assert_eq!(status, 201, "{held}");
    let (status, shown) = request(
        &client(),
        &a,
        Method::GET,
        &format!("/v1/executions/{}", held["execution_id"].as_str().unwrap()),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(
        shown["arguments"],
        json!({"amount": 5, "card": {"number": "[redacted]"}})
    );
    let found: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM carmy.reservations r WHERE r::text LIKE '%4242424242424242%'",
    )
    .fetch_one(&mut db.connect().await)
    .await
    .unwrap();
    assert_eq!(found, 0);
}
