//! Tools: named async handlers with a JSON Schema for their arguments.
//!
//! A [`Tool`] is object-safe and used as `Arc<dyn Tool>`, so an in-process Rust function
//! ([`FnTool`]) and a tool that forwards to an upstream HTTP service fit the same slot.

use crate::outcome::ExecutionId;
use serde_json::Value;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

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
    /// This execution's id.
    pub execution_id: ExecutionId,
}

/// A tool's own failure, recorded as `status: "failed"` with `error: {code, message}` and replayed
/// like any other outcome (docs/semantics.md §4).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ToolError {
    /// Machine-readable code, e.g. `TOOL_ERROR`, `NOT_FOUND`.
    pub code: String,
    /// Human-readable explanation.
    pub message: String,
}

impl ToolError {
    /// A tool error with the given code and message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
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

    /// Its own deadline; `None` uses the runtime default (`CARMY_TOOL_TIMEOUT_MS`).
    fn timeout(&self) -> Option<Duration> {
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

    fn call(&self, context: ToolContext, arguments: Value) -> ToolFuture<'_> {
        (self.handler)(context, arguments)
    }
}

/// A tool together with its compiled argument schema.
pub(crate) struct RegisteredTool {
    pub(crate) tool: Arc<dyn Tool>,
    validator: jsonschema::Validator,
}

impl RegisteredTool {
    /// Checks `arguments` against the schema; the error lists the first few violations.
    pub(crate) fn validate(&self, arguments: &Value) -> Result<(), String> {
        let problems: Vec<String> = self
            .validator
            .iter_errors(arguments)
            .take(5)
            .map(|error| {
                let at = error.instance_path().to_string();
                if at.is_empty() {
                    error.to_string()
                } else {
                    format!("{at}: {error}")
                }
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

/// Why a tool could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum ToolRegistryError {
    /// Two tools share a name.
    #[error("tool {0:?} is registered twice")]
    Duplicate(String),
    /// A tool's schema is not a valid JSON Schema.
    #[error("tool {name:?} has an invalid argument schema: {reason}")]
    InvalidSchema {
        /// The tool.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

/// The tools a runtime serves, by name.
#[derive(Default)]
pub(crate) struct ToolRegistry {
    tools: BTreeMap<String, RegisteredTool>,
}

impl ToolRegistry {
    pub(crate) fn insert(&mut self, tool: Arc<dyn Tool>) -> Result<(), ToolRegistryError> {
        let name = tool.name().to_owned();
        if self.tools.contains_key(&name) {
            return Err(ToolRegistryError::Duplicate(name));
        }
        let validator = jsonschema::validator_for(tool.input_schema()).map_err(|error| {
            ToolRegistryError::InvalidSchema {
                name: name.clone(),
                reason: error.to_string(),
            }
        })?;
        self.tools.insert(name, RegisteredTool { tool, validator });
        Ok(())
    }

    pub(crate) fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.tools.get(name)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<dyn Tool>> {
        self.tools.values().map(|registered| &registered.tool)
    }
}
