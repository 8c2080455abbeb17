//! Upstream MCP servers (docs/semantics.md §10), reached with the official Rust SDK (`rmcp`)
//! as client over Streamable HTTP or stdio. Their tools are imported under the configured
//! prefix with schema, description and annotations ([`McpTool`]).
//!
//! [`McpUpstream::supervise`] keeps the connection: when it ends (a stdio child died, an HTTP
//! session failed), calls are refused with 503 `UPSTREAM_UNAVAILABLE` (nothing is sent) while it
//! reconnects with backoff (restarting the child); after every reconnect, on
//! `notifications/tools/list_changed` and every [`TOOLS_REFRESH`] the tool list is read again
//! and, when it changed, handed to the caller's callback (the gateway replaces the server's
//! tool group in the engine). The periodic read is what finds a Streamable HTTP server that
//! restarted: the SDK's transport opens a new session with it on its own (the old session's
//! 404), so the connection never reads as ended.

mod connect;
mod tool;

pub use tool::{McpTool, IDEMPOTENCY_META_KEY};

use crate::fields::check_name;
use crate::spec::McpServerSpec;
use carmy::{Tool, ToolAnnotations};
use rmcp::service::{Peer, RoleClient};
use serde_json::Value;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::Notify;

/// First pause before reconnecting; it doubles up to [`MAX_BACKOFF`].
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(100);
/// Longest pause between reconnection attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How often a connected server's tool list is read again (docs/semantics.md §10): a server
/// that restarted with other tools is served with them within this time.
pub const TOOLS_REFRESH: Duration = Duration::from_secs(10);

/// One configured MCP server and its current connection.
pub struct McpUpstream {
    spec: McpServerSpec,
    client: reqwest::Client,
    peer: RwLock<Option<Peer<RoleClient>>>,
    changed: Arc<Notify>,
    /// The last tool list handed on (as listed, in JSON), so an unchanged list is not.
    listed: std::sync::Mutex<Option<Value>>,
}

/// A live connection, owned by whoever waits for it to end.
pub struct Connection(connect::Running);

impl McpUpstream {
    /// Connects to the server once (for stdio, starts the child).
    ///
    /// # Errors
    /// A message naming the server and why it could not be reached.
    pub async fn start(
        spec: McpServerSpec,
        client: reqwest::Client,
    ) -> Result<(Arc<Self>, Connection), String> {
        let upstream = Arc::new(Self {
            spec,
            client,
            peer: RwLock::new(None),
            changed: Arc::new(Notify::new()),
            listed: std::sync::Mutex::new(None),
        });
        let running = upstream.connect().await?;
        Ok((upstream, Connection(running)))
    }

    /// The server's configured name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    async fn connect(&self) -> Result<connect::Running, String> {
        let running = connect::connect(&self.spec, &self.client, Arc::clone(&self.changed))
            .await
            .map_err(|error| format!("MCP server {:?}: {error}", self.spec.name))?;
        *self
            .peer
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(running.peer().clone());
        Ok(running)
    }

    /// The connected peer, unless the connection is down.
    fn peer(&self) -> Option<Peer<RoleClient>> {
        let peer = self
            .peer
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()?;
        (!peer.is_transport_closed()).then_some(peer)
    }

    /// Reads the server's tool list and makes Carmy tools of it. Tools whose prefixed name is
    /// not a valid tool name, or whose schema is not a valid JSON Schema, are skipped with a
    /// warning.
    ///
    /// # Errors
    /// The server is down or `tools/list` failed.
    pub async fn tools(self: &Arc<Self>) -> Result<Vec<Arc<dyn Tool>>, String> {
        Ok(self.list().await?.1)
    }

    /// [`McpUpstream::tools`], and the list as the server gave it (JSON), to compare.
    async fn list(self: &Arc<Self>) -> Result<(Value, Vec<Arc<dyn Tool>>), String> {
        let peer = self
            .peer()
            .ok_or_else(|| format!("MCP server {:?} is not connected", self.spec.name))?;
        let listed = peer.list_all_tools().await.map_err(|error| {
            format!(
                "MCP server {:?}: tools/list failed: {error}",
                self.spec.name
            )
        })?;
        let as_listed = serde_json::to_value(&listed).unwrap_or(Value::Null);
        *self
            .listed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(as_listed.clone());
        let mut tools: Vec<Arc<dyn Tool>> = Vec::with_capacity(listed.len());
        for tool in listed {
            let name = format!("{}{}", self.spec.prefix, tool.name);
            let input_schema = Value::Object((*tool.input_schema).clone());
            if let Err(problem) = check_name(&name) {
                tracing::warn!(server = %self.spec.name, %problem, "MCP tool skipped: bad name");
                continue;
            }
            if let Err(error) = jsonschema::validator_for(&input_schema) {
                tracing::warn!(server = %self.spec.name, tool = %name, %error, "MCP tool skipped: invalid input schema");
                continue;
            }
            let annotations = tool.annotations.as_ref().map(|hints| ToolAnnotations {
                title: hints.title.clone().or_else(|| tool.title.clone()),
                read_only_hint: hints.read_only_hint,
                destructive_hint: hints.destructive_hint,
                idempotent_hint: hints.idempotent_hint,
                open_world_hint: hints.open_world_hint,
            });
            tools.push(Arc::new(McpTool {
                upstream: Arc::clone(self),
                name,
                remote_name: tool.name.to_string(),
                description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
                input_schema,
                annotations,
            }));
        }
        Ok((as_listed, tools))
    }

    /// Reads the list again and hands it to `on_tools` when it differs from the last one read.
    async fn refresh(self: &Arc<Self>, on_tools: &(impl Fn(Vec<Arc<dyn Tool>>) + Send + Sync)) {
        let before = self
            .listed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        match self.list().await {
            Ok((listed, tools)) if before.as_ref() != Some(&listed) => {
                tracing::info!(server = %self.spec.name, tools = tools.len(), "MCP tool list changed");
                on_tools(tools);
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "could not refresh MCP tools"),
        }
    }

    /// Keeps the connection for as long as the process runs: on a list change, every
    /// [`TOOLS_REFRESH`] when the list differs, and after every reconnect, the new tool list
    /// goes to `on_tools`; when the connection ends, the server's
    /// tools are refused (503) until a reconnect, tried with backoff.
    pub fn supervise(
        self: Arc<Self>,
        connection: Connection,
        on_tools: impl Fn(Vec<Arc<dyn Tool>>) + Send + Sync + 'static,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut running = connection.0;
            loop {
                let ended =
                    running.wait_closed(&self.changed, TOOLS_REFRESH, || self.refresh(&on_tools));
                ended.await;
                *self
                    .peer
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
                tracing::warn!(server = %self.spec.name, "MCP server disconnected; its tools answer 503 until it is back");
                running = self.reconnect().await;
                match self.tools().await {
                    Ok(tools) => on_tools(tools),
                    Err(error) => {
                        tracing::warn!(%error, "could not list MCP tools after reconnecting");
                    }
                }
            }
        })
    }

    /// Reconnects, pausing [`INITIAL_BACKOFF`] doubling to [`MAX_BACKOFF`] between attempts.
    async fn reconnect(&self) -> connect::Running {
        let mut pause = INITIAL_BACKOFF;
        loop {
            tokio::time::sleep(pause).await;
            match self.connect().await {
                Ok(running) => {
                    tracing::info!(server = %self.spec.name, "MCP server reconnected");
                    return running;
                }
                Err(error) => {
                    tracing::warn!(%error, retry_in_ms = pause.as_millis() as u64, "MCP reconnect failed");
                }
            }
            pause = (pause * 2).min(MAX_BACKOFF);
        }
    }
}
