//! The SDK's server handler over the engine (docs/semantics.md §11): `tools/list` from
//! [`Engine::tools`] (a snapshot per request, since the set may change at run time) and
//! `tools/call` through [`Engine::execute`], which runs detached: a client that disconnects or
//! cancels stops the waiting, never the record.

use crate::identity::IdSource;
use crate::prepare::{prepare, Prepared, Ready};
use crate::results;
use crate::transport::Caller;
use crate::{McpConfig, EXECUTION_META};
use carmy::engine::Engine;
use carmy::key_argument::{listed_schema, KeyArgument};
use carmy::Tool as CarmyTool;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Map, Value};
use std::sync::Arc;

/// One handler, cloned for every request (the SDK builds a service per stateless request).
#[derive(Clone)]
pub(crate) struct CarmyMcp {
    engine: Arc<Engine>,
    config: Arc<McpConfig>,
}

impl CarmyMcp {
    pub(crate) fn new(engine: Arc<Engine>, config: McpConfig) -> Self {
        Self {
            engine,
            config: Arc::new(config),
        }
    }

    /// The tools whose annotations say read-only, named in texts that advise checking.
    fn read_tools(&self) -> Vec<String> {
        self.engine
            .tools()
            .iter()
            .filter(|tool| tool.annotations().and_then(|a| a.read_only_hint) == Some(true))
            .map(|tool| tool.name().to_owned())
            .collect()
    }
}

/// A Carmy tool as MCP lists it: name, description, input schema (with the request id
/// argument `key`, docs/semantics.md §11), annotations.
fn listed(tool: &dyn CarmyTool, key: Option<&KeyArgument>) -> Tool {
    let schema = match key.map_or_else(
        || tool.input_schema().clone(),
        |key| listed_schema(tool.input_schema(), key),
    ) {
        Value::Object(schema) => schema,
        _ => Map::new(),
    };
    let description = Some(tool.description().to_owned()).filter(|text| !text.is_empty());
    let mut listed =
        Tool::new_with_raw(tool.name().to_owned(), description.map(Into::into), schema);
    if let Some(hints) = tool.annotations() {
        let annotations = ToolAnnotations::from_raw(
            hints.title.clone(),
            hints.read_only_hint,
            hints.destructive_hint,
            hints.idempotent_hint,
            hints.open_world_hint,
        );
        listed = listed.with_annotations(annotations);
    }
    listed
}

impl ServerHandler for CarmyMcp {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        info.server_info = Implementation::new("carmy", env!("CARGO_PKG_VERSION"));
        let name = &self.engine.key_argument_config().name;
        let name = if name.is_empty() { "request_id" } else { name };
        info.instructions = Some(INSTRUCTIONS.replace("request_id", name));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.engine.tools();
        Ok(ListToolsResult::with_all_items(
            tools
                .iter()
                .map(|tool| self.listed(tool.as_ref()))
                .collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.engine
            .tools()
            .iter()
            .find(|tool| tool.name() == name)
            .map(|tool| self.listed(tool.as_ref()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .ok_or_else(|| {
                tracing::error!("an MCP request reached the handler without its caller");
                ErrorData::internal_error("internal error", None)
            })?;
        let mut meta = context.meta.0 .0.clone();
        if let Some(own) = request.meta.clone() {
            meta.extend(own.0 .0);
        }
        match prepare(&self.engine, &self.config, caller, &meta, request)? {
            Prepared::Answer(result) => Ok(with_source(result, None).into()),
            Prepared::Run(ready) => {
                let source = ready.source;
                self.run(ready)
                    .await
                    .map(|result| with_source(result, source).into())
            }
        }
    }
}

/// What `initialize` and `server/discover` tell the model about request ids (`request_id`
/// stands for the configured argument name).
pub(crate) const INSTRUCTIONS: &str = "Carmy runs these tools with retry safety: a tool that \
changes something takes a `request_id`, a random id you choose for each new action (a UUID). If \
you are not sure whether an action took effect (a timeout, an error, a lost answer), call the \
tool again with the same arguments and the same `request_id`: you get the first attempt's \
outcome and the action is never done twice.";

impl CarmyMcp {
    /// A tool as listed, with its request id argument; a tool whose own property collides with
    /// the argument (possible only for a tool that appeared after start) is listed without it,
    /// and its calls are refused with the collision's text.
    fn listed(&self, tool: &dyn CarmyTool) -> Tool {
        match self.engine.key_argument(tool) {
            Ok(key) => listed(tool, key.as_ref()),
            Err(collision) => {
                tracing::warn!(%collision, "tool listed without a request id argument");
                listed(tool, None)
            }
        }
    }

    /// Runs a prepared call; a call with a request id still running after
    /// [`McpConfig::answer_within`] is answered "still running" and runs on.
    async fn run(&self, ready: Ready) -> Result<CallToolResult, ErrorData> {
        let Ready { call, key, .. } = ready;
        let tool = call.tool().to_owned();
        let identity = call.key();
        let execution = self.engine.execute(call);
        let outcome = match &identity {
            Some(identity) => {
                match tokio::time::timeout(self.config.answer_within, execution).await {
                    Ok(outcome) => outcome,
                    Err(_) => {
                        let execution_id = match self.engine.lookup(identity).await {
                            Ok(record) => record.map(|record| record.execution_id),
                            Err(_) => None,
                        };
                        let retry_after = self.engine.running_retry_after(&tool);
                        return Ok(results::still_running(
                            execution_id.as_ref(),
                            retry_after,
                            key.as_deref(),
                        ));
                    }
                }
            }
            None => execution.await,
        };
        match outcome {
            Ok(answer) => Ok(results::from_answer(
                &answer,
                answer.expires_at,
                || self.read_tools(),
                key.as_deref(),
            )),
            Err(refusal) => results::from_refusal(refusal, &self.read_tools(), key.as_deref()),
        }
    }
}

/// Adds `source` (where the request id came from, or `null`) to the result's
/// `_meta["io.carmy/execution"]`.
fn with_source(mut result: CallToolResult, source: Option<IdSource>) -> CallToolResult {
    if let Some(execution) = result
        .meta
        .as_mut()
        .and_then(|meta| meta.0.get_mut(EXECUTION_META))
        .and_then(Value::as_object_mut)
    {
        execution.insert(
            "source".to_owned(),
            source.map_or(Value::Null, |source| {
                Value::String(source.as_str().to_owned())
            }),
        );
    }
    result
}
