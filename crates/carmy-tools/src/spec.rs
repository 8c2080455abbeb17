//! The validated tools file: what [`crate::load`] returns and the tools are built from
//! (docs/semantics.md §10). Header values are marked sensitive and never printed.

use crate::secret::Secret;
use crate::template::UrlTemplate;
use carmy::key_argument::KeySetting;
use carmy::{OnInterrupted, ToolAnnotations};
use reqwest::header::{HeaderName, HeaderValue};
use reqwest::Method;
use serde_json::Value;
use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// The idempotency header sent when a tool names none.
pub const DEFAULT_IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// A whole tools file, validated.
#[derive(Debug)]
pub struct ToolsConfig {
    /// Where it was read from.
    pub file: PathBuf,
    /// Whether the built-in example tools are served too.
    pub example_tools: bool,
    /// The `[[tools]]` entries.
    pub http_tools: Vec<HttpToolSpec>,
    /// The `[[mcp_servers]]` entries.
    pub mcp_servers: Vec<McpServerSpec>,
    /// The `[[client_tools]]` entries (docs/semantics.md §16).
    pub client_tools: Vec<ClientToolSpec>,
}

/// One tool its caller runs itself (docs/semantics.md §16).
#[derive(Debug, Clone)]
pub struct ClientToolSpec {
    /// The name callers reserve it by.
    pub name: String,
    /// One line for `GET /v1/tools`.
    pub description: String,
    /// The arguments' JSON Schema.
    pub input_schema: Value,
    /// Behaviour hints.
    pub annotations: Option<ToolAnnotations>,
    /// What of the arguments is hidden before they are kept (`redact_arguments`,
    /// docs/semantics.md §8.5).
    pub redaction: Option<carmy::arguments::Redaction>,
}

/// One HTTP tool.
#[derive(Debug, Clone)]
pub struct HttpToolSpec {
    /// The name agents call it by.
    pub name: String,
    /// One line for `GET /v1/tools`.
    pub description: String,
    /// The HTTP method.
    pub method: Method,
    /// The URL template.
    pub url: UrlTemplate,
    /// Its deadline; `None` uses the gateway's default.
    pub timeout: Option<Duration>,
    /// The header carrying the execution id, or `None` to send none.
    pub idempotency_header: Option<HeaderName>,
    /// Statuses documented as "nothing happened" (400 to 599).
    pub not_executed_statuses: BTreeSet<u16>,
    /// Statuses recorded with effect unknown besides every 5xx and 408 (400 to 599, none of
    /// them in `not_executed_statuses`).
    pub effect_unknown_statuses: BTreeSet<u16>,
    /// The arguments' JSON Schema.
    pub input_schema: Value,
    /// Behaviour hints.
    pub annotations: Option<ToolAnnotations>,
    /// Largest upstream body kept, in bytes; `None` uses the gateway's `CARMY_MAX_RESULT_BYTES`.
    pub max_response_bytes: Option<usize>,
    /// The takeover policy (docs/semantics.md §12.7).
    pub on_interrupted: OnInterrupted,
    /// `task = "always"`: an MCP client that declared tasks gets a task at once
    /// (docs/semantics.md §11, "Tasks").
    pub task_always: bool,
    /// The request id argument a model holds over MCP (docs/semantics.md §11).
    pub key: KeySetting,
    /// Headers sent on every request.
    pub headers: Vec<Header>,
    /// The reconciliation probe (`[tools.reconcile]`, docs/semantics.md §12.10), if any.
    pub reconcile: Option<ProbeSpec>,
    /// What of the arguments is hidden before they are kept (`redact_arguments`,
    /// docs/semantics.md §8.5), if anything.
    pub redaction: Option<carmy::arguments::Redaction>,
}

/// A validated `[tools.reconcile]`: how to ask whether an execution's effect happened, and
/// what the answer means.
#[derive(Debug, Clone)]
pub struct ProbeSpec {
    /// What is asked: an HTTP request, or a call of another configured read-only tool.
    pub ask: ProbeAsk,
    /// Statuses meaning absent (default 404): the HTTP probe's answer, or the upstream status
    /// of the called tool's error.
    pub absent_status: BTreeSet<u16>,
    /// Whether absent proves the effect did not happen (`absent_means = "not_executed"`).
    pub absent_not_executed: bool,
    /// The probe's deadline (default 2 s).
    pub timeout: Duration,
}

/// What a probe asks (docs/semantics.md §12.10).
#[derive(Debug, Clone)]
pub enum ProbeAsk {
    /// `method` and `url`: one HTTP request.
    Http {
        /// The HTTP method (default GET).
        method: Method,
        /// The URL template (placeholders in the path or the query).
        url: UrlTemplate,
        /// Statuses meaning found (default 200).
        found_status: BTreeSet<u16>,
        /// Headers of the probe's request (sensitive).
        headers: Vec<Header>,
    },
    /// `tool` and `arguments`: a call of another tool the gateway serves, annotated read-only
    /// (`readOnlyHint = true`), outside any execution.
    Tool {
        /// The tool called (a `[[tools]]` entry or an MCP server's tool, prefix included).
        tool: String,
        /// Its arguments, `{execution_id}`, `{request_id}` and `{argument}` placeholders in
        /// their strings.
        arguments: Value,
        /// The JSON Pointer into the result that must hold a value for "found".
        found_pointer: String,
    },
}

impl ProbeSpec {
    /// The values of the `${NAME}` references of an HTTP probe's headers (none for a tool
    /// probe, whose tool masks its own).
    pub fn secrets(&self) -> Vec<Secret> {
        match &self.ask {
            ProbeAsk::Http { headers, .. } => headers
                .iter()
                .flat_map(|header| header.secrets.iter().cloned())
                .collect(),
            ProbeAsk::Tool { .. } => Vec::new(),
        }
    }
}

impl HttpToolSpec {
    /// The values of the `${NAME}` references of its headers, masked in every answer.
    pub fn secrets(&self) -> Vec<Secret> {
        self.headers
            .iter()
            .flat_map(|header| header.secrets.iter().cloned())
            .collect()
    }

    /// Whether an answer with `status` leaves the effect unknown (docs/semantics.md §10): every
    /// 5xx and 408 unless listed in `not_executed_statuses`, and every status listed in
    /// `effect_unknown_statuses`. Such a status does not prove the effect absent.
    pub fn effect_unknown_status(&self, status: u16) -> bool {
        if self.not_executed_statuses.contains(&status) {
            return false;
        }
        status >= 500 || status == 408 || self.effect_unknown_statuses.contains(&status)
    }
}

/// A configured header: its value expanded and marked sensitive (its `Debug` hides it).
#[derive(Clone)]
pub struct Header {
    /// The header's name.
    pub name: HeaderName,
    /// The value to send (sensitive).
    pub value: HeaderValue,
    /// The environment variables the value was made from (for the tool table).
    pub variables: Vec<String>,
    /// Their values, masked wherever an upstream echoes them back ([`crate::secret::mask`]).
    pub secrets: Vec<Secret>,
}

impl fmt::Debug for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.masked())
    }
}

impl Header {
    /// The value as the tool table shows it: `***`, with the variables it came from.
    pub fn masked(&self) -> String {
        if self.variables.is_empty() {
            "***".to_owned()
        } else {
            let names: Vec<String> = self.variables.iter().map(|v| format!("${{{v}}}")).collect();
            format!("*** (from {})", names.join(", "))
        }
    }
}

/// One upstream MCP server.
#[derive(Debug, Clone)]
pub struct McpServerSpec {
    /// Its name in logs and errors.
    pub name: String,
    /// How it is reached.
    pub transport: McpTransport,
    /// Put before every imported tool's name.
    pub prefix: String,
    /// Its tools' deadline; `None` uses the gateway's default.
    pub timeout: Option<Duration>,
    /// An argument that also receives the execution id, if configured.
    pub idempotency_argument: Option<String>,
    /// The takeover policy of every imported tool (docs/semantics.md §12.7).
    pub on_interrupted: OnInterrupted,
    /// `task = "always"` for every imported tool (docs/semantics.md §11, "Tasks").
    pub task_always: bool,
    /// The request id argument of every imported tool (docs/semantics.md §11).
    pub key: KeySetting,
    /// What of every imported tool's arguments is hidden before they are kept
    /// (`redact_arguments`, docs/semantics.md §8.5).
    pub redaction: Option<carmy::arguments::Redaction>,
    /// The values of the `${NAME}` references of its headers or environment, masked in
    /// everything its tools answer ([`crate::secret::mask`]).
    pub secrets: Vec<Secret>,
}

/// How an MCP server is reached.
#[derive(Debug, Clone)]
pub enum McpTransport {
    /// Streamable HTTP at `url`, with `headers` on every request.
    Http {
        /// The endpoint.
        url: url::Url,
        /// Sent on every request (sensitive).
        headers: Vec<Header>,
    },
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Its extra environment (values secret).
        env: Vec<(String, Secret)>,
    },
}
