//! One tool of an upstream MCP server (docs/semantics.md §10): forwarded as `tools/call` with
//! the execution id in `params._meta["io.carmy/idempotency_key"]`; a `CallToolResult` becomes
//! the outcome (`structuredContent`, else the content list; `isError` → `failed`), with the
//! server's configured secrets masked.

use super::McpUpstream;
use crate::secret::{mask_outcome, mask_text};
use carmy::tool::{Tool, ToolContext, ToolFuture};
use carmy::{ToolAnnotations, ToolError};
use rmcp::model::{CallToolRequestParams, CallToolResult, MetaObject, RequestMetaObject};
use rmcp::ServiceError;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// Where the execution id travels in `params._meta`.
pub const IDEMPOTENCY_META_KEY: &str = "io.carmy/idempotency_key";

/// An imported tool: Carmy's name (prefix + the server's name) and the server's own.
pub struct McpTool {
    pub(super) upstream: Arc<McpUpstream>,
    pub(super) name: String,
    pub(super) remote_name: String,
    pub(super) description: String,
    pub(super) input_schema: Value,
    pub(super) annotations: Option<ToolAnnotations>,
}

impl McpTool {
    /// The `tools/call` parameters for `arguments` as execution `context`.
    fn params(&self, context: &ToolContext, arguments: Value) -> CallToolRequestParams {
        let mut arguments = match arguments {
            Value::Object(members) => members,
            _ => Map::new(),
        };
        if let Some(name) = &self.upstream.spec.idempotency_argument {
            arguments.insert(name.clone(), json!(context.execution_id.as_str()));
        }
        let mut meta = Map::new();
        meta.insert(
            IDEMPOTENCY_META_KEY.to_owned(),
            json!(context.execution_id.as_str()),
        );
        // The tool's span when traces are exported (docs/operations.md "Traces"), else the
        // caller's value.
        let traceparent = carmy::trace::outgoing_traceparent(
            &tracing::Span::current(),
            context.traceparent.as_deref(),
        );
        if let Some(traceparent) = traceparent {
            meta.insert("traceparent".to_owned(), json!(traceparent));
        }
        let mut params =
            CallToolRequestParams::new(self.remote_name.clone()).with_arguments(arguments);
        params.meta = Some(RequestMetaObject(MetaObject(meta)));
        params
    }

    /// [`Self::send`] with the server's configured secrets masked in what it answers.
    async fn run(&self, context: ToolContext, arguments: Value) -> Result<Value, ToolError> {
        let outcome = self.send(context, arguments).await;
        mask_outcome(outcome, &self.upstream.spec.secrets)
    }

    async fn send(&self, context: ToolContext, arguments: Value) -> Result<Value, ToolError> {
        let Some(peer) = self.upstream.peer() else {
            return Err(unavailable(&self.upstream.spec.name));
        };
        let params = self.params(&context, arguments);
        match peer.call_tool(params).await {
            Ok(result) => outcome(result),
            Err(ServiceError::McpError(error)) => Err(ToolError::new(
                "UPSTREAM_ERROR",
                format!("the MCP server answered with an error: {}", error.message),
            )
            .with_details(
                json!({"code": error.code.0, "message": error.message, "data": error.data}),
            )),
            Err(error) => {
                let error = mask_text(&error.to_string(), &self.upstream.spec.secrets);
                tracing::warn!(tool = %self.name, execution_id = %context.execution_id, %error,
                    "MCP call failed after it may have been sent");
                Err(ToolError::effect_unknown(
                    "UPSTREAM_DISCONNECTED",
                    "the connection to the MCP server failed after the call may have been sent; the effect is unknown: check before acting again",
                ))
            }
        }
    }
}

/// Refused before sending: the server is not connected (starting, or restarting).
pub(super) fn unavailable(server: &str) -> ToolError {
    ToolError::not_executed(
        "UPSTREAM_UNAVAILABLE",
        format!("the MCP server {server:?} is not connected; nothing was sent; retry the same call later"),
    )
    .with_retry_after(Duration::from_secs(1))
}

/// A `CallToolResult` as an outcome.
fn outcome(result: CallToolResult) -> Result<Value, ToolError> {
    let content = serde_json::to_value(&result.content).unwrap_or(Value::Null);
    if result.is_error == Some(true) {
        let text: String = result
            .content
            .iter()
            .find_map(|block| block.as_text().map(|text| text.text.clone()))
            .unwrap_or_default()
            .chars()
            .take(300)
            .collect();
        let mut details = json!({"content": content});
        if let Some(structured) = result.structured_content {
            details["structuredContent"] = structured;
        }
        return Err(ToolError::new(
            "UPSTREAM_TOOL_ERROR",
            format!("the MCP tool reported an error: {text}"),
        )
        .with_details(details));
    }
    Ok(result.structured_content.unwrap_or(content))
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> &Value {
        &self.input_schema
    }

    fn timeout(&self) -> Option<Duration> {
        self.upstream.spec.timeout
    }

    fn annotations(&self) -> Option<&ToolAnnotations> {
        self.annotations.as_ref()
    }

    fn on_interrupted(&self) -> carmy::OnInterrupted {
        self.upstream.spec.on_interrupted
    }

    /// The execution id travels in `_meta` ([`IDEMPOTENCY_META_KEY`]) on every call.
    fn key_setting(&self) -> carmy::key_argument::KeySetting {
        self.upstream.spec.key.clone()
    }

    fn sends_idempotency_key(&self) -> bool {
        true
    }

    fn call(&self, context: ToolContext, arguments: Value) -> ToolFuture<'_> {
        Box::pin(self.run(context, arguments))
    }
}
