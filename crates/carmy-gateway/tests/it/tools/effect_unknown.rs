//! Statuses that do not prove the effect absent (docs/semantics.md §10): an upstream that makes
//! a payment and then answers 500, 502, 504 or 408 is recorded with `effect: "unknown"` on both
//! stores; the HTTP answer, the record and the MCP result say so alike, a retry replays and the
//! upstream never sees the call twice; a status in `not_executed_statuses` is still released and
//! `effect_unknown_statuses` widens the rule.

use crate::http_tools::replica;
use crate::mcp_client::{call as mcp_call, connect, execution, structured, text};
use crate::tools_file::write_tools_file;
use crate::upstream::Upstream;
use carmy_test_support::{call, client, post, Replica, TestDb};
use serde_json::{json, Value};

/// One tool per status, each at `/paid-then/<status>` (the upstream charges, then answers it).
fn tools_file(base: &str) -> std::path::PathBuf {
    let mut text = String::new();
    for status in [500, 502, 504, 408, 409, 503] {
        text.push_str(&format!(
            "[[tools]]\nname = \"pay_{status}\"\nurl = \"{base}/paid-then/{status}\"\n"
        ));
        match status {
            409 => text.push_str("effect_unknown_statuses = [409]\n"),
            503 => text.push_str("not_executed_statuses = [503]\n"),
            _ => {}
        }
    }
    write_tools_file(&text)
}

/// The HTTP answer's `error` for an effect-unknown `status` of the upstream's `nth` request.
fn expected_error(status: u16, reason: &str, nth: usize) -> Value {
    json!({
        "code": "UPSTREAM_STATUS",
        "message": format!("the upstream answered {status} {reason}, which does not prove that nothing happened: the effect is unknown; check the upstream before acting again; see error.details for its status and body"),
        "effect": "unknown",
        "details": {"status": status, "body": {"payment_id": format!("pay_{nth}"), "charged": true}},
    })
}

async fn statuses_leave_the_effect_unknown(gateway: &Replica, upstream: &Upstream) {
    let http = client();
    let mcp = connect(&gateway.url("/mcp"), None).await;
    let cases = [
        (500, "Internal Server Error"),
        (502, "Bad Gateway"),
        (504, "Gateway Timeout"),
        (408, "Request Timeout"),
        (409, "Conflict"),
    ];
    for (status, reason) in cases {
        let tool = format!("pay_{status}");
        let body = call(&tool, json!({"amount": 5}), &format!("http-{status}"));
        let (code, first) = post(&http, gateway, &body).await;
        assert_eq!(code, 200, "{tool}: {first}");
        assert_eq!(
            (&first["status"], &first["replayed"], &first["error"]),
            (
                &json!("failed"),
                &json!(false),
                &expected_error(status, reason, 1)
            ),
            "{tool}: {first}"
        );
        let (_, replay) = post(&http, gateway, &body).await;
        assert_eq!(replay["replayed"], true, "{tool}: {replay}");
        assert_eq!(replay["error"], first["error"], "{tool}");
        let record = http
            .get(gateway.url(&format!(
                "/v1/executions/{}",
                first["execution_id"].as_str().unwrap()
            )))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        assert_eq!(record["error"]["effect"], "unknown", "{tool}: {record}");

        let params = mcp_call(&tool, json!({"amount": 5}), &format!("mcp-{status}"));
        let result = mcp.call_tool(params.clone()).await.unwrap();
        assert_eq!(result.is_error, Some(true), "{tool}");
        let fields = structured(&result);
        assert_eq!(fields["effect_may_have_happened"], true, "{tool}: {fields}");
        assert_eq!(fields["error"], expected_error(status, reason, 2), "{tool}");
        let words = text(&result);
        assert!(
            words.contains("Its effect may have happened.")
                && words.contains("retrying the same call")
                && words.contains("only returns this record"),
            "{tool}: {words}"
        );
        assert!(!words.to_lowercase().contains("new request id"), "{words}");
        let again = mcp.call_tool(params).await.unwrap();
        assert_eq!(execution(&again)["replayed"], true, "{tool}");
        assert_eq!(structured(&again)["error"], fields["error"], "{tool}");
        assert_eq!(
            upstream.arrivals_at(&format!("/paid-then/{status}")).len(),
            2,
            "{tool}: one request per request id, none for the retries"
        );
    }
    // A status the tool documents as "nothing happened" is still released.
    let body = call("pay_503", json!({"amount": 5}), "http-503");
    let (code, released) = post(&http, gateway, &body).await;
    assert_eq!(
        (code, released["code"].as_str()),
        (503, Some("UPSTREAM_UNAVAILABLE")),
        "{released}"
    );
    mcp.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn statuses_that_prove_nothing_are_effect_unknown_on_the_memory_store() {
    let upstream = Upstream::start().await;
    let gateway = replica("effect-unknown-memory", &tools_file(&upstream.base()), &[]);
    statuses_leave_the_effect_unknown(&gateway, &upstream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn statuses_that_prove_nothing_are_effect_unknown_on_postgres() {
    let upstream = Upstream::start().await;
    let db = TestDb::create().await;
    let env = [
        ("DATABASE_URL", db.url.as_str()),
        ("CARMY_REPLAY_CACHE_ENTRIES", "0"),
    ];
    let gateway = replica("effect-unknown-pg", &tools_file(&upstream.base()), &env);
    statuses_leave_the_effect_unknown(&gateway, &upstream).await;
}
