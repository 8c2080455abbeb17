//! An MCP server written with the official Rust SDK (`rmcp`) over Streamable HTTP, started by
//! the test on 127.0.0.1, behind a real `carmy-gateway` process (docs/semantics.md §10): tools
//! imported with prefix, schema and annotations, the execution id in `_meta`, replay without a
//! second call, `isError` recorded as `failed`.

use crate::http_tools::replica;
use crate::tools_file::write_tools_file;
use carmy_test_support::{call, client, post};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// A call the server served: the tool and the key it carried.
type Served = (String, Option<String>);

/// Records the key of every call it serves.
#[derive(Clone, Default)]
struct Recorder {
    keys: Arc<Mutex<Vec<Served>>>,
}

impl ServerHandler for Recorder {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = |value: Value| Arc::new(value.as_object().unwrap().clone());
        let mut remember = Tool::new(
            "remember",
            "Remembers a text",
            schema(
                json!({"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}),
            ),
        );
        let mut hints = ToolAnnotations::default();
        hints.destructive_hint = Some(false);
        remember.annotations = Some(hints);
        let oops = Tool::new("oops", "Always fails", schema(json!({"type": "object"})));
        Ok(ListToolsResult::with_all_items(vec![remember, oops]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // The SDK hands the request's `_meta` over in the context.
        let key = context
            .meta
            .0
             .0
            .get("io.carmy/idempotency_key")
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.keys
            .lock()
            .unwrap()
            .push((request.name.to_string(), key.clone()));
        let arguments = request.arguments.unwrap_or_default();
        let result = if request.name == "oops" {
            CallToolResult::error(vec![ContentBlock::text("oops, it broke")])
        } else {
            let mut result = CallToolResult::success(vec![ContentBlock::text("remembered")]);
            result.structured_content = Some(json!({"text": arguments.get("text"), "key": key}));
            result
        };
        Ok(CallToolResponse::Complete(result))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_rmcp_server_over_streamable_http_is_imported_called_and_replayed() {
    let recorder = Recorder::default();
    let service = StreamableHttpService::new(
        {
            let recorder = recorder.clone();
            move || Ok(recorder.clone())
        },
        LocalSessionManager::default().into(),
        StreamableHttpServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let router = axum::Router::new().nest_service("/mcp", service);
        axum::serve(listener, router).await.unwrap();
    });
    let file = write_tools_file(&format!(
        "[[mcp_servers]]\nname = \"rust\"\nurl = \"http://{address}/mcp\"\nprefix = \"rs.\"\n"
    ));
    let gateway = replica("mcp-rmcp", &file, &[]);
    let http = client();
    let listed: Value = http
        .get(gateway.url("/v1/tools"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["rs.oops", "rs.remember"]);
    let remember = &listed["tools"][1];
    assert_eq!(
        remember["annotations"],
        json!({"destructiveHint": false}),
        "{remember}"
    );
    assert_eq!(remember["input_schema"]["required"], json!(["text"]));

    let body = call("rs.remember", json!({"text": "milk"}), "m1");
    let (status, first) = post(&http, &gateway, &body).await;
    assert_eq!(
        (status, first["status"].as_str()),
        (200, Some("completed")),
        "{first}"
    );
    assert_eq!(
        first["data"],
        json!({"text": "milk", "key": first["execution_id"]})
    );
    let (_, replay) = post(&http, &gateway, &body).await;
    assert_eq!(
        (replay["replayed"].as_bool(), &replay["data"]),
        (Some(true), &first["data"])
    );
    let (_, failed) = post(&http, &gateway, &call("rs.oops", json!({}), "o1")).await;
    assert_eq!(
        (failed["status"].as_str(), failed["error"]["code"].as_str()),
        (Some("failed"), Some("UPSTREAM_TOOL_ERROR")),
        "{failed}"
    );
    let keys = recorder.keys.lock().unwrap().clone();
    let key = |answer: &Value| answer["execution_id"].as_str().map(str::to_owned);
    assert_eq!(
        keys,
        [
            ("remember".to_owned(), key(&first)),
            ("oops".to_owned(), key(&failed))
        ]
    );
    server.abort();
}
