//! Tool probes (docs/semantics.md §12.10): `[tools.reconcile] tool = …,
//! arguments = …` calls another configured read-only tool, an HTTP tool of the file or an MCP
//! server's, across real `carmy-gateway` processes on one PostgreSQL database and the real
//! payments upstream. The owner is killed mid-call; the background reconciler, a retry (inline,
//! with the retry's arguments) and the on-demand endpoint decide through the tool probe exactly
//! as through an HTTP probe. The probe's call leaves no record and reaches the upstream under a
//! `probe_…` key, never the execution's. Secrets an upstream echoes are masked in a probe's
//! outcome, for HTTP and tool probes alike. `check-config` shows a tool probe and refuses one
//! that names the tool itself, a tool that is not read-only or no tool at all.

use super::reconciling::{payment_call, Reconciling, WAIT};
use crate::mcp::upstream_servers::StdioServer;
use crate::payments::Payments;
use crate::tools_file::write_tools_file;
use carmy_test_support::{client, eventually, metric, post, request, Replica};
use reqwest::Method;
use serde_json::json;
use sqlx::Row;
use std::path::PathBuf;

/// The read-only lookup tools and the paying tools whose probes call them (`tp_*`), and one
/// HTTP probe that meets an upstream echoing its secret (`hp_echo`).
pub(super) fn tools(base: &str) -> PathBuf {
    let lookup = |name: &str, path: &str| {
        format!(
            "[[tools]]\nname = \"{name}\"\nmethod = \"GET\"\nurl = \"{base}/{path}\"\nannotations = {{ readOnlyHint = true }}\ninput_schema = {{ type = \"object\", properties = {{ idempotency_key = {{ type = \"string\" }} }} }}\n[tools.headers]\nAuthorization = \"Bearer ${{CARMY_TEST_LOOKUP_TOKEN}}\"\n"
        )
    };
    let paying = |name: &str, path: &str, probe: &str| {
        format!(
            "[[tools]]\nname = \"{name}\"\nurl = \"{base}/pay/{path}\"\n[tools.reconcile]\n{probe}\n"
        )
    };
    let by_key =
        "arguments = { idempotency_key = \"{execution_id}\" }\nfound_pointer = \"/payment_id\"";
    let text = [
        lookup("get_payment", "lookup"),
        lookup("get_payment_echo", "lookup-echo"),
        paying(
            "tp_found",
            "commit-tfound",
            &format!("tool = \"get_payment\"\n{by_key}"),
        ),
        // A short deadline: absent proves "not executed" only once it has passed.
        format!(
            "[[tools]]\nname = \"tp_released\"\nurl = \"{base}/pay/lost-treleased\"\ntimeout_ms = 3000\n[tools.reconcile]\ntool = \"get_payment\"\n{by_key}\nabsent_means = \"not_executed\"\n"
        ),
        paying(
            "tp_unknown",
            "lost-tunknown",
            &format!("tool = \"get_payment\"\n{by_key}"),
        ),
        paying(
            "tp_argument",
            "commit-targument",
            "tool = \"get_payment\"\narguments = { idempotency_key = \"{execution_id}\", note = \"{amount} for {request_id}\" }\nfound_pointer = \"/payment_id\"",
        ),
        paying(
            "tp_echo",
            "commit-techo",
            &format!("tool = \"get_payment_echo\"\n{by_key}"),
        ),
        paying(
            "tp_done",
            "ok-tdone",
            &format!("tool = \"get_payment\"\n{by_key}"),
        ),
        paying(
            "hp_echo",
            "commit-hecho",
            &format!("url = \"{base}/lookup-echo?idempotency_key={{execution_id}}\"\n[tools.reconcile.headers]\nAuthorization = \"Bearer ${{CARMY_TEST_PROBE_TOKEN}}\""),
        ),
    ]
    .concat();
    write_tools_file(&text)
}

pub(super) const LOOKUP_TOKEN: &str = "tok_lookup_tool_secret";
pub(super) const PROBE_TOKEN: &str = "tok_http_probe_secret";

/// The fixture over `tools`, with the secrets its tools name.
async fn reconciling(tools: impl FnOnce(&str) -> PathBuf) -> Reconciling {
    Reconciling::start(
        tools,
        &[
            ("CARMY_TEST_LOOKUP_TOKEN", LOOKUP_TOKEN),
            ("CARMY_TEST_PROBE_TOKEN", PROBE_TOKEN),
        ],
    )
    .await
}

/// The `Idempotency-Key` headers of the lookups whose query asked about `id`.
fn probe_keys(payments: &Payments, id: &str) -> Vec<Option<String>> {
    payments
        .lookup_requests()
        .into_iter()
        .filter(|(_, query)| query.contains(id))
        .map(|(key, _)| key)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tool_probe_decides_in_the_background_inline_and_on_demand() {
    let fixture = reconciling(tools).await;
    let (payments, http) = (&fixture.payments, fixture.http.clone());
    let mut a = fixture.replica("tool-probe-a", &[]);
    let b = fixture.replica("tool-probe-b", &[]);

    // Found by the background reconciler through get_payment: resolved with the payment.
    let call = payment_call("tp_found", "tp-found-1");
    let id = fixture
        .interrupt_one(&mut a, &b, &call, "/pay/commit-tfound")
        .await;
    fixture.until_status(&b, &id, "completed").await;
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["execution_id"].as_str(), body["replayed"].as_bool()),
        (Some(id.as_str()), Some(true)),
        "{body}"
    );
    assert_eq!(body["data"], payments.payment(&id).unwrap(), "{body}");
    assert_eq!(body["resolution"]["by"], "reconciler", "{body}");
    assert_eq!(
        fixture.audit(&id).await,
        [("resolve".to_owned(), "reconciler".to_owned())]
    );
    // The probe's call reached the upstream under a key of its own, and left no record.
    let keys = probe_keys(payments, &id);
    assert_eq!(keys.len(), 1, "{keys:?}");
    let key = keys[0].clone().unwrap();
    assert!(key.starts_with("probe_") && key != id, "{key}");
    let mut connection = fixture.db.connect().await;
    let lookup_rows: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM carmy.reservations WHERE tool LIKE 'get_payment%'",
    )
    .fetch_one(&mut connection)
    .await
    .unwrap();
    assert_eq!(lookup_rows, 0);
    assert_eq!(
        metric(
            &http,
            &b,
            "carmy_reconciliations_total{tool=\"tp_found\",result=\"resolved\"}"
        )
        .await,
        1
    );

    // Absent (get_payment failed with 404) and not_executed: released, the retry pays anew.
    a.restart();
    let call = payment_call("tp_released", "tp-released-1");
    let id = fixture
        .interrupt_one(&mut a, &b, &call, "/pay/lost-treleased")
        .await;
    fixture.until_released(&id).await;
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(
        (status, body["replayed"].as_bool()),
        (200, Some(false)),
        "{body}"
    );
    assert_ne!(body["execution_id"], id.as_str(), "{body}");

    // Absent and unknown: stays interrupted with the tool's 404 as evidence; on demand too.
    a.restart();
    let call = payment_call("tp_unknown", "tp-unknown-1");
    let id = fixture
        .interrupt_one(&mut a, &b, &call, "/pay/lost-tunknown")
        .await;
    let kept = eventually(WAIT, "the reconciler's evidence", || async {
        let (kept, attempts) = fixture.evidence(&id).await;
        (attempts >= 1 && kept["answer"] == "absent")
            .then_some(kept.clone())
            .ok_or(kept)
    })
    .await;
    assert_eq!(kept["status"], 404, "{kept}");
    assert_eq!(kept["error"]["code"], "UPSTREAM_STATUS", "{kept}");
    assert!(
        kept["request"]
            .as_str()
            .unwrap()
            .starts_with("tool get_payment {"),
        "{kept}"
    );
    let path = format!("/v1/executions/{id}/reconcile");
    let (status, body) = request(&http, &b, Method::POST, &path, None, None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["result"].as_str(), body["evidence"]["status"].as_u64()),
        (Some("absent"), Some(404)),
        "{body}"
    );
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(
        (status, body["state"].as_str()),
        (409, Some("interrupted")),
        "{body}"
    );
    assert_eq!(fixture.audit(&id).await, []);
    assert!(!body.to_string().contains(LOOKUP_TOKEN), "{body}");
    assert!(!kept.to_string().contains(LOOKUP_TOKEN), "{kept}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_fills_the_arguments_a_tool_probe_needs_and_secrets_stay_masked() {
    let fixture = reconciling(tools).await;
    let (payments, http) = (&fixture.payments, fixture.http.clone());
    let mut a = fixture.replica("tool-probe-inline-a", &[]);
    let b = fixture.replica("tool-probe-inline-b", &[]);

    // The background reconciler has no arguments: {amount} cannot be filled, nothing decided.
    let call = payment_call("tp_argument", "tp-argument-1");
    let id = fixture
        .interrupt_one(&mut a, &b, &call, "/pay/commit-targument")
        .await;
    let kept = eventually(WAIT, "the reconciler's evidence", || async {
        let (kept, attempts) = fixture.evidence(&id).await;
        (attempts >= 1 && kept["answer"] == "error")
            .then_some(kept.clone())
            .ok_or(kept)
    })
    .await;
    assert!(
        kept["detail"]
            .as_str()
            .unwrap()
            .contains("{amount} has no value"),
        "{kept}"
    );
    assert!(probe_keys(payments, &id).is_empty());
    // The retry carries them: the inline probe asks with them and replays what it found.
    let (status, body) = post(&http, &b, &call).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["execution_id"].as_str(), body["replayed"].as_bool()),
        (Some(id.as_str()), Some(true)),
        "{body}"
    );
    assert_eq!(body["resolution"]["by"], "reconciler", "{body}");
    assert_eq!(body["data"], payments.payment(&id).unwrap(), "{body}");
    let queries: Vec<String> = payments
        .lookup_requests()
        .into_iter()
        .filter(|(_, query)| query.contains(&id))
        .map(|(_, query)| query)
        .collect();
    assert_eq!(
        queries,
        [format!("idempotency_key={id}&note=5+for+tp-argument-1")]
    );

    // An upstream that echoes the lookup tool's secret: masked in the resolved outcome.
    a.restart();
    let call = payment_call("tp_echo", "tp-echo-1");
    let id = fixture
        .interrupt_one(&mut a, &b, &call, "/pay/commit-techo")
        .await;
    let body = fixture.until_status(&b, &id, "completed").await;
    assert_eq!(body["data"]["seen_authorization"], "Bearer ***", "{body}");
    // The same for an HTTP probe's own header.
    a.restart();
    let call = payment_call("hp_echo", "hp-echo-1");
    let id = fixture
        .interrupt_one(&mut a, &b, &call, "/pay/commit-hecho")
        .await;
    let body = fixture.until_status(&b, &id, "completed").await;
    assert_eq!(body["data"]["seen_authorization"], "Bearer ***", "{body}");
    let mut connection = fixture.db.connect().await;
    let leaked: i64 = sqlx::query(
        "SELECT count(*) FROM carmy.reservations \
         WHERE outcome::text LIKE '%' || $1 || '%' OR outcome::text LIKE '%' || $2 || '%' \
            OR reconcile_evidence::text LIKE '%' || $1 || '%' \
            OR reconcile_evidence::text LIKE '%' || $2 || '%'",
    )
    .bind(LOOKUP_TOKEN)
    .bind(PROBE_TOKEN)
    .fetch_one(&mut connection)
    .await
    .unwrap()
    .get(0);
    assert_eq!(leaked, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_process_local_store_never_probes() {
    let payments = Payments::start().await;
    let file = tools(&payments.base());
    let gateway = Replica::start(
        "tool-probe-memory",
        &[
            ("CARMY_TOOLS_FILE", file.to_str().unwrap()),
            ("CARMY_TEST_LOOKUP_TOKEN", LOOKUP_TOKEN),
            ("CARMY_TEST_PROBE_TOKEN", PROBE_TOKEN),
            ("CARMY_RECONCILE_INTERVAL_MS", "100"),
        ],
    );
    let http = client();
    let (status, body) = post(&http, &gateway, &payment_call("tp_done", "done-1")).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("completed")),
        "{body}"
    );
    let id = body["execution_id"].as_str().unwrap().to_owned();
    // An execution with an outcome is never probed, on demand or in the background.
    let path = format!("/v1/executions/{id}/reconcile");
    let (status, body) = request(&http, &gateway, Method::POST, &path, None, None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("INVALID_REQUEST")),
        "{body}"
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(payments.lookup_requests().is_empty());
    let (status, body) = post(&http, &gateway, &payment_call("tp_done", "done-1")).await;
    assert_eq!(
        (status, body["replayed"].as_bool()),
        (200, Some(true)),
        "{body}"
    );
    assert!(payments.lookup_requests().is_empty());
}

/// A tools file with the stdio MCP server (prefix `py.`) and `pay`, probed by `probe`.
pub(super) fn mcp_tools(base: &str, probe: &str) -> StdioServer {
    StdioServer::tools_file(
        &format!(
            "[[tools]]\nname = \"pay\"\nurl = \"{base}/pay/commit-mcp\"\n[tools.reconcile]\n{probe}\n\n"
        ),
        false,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tool_probe_calls_a_read_only_mcp_tool() {
    let probe =
        "tool = \"py.lookup\"\narguments = { key = \"{execution_id}\" }\nfound_pointer = \"/found\"";
    let fixture = reconciling(|base| mcp_tools(base, probe).file).await;
    let server = StdioServer::beside(fixture.file.clone());
    let mut a = fixture.replica("mcp-probe-a", &[]);
    let b = fixture.replica("mcp-probe-b", &[]);
    let call = payment_call("pay", "mcp-probe-1");
    let id = fixture
        .interrupt_one(&mut a, &b, &call, "/pay/commit-mcp")
        .await;
    let body = fixture.until_status(&b, &id, "completed").await;
    assert_eq!(
        body["data"],
        json!({"key": id.as_str(), "found": true}),
        "{body}"
    );
    assert_eq!(body["resolution"]["by"], "reconciler", "{body}");
    // The MCP server saw the probe's own key in _meta, never the execution's.
    let calls = server.calls_of("lookup");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["arguments"], json!({"key": id.as_str()}));
    let key = calls[0]["key"].as_str().unwrap();
    assert!(key.starts_with("probe_"), "{key}");
}
