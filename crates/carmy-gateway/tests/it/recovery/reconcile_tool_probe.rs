//! Tool probes (docs/semantics.md §12.10): `[tools.reconcile] tool = …,
//! arguments = …` calls another configured read-only tool, an HTTP tool of the file or an MCP
//! server's, across real `carmy-gateway` processes on one PostgreSQL database and the real
//! payments upstream. The owner is killed mid-call; the background reconciler, a retry (inline,
//! with the retry's arguments) and the on-demand endpoint decide through the tool probe exactly
//! as through an HTTP probe. The probe's call leaves no record and reaches the upstream under a
//! `probe_…` key, never the execution's. Secrets an upstream echoes are masked in a probe's
//! outcome, for HTTP and tool probes alike. `check-config` shows a tool probe and refuses one
//! that names the tool itself, a tool that is not read-only or no tool at all.

use super::reconcile::{audit, evidence, interrupt, WAIT};
use crate::payments::Payments;
use crate::tools_file::write_tools_file;
use carmy_test_support::replica::gateway_binary;
use carmy_test_support::{client, eventually, metric, post, request, Replica, TestDb};
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::Row;
use std::path::{Path, PathBuf};

/// The read-only lookup tools and the paying tools whose probes call them (`tp_*`), and one
/// HTTP probe that meets an upstream echoing its secret (`hp_echo`).
fn tools(base: &str) -> PathBuf {
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

const LOOKUP_TOKEN: &str = "tok_lookup_tool_secret";
const PROBE_TOKEN: &str = "tok_http_probe_secret";

fn replica(name: &str, db: &TestDb, file: &Path, interval_ms: &str) -> Replica {
    Replica::start(
        name,
        &[
            ("DATABASE_URL", db.url.as_str()),
            ("CARMY_LEASE_TTL_MS", "1000"),
            ("CARMY_TOOLS_FILE", file.to_str().unwrap()),
            ("CARMY_TEST_LOOKUP_TOKEN", LOOKUP_TOKEN),
            ("CARMY_TEST_PROBE_TOKEN", PROBE_TOKEN),
            ("CARMY_RECONCILE_INTERVAL_MS", interval_ms),
        ],
    )
}

fn payment_call(tool: &str, request_id: &str) -> Value {
    json!({"tool": tool, "arguments": {"amount": 5}, "request_id": request_id})
}

/// Waits until `id` reads `status` on `reader`; its body.
async fn until_status(reader: &Replica, id: &str, status: &str) -> Value {
    let http = client();
    eventually(WAIT, "the reconciler decides", || async {
        let path = format!("/v1/executions/{id}");
        let (_, body) = request(&http, reader, Method::GET, &path, None, None).await;
        (body["status"] == status)
            .then_some(body.clone())
            .ok_or(body)
    })
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
    let db = TestDb::migrated().await;
    let payments = Payments::start().await;
    let file = tools(&payments.base());
    let mut a = replica("tool-probe-a", &db, &file, "100");
    let b = replica("tool-probe-b", &db, &file, "100");
    let http = client();

    // Found by the background reconciler through get_payment: resolved with the payment.
    let call = payment_call("tp_found", "tp-found-1");
    let id = interrupt(
        &payments,
        &mut a,
        &b,
        std::slice::from_ref(&call),
        "/pay/commit-tfound",
    )
    .await
    .remove(0);
    until_status(&b, &id, "completed").await;
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
        audit(&db, &id).await,
        [("resolve".to_owned(), "reconciler".to_owned())]
    );
    // The probe's call reached the upstream under a key of its own, and left no record.
    let keys = probe_keys(&payments, &id);
    assert_eq!(keys.len(), 1, "{keys:?}");
    let key = keys[0].clone().unwrap();
    assert!(key.starts_with("probe_") && key != id, "{key}");
    let mut connection = db.connect().await;
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
    let id = interrupt(
        &payments,
        &mut a,
        &b,
        std::slice::from_ref(&call),
        "/pay/lost-treleased",
    )
    .await
    .remove(0);
    eventually(WAIT, "the reconciler releases it", || async {
        let trail = audit(&db, &id).await;
        (trail == [("release".to_owned(), "reconciler".to_owned())])
            .then_some(())
            .ok_or(trail)
    })
    .await;
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
    let id = interrupt(
        &payments,
        &mut a,
        &b,
        std::slice::from_ref(&call),
        "/pay/lost-tunknown",
    )
    .await
    .remove(0);
    let kept = eventually(WAIT, "the reconciler's evidence", || async {
        let (kept, attempts) = evidence(&db, &id).await;
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
    assert_eq!(audit(&db, &id).await, []);
    assert!(!body.to_string().contains(LOOKUP_TOKEN), "{body}");
    assert!(!kept.to_string().contains(LOOKUP_TOKEN), "{kept}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_fills_the_arguments_a_tool_probe_needs_and_secrets_stay_masked() {
    let db = TestDb::migrated().await;
    let payments = Payments::start().await;
    let file = tools(&payments.base());
    let mut a = replica("tool-probe-inline-a", &db, &file, "100");
    let b = replica("tool-probe-inline-b", &db, &file, "100");
    let http = client();

    // The background reconciler has no arguments: {amount} cannot be filled, nothing decided.
    let call = payment_call("tp_argument", "tp-argument-1");
    let id = interrupt(
        &payments,
        &mut a,
        &b,
        std::slice::from_ref(&call),
        "/pay/commit-targument",
    )
    .await
    .remove(0);
    let kept = eventually(WAIT, "the reconciler's evidence", || async {
        let (kept, attempts) = evidence(&db, &id).await;
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
    assert!(probe_keys(&payments, &id).is_empty());
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
    let id = interrupt(
        &payments,
        &mut a,
        &b,
        std::slice::from_ref(&call),
        "/pay/commit-techo",
    )
    .await
    .remove(0);
    let body = until_status(&b, &id, "completed").await;
    assert_eq!(body["data"]["seen_authorization"], "Bearer ***", "{body}");
    // The same for an HTTP probe's own header.
    a.restart();
    let call = payment_call("hp_echo", "hp-echo-1");
    let id = interrupt(
        &payments,
        &mut a,
        &b,
        std::slice::from_ref(&call),
        "/pay/commit-hecho",
    )
    .await
    .remove(0);
    let body = until_status(&b, &id, "completed").await;
    assert_eq!(body["data"]["seen_authorization"], "Bearer ***", "{body}");
    let mut connection = db.connect().await;
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

fn stdio_server() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/stdio_server.py")
}

/// A tools file with the stdio MCP server (prefix `py.`) and `pay`, probed by `probe`.
fn mcp_tools(base: &str, probe: &str) -> (PathBuf, PathBuf) {
    let file = write_tools_file("");
    let state = file.with_file_name("state.jsonl");
    std::fs::write(
        &file,
        format!(
            "[[tools]]\nname = \"pay\"\nurl = \"{base}/pay/commit-mcp\"\n[tools.reconcile]\n{probe}\n\n[[mcp_servers]]\nname = \"py\"\ncommand = \"python3\"\nargs = [{:?}]\nprefix = \"py.\"\nenv = {{ STATE_FILE = {:?} }}\n",
            stdio_server().display().to_string(),
            state.display().to_string()
        ),
    )
    .unwrap();
    (file, state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tool_probe_calls_a_read_only_mcp_tool() {
    let db = TestDb::migrated().await;
    let payments = Payments::start().await;
    let (file, state) = mcp_tools(
        &payments.base(),
        "tool = \"py.lookup\"\narguments = { key = \"{execution_id}\" }\nfound_pointer = \"/found\"",
    );
    let mut a = replica("mcp-probe-a", &db, &file, "100");
    let b = replica("mcp-probe-b", &db, &file, "100");
    let call = payment_call("pay", "mcp-probe-1");
    let id = interrupt(
        &payments,
        &mut a,
        &b,
        std::slice::from_ref(&call),
        "/pay/commit-mcp",
    )
    .await
    .remove(0);
    let body = until_status(&b, &id, "completed").await;
    assert_eq!(
        body["data"],
        json!({"key": id.as_str(), "found": true}),
        "{body}"
    );
    assert_eq!(body["resolution"]["by"], "reconciler", "{body}");
    // The MCP server saw the probe's own key in _meta, never the execution's.
    let calls: Vec<Value> = std::fs::read_to_string(&state)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|event| event["event"] == "call" && event["tool"] == "lookup")
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["arguments"], json!({"key": id.as_str()}));
    let key = calls[0]["key"].as_str().unwrap();
    assert!(key.starts_with("probe_"), "{key}");
}

/// Runs `check-config` on `file`: success, standard output, standard error.
fn check_config(file: &Path) -> (bool, String, String) {
    let output = std::process::Command::new(gateway_binary())
        .arg("check-config")
        .env_remove("DATABASE_URL")
        .env("CARMY_TOOLS_FILE", file)
        .env("CARMY_TEST_LOOKUP_TOKEN", LOOKUP_TOKEN)
        .env("CARMY_TEST_PROBE_TOKEN", PROBE_TOKEN)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn check_config_shows_tool_probes_and_refuses_a_bad_one_in_one_line() {
    let (ok, stdout, stderr) = check_config(&tools("http://127.0.0.1:9"));
    assert!(ok, "{stderr}");
    assert!(stdout.contains("reconcile tool get_payment arguments={\"idempotency_key\":\"{execution_id}\"}  found_pointer=/payment_id  absent=[404] absent_means=not_executed  timeout=2000ms"), "{stdout}");
    assert!(
        !stdout.contains(LOOKUP_TOKEN) && !stdout.contains(PROBE_TOKEN),
        "{stdout}"
    );

    let pay = "[[tools]]\nname = \"pay\"\nurl = \"http://127.0.0.1:9/pay\"\n";
    let read = "[[tools]]\nname = \"read\"\nmethod = \"GET\"\nurl = \"http://127.0.0.1:9/read\"\nannotations = { readOnlyHint = true }\n";
    let write = "[[tools]]\nname = \"write\"\nurl = \"http://127.0.0.1:9/write\"\nannotations = { readOnlyHint = false }\n";
    let cases = [
        (
            format!("{pay}[tools.reconcile]\ntool = \"pay\"\n"),
            "reconcile.tool",
            "names the tool itself",
        ),
        (
            format!("{pay}[tools.reconcile]\ntool = \"write\"\nfound_pointer = \"/x\"\n{write}"),
            "reconcile.tool",
            "\"write\" is not annotated read-only",
        ),
        (
            format!("{pay}[tools.reconcile]\ntool = \"nothing\"\nfound_pointer = \"/x\"\n{read}"),
            "reconcile.tool",
            "no [[tools]] entry is named \"nothing\"",
        ),
        (
            format!("{pay}[tools.reconcile]\ntool = \"read\"\nfound_status = [200]\n{read}"),
            "reconcile.found_status",
            "found is a value at found_pointer",
        ),
        (
            format!("{pay}[tools.reconcile]\ntool = \"read\"\n{read}"),
            "reconcile.found_pointer",
            "is required with tool",
        ),
        (
            format!("{pay}[tools.reconcile]\ntool = \"read\"\nfound_pointer = \"payment_id\"\n{read}"),
            "reconcile.found_pointer",
            "is not a JSON Pointer",
        ),
        (
            format!("{pay}[tools.reconcile]\nurl = \"http://127.0.0.1:9/l?k={{execution_id}}\"\nfound_pointer = \"/id\"\n"),
            "reconcile.found_pointer",
            "goes with tool",
        ),
        (
            format!("{pay}[tools.reconcile]\ntool = \"read\"\narguments = {{ k = \"{{execution_id\" }}\n{read}"),
            "reconcile.arguments",
            "without its }",
        ),
        (
            format!("{pay}[tools.reconcile]\nurl = \"http://127.0.0.1:9/l?k={{execution_id}}\"\narguments = {{ k = \"v\" }}\n"),
            "reconcile.arguments",
            "go with tool",
        ),
    ];
    for (text, field, message) in cases {
        let (ok, _, stderr) = check_config(&write_tools_file(&text));
        assert!(!ok, "{text}: {stderr}");
        assert!(
            stderr.contains(field) && stderr.contains(message) && stderr.contains("tool \"pay\""),
            "{text}: {stderr}"
        );
        let said: Vec<&str> = stderr
            .lines()
            .filter(|line| line.starts_with("carmy-gateway: "))
            .collect();
        assert_eq!(said.len(), 1, "{stderr}");
        assert!(said[0].contains(message), "{stderr}");
    }
}

#[test]
fn check_config_checks_a_probe_that_calls_an_mcp_tool() {
    let (file, _) = mcp_tools(
        "http://127.0.0.1:9",
        "tool = \"py.lookup\"\narguments = { key = \"{execution_id}\" }\nfound_pointer = \"/found\"",
    );
    let (ok, stdout, stderr) = check_config(&file);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains(
            "reconcile tool py.lookup arguments={\"key\":\"{execution_id}\"}  found_pointer=/found"
        ),
        "{stdout}"
    );
    for (probe, message) in [
        (
            "tool = \"py.write\"\nfound_pointer = \"/found\"",
            "tool \"pay\": reconcile.tool names \"py.write\", which is not annotated read-only",
        ),
        (
            "tool = \"py.missing\"\nfound_pointer = \"/found\"",
            "tool \"pay\": reconcile.tool names \"py.missing\", which neither",
        ),
    ] {
        let (file, _) = mcp_tools("http://127.0.0.1:9", probe);
        let (ok, _, stderr) = check_config(&file);
        assert!(!ok, "{probe}: {stderr}");
        assert!(stderr.contains(message), "{probe}: {stderr}");
    }
}
