//! Decisions over HTTP (docs/semantics.md §12.1) through the real router on the in-memory store:
//! resolve, release, operator keys, listing and lookup by identity.

use axum::body::Body;
use axum::http::Request;
use axum::Router;
use carmy_test_support::{eventually, InProcess};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::time::Duration;
use tower::ServiceExt;

const FLAGS: [&str; 4] = ["--api-keys", "ka=alice,kb=bob", "--operator-keys", "ko=ops"];

/// Sends `method path` with `key` and an optional JSON body; the status and JSON body.
async fn send(
    router: &Router,
    method: &str,
    path: &str,
    key: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json");
    let body = body.map_or_else(Body::empty, |body| Body::from(body.to_string()));
    let response = router
        .clone()
        .oneshot(request.body(body).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, value)
}

/// A long `sleep` call as `key` with `request_id`, left running on a task of its own.
fn start_sleep(router: &Router, key: &'static str, request_id: &str) -> Value {
    let call = json!({"tool": "sleep", "arguments": {"ms": 600_000}, "request_id": request_id});
    let router = router.clone();
    let body = call.clone();
    tokio::spawn(async move { send(&router, "POST", "/v1/executions", key, Some(body)).await });
    call
}

/// The execution id of `key`'s running record for `request_id`, once it is reserved.
async fn running_id(router: &Router, key: &str, request_id: &str) -> String {
    let path = format!("/v1/executions?request_id={request_id}");
    eventually(Duration::from_secs(10), "the call is reserved", || async {
        let (status, body) = send(router, "GET", &path, key, None).await;
        (status == 200 && body["status"] == "running")
            .then(|| body["execution_id"].as_str().unwrap().to_owned())
            .ok_or((status, body))
    })
    .await
}

#[tokio::test]
async fn resolve_is_one_decision_and_replays_with_its_resolution() {
    let gateway = InProcess::start(&FLAGS).await;
    let router = gateway.router();
    let call = start_sleep(&router, "ka", "r-resolve");
    let id = running_id(&router, "ka", "r-resolve").await;
    let path = format!("/v1/executions/{id}/resolve");
    let outcome = json!({"status": "completed", "data": {"slept": true}, "note": "it slept"});

    let (status, body) = send(&router, "POST", &path, "kb", Some(outcome.clone())).await;
    assert_eq!(
        (status, &body["code"]),
        (404, &json!("NOT_FOUND")),
        "{body}"
    );
    let no_note = json!({"status": "completed", "data": 1});
    let (status, body) = send(&router, "POST", &path, "ka", Some(no_note)).await;
    assert_eq!(
        (status, &body["code"]),
        (400, &json!("INVALID_REQUEST")),
        "{body}"
    );
    let bad = json!({"status": "failed", "data": null, "note": "x"});
    let (status, body) = send(&router, "POST", &path, "ka", Some(bad)).await;
    assert_eq!(status, 400, "a failed outcome needs an error: {body}");
    let (status, body) = send(&router, "POST", &path, "ka", Some(outcome.clone())).await;
    assert_eq!(
        (status, &body["code"]),
        (409, &json!("EXECUTION_RUNNING")),
        "{body}"
    );
    assert_eq!(body["execution_id"], json!(id));

    let mut forced = outcome.clone();
    forced["force"] = json!(true);
    let (status, resolved) = send(&router, "POST", &path, "ko", Some(forced.clone())).await;
    assert_eq!(status, 200, "{resolved}");
    assert_eq!(resolved["execution_id"], json!(id));
    assert_eq!(resolved["data"], json!({"slept": true}));
    assert_eq!(resolved["resolution"]["by"], "operator:ops");
    assert_eq!(resolved["resolution"]["note"], "it slept");

    let release = json!({"note": "x", "force": true});
    for (key, route, body) in [("ka", "resolve", forced), ("ko", "release", release)] {
        let path = format!("/v1/executions/{id}/{route}");
        let (status, body) = send(&router, "POST", &path, key, Some(body)).await;
        assert_eq!(
            (status, &body["code"]),
            (409, &json!("EXECUTION_FINISHED")),
            "{body}"
        );
    }
    let (status, replay) = send(&router, "POST", "/v1/executions", "ka", Some(call)).await;
    assert_eq!(status, 200, "{replay}");
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["resolution"], resolved["resolution"]);
    let (_, mut read) = send(&router, "GET", &format!("/v1/executions/{id}"), "ka", None).await;
    // A read adds what the call asked (docs/semantics.md §8.5); the decision's answer does not.
    let asked = read.as_object_mut().unwrap().remove("arguments");
    assert_eq!(asked, Some(json!({"ms": 600_000})));
    assert_eq!(read, resolved);
    assert_eq!(gateway.tool_runs("sleep"), 1);
}

#[tokio::test]
async fn release_frees_the_identity_and_keeps_the_execution_readable() {
    let gateway = InProcess::start(&FLAGS).await;
    let router = gateway.router();
    let call = start_sleep(&router, "ka", "r-release");
    let id = running_id(&router, "ka", "r-release").await;
    let path = format!("/v1/executions/{id}/release");
    let (status, body) = send(&router, "POST", &path, "ka", Some(json!({"force": true}))).await;
    assert_eq!(status, 400, "a note is required: {body}");
    let release = json!({"note": "nothing happened yet", "force": true});
    let (status, released) = send(&router, "POST", &path, "ka", Some(release.clone())).await;
    assert_eq!(status, 200, "{released}");
    assert_eq!(released["status"], "released");
    assert_eq!(released["resolution"]["by"], "alice");
    let (status, mut read) =
        send(&router, "GET", &format!("/v1/executions/{id}"), "ka", None).await;
    let asked = read.as_object_mut().unwrap().remove("arguments");
    assert_eq!(asked, Some(json!({"ms": 600_000})));
    assert_eq!((status, &read), (200, &released));
    let (status, body) = send(&router, "POST", &path, "ka", Some(release)).await;
    assert_eq!(
        (status, &body["code"]),
        (409, &json!("EXECUTION_FINISHED")),
        "{body}"
    );

    let router2 = router.clone();
    tokio::spawn(async move { send(&router2, "POST", "/v1/executions", "ka", Some(call)).await });
    let again = running_id(&router, "ka", "r-release").await;
    assert_ne!(again, id, "the next attempt runs as a new execution");
    eventually(Duration::from_secs(10), "the tool ran twice", || async {
        let runs = gateway.tool_runs("sleep");
        (runs == 2).then_some(()).ok_or(runs)
    })
    .await;
}

#[tokio::test]
async fn operators_list_across_principals_and_agents_find_their_record() {
    let gateway = InProcess::start(&FLAGS).await;
    let router = gateway.router();
    start_sleep(&router, "ka", "same");
    start_sleep(&router, "kb", "same");
    let alices = running_id(&router, "ka", "same").await;
    let bobs = running_id(&router, "kb", "same").await;
    let ids = |body: &Value| -> Vec<String> {
        let mut ids: Vec<String> = body["executions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|record| record["execution_id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };
    let (status, own) = send(&router, "GET", "/v1/executions?state=running", "ka", None).await;
    assert_eq!((status, ids(&own)), (200, vec![alices.clone()]));
    let (_, all) = send(&router, "GET", "/v1/executions?state=running", "ko", None).await;
    let mut expected = vec![alices.clone(), bobs];
    expected.sort();
    assert_eq!(ids(&all), expected);
    let (_, none) = send(
        &router,
        "GET",
        "/v1/executions?state=interrupted",
        "ko",
        None,
    )
    .await;
    assert_eq!(ids(&none), Vec::<String>::new());

    // One execution by id: an operator reads any principal's, another principal none.
    let one = format!("/v1/executions/{alices}");
    let (status, read) = send(&router, "GET", &one, "ko", None).await;
    assert_eq!(
        (status, &read["execution_id"], &read["status"]),
        (200, &json!(alices), &json!("running")),
        "{read}"
    );
    let (status, own) = send(&router, "GET", &one, "ka", None).await;
    assert_eq!((status, own), (200, read));
    let (status, body) = send(&router, "GET", &one, "kb", None).await;
    assert_eq!(
        (status, &body["code"]),
        (404, &json!("NOT_FOUND")),
        "{body}"
    );
    let (status, body) = send(&router, "GET", "/v1/executions/exe_nothing", "ko", None).await;
    assert_eq!(status, 404, "{body}");

    let by_identity = "/v1/executions?request_id=same&session_id=default";
    let (status, found) = send(&router, "GET", by_identity, "ka", None).await;
    assert_eq!((status, &found["execution_id"]), (200, &json!(alices)));
    let (status, body) = send(
        &router,
        "GET",
        "/v1/executions?request_id=other",
        "ka",
        None,
    )
    .await;
    assert_eq!(
        (status, &body["code"]),
        (404, &json!("NOT_FOUND")),
        "{body}"
    );
    for bad in ["?state=finished", "?request_id=", "?limit=x", "?colour=red"] {
        let (status, body) =
            send(&router, "GET", &format!("/v1/executions{bad}"), "ka", None).await;
        assert_eq!(
            (status, &body["code"]),
            (400, &json!("INVALID_REQUEST")),
            "{bad}: {body}"
        );
    }
}

#[tokio::test]
async fn an_operator_key_may_not_also_be_an_api_key() {
    let config = carmy_test_support::in_process::gateway_config(&[
        "--api-keys",
        "k=alice",
        "--operator-keys",
        "k=ops",
    ]);
    let error = carmy_gateway::build(&config).await.err().expect("refused");
    assert!(error.to_string().contains("operator keys"), "{error}");
}

#[tokio::test]
async fn a_late_outcome_is_superseded_and_kept_in_the_audit_log() {
    let gateway = InProcess::start(&FLAGS).await;
    let router = gateway.router();
    let call = json!({"tool": "sleep", "arguments": {"ms": 700}, "request_id": "late"});
    let first = {
        let (router, call) = (router.clone(), call.clone());
        tokio::spawn(async move { send(&router, "POST", "/v1/executions", "ka", Some(call)).await })
    };
    let id = running_id(&router, "ka", "late").await;
    let release = json!({"note": "the agent gave up on it", "force": true});
    let path = format!("/v1/executions/{id}/release");
    assert_eq!(
        send(&router, "POST", &path, "ko", Some(release)).await.0,
        200
    );
    let second = {
        let router = router.clone();
        tokio::spawn(async move { send(&router, "POST", "/v1/executions", "ka", Some(call)).await })
    };
    let next = running_id(&router, "ka", "late").await;
    let (status, body) = first.await.unwrap();
    assert_eq!(
        (status, &body["code"]),
        (409, &json!("EXECUTION_SUPERSEDED")),
        "{body}"
    );
    assert_eq!(body["execution_id"], json!(id));
    assert_eq!(body["current_execution_id"], json!(next));
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains(&next) && !detail.contains("retry later"),
        "{detail}"
    );
    let (status, replay) = second.await.unwrap();
    assert_eq!((status, &replay["execution_id"]), (200, &json!(next)));

    use carmy::store::IdempotencyStore;
    let trail = gateway
        .memory_store()
        .audit_trail(&carmy::ExecutionId::from_stored(id))
        .await
        .unwrap();
    let actions: Vec<&str> = trail.iter().map(|entry| entry.action.as_str()).collect();
    assert_eq!(actions, vec!["release", "late_arrival"]);
    assert_eq!(trail[1].after["outcome"]["data"], json!({"slept_ms": 700}));
}
