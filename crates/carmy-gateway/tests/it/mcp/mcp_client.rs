//! The MCP tests' client side, through the official SDK's client (`rmcp`): connecting to a
//! gateway's `/mcp`, calls with a request id in `_meta`, and reading Carmy's parts of a result.

use carmy::engine::Engine;
use carmy_test_support::InProcess;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, CustomRequest, MetaObject,
    RequestMetaObject, ServerResult,
};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// A connected (initialized) MCP client.
pub type Client = RunningService<RoleClient, ()>;

/// Connects to the MCP endpoint `url` (`http://…/mcp`), with `key` as the bearer token if given,
/// and runs `initialize`.
pub async fn try_connect(url: &str, key: Option<&str>) -> Result<Client, String> {
    // rmcp's client is reqwest 0.13, which carmy-tools builds without a crypto provider.
    carmy_tools::client::install_tls_provider();
    let mut config =
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).max_concurrent_requests(64);
    if let Some(key) = key {
        config = config.auth_header(key);
    }
    let transport = StreamableHttpClientTransport::from_config(config);
    ().serve(transport).await.map_err(|error| error.to_string())
}

/// [`try_connect`], panicking on failure.
pub async fn connect(url: &str, key: Option<&str>) -> Client {
    try_connect(url, key)
        .await
        .unwrap_or_else(|error| panic!("connecting to {url}: {error}"))
}

/// A `tools/call` with `meta` as its `_meta`.
pub fn call_with_meta(tool: &str, arguments: Value, meta: Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(arguments.as_object().expect("arguments object").clone());
    let meta: Map<String, Value> = meta.as_object().expect("meta object").clone();
    params.meta = Some(RequestMetaObject(MetaObject(meta)));
    params
}

/// A `tools/call` with Carmy's request id `_meta["io.carmy/request_id"]`.
pub fn call(tool: &str, arguments: Value, request_id: &str) -> CallToolRequestParams {
    call_with_meta(tool, arguments, json!({"io.carmy/request_id": request_id}))
}

/// Sends a `tools/call` whose `params` are `params` as given (e.g. with `idempotencyKey`, which
/// the SDK's typed parameters do not carry).
pub async fn call_raw(client: &Client, params: Value) -> Result<CallToolResult, ServiceError> {
    let request = ClientRequest::CustomRequest(CustomRequest::new("tools/call", Some(params)));
    match client.send_request(request).await? {
        ServerResult::CallToolResult(result) => Ok(result),
        other => panic!("not a tools/call result: {other:?}"),
    }
}

/// `_meta["io.carmy/execution"]` of a result.
pub fn execution(result: &CallToolResult) -> Value {
    result
        .meta
        .as_ref()
        .and_then(|meta| meta.0.get("io.carmy/execution"))
        .cloned()
        .unwrap_or_else(|| panic!("no io.carmy/execution in {result:?}"))
}

/// The text of a result's first content block.
pub fn text(result: &CallToolResult) -> String {
    let block = serde_json::to_value(&result.content[0]).unwrap();
    block["text"].as_str().expect("a text block").to_owned()
}

/// `structuredContent` of a result (`null` when absent).
/// `structuredContent` without Carmy's guidance member (`io.carmy/guidance`, the texts a model
/// reads, docs/semantics.md §11): the tool's data, or Carmy's machine fields.
pub fn structured(result: &CallToolResult) -> Value {
    let mut fields = result.structured_content.clone().unwrap_or(Value::Null);
    if let Some(fields) = fields.as_object_mut() {
        fields.remove(GUIDANCE);
    }
    fields
}

/// The guidance member of `structuredContent`, `Null` when there is none.
pub fn guidance(result: &CallToolResult) -> Value {
    result
        .structured_content
        .as_ref()
        .and_then(|fields| fields.get(GUIDANCE))
        .cloned()
        .unwrap_or(Value::Null)
}

/// The member of `structuredContent` that carries Carmy's guidance.
pub const GUIDANCE: &str = "io.carmy/guidance";

/// Whether `result` is a recorded `completed` outcome (an answer that is not an outcome yet is
/// no error result either: `_meta["io.carmy/execution"].status` tells them apart).
pub fn completed(result: &CallToolResult) -> bool {
    result.is_error == Some(false) && execution(result)["status"] == "completed"
}

/// The JSON-RPC error code of a failed request.
pub fn rpc_code(error: &ServiceError) -> i32 {
    match error {
        ServiceError::McpError(data) => data.code.0,
        other => panic!("not a JSON-RPC error: {other}"),
    }
}

/// A gateway built in-process from `flags` and served over TCP on 127.0.0.1 (the MCP client
/// needs a real connection); stopped when dropped.
pub struct Served {
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    /// The engine, for the tool-run counters.
    pub engine: Arc<Engine>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Served {
    /// Builds and serves the gateway.
    pub async fn start(flags: &[&str]) -> Self {
        let app = InProcess::start(flags).await.gateway.app;
        let engine = Arc::clone(app.engine());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(app.serve(listener, async move {
            let _ = stopped.await;
        }));
        Self {
            base,
            engine,
            stop: Some(stop),
        }
    }

    /// The MCP endpoint.
    pub fn mcp(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// How many times `tool` started.
    pub fn runs(&self, tool: &str) -> u64 {
        self.engine.metrics().tool_runs(tool)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
