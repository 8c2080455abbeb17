//! HTTP helpers against a running [`Replica`]: a plain client, calls, and the tool-run counter
//! of `/metrics`.

use crate::replica::Replica;
use serde_json::Value;

/// A plain HTTP client (no TLS, no proxy).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// POSTs a call; returns the status and the JSON body.
pub async fn post(client: &reqwest::Client, replica: &Replica, body: &Value) -> (u16, Value) {
    let response = client
        .post(replica.url("/v1/executions"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("request");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    (status, value)
}

/// POSTs `body` to `replica` on a task of its own (so the test can act while the call runs);
/// the handle yields the status and JSON body, and panics on a transport error.
pub fn spawn_post(
    client: &reqwest::Client,
    replica: &Replica,
    body: &Value,
) -> tokio::task::JoinHandle<(u16, Value)> {
    let (client, url, body) = (
        client.clone(),
        replica.url("/v1/executions"),
        body.to_string(),
    );
    tokio::spawn(async move {
        let response = client
            .post(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request");
        let status = response.status().as_u16();
        (
            status,
            response.json::<Value>().await.expect("a JSON answer"),
        )
    })
}

/// POSTs `body` on a task of its own whose answer nobody waits for (the replica may die).
pub fn spawn_post_unanswered(client: &reqwest::Client, replica: &Replica, body: &Value) {
    let (client, url, body) = (
        client.clone(),
        replica.url("/v1/executions"),
        body.to_string(),
    );
    tokio::spawn(async move {
        let _ = client
            .post(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await;
    });
}

/// POSTs raw text; returns the status and the raw body text.
pub async fn post_text(client: &reqwest::Client, replica: &Replica, body: &str) -> (u16, String) {
    let response = client
        .post(replica.url("/v1/executions"))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("request");
    (response.status().as_u16(), response.text().await.unwrap())
}

/// How many times this replica's process started `tool` (from `/metrics`).
pub async fn tool_runs(client: &reqwest::Client, replica: &Replica, tool: &str) -> u64 {
    metric(
        client,
        replica,
        &format!("carmy_tool_runs_total{{tool=\"{tool}\"}}"),
    )
    .await
}

/// The value of the counter `series` (a name with its labels, as `/metrics` prints it, e.g.
/// `carmy_records_damaged_total`) of this replica's process; 0 when it is not shown.
pub async fn metric(client: &reqwest::Client, replica: &Replica, series: &str) -> u64 {
    let text = client
        .get(replica.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |count| count.trim().parse().unwrap())
}

/// The body of a call with a request id.
pub fn call(tool: &str, arguments: Value, request_id: &str) -> Value {
    serde_json::json!({"tool": tool, "arguments": arguments, "request_id": request_id})
}

/// Sends `method` to `path` on `replica` with an optional `Authorization: Bearer <key>` and an
/// optional JSON body; returns the status and the JSON body (`Value::Null` when empty).
///
/// # Panics
/// On a transport error or a body that is not JSON.
pub async fn request(
    client: &reqwest::Client,
    replica: &Replica,
    method: reqwest::Method,
    path: &str,
    key: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut builder = client.request(method, replica.url(path));
    if let Some(key) = key {
        builder = builder.bearer_auth(key);
    }
    if let Some(body) = body {
        builder = builder
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = builder.send().await.expect("request");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    if text.is_empty() {
        return (status, Value::Null);
    }
    let value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"));
    (status, value)
}
