//! Opening one MCP client connection with `rmcp`: Streamable HTTP through the shared reqwest
//! client with the configured (secret) headers (protocol 2026-07-28 when the server offers it,
//! else the `initialize` handshake), or a child process on stdio; and waiting for
//! it to end while relaying `notifications/tools/list_changed` and a periodic refresh.

use crate::spec::{McpServerSpec, McpTransport};
use rmcp::model::{
    ClientCapabilities, ClientConfig, ExtensionCapabilities, JsonObject, ProtocolVersion,
    TASKS_EXTENSION_ID,
};
use rmcp::service::{
    serve_client_with_lifecycle, ClientLifecycleMode, NotificationContext, Peer, RoleClient,
    RunningService,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// The client side of one connection: it wakes the supervisor when the tool list changes.
pub(super) struct Listener {
    changed: Arc<Notify>,
}

impl ClientHandler for Listener {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.changed.notify_one();
        std::future::ready(())
    }

    /// Declares the tasks extension: a server may answer a call with a task, which the tool
    /// follows to its end (docs/semantics.md §10, "Upstream tasks").
    fn get_info(&self) -> ClientConfig {
        // Not ClientCapabilities::builder: rmcp offers it only with its server feature, which
        // this crate does not need.
        let mut capabilities = ClientCapabilities::default();
        capabilities.extensions = Some(ExtensionCapabilities::from([(
            TASKS_EXTENSION_ID.to_owned(),
            JsonObject::new(),
        )]));
        let mut config = ClientConfig::default();
        config.capabilities = capabilities;
        config
    }
}

/// A running client connection.
pub(super) struct Running(RunningService<RoleClient, Listener>);

impl Running {
    pub(super) fn peer(&self) -> &Peer<RoleClient> {
        self.0.peer()
    }

    /// Waits until the connection ends, running `refresh` on every tool-list change meanwhile
    /// and every `every` (a Streamable HTTP server that restarted is joined again by the
    /// transport under a new session, silently: only a fresh list shows its new tools).
    pub(super) async fn wait_closed<F, Fut>(self, changed: &Notify, every: Duration, refresh: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = ()>,
    {
        let closed = self.0.waiting();
        tokio::pin!(closed);
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut closed => return,
                () = changed.notified() => refresh().await,
                _ = ticks.tick() => refresh().await,
            }
        }
    }
}

/// Connects per `spec.transport`.
pub(super) async fn connect(
    spec: &McpServerSpec,
    client: &reqwest::Client,
    changed: Arc<Notify>,
) -> Result<Running, String> {
    let listener = Listener { changed };
    let running = match &spec.transport {
        McpTransport::Http { url, headers } => {
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            for header in headers {
                config
                    .custom_headers
                    .insert(header.name.clone(), header.value.clone());
            }
            let transport = StreamableHttpClientTransport::with_client(client.clone(), config);
            // Protocol 2026-07-28 (where tasks live) when the server speaks it, else the
            // `initialize` handshake.
            let lifecycle = ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: None,
            };
            serve_client_with_lifecycle(listener, transport, lifecycle)
                .await
                .map_err(|error| error.to_string())?
        }
        McpTransport::Stdio { command, args, env } => {
            let mut child = tokio::process::Command::new(command);
            child.args(args).kill_on_drop(true);
            for (key, value) in env {
                child.env(key, value.expose());
            }
            let (transport, _) = TokioChildProcess::builder(child)
                .stderr(std::process::Stdio::inherit())
                .spawn()
                .map_err(|error| format!("cannot start {command:?}: {error}"))?;
            listener
                .serve(transport)
                .await
                .map_err(|error| error.to_string())?
        }
    };
    Ok(Running(running))
}
