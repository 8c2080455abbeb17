//! The SDK's server handler over the engine (docs/semantics.md §11): `tools/list` from
//! [`Engine::tools`] (a snapshot per request, since the set may change at run time) and
//! `tools/call` through [`Engine::execute`], which runs detached: a client that disconnects or
//! cancels stops the waiting, never the record.

use crate::identity::IdSource;
use crate::prepare::{prepare, Prepared, Ready};
use crate::results;
use crate::tasks;
use crate::texts::{KeyHold, KeyText};
use crate::transport::RequestFacts;
use crate::{McpConfig, EXECUTION_META};
use carmy::engine::Engine;
use carmy::key_argument::{listed_schema, KeyArgument};
use carmy::Tool as CarmyTool;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, CustomRequest,
    CustomResult, ErrorCode, ErrorData, GetTaskParams, GetTaskResult, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::time::Duration;

/// One handler, cloned for every request (the SDK builds a service per stateless request).
#[derive(Clone)]
pub(crate) struct CarmyMcp {
    engine: Arc<Engine>,
    config: Arc<McpConfig>,
    /// What `initialize` answers, made once: the SDK asks for it on every stateless request.
    info: Arc<ServerConfig>,
}

impl CarmyMcp {
    pub(crate) fn new(engine: Arc<Engine>, config: McpConfig) -> Self {
        let info = Arc::new(server_info(&engine));
        Self {
            engine,
            config: Arc::new(config),
            info,
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

/// What `initialize` answers: the capabilities, the implementation and the instructions with
/// the request id argument's name.
fn server_info(engine: &Engine) -> ServerConfig {
    let mut info = ServerConfig::new(
        ServerCapabilities::builder()
            .enable_tools()
            .enable_tasks()
            .build(),
    );
    info.server_info = Implementation::new("carmy", env!("CARGO_PKG_VERSION"));
    let name = &engine.key_argument_config().name;
    let name = if name.is_empty() { "request_id" } else { name };
    info.instructions = Some(INSTRUCTIONS.replace("request_id", name));
    info
}

impl ServerHandler for CarmyMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::clone(&self.info)
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
                // A tool its caller runs itself is reserved over HTTP only (§16).
                .filter(|tool| !tool.held_by_client())
                .map(|tool| self.listed(tool.as_ref()))
                .collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.engine
            .tools()
            .iter()
            .find(|tool| tool.name() == name && !tool.held_by_client())
            .map(|tool| self.listed(tool.as_ref()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let facts = request_facts(&context)?;
        let parts = context.extensions.get::<axum::http::request::Parts>();
        let tasks = context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.supports_tasks());
        let mut meta = context.meta.0 .0.clone();
        if let Some(own) = request.meta.clone() {
            meta.extend(own.0 .0);
        }
        // W3C Trace Context (docs/semantics.md §13): `_meta.traceparent`, as MCP clients carry
        // it, else the HTTP request's header.
        let traceparent = meta
            .get("traceparent")
            .and_then(serde_json::Value::as_str)
            .or_else(|| {
                parts
                    .and_then(|parts| parts.headers.get("traceparent"))
                    .and_then(|value| value.to_str().ok())
            })
            .map(str::to_owned);
        let prepared = match prepare(
            &self.engine,
            &self.config,
            facts,
            &meta,
            traceparent.as_deref(),
            request,
        ) {
            Ok(prepared) => prepared,
            // An input error (a malformed request id or session, a call the stateless checks
            // refuse) is a tool result the model reads (docs/semantics.md §11, SEP-1303).
            Err(error) if error.code == ErrorCode::INVALID_PARAMS => {
                Prepared::Answer(results::input_error(&error.message, None))
            }
            Err(error) => return Err(error),
        };
        match prepared {
            Prepared::Answer(result) => Ok(with_source(result, None).into()),
            Prepared::Run(ready) => {
                let source = ready.source;
                self.run(ready, tasks).await.map(|response| match response {
                    CallToolResponse::Complete(result) => with_source(result, source).into(),
                    other => other,
                })
            }
        }
    }

    /// `tasks/get`: the task of the caller's execution, read from the store (crate::tasks).
    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let facts = request_facts(&context)?;
        tasks::get(&self.engine, &facts.principal, &request.task_id, || {
            self.read_tools()
        })
        .await
    }

    /// `tasks/cancel`: Carmy's cancel of the caller's execution (crate::tasks).
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let facts = request_facts(&context)?;
        tasks::cancel(&self.engine, &facts.principal, &request.task_id).await
    }

    /// A request the SDK could not read as one it knows. For a method Carmy serves, its params
    /// had the wrong shape (a number as `taskId`, say): invalid params naming the shape, not
    /// "method not found"; any other method is not found.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        Err(match malformed_params(&request.method) {
            Some(shape) => ErrorData::invalid_params(
                format!("{} could not be read: {shape}", request.method),
                None,
            ),
            None => ErrorData::new(ErrorCode::METHOD_NOT_FOUND, request.method, None),
        })
    }
}

/// The params a served method takes, told to a caller whose params could not be read; `None`
/// for a method Carmy does not serve.
fn malformed_params(method: &str) -> Option<&'static str> {
    Some(match method {
        "tools/call" => "params.name must be a tool's name (a string) and params.arguments, when given, an object; list the tools with tools/list",
        "tools/list" => "params.cursor, when given, must be a string",
        "tasks/get" | "tasks/cancel" => "params.taskId must be a string: the taskId of the task your tools/call answered with",
        "initialize" => "params must carry protocolVersion (a string), capabilities (an object) and clientInfo (name and version)",
        "ping" => "ping takes no params",
        _ => return None,
    })
}

/// The [`RequestFacts`] the transport recorded for this request.
fn request_facts(context: &RequestContext<RoleServer>) -> Result<&RequestFacts, ErrorData> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<RequestFacts>())
        .ok_or_else(|| {
            tracing::error!("an MCP request reached the handler without its caller");
            ErrorData::internal_error("internal error", None)
        })
}

/// What `initialize` and `server/discover` tell the model about request ids (`request_id`
/// stands for the configured argument name).
pub(crate) const INSTRUCTIONS: &str = "Carmy runs these tools with retry safety: a tool that \
changes something takes a `request_id`, a new random UUID you generate for each new action \
(never one from an example). If \
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
    /// [`McpConfig::answer_within`] is answered "still running" and runs on. When the client
    /// declared the tasks extension (`tasks`), a call with a request id still running after
    /// [`McpConfig::task_after`] (at once for a tool whose calls are always tasks) is answered
    /// with a task whose id is its execution id (docs/semantics.md §11, "Tasks").
    async fn run(&self, ready: Ready, tasks: bool) -> Result<CallToolResponse, ErrorData> {
        let Ready {
            call,
            key,
            source,
            replay_window,
        } = ready;
        let tool = call.tool().to_owned();
        let identity = call.key();
        // A write without any request id runs unprotected: counted, and its answer tells the
        // model how to make a retry safe (docs/semantics.md §11).
        let unprotected = if identity.is_none() && self.is_write(&tool) {
            self.engine.metrics().mcp_unprotected_call(&tool);
            key.clone()
        } else {
            None
        };
        // A call without a request id has no record (docs/semantics.md §11): its answer names
        // no request id to repeat and no expiry.
        let key = key.filter(|_| identity.is_some());
        let key = key.as_deref().map(|name| KeyText {
            name,
            hold: key_hold(source, identity.as_ref()),
        });
        let execution = self.engine.execute(call);
        tokio::pin!(execution);
        let outcome = match &identity {
            Some(identity) => {
                let answer_within = self.config.answer_within;
                let always = tasks && self.task_always(&tool);
                let first = match (tasks, always) {
                    (true, true) => RESERVE_GRACE,
                    (true, false) => self.config.task_after,
                    (false, _) => answer_within,
                }
                .min(answer_within);
                match tokio::time::timeout(first, &mut execution).await {
                    // A model's unscoped id past its replay window: refused, never replayed.
                    Ok(Ok(answer)) if reused(&answer, replay_window).is_some() && key.is_some() => {
                        Ok(answer)
                    }
                    // A tool whose calls are always tasks: its recorded outcome is a task too.
                    Ok(Ok(answer)) if always => {
                        let id = &answer.result.result().execution_id;
                        return Ok(CallToolResponse::Task(tasks::created(id)));
                    }
                    Ok(outcome) => outcome,
                    Err(_) => {
                        let execution_id = self.running_execution(identity).await;
                        if let (true, Some(id)) = (tasks, &execution_id) {
                            return Ok(CallToolResponse::Task(tasks::created(id)));
                        }
                        let rest = answer_within.saturating_sub(first);
                        match tokio::time::timeout(rest, &mut execution).await {
                            Ok(outcome) => outcome,
                            Err(_) => {
                                let retry_after = self.engine.running_retry_after(&tool);
                                return Ok(results::still_running(
                                    execution_id.as_ref(),
                                    retry_after,
                                    key,
                                )
                                .into());
                            }
                        }
                    }
                }
            }
            None => execution.await,
        };
        if let (Ok(answer), Some(key)) = (&outcome, key) {
            if let (Some(age), Some(window)) = (reused(answer, replay_window), replay_window) {
                let id = &answer.result.result().execution_id;
                let refused = results::key_reused(key.name, id, age, window, &self.read_tools());
                return Ok(refused.into());
            }
        }
        let ran = outcome.is_ok();
        let result = self.answer(outcome, key)?;
        Ok(match unprotected {
            Some(key) if ran => results::unprotected(result, &key),
            _ => result,
        }
        .into())
    }

    /// Whether `tool` is a registered tool whose annotations do not say read-only: a write.
    fn is_write(&self, tool: &str) -> bool {
        self.engine.tools().iter().any(|candidate| {
            candidate.name() == tool
                && candidate.annotations().and_then(|a| a.read_only_hint) != Some(true)
        })
    }

    /// The execution holding `identity` while it runs, if the store could tell. An interrupted
    /// one (its probe may still release it, and this call then run as a new execution) or a
    /// finished one is not named: a task under its id would not follow this call.
    async fn running_execution(
        &self,
        identity: &carmy::store::IdempotencyKey,
    ) -> Option<carmy::ExecutionId> {
        match self.engine.lookup(identity).await {
            Ok(Some(record))
                if record.state
                    == carmy::store::RecordState::InFlight(
                        carmy::store::InFlightState::Running,
                    ) =>
            {
                Some(record.execution_id)
            }
            _ => None,
        }
    }

    /// Whether calls of `tool` are answered with a task at once (`task = "always"`).
    fn task_always(&self, tool: &str) -> bool {
        self.engine
            .tools()
            .iter()
            .any(|candidate| candidate.name() == tool && candidate.mcp_task_always())
    }

    /// The engine's answer as a `tools/call` result.
    fn answer(
        &self,
        outcome: Result<carmy::engine::Answer, carmy::engine::Refusal>,
        key: Option<KeyText<'_>>,
    ) -> Result<CallToolResult, ErrorData> {
        match outcome {
            Ok(answer) => Ok(results::from_answer(
                &answer,
                answer.expires_at,
                || self.read_tools(),
                key,
            )),
            Err(refusal) => results::from_refusal(refusal, &self.read_tools(), key),
        }
    }
}

/// How the model repeats a call whose request id came from `source` (docs/semantics.md §11):
/// an id from the client's `_meta` is named, so that the model adds it to the argument (the
/// argument comes before the client's `_meta`, and the model's next tool call has a new
/// tool-use id), unless the argument would refuse it as not random enough.
fn key_hold<'a>(
    source: Option<IdSource>,
    identity: Option<&'a carmy::store::IdempotencyKey>,
) -> KeyHold<'a> {
    match (source, identity) {
        (Some(IdSource::Argument), _) => KeyHold::Held,
        (Some(IdSource::ClientMeta), Some(identity))
            if carmy::random_id::check(
                &identity.request_id,
                &carmy::random_id::Vocabulary::none(),
            )
            .is_ok() =>
        {
            KeyHold::Given(&identity.request_id)
        }
        _ => KeyHold::Unseen,
    }
}

/// How long ago `answer`'s outcome was recorded when it replays a record older than `window`
/// (docs/semantics.md §11: a model's unscoped id replays only within its window); `None` for
/// an answer that is not such a replay.
fn reused(answer: &carmy::engine::Answer, window: Option<Duration>) -> Option<Duration> {
    let window = window?;
    if !answer.replayed {
        return None;
    }
    let age = (chrono::Utc::now() - answer.result.result().finished_at)
        .to_std()
        .unwrap_or_default();
    (age > window).then_some(age)
}

/// How long a call of a tool whose calls are always tasks may take to be reserved (or to end)
/// before it is answered; one not reserved by then is waited for as usual.
const RESERVE_GRACE: Duration = Duration::from_millis(200);

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
