//! Tools: named async handlers with a JSON Schema for their arguments.
//!
//! A [`Tool`] is object-safe and used as `Arc<dyn Tool>`, so an in-process Rust function
//! ([`FnTool`]) and a tool that forwards to an upstream HTTP service fit the same slot.

pub use crate::key_argument::KeySetting;
use crate::outcome::ExecutionId;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub use crate::registry::ToolRegistryError;

/// The boxed future a tool call returns: the result value, or a [`ToolError`] recorded as
/// `status: "failed"`.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send + 'a>>;

/// What a tool knows about the call it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolContext {
    /// The authenticated principal (docs/semantics.md §6). Tools keep principals' data apart with
    /// it.
    pub principal: String,
    /// The session (`default` when the call named none).
    pub session_id: String,
    /// The caller's `request_id`, if any.
    pub request_id: Option<String>,
    /// This execution's id. The same on every attempt of one execution, so a tool that
    /// forwards it as an idempotency key lets its upstream deduplicate (docs/semantics.md §10).
    pub execution_id: ExecutionId,
    /// The W3C Trace Context `traceparent` the call arrived with (already checked by
    /// [`crate::trace::parse_traceparent`]; `None` when absent or malformed). Transport-neutral:
    /// the HTTP front takes it from the `traceparent` header, other fronts from where their
    /// protocol carries it. A tool that calls an upstream forwards it unchanged as that
    /// request's `traceparent` (docs/semantics.md §13), so the upstream joins the caller's trace.
    pub traceparent: Option<String>,
    /// How long the engine lets this run take (the tool's own timeout, else
    /// `CARMY_TOOL_TIMEOUT_MS`): past it the run is stopped and recorded `timed_out`. A tool that
    /// waits on something it can name (an upstream task) may stop just before and return a
    /// [`ToolErrorKind::TimedOut`] error that says what it was waiting on.
    pub timeout: Duration,
}

/// A tool's own failure (docs/semantics.md §4). What happens to it depends on its
/// [`ToolErrorKind`]: by default it is recorded as `status: "failed"` with `error: {code,
/// message}` and replayed like any other outcome.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    /// Machine-readable code, e.g. `TOOL_ERROR`, `NOT_FOUND`, `UPSTREAM_UNAVAILABLE`.
    pub code: String,
    /// Human-readable explanation.
    pub message: String,
    /// What the failure says about the tool's effect.
    pub kind: ToolErrorKind,
    /// Structured detail recorded beside `code` and `message` as `error.details`, e.g. an
    /// upstream's status and body (docs/semantics.md §10).
    pub details: Option<Value>,
}

/// What a [`ToolError`] says about the tool's effect (docs/semantics.md §4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolErrorKind {
    /// The tool finished and failed; recorded `failed`, replayed.
    #[default]
    Failed,
    /// The effect may have happened (e.g. a commit whose acknowledgement was lost): recorded
    /// `failed` with `error.effect = "unknown"`, replayed, never re-run.
    EffectUnknown,
    /// The effect provably did not happen (e.g. the upstream refused the connection): nothing is
    /// recorded, the reservation is released and the caller is told to retry the same call,
    /// after `retry_after` when given.
    NotExecuted {
        /// How long the caller should wait before retrying (`Retry-After`), if known.
        retry_after: Option<Duration>,
    },
    /// The tool stopped waiting at its deadline ([`ToolContext::timeout`]) on work that may
    /// still be going on (e.g. an upstream MCP task still `working`): recorded `timed_out`
    /// with `error.effect = "unknown"` and the tool's `details` (what to reconcile with),
    /// replayed, never re-run.
    TimedOut,
}

impl ToolError {
    /// A failure recorded as `failed` and replayed ([`ToolErrorKind::Failed`]).
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            kind: ToolErrorKind::Failed,
            details: None,
        }
    }

    /// The effect may have happened ([`ToolErrorKind::EffectUnknown`]): recorded, replayed,
    /// never re-run, and the record says so.
    pub fn effect_unknown(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind: ToolErrorKind::EffectUnknown,
            ..Self::new(code, message)
        }
    }

    /// The effect provably did not happen ([`ToolErrorKind::NotExecuted`]): the reservation is
    /// released and nothing is recorded. Only for failures where nothing can have reached the
    /// effect (a connection that was never established, an upstream status documented as
    /// "nothing happened"); when in doubt use [`ToolError::effect_unknown`].
    pub fn not_executed(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind: ToolErrorKind::NotExecuted { retry_after: None },
            ..Self::new(code, message)
        }
    }

    /// The deadline passed while the work may still be going on ([`ToolErrorKind::TimedOut`]).
    pub fn timed_out(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind: ToolErrorKind::TimedOut,
            ..Self::new(code, message)
        }
    }

    /// Sets the pause a [`ToolError::not_executed`] caller should wait before retrying; ignored
    /// for other kinds.
    #[must_use]
    pub fn with_retry_after(mut self, pause: Duration) -> Self {
        if let ToolErrorKind::NotExecuted { retry_after } = &mut self.kind {
            *retry_after = Some(pause);
        }
        self
    }

    /// Sets the structured detail recorded as `error.details`.
    #[must_use]
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }
}

/// MCP-style hints about a tool's behaviour, shown by `GET /v1/tools` and `tools/list`
/// (docs/semantics.md §10). Hints only: Carmy's guarantees never depend on them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolAnnotations {
    /// A human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not change its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may destroy or overwrite data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling it twice with the same arguments has no further effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool reaches entities outside the gateway (the internet, other services).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

/// What the next attempt does with an execution of the tool whose owner's lease lapsed before an
/// outcome was recorded (docs/semantics.md §12.7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnInterrupted {
    /// `EXECUTION_UNCERTAIN` `interrupted` until someone resolves or releases it (§4: never
    /// re-run automatically). The default.
    #[default]
    Uncertain,
    /// The next attempt takes the execution over and runs the tool again: same `execution_id`
    /// (so an upstream sees the same idempotency key), `attempt` incremented, an audit row; at
    /// most one attempt takes over. Accepted only for a tool whose annotations say read-only
    /// or idempotent, or that sends the execution id as an idempotency key
    /// ([`Tool::sends_idempotency_key`]); the registry refuses it otherwise.
    Rerun,
}

impl OnInterrupted {
    /// `uncertain` or `rerun`, as in the tools file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Uncertain => "uncertain",
            Self::Rerun => "rerun",
        }
    }
}

/// A named, schema-described async operation an agent can call.
pub trait Tool: Send + Sync + 'static {
    /// The name agents call it by (the body's `tool`). Part of the fingerprint.
    fn name(&self) -> &str;

    /// One line for `GET /v1/tools`.
    fn description(&self) -> &str {
        ""
    }

    /// The JSON Schema its `arguments` object must satisfy. A call whose arguments fail it is
    /// rejected with 400 before anything is reserved (docs/semantics.md §3).
    fn input_schema(&self) -> &Value;

    /// Checks beyond the schema that the arguments must pass before anything is reserved, e.g.
    /// an HTTP tool's path arguments (docs/semantics.md §10). Called by the engine right after
    /// the schema check; an `Err` is a 400 `INVALID_REQUEST` with that message, and nothing is
    /// reserved (docs/semantics.md §3). Must be stateless and cheap. The default accepts all.
    ///
    /// # Errors
    /// A message naming the argument and what is wrong with it.
    fn check_arguments(&self, arguments: &Value) -> Result<(), String> {
        let _ = arguments;
        Ok(())
    }

    /// Its own deadline; `None` uses the runtime default (`CARMY_TOOL_TIMEOUT_MS`).
    fn timeout(&self) -> Option<Duration> {
        None
    }

    /// Its behaviour hints, if it declares any.
    fn annotations(&self) -> Option<&ToolAnnotations> {
        None
    }

    /// What happens to an execution whose owner died before recording an outcome
    /// (docs/semantics.md §12.7). The default keeps it uncertain.
    fn on_interrupted(&self) -> OnInterrupted {
        OnInterrupted::Uncertain
    }

    /// Whether every run passes the execution id to its upstream as an idempotency key, so
    /// that the upstream itself deduplicates a second run (docs/semantics.md §10); makes
    /// [`OnInterrupted::Rerun`] acceptable. The default says no.
    fn sends_idempotency_key(&self) -> bool {
        false
    }

    /// Whether the caller runs this tool itself ([`crate::held::ClientTool`], docs/semantics.md
    /// §16): the engine then never runs it, and answers calls of it only through
    /// [`Engine::hold`](crate::engine::Engine::hold). The default says no.
    fn held_by_client(&self) -> bool {
        false
    }

    /// Whether an MCP client that declared the tasks extension gets a task for every call of
    /// it at once (`task = "always"` in the tools file), rather than only for calls still
    /// running after `CARMY_MCP_TASK_AFTER_MS` (docs/semantics.md §11, "Tasks"). The default
    /// says no.
    fn mcp_task_always(&self) -> bool {
        false
    }

    /// Its choice about the request id a model holds (docs/semantics.md §11); the default
    /// follows the gateway's settings and the read-only hint.
    fn key_setting(&self) -> KeySetting {
        KeySetting::default()
    }

    /// The tool's reconciliation probe (the tools file's `[tools.reconcile]`,
    /// docs/semantics.md §12.10): how to ask the upstream whether an interrupted
    /// execution's effect happened. `None` (the default): interrupted executions wait for a
    /// person.
    fn probe(&self) -> Option<&dyn crate::reconcile::Probe> {
        None
    }

    /// What of its arguments is hidden before they are kept with an execution (the tools
    /// file's `redact_arguments`, docs/semantics.md §8.5). `None` (the default) hides nothing.
    fn redaction(&self) -> Option<&crate::arguments::Redaction> {
        None
    }

    /// Runs the tool. The future runs detached from the HTTP connection; it is dropped when the
    /// deadline passes (recorded `timed_out`) or the execution is cancelled (`cancelled`).
    fn call(&self, context: ToolContext, arguments: Value) -> ToolFuture<'_>;
}

type BoxedHandler = dyn Fn(ToolContext, Value) -> ToolFuture<'static> + Send + Sync;

/// A tool made from an async closure: `FnTool::new("echo", schema, |_ctx, args| async move {
/// Ok(args) })`.
pub struct FnTool {
    name: String,
    description: String,
    schema: Value,
    timeout: Option<Duration>,
    annotations: Option<ToolAnnotations>,
    on_interrupted: OnInterrupted,
    key_setting: KeySetting,
    redaction: Option<crate::arguments::Redaction>,
    handler: Box<BoxedHandler>,
}

impl FnTool {
    /// A tool named `name` whose arguments must match `schema`, served by `handler`.
    pub fn new<F, Fut>(name: impl Into<String>, schema: Value, handler: F) -> Self
    where
        F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        Self {
            name: name.into(),
            description: String::new(),
            schema,
            timeout: None,
            annotations: None,
            on_interrupted: OnInterrupted::Uncertain,
            key_setting: KeySetting::default(),
            redaction: None,
            handler: Box::new(move |context, arguments| Box::pin(handler(context, arguments))),
        }
    }

    /// Sets the description shown by `GET /v1/tools`.
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Sets this tool's own deadline.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the behaviour hints shown by `GET /v1/tools`.
    #[must_use]
    pub fn with_annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = Some(annotations);
        self
    }

    /// Sets the takeover policy ([`OnInterrupted`]); `Rerun` needs annotations that say
    /// read-only or idempotent, or registration fails.
    #[must_use]
    pub fn with_on_interrupted(mut self, policy: OnInterrupted) -> Self {
        self.on_interrupted = policy;
        self
    }
}

impl FnTool {
    /// Sets its choice about the request id a model holds (docs/semantics.md §11).
    #[must_use]
    pub fn with_key_setting(mut self, setting: KeySetting) -> Self {
        self.key_setting = setting;
        self
    }

    /// Sets what of its arguments is hidden before they are kept (docs/semantics.md §8.5).
    #[must_use]
    pub fn with_redaction(mut self, redaction: crate::arguments::Redaction) -> Self {
        self.redaction = Some(redaction);
        self
    }
}

impl Tool for FnTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> &Value {
        &self.schema
    }

    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    fn annotations(&self) -> Option<&ToolAnnotations> {
        self.annotations.as_ref()
    }

    fn on_interrupted(&self) -> OnInterrupted {
        self.on_interrupted
    }

    fn key_setting(&self) -> KeySetting {
        self.key_setting.clone()
    }

    fn redaction(&self) -> Option<&crate::arguments::Redaction> {
        self.redaction.as_ref()
    }

    fn call(&self, context: ToolContext, arguments: Value) -> ToolFuture<'_> {
        (self.handler)(context, arguments)
    }
}
