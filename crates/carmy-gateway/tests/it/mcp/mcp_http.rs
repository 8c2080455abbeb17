//! The MCP front at the HTTP level (docs/semantics.md §11), with raw requests: the 2026-07-28
//! per-request lifecycle and an older version sharing one record, the `Host` and `Origin` checks
//! and their settings, the API key (and a credential sent to a server without keys), the body limit and
//! strict JSON.

use super::mcp_client::Served;
use serde_json::{json, Value};

/// POSTs a JSON-RPC message to `/mcp` with `headers`; returns the status and the body text.
async fn post(served: &Served, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut request = carmy_test_support::client()
        .post(served.mcp())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

fn call(request_id: &str, extra_meta: &Value) -> String {
    let mut meta = json!({"io.carmy/request_id": request_id});
    meta.as_object_mut()
        .unwrap()
        .extend(extra_meta.as_object().unwrap().clone());
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": "echo", "arguments": {"v": 1}, "_meta": meta}})
    .to_string()
}

fn execution(body: &str) -> Value {
    let message: Value = serde_json::from_str(body).unwrap();
    message["result"]["_meta"]["io.carmy/execution"].clone()
}

#[tokio::test]
async fn the_2026_07_28_lifecycle_and_an_older_version_share_one_record() {
    let gateway = Served::start(&[]).await;
    let inline = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "echo"),
    ];
    let (status, first) = post(&gateway, &headers, &call("v-1", &inline)).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(execution(&first)["replayed"], false, "{first}");
    let older = [("mcp-protocol-version", "2025-06-18")];
    let (status, again) = post(&gateway, &older, &call("v-1", &json!({}))).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(execution(&again)["replayed"], true, "{again}");
    assert_eq!(
        execution(&again)["execution_id"],
        execution(&first)["execution_id"]
    );
    assert_eq!(gateway.runs("echo"), 1);
}

#[tokio::test]
async fn only_allowed_hosts_are_served() {
    let default = Served::start(&[]).await;
    let body = call("h-1", &json!({}));
    let (status, text) = post(&default, &[("host", "carmy.example")], &body).await;
    assert_eq!(status, 403);
    let problem: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(problem["code"], "HOST_NOT_ALLOWED", "{text}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("CARMY_MCP_ALLOWED_HOSTS"),
        "{text}"
    );
    let configured = Served::start(&["--mcp-allowed-hosts", "carmy.example,127.0.0.1"]).await;
    let (status, text) = post(&configured, &[("host", "carmy.example")], &body).await;
    assert_eq!(status, 200, "{text}");
    let any = Served::start(&["--mcp-allowed-hosts", "*"]).await;
    let (status, text) = post(&any, &[("host", "elsewhere.example:9")], &body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(default.runs("echo"), 0);
}

#[tokio::test]
async fn a_foreign_origin_is_refused_naming_the_setting_and_runs_nothing() {
    let default = Served::start(&[]).await;
    let body = call("o-1", &json!({}));
    for origin in [
        "https://evil.example",
        "http://localhost.evil.example:8080",
        "null",
    ] {
        let (status, text) = post(&default, &[("origin", origin)], &body).await;
        assert_eq!(status, 403, "{origin}: {text}");
        let problem: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(problem["code"], "ORIGIN_NOT_ALLOWED", "{text}");
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("CARMY_MCP_ALLOWED_ORIGINS"),
            "{text}"
        );
    }
    assert_eq!(default.runs("echo"), 0, "a refused call never runs");
    // A page on this machine, and a client that sends no Origin, are served.
    let (status, text) = post(&default, &[("origin", "http://localhost:5173")], &body).await;
    assert_eq!(status, 200, "{text}");
    let (status, text) = post(&default, &[], &call("o-2", &json!({}))).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(default.runs("echo"), 2);
    let configured = Served::start(&["--mcp-allowed-origins", "https://app.example"]).await;
    let (status, text) = post(&configured, &[("origin", "https://app.example")], &body).await;
    assert_eq!(status, 200, "{text}");
    let (status, _) = post(&configured, &[("origin", "http://localhost:5173")], &body).await;
    assert_eq!(status, 403);
    let any = Served::start(&["--mcp-allowed-origins", "*"]).await;
    let (status, text) = post(&any, &[("origin", "https://evil.example")], &body).await;
    assert_eq!(status, 200, "{text}");
}

#[tokio::test]
async fn keys_limits_and_strict_json_before_the_sdk() {
    let gateway = Served::start(&["--api-keys", "k1=alice", "--max-body-bytes", "512"]).await;
    let body = call("s-1", &json!({}));
    let (status, text) = post(&gateway, &[], &body).await;
    assert_eq!(status, 401, "{text}");
    assert!(text.contains("UNAUTHORIZED"), "{text}");
    let key = [("authorization", "Bearer k1")];
    let (status, text) = post(&gateway, &key, &body).await;
    assert_eq!(status, 200, "{text}");
    let large = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "echo", "arguments": {"pad": "x".repeat(600)}}});
    let (status, text) = post(&gateway, &key, &large.to_string()).await;
    assert_eq!(status, 413, "{text}");
    let duplicate = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"a":1,"a":2}}}"#;
    let (status, text) = post(&gateway, &key, duplicate).await;
    assert_eq!(status, 400, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["error"]["code"], -32700);
    assert_eq!(gateway.runs("echo"), 1);
}

#[tokio::test]
async fn without_keys_a_credential_is_refused_as_the_http_api_refuses_it() {
    let gateway = Served::start(&[]).await;
    let body = call("n-1", &json!({}));
    for authorization in ["Bearer sk-123", "Basic YTpi"] {
        let (status, text) = post(&gateway, &[("authorization", authorization)], &body).await;
        assert_eq!(status, 401, "{text}");
        let problem: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(problem["code"], "UNAUTHORIZED", "{text}");
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .starts_with("this server has no API keys configured"),
            "{text}"
        );
    }
    assert_eq!(gateway.runs("echo"), 0);
    // Without the header the same call runs, once, as `anonymous`.
    let (status, text) = post(&gateway, &[], &body).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(execution(&text)["replayed"], false, "{text}");
    assert_eq!(gateway.runs("echo"), 1);
}

#[tokio::test]
async fn a_body_that_does_not_arrive_gets_408() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gateway = Served::start(&["--body-timeout-ms", "200"]).await;
    let address = gateway.base.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\ncontent-length: 100\r\n\r\n{{\"jsonrpc\""
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0; 1024];
    let read = tokio::time::timeout(std::time::Duration::from_secs(10), stream.read(&mut answer))
        .await
        .expect("an answer within the deadline")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
}
