//! HTTP tools from a tools file against a real upstream (docs/semantics.md §10), through real
//! `carmy-gateway` processes: the execution id as idempotency key, replays and conflicts that
//! never reach the upstream, bodies recorded and replayed byte-faithfully on the memory store
//! and on PostgreSQL across two replicas, `traceparent` forwarded, arguments that stay inside
//! their path segment.

use crate::tools_file::write_tools_file;
use crate::upstream::{Upstream, JSON_BODY, NOT_FOUND_BODY, SERVER_ERROR_BODY, TEXT_BODY};
use carmy_test_support::{call, client, post, Replica, TestDb};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// A tools file with one tool per upstream path, all at `base`.
pub fn tools_for(base: &str, extra: &str) -> PathBuf {
    let mut text = String::new();
    for (name, path) in [
        ("json", "/json"),
        ("text", "/text"),
        ("empty", "/empty"),
        ("missing", "/missing"),
        ("boom", "/boom"),
        ("redirect", "/redirect"),
    ] {
        text.push_str(&format!(
            "[[tools]]\nname = \"{name}\"\nurl = \"{base}{path}\"\n\n"
        ));
    }
    text.push_str(&format!(
        r#"[[tools]]
name = "item"
url = "{base}/items/{{id}}/detail"
input_schema = {{ type = "object", required = ["id"] }}

[[tools]]
name = "search"
method = "GET"
url = "{base}/search/{{kind}}"
input_schema = {{ type = "object", properties = {{ kind = {{ type = "string" }} }} }}

[[tools]]
name = "nokey"
method = "PUT"
url = "{base}/nokey"
idempotency_header = ""

[[tools]]
name = "big"
url = "{base}/big"
max_response_bytes = 1000

{extra}"#
    ));
    write_tools_file(&text)
}

/// A memory-store replica serving `file`.
pub fn replica(name: &str, file: &Path, env: &[(&str, &str)]) -> Replica {
    let file = file.to_str().unwrap();
    let mut all = vec![("CARMY_TOOLS_FILE", file)];
    all.extend_from_slice(env);
    Replica::start(name, &all)
}

/// The response without `replayed`.
fn without_replayed(mut body: Value) -> Value {
    body.as_object_mut().unwrap().remove("replayed");
    body
}

/// Calls each body tool on `first`, then replays it on `second`: the replay is the recorded
/// answer, byte for byte, and the upstream saw one request per tool.
async fn bodies_replay_faithfully(
    first: &Replica,
    second: &Replica,
    upstream: &Upstream,
    run: &str,
) {
    let http = client();
    let expected: [(&str, &str, Value, Value); 5] = [
        (
            "json",
            "completed",
            serde_json::from_str(JSON_BODY).unwrap(),
            Value::Null,
        ),
        ("text", "completed", json!(TEXT_BODY), Value::Null),
        ("empty", "completed", Value::Null, Value::Null),
        (
            "missing",
            "failed",
            Value::Null,
            json!({"code": "UPSTREAM_STATUS",
            "message": "the upstream answered 404 Not Found; see error.details for its status and body",
            "details": {"status": 404, "body": serde_json::from_str::<Value>(NOT_FOUND_BODY).unwrap()}}),
        ),
        (
            "boom",
            "failed",
            Value::Null,
            json!({"code": "UPSTREAM_STATUS",
            "message": "the upstream answered 500 Internal Server Error, which does not prove that nothing happened: the effect is unknown; check the upstream before acting again; see error.details for its status and body",
            "effect": "unknown",
            "details": {"status": 500, "body": SERVER_ERROR_BODY}}),
        ),
    ];
    for (tool, status, data, error) in expected {
        let request_id = format!("{run}-{tool}");
        let body = call(tool, json!({"n": 1}), &request_id);
        let response = http
            .post(first.url("/v1/executions"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{tool}");
        let first_text = response.text().await.unwrap();
        let answer: Value = serde_json::from_str(&first_text).unwrap();
        assert_eq!(
            (answer["status"].as_str(), &answer["data"], &answer["error"]),
            (Some(status), &data, &error),
            "{tool}: {first_text}"
        );
        if tool == "json" {
            assert!(
                first_text.contains(&format!("\"data\":{JSON_BODY}")),
                "{first_text}"
            );
        }
        let replay = http
            .post(second.url("/v1/executions"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(replay.status(), 200);
        let replay_text = replay.text().await.unwrap();
        assert_eq!(
            replay_text.replace("\"replayed\":true", "\"replayed\":false"),
            first_text,
            "{tool}: the replay is the recorded answer"
        );
        let arrivals = upstream.arrivals_at(&format!("/{tool}"));
        assert_eq!(arrivals.len(), 1, "{tool}: {arrivals:?}");
        assert_eq!(
            arrivals[0].idempotency_key.as_deref(),
            answer["execution_id"].as_str()
        );
        assert_eq!(arrivals[0].body, r#"{"n":1}"#);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bodies_are_recorded_and_replayed_byte_faithfully_on_the_memory_store() {
    let upstream = Upstream::start().await;
    let gateway = replica("http-bodies-memory", &tools_for(&upstream.base(), ""), &[]);
    bodies_replay_faithfully(&gateway, &gateway, &upstream, "mem").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bodies_are_recorded_and_replayed_byte_faithfully_across_two_postgres_replicas() {
    let upstream = Upstream::start().await;
    let db = TestDb::create().await;
    let file = tools_for(&upstream.base(), "");
    // No replay cache: the second replica reads the record from the database.
    let env = [
        ("DATABASE_URL", db.url.as_str()),
        ("CARMY_REPLAY_CACHE_ENTRIES", "0"),
    ];
    let a = replica("http-bodies-pg-a", &file, &env);
    let b = replica("http-bodies-pg-b", &file, &env);
    bodies_replay_faithfully(&a, &b, &upstream, "pg").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_key_is_the_execution_id_and_replays_and_conflicts_never_reach_the_upstream() {
    let upstream = Upstream::start().await;
    let gateway = replica("http-keys", &tools_for(&upstream.base(), ""), &[]);
    let http = client();
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let body = call("item", json!({"id": "c1", "amount": 5}), "k1");
    let first: Value = http
        .post(gateway.url("/v1/executions"))
        .header("traceparent", traceparent)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(first["status"], "completed", "{first}");
    for _ in 0..3 {
        let (status, replay) = post(&http, &gateway, &body).await;
        assert_eq!((status, &replay["replayed"]), (200, &json!(true)));
        assert_eq!(without_replayed(replay), without_replayed(first.clone()));
    }
    let (status, conflict) = post(
        &http,
        &gateway,
        &call("item", json!({"id": "c1", "amount": 6}), "k1"),
    )
    .await;
    assert_eq!(
        (status, conflict["code"].as_str()),
        (409, Some("IDEMPOTENCY_CONFLICT"))
    );
    let arrivals = upstream.arrivals();
    assert_eq!(arrivals.len(), 1, "{arrivals:?}");
    let arrival = &arrivals[0];
    assert_eq!(
        (arrival.method.as_str(), arrival.target.as_str()),
        ("POST", "/items/c1/detail")
    );
    assert_eq!(
        arrival.idempotency_key.as_deref(),
        first["execution_id"].as_str()
    );
    assert_eq!(arrival.traceparent.as_deref(), Some(traceparent));
    // The path argument is not repeated in the body.
    assert_eq!(arrival.body, r#"{"amount":5}"#);
    assert_eq!(first["data"]["key"], first["execution_id"]);
    // An empty idempotency_header sends none.
    let (_, done) = post(&http, &gateway, &call("nokey", json!({}), "k2")).await;
    assert_eq!(done["status"], "completed");
    let sent = upstream.arrivals_at("/nokey");
    assert_eq!(
        (
            sent.len(),
            sent[0].idempotency_key.as_deref(),
            sent[0].method.as_str()
        ),
        (1, None, "PUT")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn path_arguments_stay_inside_their_segment() {
    let upstream = Upstream::start().await;
    let gateway = replica("http-paths", &tools_for(&upstream.base(), ""), &[]);
    let http = client();
    let table: [(Value, &str); 9] = [
        (json!("../admin"), "..%2Fadmin"),
        (json!("a?b=1"), "a%3Fb%3D1"),
        (json!("a#frag"), "a%23frag"),
        (json!("user@evil.example"), "user%40evil.example"),
        (json!("a%2Fb"), "a%252Fb"),
        (
            json!("line\nbreak\r\nX-Injected: 1"),
            "line%0Abreak%0D%0AX-Injected%3A%201",
        ),
        (
            json!("http://evil.example:8080/x"),
            "http%3A%2F%2Fevil.example%3A8080%2Fx",
        ),
        (json!("/"), "%2F"),
        (json!(42), "42"),
    ];
    for (index, (id, segment)) in table.iter().enumerate() {
        let (status, answer) = post(
            &http,
            &gateway,
            &call("item", json!({"id": id}), &format!("p{index}")),
        )
        .await;
        assert_eq!(
            (status, answer["status"].as_str()),
            (200, Some("completed")),
            "{id}: {answer}"
        );
        assert_eq!(
            answer["data"]["target"],
            format!("/items/{segment}/detail"),
            "{id}"
        );
    }
    assert_eq!(upstream.arrivals().len(), table.len());
    // Unusable path arguments: 400 before anything is reserved or sent.
    for (index, arguments) in [
        json!({}),
        json!({"id": [1]}),
        json!({"id": {"a": 1}}),
        json!({"id": null}),
        json!({"id": ""}),
        json!({"id": ".."}),
    ]
    .iter()
    .enumerate()
    {
        let request_id = format!("bad{index}");
        let (status, refused) = post(
            &http,
            &gateway,
            &call("item", arguments.clone(), &request_id),
        )
        .await;
        assert_eq!(
            (status, refused["code"].as_str()),
            (400, Some("INVALID_REQUEST")),
            "{arguments}: {refused}"
        );
        // Nothing was reserved: the same request_id then runs.
        let (status, ran) = post(
            &http,
            &gateway,
            &call("item", json!({"id": "ok"}), &request_id),
        )
        .await;
        assert_eq!(
            (status, ran["replayed"].as_bool()),
            (200, Some(false)),
            "{arguments}"
        );
    }
    assert_eq!(upstream.arrivals().len(), table.len() + 6);
    // GET sends the other arguments as the query string.
    let (_, found) = post(
        &http,
        &gateway,
        &call(
            "search",
            json!({"kind": "a b", "q": "x&y=z", "n": 3, "f": true}),
            "g1",
        ),
    )
    .await;
    assert_eq!(
        found["data"]["target"], "/search/a%20b?f=true&n=3&q=x%26y%3Dz",
        "{found}"
    );
    assert_eq!(found["data"]["method"], "GET");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redirects_are_not_followed_and_large_bodies_are_not_kept() {
    let upstream = Upstream::start().await;
    let gateway = replica("http-redirect", &tools_for(&upstream.base(), ""), &[]);
    let http = client();
    let (_, redirected) = post(&http, &gateway, &call("redirect", json!({}), "r1")).await;
    assert_eq!(
        (
            redirected["status"].as_str(),
            redirected["error"]["details"]["status"].as_u64()
        ),
        (Some("failed"), Some(302)),
        "{redirected}"
    );
    assert!(upstream.arrivals_at("/json").is_empty());
    let (_, big) = post(&http, &gateway, &call("big", json!({}), "b1")).await;
    assert_eq!(
        (
            big["status"].as_str(),
            big["error"]["code"].as_str(),
            big["error"]["effect"].as_str()
        ),
        (Some("failed"), Some("RESULT_TOO_LARGE"), Some("unknown")),
        "{big}"
    );
}
