//! One tool of an upstream MCP server (docs/semantics.md §10): forwarded as `tools/call` with
//! the execution id in `params._meta["io.carmy/idempotency_key"]`; a `CallToolResult` becomes
//! the outcome (`structuredContent`, else the content list; `isError` → `failed`), with the
//! server's configured secrets masked.

use super::McpUpstream;
use crate::secret::{mask_outcome, mask_text};
use carmy::tool::{Tool, ToolContext, ToolFuture};
use carmy::{ToolAnnotations, ToolError};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, GetTaskParams,
    MetaObject, RequestMetaObject, Task, TaskPayload,
};
use rmcp::service::{Peer, RoleClient};
use rmcp::ServiceError;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
        let started = Instant::now();
        let params = self.params(&context, arguments);
        match peer.call_tool_once(params).await {
            Ok(CallToolResponse::Complete(result)) => outcome(result),
            Ok(CallToolResponse::InputRequired(_)) => Err(input_required_at_call()),
            Ok(CallToolResponse::Task(created)) => {
                let budget = context.timeout.saturating_sub(DEADLINE_MARGIN);
                self.follow(&peer, &context, created.task, started + budget)
                    .await
            }
            Ok(_) => Err(ToolError::effect_unknown(
                "UPSTREAM_ANSWER_UNKNOWN",
                "the MCP server answered the call with a kind of result Carmy does not know; the effect is unknown: check before acting again",
            )),
            Err(error) => Err(self.call_error(&context, error)),
        }
    }

    /// A failed exchange with the server (docs/semantics.md §10): its JSON-RPC error is
    /// recorded `failed`; a broken connection after the request may have been sent is effect
    /// unknown.
    fn call_error(&self, context: &ToolContext, error: ServiceError) -> ToolError {
        match error {
            ServiceError::McpError(error) => ToolError::new(
                "UPSTREAM_ERROR",
                format!("the MCP server answered with an error: {}", error.message),
            )
            .with_details(
                json!({"code": error.code.0, "message": error.message, "data": error.data}),
            ),
            error => {
                let error = mask_text(&error.to_string(), &self.upstream.spec.secrets);
                tracing::warn!(tool = %self.name, execution_id = %context.execution_id, %error,
                    "MCP call failed after it may have been sent");
                ToolError::effect_unknown(
                    "UPSTREAM_DISCONNECTED",
                    "the connection to the MCP server failed after the call may have been sent; the effect is unknown: check before acting again",
                )
            }
        }
    }

    /// Follows an upstream task (the server answered the call with one) to its end by polling
    /// `tasks/get`, at the server's `pollIntervalMs` (bounded to [`MIN_POLL`] ..
    /// [`MAX_POLL`]), until `deadline` (docs/semantics.md §10, "Upstream tasks"). Only the final
    /// state is an outcome: `completed` is the result, `failed` the server's error, `cancelled`
    /// and `input_required` effect unknown, and a task still working at the deadline is
    /// `timed_out` with effect unknown. Every error names the upstream task id in
    /// `details.upstream_task_id`, for reconciliation.
    async fn follow(
        &self,
        peer: &Peer<RoleClient>,
        context: &ToolContext,
        mut task: Task,
        deadline: Instant,
    ) -> Result<Value, ToolError> {
        let task_id = task.task_id.clone();
        tracing::info!(tool = %self.name, execution_id = %context.execution_id, upstream_task_id = %task_id,
            "the MCP server answered with a task; following it");
        let with_task = |error: ToolError, extra: Value| {
            let mut details = json!({"upstream_task_id": task_id});
            if let (Some(details), Value::Object(extra)) = (details.as_object_mut(), extra) {
                details.extend(extra);
            }
            error.with_details(details)
        };
        loop {
            let pause = task
                .poll_interval_ms
                .map_or(DEFAULT_POLL, Duration::from_millis)
                .clamp(MIN_POLL, MAX_POLL);
            if Instant::now() + pause >= deadline {
                return Err(with_task(
                    ToolError::timed_out(
                        "UPSTREAM_TASK_TIMEOUT",
                        format!("the MCP server's task {task_id} was still working when the tool's deadline passed; its effect is unknown: check the server before acting again"),
                    ),
                    json!({"upstream_status": "working"}),
                ));
            }
            tokio::time::sleep(pause).await;
            let polled = match peer.get_task(GetTaskParams::new(task_id.clone())).await {
                Ok(polled) => polled,
                Err(error) => {
                    let error = self.call_error(context, error);
                    let effect_unknown = ToolError::effect_unknown(error.code, error.message);
                    return Err(with_task(effect_unknown, json!({})));
                }
            };
            match polled.task.payload {
                TaskPayload::Working => task = polled.task.task,
                TaskPayload::Completed { result } => {
                    return match serde_json::from_value::<CallToolResult>(Value::Object(result)) {
                        Ok(result) => outcome(result).map_err(|error| {
                            let details = error.details.clone().unwrap_or(json!({}));
                            with_task(error, details)
                        }),
                        Err(problem) => Err(with_task(
                            ToolError::effect_unknown(
                                "UPSTREAM_TASK_RESULT_INVALID",
                                format!("the MCP server's task {task_id} completed with a result that is not a tool result ({problem}); its effect is unknown: check the server before acting again"),
                            ),
                            json!({}),
                        )),
                    };
                }
                TaskPayload::Failed { error } => {
                    let message = error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned();
                    return Err(with_task(
                        ToolError::effect_unknown(
                            "UPSTREAM_TASK_FAILED",
                            format!("the MCP server's task {task_id} failed: {message}"),
                        ),
                        json!({"error": error}),
                    ));
                }
                TaskPayload::Cancelled => {
                    return Err(with_task(
                        ToolError::effect_unknown(
                            "UPSTREAM_TASK_CANCELLED",
                            format!("the MCP server cancelled its task {task_id}; its effect is unknown: check the server before acting again"),
                        ),
                        json!({"upstream_status": "cancelled"}),
                    ));
                }
                TaskPayload::InputRequired { .. } => {
                    // Carmy cannot answer the server's questions: stop the task, say so.
                    if let Err(error) = peer
                        .cancel_task(CancelTaskParams::new(task_id.clone()))
                        .await
                    {
                        tracing::warn!(upstream_task_id = %task_id, %error, "could not cancel an upstream task that needs input");
                    }
                    return Err(with_task(
                        ToolError::effect_unknown(
                            "UPSTREAM_INPUT_REQUIRED",
                            format!("the MCP tool's task {task_id} asked for input that Carmy cannot give (it answers no server requests), so Carmy cancelled it; its effect is unknown: check the server, then ask the user or use the server directly"),
                        ),
                        json!({"upstream_status": "input_required"}),
                    ));
                }
                _ => task = polled.task.task,
            }
        }
    }
}

/// The server asked for input before running the call (an `input_required` answer to
/// `tools/call`): Carmy cannot give it, and the call did not run, so nothing is recorded.
fn input_required_at_call() -> ToolError {
    ToolError::not_executed(
        "UPSTREAM_INPUT_REQUIRED",
        "the MCP tool asked for input that Carmy cannot give (it answers no server requests such as elicitation or sampling), so the call was not run; do not retry it through Carmy: ask the user, or use a tool that takes the information as arguments",
    )
}

/// Kept between an upstream task's last poll and the engine's deadline, so that the tool
/// records the task id itself rather than being stopped without it.
const DEADLINE_MARGIN: Duration = Duration::from_millis(250);
/// Pause between polls when the server suggests none.
const DEFAULT_POLL: Duration = Duration::from_millis(500);
/// Shortest pause between polls, whatever the server suggests.
const MIN_POLL: Duration = Duration::from_millis(50);
/// Longest pause between polls, whatever the server suggests.
const MAX_POLL: Duration = Duration::from_secs(5);

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

    fn mcp_task_always(&self) -> bool {
        self.upstream.spec.task_always
    }

    /// The execution id travels in `_meta` ([`IDEMPOTENCY_META_KEY`]) on every call.
    fn key_setting(&self) -> carmy::key_argument::KeySetting {
        self.upstream.spec.key.clone()
    }

    /// The server entry's `redact_arguments` (docs/semantics.md §8.5).
    fn redaction(&self) -> Option<&carmy::arguments::Redaction> {
        self.upstream.spec.redaction.as_ref()
    }

    fn sends_idempotency_key(&self) -> bool {
        true
    }

    fn call(&self, context: ToolContext, arguments: Value) -> ToolFuture<'_> {
        Box::pin(self.run(context, arguments))
    }
}
