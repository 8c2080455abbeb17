//! The tools file as written (`CARMY_TOOLS_FILE`, TOML): serde types with the key names of
//! docs/semantics.md §10, unknown keys refused. [`crate::load`] validates them into
//! [`crate::ToolsConfig`].
//!
//! ```toml
//! example_tools = false            # keep the built-in example tools beside these
//!
//! [[tools]]
//! name = "create_payment"
//! description = "Charge a customer"
//! kind = "http"                    # the default
//! method = "POST"                  # GET, POST, PUT, PATCH, DELETE; default POST
//! url = "https://payments.internal/v1/customers/{customer}/payments"
//! timeout_ms = 10000
//! idempotency_header = "Idempotency-Key"   # default; "" sends none
//! not_executed_statuses = [429]
//! effect_unknown_statuses = [409]  # besides every 5xx and 408, recorded as effect unknown
//! input_schema = { type = "object", required = ["customer"] }   # or input_schema_file
//! annotations = { readOnlyHint = false }
//! max_response_bytes = 1048576     # default: the gateway's CARMY_MAX_RESULT_BYTES
//! on_interrupted = "uncertain"     # default; "rerun" re-runs an interrupted execution
//! key_argument = "request_id"      # the request id a model holds over MCP; "" for none
//! key_required = false             # default: CARMY_MCP_KEY_REQUIRED
//! task = "auto"                    # "always": an MCP client with tasks gets a task at once
//! redact_arguments = ["/card/number"]  # JSON pointers hidden before the arguments are kept; "all"
//! [tools.headers]
//! Authorization = "Bearer ${PAYMENTS_TOKEN}"
//! [tools.reconcile]                # optional: see [`RawReconcile`]
//! url = "https://payments.internal/v1/payments?idempotency_key={execution_id}"
//!
//! [[mcp_servers]]
//! name = "files"
//! url = "http://127.0.0.1:9001/mcp"        # Streamable HTTP, or command/args/env (stdio)
//! prefix = "files."
//! ```

use carmy::ToolAnnotations;
use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFile {
    /// Serve the built-in example tools too (default `false`).
    #[serde(default)]
    pub example_tools: bool,
    /// `[[tools]]`: HTTP tools.
    #[serde(default)]
    pub tools: Vec<Spanned<RawTool>>,
    /// `[[mcp_servers]]`: upstream MCP servers whose tools are imported.
    #[serde(default)]
    pub mcp_servers: Vec<Spanned<RawMcpServer>>,
    /// `[[client_tools]]`: tools their callers run themselves (docs/semantics.md §16).
    #[serde(default)]
    pub client_tools: Vec<Spanned<RawClientTool>>,
}

/// One `[[client_tools]]` entry: a tool its caller runs itself (a Python or TypeScript
/// function wrapped by Carmy's client), declared so that its calls are checked against a
/// schema and operators see it (docs/semantics.md §16).
///
/// ```toml
/// [[client_tools]]
/// name = "charge_card"
/// description = "Charge a customer's card"
/// input_schema = { type = "object", required = ["customer"] }   # or input_schema_file
/// on_interrupted = "uncertain"     # the default and, for now, the only policy
/// redact_arguments = ["/card/number"]   # as for [[tools]]: hidden before the arguments are kept
/// ```
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawClientTool {
    /// The name callers reserve it by.
    pub name: Spanned<String>,
    /// One line for `GET /v1/tools`.
    #[serde(default)]
    pub description: String,
    /// The arguments' JSON Schema, inline.
    pub input_schema: Option<Spanned<serde_json::Value>>,
    /// The arguments' JSON Schema, in a JSON file (relative to the tools file).
    pub input_schema_file: Option<Spanned<String>>,
    /// MCP-style behaviour hints.
    pub annotations: Option<ToolAnnotations>,
    /// What the next attempt does when the holder died: `uncertain` (the default; a holder's
    /// `reconcile` hook or an operator decides).
    pub on_interrupted: Option<Spanned<String>>,
    /// What of the arguments is hidden before they are kept, as for `[[tools]]`
    /// (docs/semantics.md §8.5).
    pub redact_arguments: Option<Spanned<toml::Value>>,
}

/// The kind of a `[[tools]]` entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolKind {
    /// A call is one HTTP request to the tool's `url`.
    #[default]
    Http,
}

/// One `[[tools]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTool {
    /// The name agents call it by.
    pub name: Spanned<String>,
    /// One line for `GET /v1/tools`.
    #[serde(default)]
    pub description: String,
    /// `http` (the default and, for now, the only kind).
    #[serde(default)]
    pub kind: ToolKind,
    /// `GET`, `POST`, `PUT`, `PATCH` or `DELETE`; `POST` when omitted.
    pub method: Option<Spanned<String>>,
    /// The URL template; `{name}` placeholders in the path are filled from the arguments.
    pub url: Spanned<String>,
    /// The tool's deadline in milliseconds (at least 1); the gateway's default when omitted.
    pub timeout_ms: Option<Spanned<u64>>,
    /// The header carrying the execution id; `Idempotency-Key` when omitted, `""` for none.
    pub idempotency_header: Option<Spanned<String>>,
    /// Statuses the upstream documents as "nothing happened": the reservation is released.
    pub not_executed_statuses: Option<Spanned<Vec<u16>>>,
    /// Statuses recorded with effect unknown besides every 5xx and 408 (e.g. 409 for an
    /// upstream that answers it after a partial write).
    pub effect_unknown_statuses: Option<Spanned<Vec<u16>>>,
    /// The arguments' JSON Schema, inline.
    pub input_schema: Option<Spanned<serde_json::Value>>,
    /// The arguments' JSON Schema, in a JSON file (relative to the tools file).
    pub input_schema_file: Option<Spanned<String>>,
    /// MCP-style behaviour hints.
    pub annotations: Option<ToolAnnotations>,
    /// Largest upstream body kept, in bytes (at least 1).
    pub max_response_bytes: Option<Spanned<u64>>,
    /// What the next attempt does when the owner of an execution died: `uncertain` (the
    /// default) or `rerun` (docs/semantics.md §12.7; needs an idempotency header or read-only /
    /// idempotent annotations).
    /// Read as text so that an unknown policy is reported naming the field.
    pub on_interrupted: Option<Spanned<String>>,
    /// `auto` (the default: an MCP call still running after `CARMY_MCP_TASK_AFTER_MS` becomes
    /// a task) or `always` (every call of a client that declared tasks is a task at once;
    /// docs/semantics.md §11, "Tasks").
    pub task: Option<Spanned<String>>,
    /// The request id argument a model holds over MCP (docs/semantics.md §11): its name (one
    /// of the tool's own properties is adopted), `""` for none; by default the gateway's
    /// `CARMY_MCP_KEY_ARGUMENT` unless the tool is annotated read-only.
    pub key_argument: Option<String>,
    /// Whether that argument is required (default `CARMY_MCP_KEY_REQUIRED`).
    pub key_required: Option<bool>,
    /// What of the arguments is hidden before they are kept with an execution
    /// (docs/semantics.md §8.5): a list of JSON pointers, or `"all"`. Read as a TOML value so
    /// that a wrong shape is reported naming the field.
    pub redact_arguments: Option<Spanned<toml::Value>>,
    /// Headers sent on every request; values may use `${NAME}` from the environment.
    #[serde(default)]
    pub headers: BTreeMap<String, Spanned<String>>,
    /// `[tools.reconcile]`: how to ask the upstream whether an interrupted execution's effect
    /// happened (docs/semantics.md §12.10).
    pub reconcile: Option<Spanned<RawReconcile>>,
}

/// A `[tools.reconcile]` table: an HTTP probe, or a call of another read-only tool.
///
/// ```toml
/// [tools.reconcile]
/// method = "GET"                  # default GET
/// url = "https://payments.internal/v1/payments?idempotency_key={execution_id}"
/// found_status = [200]            # default [200]: the body becomes the outcome's data
/// absent_status = [404]           # default [404]: the upstream says it did not happen
/// absent_means = "unknown"        # default; or "not_executed"
/// timeout_ms = 2000               # default 2000
/// [tools.reconcile.headers]
/// Authorization = "Bearer ${PAYMENTS_TOKEN}"
/// ```
///
/// or, instead of `method`, `url`, `found_status` and headers:
///
/// ```toml
/// [tools.reconcile]
/// tool = "get_payment"            # annotated readOnlyHint = true; found = a result, not an error
/// arguments = { key = "{execution_id}" }
/// absent_status = [404]           # the called tool's upstream status meaning absent
/// ```
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReconcile {
    /// `GET` (the default), `POST`, `PUT`, `PATCH` or `DELETE`.
    pub method: Option<Spanned<String>>,
    /// The probe's URL template: `{execution_id}`, `{request_id}` and the call's arguments, in
    /// the path or the query.
    pub url: Option<Spanned<String>>,
    /// Statuses meaning "the effect happened".
    pub found_status: Option<Spanned<Vec<u16>>>,
    /// Statuses meaning "the effect did not happen".
    pub absent_status: Option<Spanned<Vec<u16>>>,
    /// `unknown` (the default) or `not_executed`.
    pub absent_means: Option<Spanned<String>>,
    /// The probe's deadline in milliseconds (at least 1).
    pub timeout_ms: Option<Spanned<u64>>,
    /// Instead of `method` and `url`: a tool the gateway serves, annotated read-only, to call
    /// as the probe (a `[[tools]]` entry's name, or an MCP server's tool with its prefix).
    pub tool: Option<Spanned<String>>,
    /// That tool's arguments: `{execution_id}`, `{request_id}` and the call's arguments in
    /// their strings.
    pub arguments: Option<Spanned<toml::Value>>,
    /// With `tool`: the JSON Pointer (RFC 6901) into the called tool's result that must hold a
    /// value (not null, false or empty) for the probe to mean "found".
    pub found_pointer: Option<Spanned<String>>,
    /// Headers of the probe's request; values may use `${NAME}` (kept secret).
    #[serde(default)]
    pub headers: BTreeMap<String, Spanned<String>>,
}

/// One `[[mcp_servers]]` entry: `url` (Streamable HTTP) or `command` (stdio), not both.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMcpServer {
    /// The server's name in logs and errors.
    pub name: Spanned<String>,
    /// The Streamable HTTP endpoint.
    pub url: Option<Spanned<String>>,
    /// The program to start for stdio.
    pub command: Option<Spanned<String>>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Its environment (values may use `${NAME}`; kept secret).
    #[serde(default)]
    pub env: BTreeMap<String, Spanned<String>>,
    /// Put before every imported tool's name (default: none).
    #[serde(default)]
    pub prefix: String,
    /// Headers for Streamable HTTP (values may use `${NAME}`; kept secret).
    #[serde(default)]
    pub headers: BTreeMap<String, Spanned<String>>,
    /// The deadline of its tools in milliseconds; the gateway's default when omitted.
    pub timeout_ms: Option<Spanned<u64>>,
    /// An argument that also receives the execution id, for servers whose tools take a key.
    pub idempotency_argument: Option<String>,
    /// `uncertain` (the default) or `rerun` for every imported tool (docs/semantics.md §12.7;
    /// the execution id travels in `_meta` as the call's idempotency key).
    pub on_interrupted: Option<Spanned<String>>,
    /// `task` of every imported tool (as for `[[tools]]`, docs/semantics.md §11).
    pub task: Option<Spanned<String>>,
    /// `key_argument` of every imported tool (as for `[[tools]]`, docs/semantics.md §11).
    pub key_argument: Option<String>,
    /// `key_required` of every imported tool.
    pub key_required: Option<bool>,
    /// `redact_arguments` of every imported tool, as for `[[tools]]` (docs/semantics.md §8.5):
    /// a pointer that names nothing in a tool's call hides nothing there.
    pub redact_arguments: Option<Spanned<toml::Value>>,
}

/// Just enough of an entry to name it in an error about the rest of it.
#[derive(Deserialize)]
pub(crate) struct EntryName {
    #[serde(default)]
    pub(crate) name: Option<toml::Value>,
}

/// The entries' names and spans, read leniently, to say which entry a parse error is in.
#[derive(Deserialize)]
pub(crate) struct EntryNames {
    #[serde(default)]
    pub(crate) tools: Vec<Spanned<EntryName>>,
    #[serde(default)]
    pub(crate) mcp_servers: Vec<Spanned<EntryName>>,
    #[serde(default)]
    pub(crate) client_tools: Vec<Spanned<EntryName>>,
}
