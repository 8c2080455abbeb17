//! Faults at an HTTP tool's upstream (docs/semantics.md §10): nothing sent → released and run
//! later; sent and then lost → recorded, never re-sent; a listed status → released with its
//! Retry-After; and the tool's secret header in no log line, record, error or tool list.

use crate::http_tools::{replica, tools_for};
use crate::tools_file::write_tools_file;
use crate::upstream::{refused_address, Resetter, Upstream};
use carmy_test_support::{call, client, post};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connection_refused_is_503_then_the_same_request_id_runs_once() {
    let address = refused_address().await;
    let file = write_tools_file(&format!(
        "[[tools]]\nname = \"pay\"\nurl = \"http://{address}/json\"\n"
    ));
    let gateway = replica("http-refused", &file, &[]);
    let http = client();
    let body = call("pay", json!({"amount": 1}), "once");
    for _ in 0..2 {
        let (status, refused) = post(&http, &gateway, &body).await;
        assert_eq!(
            (status, refused["code"].as_str()),
            (503, Some("UPSTREAM_UNAVAILABLE")),
            "{refused}"
        );
    }
    let upstream = Upstream::start_on(tokio::net::TcpListener::bind(address).await.unwrap());
    let (status, ran) = post(&http, &gateway, &body).await;
    assert_eq!(
        (status, ran["status"].as_str(), ran["replayed"].as_bool()),
        (200, Some("completed"), Some(false)),
        "{ran}"
    );
    let (_, replay) = post(&http, &gateway, &body).await;
    assert_eq!(replay["replayed"], true);
    let arrivals = upstream.arrivals();
    assert_eq!(arrivals.len(), 1);
    assert_eq!(
        arrivals[0].idempotency_key.as_deref(),
        ran["execution_id"].as_str()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reset_after_the_request_was_read_is_recorded_and_never_resent() {
    let resetter = Resetter::start().await;
    let file = write_tools_file(&format!(
        "[[tools]]\nname = \"pay\"\nurl = \"http://{}/pay\"\n",
        resetter.address
    ));
    let gateway = replica("http-reset", &file, &[]);
    let http = client();
    let body = call("pay", json!({"amount": 1}), "reset");
    let (status, first) = post(&http, &gateway, &body).await;
    assert_eq!(status, 200);
    assert_eq!(
        (
            first["status"].as_str(),
            &first["error"]["code"],
            &first["error"]["effect"]
        ),
        (
            Some("failed"),
            &json!("UPSTREAM_DISCONNECTED"),
            &json!("unknown")
        ),
        "{first}"
    );
    let (_, replay) = post(&http, &gateway, &body).await;
    assert_eq!(
        (replay["replayed"].as_bool(), &replay["execution_id"]),
        (Some(true), &first["execution_id"])
    );
    assert_eq!(resetter.requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slower_than_the_deadline_is_timed_out_and_never_resent() {
    let upstream = Upstream::start().await;
    let extra = "[[tools]]\nname = \"slow\"\nurl = \"BASE/slow\"\ntimeout_ms = 300\n"
        .replace("BASE", &upstream.base());
    let gateway = replica("http-slow", &tools_for(&upstream.base(), &extra), &[]);
    let http = client();
    let body = call("slow", json!({}), "slow");
    let (_, first) = post(&http, &gateway, &body).await;
    assert_eq!(
        (first["status"].as_str(), &first["error"]["effect"]),
        (Some("timed_out"), &json!("unknown")),
        "{first}"
    );
    let (_, replay) = post(&http, &gateway, &body).await;
    assert_eq!(
        (replay["replayed"].as_bool(), replay["status"].as_str()),
        (Some(true), Some("timed_out"))
    );
    assert_eq!(upstream.arrivals_at("/slow").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_listed_not_executed_status_releases_with_its_retry_after() {
    let upstream = Upstream::start().await;
    let extra = format!(
        "[[tools]]\nname = \"busy\"\nurl = \"{}/busy\"\nnot_executed_statuses = [429, 503]\n",
        upstream.base()
    );
    let gateway = replica("http-busy", &tools_for(&upstream.base(), &extra), &[]);
    let http = client();
    let body = call("busy", json!({}), "busy");
    for attempt in 1..=2 {
        let response = http
            .post(gateway.url("/v1/executions"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()["retry-after"], "7");
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["code"], "UPSTREAM_UNAVAILABLE", "{problem}");
        // Released: every attempt reaches the upstream again.
        assert_eq!(upstream.arrivals_at("/busy").len(), attempt);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_secret_is_in_no_log_line_record_error_body_or_tool_list() {
    let secret = "sk_live_do_not_leak_91e3";
    let upstream = Upstream::start().await;
    let refused = refused_address().await;
    let mut text = String::new();
    for (name, url) in [
        ("echoed", format!("{}/echo", upstream.base())),
        ("missing", format!("{}/missing", upstream.base())),
        ("down", format!("http://{refused}/x")),
    ] {
        text.push_str(&format!(
            "[[tools]]\nname = \"{name}\"\nurl = \"{url}\"\n[tools.headers]\nAuthorization = \"Bearer ${{CARMY_TEST_SECRET}}\"\nX-Api-Key = \"${{CARMY_TEST_SECRET}}\"\n\n"
        ));
    }
    let mut gateway = replica(
        "http-secrets",
        &write_tools_file(&text),
        &[("CARMY_TEST_SECRET", secret), ("RUST_LOG", "trace")],
    );
    let http = client();
    let mut seen = Vec::new();
    for tool in ["echoed", "missing", "down"] {
        for _ in 0..2 {
            let response = http
                .post(gateway.url("/v1/executions"))
                .json(&call(tool, json!({"a": 1}), tool))
                .send()
                .await
                .unwrap();
            seen.push(response.text().await.unwrap());
        }
    }
    let recorded: Value = serde_json::from_str(&seen[0]).unwrap();
    let id = recorded["execution_id"].as_str().unwrap();
    seen.push(
        http.get(gateway.url(&format!("/v1/executions/{id}")))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    seen.push(
        http.get(gateway.url("/v1/tools"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    // The upstream did get it.
    assert_eq!(
        upstream.arrivals_at("/echo")[0].authorization.as_deref(),
        Some(&*format!("Bearer {secret}"))
    );
    assert!(gateway.terminate());
    let log = std::fs::read_to_string(gateway.log_path()).unwrap();
    assert!(log.lines().count() > 20, "trace logging was on: {log}");
    for text in seen.iter().chain([&log]) {
        assert!(!text.contains(secret), "the secret leaked: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_secret_the_upstream_echoes_is_masked_in_the_record_and_the_replay() {
    let secret = "sk_live_reflected_5f0c";
    let upstream = Upstream::start().await;
    let text = format!(
        "[[tools]]\nname = \"reflect\"\nurl = \"{}/reflect\"\n[tools.headers]\nAuthorization = \"Bearer ${{CARMY_TEST_SECRET}}\"\n",
        upstream.base()
    );
    let mut gateway = replica(
        "http-reflected",
        &write_tools_file(&text),
        &[("CARMY_TEST_SECRET", secret), ("RUST_LOG", "trace")],
    );
    let http = client();
    let body = call("reflect", json!({"a": 1}), "reflect-1");
    let (status, first) = post(&http, &gateway, &body).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        first["error"]["details"],
        json!({"status": 401, "body": {"error": "unauthorized", "received": {"authorization": "Bearer ***"}}}),
        "{first}"
    );
    let (_, replay) = post(&http, &gateway, &body).await;
    assert_eq!(replay["replayed"], true, "{replay}");
    assert_eq!(replay["error"], first["error"]);
    let id = first["execution_id"].as_str().unwrap();
    let record = http
        .get(gateway.url(&format!("/v1/executions/{id}")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(record.contains("Bearer ***"), "{record}");
    // The upstream did get it, once.
    let arrivals = upstream.arrivals_at("/reflect");
    assert_eq!(arrivals.len(), 1);
    assert_eq!(
        arrivals[0].authorization.as_deref(),
        Some(&*format!("Bearer {secret}"))
    );
    assert!(gateway.terminate());
    let log = std::fs::read_to_string(gateway.log_path()).unwrap();
    for text in [&first.to_string(), &replay.to_string(), &record, &log] {
        assert!(!text.contains(secret), "the secret leaked: {text}");
    }
}
