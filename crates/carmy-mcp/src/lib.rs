//! # carmy-mcp
//!
//! Carmy as an MCP server (docs/semantics.md §11): `/mcp` serves `tools/list` and `tools/call`
//! over Streamable HTTP with the official SDK (`rmcp`), stateless and with JSON responses, so any
//! replica answers any request. Calls go through the same engine as the HTTP API
//! ([`carmy::engine::Engine::execute`]), so an execution made over MCP replays over HTTP and the
//! other way round.
//!
//! Modules, one job each:
//! - `transport`: the HTTP side in front of the SDK: the principal by the API's one check of
//!   credentials (operator keys refused), the body
//!   limit, strict JSON, and `params.idempotencyKey` (which the SDK's types do not carry);
//! - `identity`: the request id and session of a `tools/call` (docs/semantics.md §11);
//! - `prepare`: a `tools/call` made ready for the engine, with the request id argument a model
//!   holds taken out of its arguments and checked;
//! - `server`: the SDK's server handler over the engine;
//! - `tasks`: MCP tasks (`tasks/get`, `tasks/cancel`) answered from the store;
//! - `results`: the one mapping of [`carmy::engine::Answer`] and [`carmy::engine::Refusal`] to MCP
//!   results and JSON-RPC errors;
//! - [`texts`]: the texts a language model reads, in one table.

mod identity;
mod prepare;
mod results;
mod server;
mod tasks;
pub mod texts;
mod transport;

use axum::Router;
use carmy::auth::Credentials;
use carmy::engine::Engine;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;
use std::time::Duration;

/// Where the MCP front is served.
pub const MCP_PATH: &str = "/mcp";

/// The origins a browser page may call `/mcp` from when `CARMY_MCP_ALLOWED_ORIGINS` is not set:
/// pages served from this machine, on any port (docs/semantics.md §11).
pub const DEFAULT_ALLOWED_ORIGINS: &[&str] = &[
    "http://localhost:*",
    "http://127.0.0.1:*",
    "http://[::1]:*",
    "https://localhost:*",
    "https://127.0.0.1:*",
    "https://[::1]:*",
];

/// The `_meta` keys read for a request id after `params.idempotencyKey` and
/// `_meta["io.carmy/request_id"]`, by default (`CARMY_MCP_REQUEST_ID_META`): keys that agent
/// clients already send with every tool call.
pub const DEFAULT_REQUEST_ID_META_KEYS: &[&str] = &["claudecode/toolUseId"];

/// The `_meta` keys whose value names the client's conversation, scoping the ids of the model
/// and of the client's `_meta` by default (`CARMY_MCP_CONVERSATION_META`, docs/semantics.md
/// §11): VS Code's (GitHub Copilot's) conversation id, and the session id in the turn metadata
/// that Codex sends with every tool call (`key[member]` reads a member of an object).
pub const DEFAULT_CONVERSATION_META_KEYS: &[&str] =
    &["vscode.conversationId", "x-codex-turn-metadata[session_id]"];

/// The default of [`McpConfig::argument_replay_window`]: ten minutes.
pub const DEFAULT_ARGUMENT_REPLAY_WINDOW: Duration = Duration::from_secs(600);

/// The `_meta` key of Carmy's own request id.
pub const REQUEST_ID_META: &str = "io.carmy/request_id";

/// The `_meta` key of the session.
pub const SESSION_ID_META: &str = "io.carmy/session_id";

/// The `_meta` key of every `tools/call` result: `{execution_id, status, replayed, expires_at,
/// source}` (`source`: where the request id came from, docs/semantics.md §11).
pub const EXECUTION_META: &str = "io.carmy/execution";

/// The default of [`McpConfig::answer_within`]: below the 60 s that common MCP clients wait.
pub const DEFAULT_ANSWER_WITHIN: Duration = Duration::from_secs(45);

/// The default of [`McpConfig::task_after`].
pub const DEFAULT_TASK_AFTER: Duration = Duration::from_secs(1);

/// Settings of the MCP front (docs/semantics.md §11).
#[derive(Clone, Debug)]
pub struct McpConfig {
    /// Allowed `Host` header values (`host` or `host:port`; `CARMY_MCP_ALLOWED_HOSTS`). `None`
    /// keeps the SDK's default (loopback names only); an empty list allows every host.
    pub allowed_hosts: Option<Vec<String>>,
    /// Allowed `Origin` header values (`scheme://host[:port]`, `:*` for any port;
    /// `CARMY_MCP_ALLOWED_ORIGINS`). `None` allows the loopback origins
    /// ([`DEFAULT_ALLOWED_ORIGINS`]); an empty list allows every origin. A request without
    /// `Origin` is never refused by this check.
    pub allowed_origins: Option<Vec<String>>,
    /// `_meta` keys read, in order, for a request id when neither `params.idempotencyKey` nor
    /// `_meta["io.carmy/request_id"]` is sent.
    pub request_id_meta_keys: Vec<String>,
    /// `_meta` keys read, in order, for the client's conversation (`key`, or `key[member]` for
    /// a member of an object; `CARMY_MCP_CONVERSATION_META`, default
    /// [`DEFAULT_CONVERSATION_META_KEYS`]): it scopes the model's and the client's ids when no
    /// `_meta["io.carmy/session_id"]` does (docs/semantics.md §11).
    pub conversation_meta_keys: Vec<String>,
    /// How long after its outcome was recorded a model's id that no session or conversation
    /// scopes still replays it (`CARMY_MCP_ARGUMENT_REPLAY_WINDOW`, default
    /// [`DEFAULT_ARGUMENT_REPLAY_WINDOW`]; `None`: as long as the record holds its identity).
    /// Later repeats are refused with `REQUEST_ID_REUSED` (docs/semantics.md §11).
    pub argument_replay_window: Option<Duration>,
    /// Refuse calls without a request id (`CARMY_MCP_REQUIRE_REQUEST_ID`) instead of running
    /// them unprotected.
    pub require_request_id: bool,
    /// How long a call with a request id may run before it is answered "still running, call
    /// again with the same request id" (`CARMY_MCP_ANSWER_WITHIN_MS`, default
    /// [`DEFAULT_ANSWER_WITHIN`]); the execution runs on and is recorded.
    pub answer_within: Duration,
    /// How long a call with a request id from a client that declared the tasks extension may
    /// run before it is answered with a task (`CARMY_MCP_TASK_AFTER_MS`, default
    /// [`DEFAULT_TASK_AFTER`]; docs/semantics.md §11, "Tasks"); the execution runs on.
    pub task_after: Duration,
    /// Largest request body, in bytes (the HTTP API's limit); larger bodies get 413.
    pub max_body_bytes: usize,
    /// How long a body may take to arrive once the headers did (the HTTP API's limit); slower
    /// bodies get 408.
    pub body_timeout: Duration,
}

impl Default for McpConfig {
    fn default() -> Self {
        Self {
            allowed_hosts: None,
            allowed_origins: None,
            request_id_meta_keys: DEFAULT_REQUEST_ID_META_KEYS
                .iter()
                .map(|key| (*key).to_owned())
                .collect(),
            conversation_meta_keys: DEFAULT_CONVERSATION_META_KEYS
                .iter()
                .map(|key| (*key).to_owned())
                .collect(),
            argument_replay_window: Some(DEFAULT_ARGUMENT_REPLAY_WINDOW),
            require_request_id: false,
            answer_within: DEFAULT_ANSWER_WITHIN,
            task_after: DEFAULT_TASK_AFTER,
            max_body_bytes: carmy::http::DEFAULT_MAX_BODY_BYTES,
            body_timeout: carmy::http::DEFAULT_BODY_TIMEOUT,
        }
    }
}

/// The router that serves [`MCP_PATH`] over `engine`, authenticating with `credentials` (the
/// application's, `carmy_http::App::credentials`: an API key acts as its principal, an operator key
/// is refused, docs/semantics.md §6). Merge it into the application's router
/// (`carmy_http::App::merge_routes`; carmy-mcp does not depend on carmy-http).
pub fn router(engine: Arc<Engine>, credentials: Credentials, config: McpConfig) -> Router {
    let mut sdk = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(config.max_body_bytes);
    if let Some(hosts) = &config.allowed_hosts {
        sdk = if hosts.is_empty() {
            sdk.disable_allowed_hosts()
        } else {
            sdk.with_allowed_hosts(hosts.clone())
        };
    }
    sdk = match &config.allowed_origins {
        None => sdk.with_allowed_origins(DEFAULT_ALLOWED_ORIGINS.iter().copied()),
        Some(origins) if origins.is_empty() => sdk.disable_allowed_origins(),
        Some(origins) => sdk.with_allowed_origins(origins.clone()),
    };
    let gate = transport::Gate::new(credentials, config.max_body_bytes, config.body_timeout);
    let handler = server::CarmyMcp::new(engine, config);
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        sdk,
    );
    Router::new()
        .route_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn_with_state(gate, transport::admit))
}
