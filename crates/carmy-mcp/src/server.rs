//! The SDK's server handler over the engine (docs/semantics.md §11): `tools/list` from
//! [`Engine::tools`] (a snapshot per request, since the set may change at run time) and
//! `tools/call` through [`Engine::execute`], which runs detached: a client that disconnects or
//! cancels stops the waiting, never the record.

use crate::identity::call_identity;
use crate::results;
use crate::transport::Caller;
use crate::McpConfig;
use carmy::call::{CallValues, ValidatedCall};
use carmy::engine::Engine;
use carmy::Tool as CarmyTool;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
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

    /// The call as the engine takes it.
    fn validated(
        &self,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<ValidatedCall>, ErrorData> {
        let caller = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .ok_or_else(|| {
                tracing::error!("an MCP request reached the handler without its caller");
                ErrorData::internal_error("internal error", None)
            })?;
        let mut meta = context.meta.0 .0.clone();
        if let Some(own) = request.meta {
            meta.extend(own.0 .0);
        }
        let identity = call_identity(
            caller.idempotency_key.as_ref(),
            &meta,
            &self.config.request_id_meta_keys,
        )
        .map_err(|message| ErrorData::invalid_params(message, None))?;
        if identity.request_id.is_none() && self.config.require_request_id {
            return Ok(None);
        }
        let call = CallValues {
            tool: request.name.into_owned(),
            arguments: Value::Object(request.arguments.unwrap_or_default()),
            request_id: identity.request_id,
            session_id: identity.session_id,
            metadata: None,
        };
        ValidatedCall::from_values(caller.principal.clone(), call)
            .map(Some)
            .map_err(|rejected| ErrorData::invalid_params(rejected.into_message(), None))
    }
}

/// A Carmy tool as MCP lists it: name, description, input schema, annotations.
fn listed(tool: &dyn CarmyTool) -> Tool {
    let schema = match tool.input_schema() {
        Value::Object(schema) => schema.clone(),
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
        info.instructions = Some(
            "Carmy runs these tools with retry safety: repeating a call with the same request id \
             returns the recorded outcome instead of running it again."
                .to_owned(),
        );
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.engine.tools();
        Ok(ListToolsResult::with_all_items(
            tools.iter().map(|tool| listed(tool.as_ref())).collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.engine
            .tools()
            .iter()
            .find(|tool| tool.name() == name)
            .map(|tool| listed(tool.as_ref()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(call) = self.validated(request, &context)? else {
            return Ok(results::request_id_required().into());
        };
        match self.engine.execute(call).await {
            Ok(answer) => {
                let expires_at = self.engine.expires_at(answer.result.result());
                Ok(results::from_answer(&answer, expires_at, || self.read_tools()).into())
            }
            Err(refusal) => results::from_refusal(refusal, &self.read_tools()).map(Into::into),
        }
    }
}
