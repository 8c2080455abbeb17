//! The application builder: `carmy_http::app().tool(…).idempotency_store(…).run().await`.

use crate::routes::{router, AppState};
use axum::Router;
use carmy::auth::{ApiKeys, Credentials, TokenVerifier};
use carmy::engine::{Engine, EngineConfig};
use carmy::http::{DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BODY_BYTES};
use carmy::memory::InMemoryIdempotencyStore;
use carmy::metrics::Metrics;
use carmy::store::IdempotencyStore;
use carmy::tool::{Tool, ToolRegistryError};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The default listen address (docs/semantics.md §9, `CARMY_LISTEN`).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// How long, after the drain period, shutdown waits for cancelled executions to be recorded.
const RECORD_GRACE: Duration = Duration::from_secs(10);

/// How long, after that, shutdown waits for open connections before dropping them.
const CONNECTION_GRACE: Duration = Duration::from_secs(2);

/// Starts building an application with the in-memory store, no tools and no API keys.
pub fn app() -> AppBuilder {
    AppBuilder::default()
}

/// Why an application could not be built or served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppError {
    /// A tool could not be registered.
    #[error(transparent)]
    Tool(#[from] ToolRegistryError),
    /// No API keys are configured and the address is not loopback (docs/semantics.md §6).
    #[error("refusing to serve anonymously on non-loopback address {0}: configure API keys (gateway: CARMY_API_KEYS or CARMY_API_KEYS_FILE) or allow anonymous network access explicitly (gateway: CARMY_ALLOW_ANONYMOUS_NETWORK=true)")]
    AnonymousOnNetwork(SocketAddr),
    /// A key is configured both as an API key and as an operator key (docs/semantics.md §12.1).
    #[error("a key appears both among the API keys and among the operator keys (CARMY_OPERATOR_KEYS); give operators keys of their own")]
    AmbiguousKey,
    /// The listen address could not be bound (in use, not local, no permission).
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address that was asked for.
        address: SocketAddr,
        /// Why binding failed.
        source: std::io::Error,
    },
    /// Serving failed.
    #[error("serving failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Configures an [`App`]. Every setter consumes and returns the builder.
pub struct AppBuilder {
    tools: Vec<Arc<dyn Tool>>,
    store: Option<Arc<dyn IdempotencyStore>>,
    engine_config: EngineConfig,
    keys: ApiKeys,
    operators: ApiKeys,
    listen: SocketAddr,
    allow_anonymous_network: bool,
    max_body_bytes: usize,
    body_timeout: Duration,
    console_secure_cookie: bool,
    trusted_proxies: Vec<std::net::IpAddr>,
    tokens: Option<Arc<dyn TokenVerifier>>,
}

impl Default for AppBuilder {
    fn default() -> Self {
        Self {
            tools: Vec::new(),
            store: None,
            engine_config: EngineConfig::default(),
            keys: ApiKeys::none(),
            operators: ApiKeys::none(),
            listen: DEFAULT_LISTEN.parse().expect("the default address parses"),
            allow_anonymous_network: false,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            console_secure_cookie: false,
            trusted_proxies: Vec::new(),
            tokens: None,
        }
    }
}

impl AppBuilder {
    /// Registers a tool.
    #[must_use]
    pub fn tool(self, tool: impl Tool) -> Self {
        self.shared_tool(Arc::new(tool))
    }

    /// Registers a tool already behind an `Arc`.
    #[must_use]
    pub fn shared_tool(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Sets the idempotency store (default: [`InMemoryIdempotencyStore`] with 10,000 entries).
    #[must_use]
    pub fn idempotency_store(mut self, store: Arc<dyn IdempotencyStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Sets deadlines, the result-size limit and the drain period.
    #[must_use]
    pub fn engine_config(mut self, config: EngineConfig) -> Self {
        self.engine_config = config;
        self
    }

    /// Sets the API keys (docs/semantics.md §6); none means anonymous, loopback only.
    #[must_use]
    pub fn api_keys(mut self, keys: ApiKeys) -> Self {
        self.keys = keys;
        self
    }

    /// Sets the operator keys (`key=name` pairs, docs/semantics.md §12.1): an operator may resolve,
    /// release and list any principal's executions; decisions record it as `operator:<name>`.
    /// None by default. A key must not also be an API key.
    #[must_use]
    pub fn operator_keys(mut self, keys: ApiKeys) -> Self {
        self.operators = keys;
        self
    }

    /// Accepts OAuth 2.1 access tokens beside the keys, checked by `verifier` (docs/semantics.md
    /// §6.1; the gateway's is `carmy_oauth::JwtVerifier`). None by default. A server
    /// with tokens is never anonymous.
    #[must_use]
    pub fn token_verifier(mut self, verifier: Arc<dyn TokenVerifier>) -> Self {
        self.tokens = Some(verifier);
        self
    }

    /// Sets the address [`AppBuilder::run`] serves on.
    #[must_use]
    pub fn listen(mut self, address: SocketAddr) -> Self {
        self.listen = address;
        self
    }

    /// Allows serving without API keys on a non-loopback address.
    #[must_use]
    pub fn allow_anonymous_network(mut self, allow: bool) -> Self {
        self.allow_anonymous_network = allow;
        self
    }

    /// Sets the request body limit in bytes (default 2 MiB); larger bodies get 413.
    #[must_use]
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Sets how long a request body may take to arrive once its headers did (default 30 s);
    /// slower bodies get 408.
    #[must_use]
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// The reverse proxies in front of this process whose `X-Forwarded-For` names the client
    /// (default none): the console's login limits count by that client's address instead of
    /// the proxy's (docs/operations.md, "The operator console").
    #[must_use]
    pub fn trusted_proxies(mut self, proxies: Vec<std::net::IpAddr>) -> Self {
        self.trusted_proxies = proxies;
        self
    }

    /// Marks the operator console's session cookie `Secure` (default off): set it when the
    /// console is reached over TLS (docs/operations.md, "The operator console").
    #[must_use]
    pub fn console_secure_cookie(mut self, secure: bool) -> Self {
        self.console_secure_cookie = secure;
        self
    }

    /// Builds the application without serving it.
    ///
    /// # Errors
    /// [`AppError::Tool`] for a duplicate tool name or an invalid argument schema;
    /// [`AppError::AmbiguousKey`] when an API key is also an operator key.
    pub fn build(self) -> Result<App, AppError> {
        if self.keys.shares_a_key_with(&self.operators) {
            return Err(AppError::AmbiguousKey);
        }
        let store = self
            .store
            .unwrap_or_else(|| Arc::new(InMemoryIdempotencyStore::default()));
        let engine = Arc::new(Engine::new(
            store,
            self.tools,
            self.engine_config,
            Metrics::default(),
        )?);
        let mut credentials = Credentials::new(self.keys, self.operators);
        if let Some(tokens) = self.tokens {
            credentials = credentials.with_tokens(tokens);
        }
        let anonymous = credentials.is_anonymous();
        let router = router(AppState {
            engine: Arc::clone(&engine),
            credentials: Arc::new(credentials.clone()),
            max_body_bytes: self.max_body_bytes,
            body_timeout: self.body_timeout,
            console: Arc::new(crate::console::Sessions::new(self.console_secure_cookie)),
            console_logins: Arc::new(crate::console::LoginLimits::new(self.trusted_proxies)),
        });
        Ok(App {
            engine,
            credentials,
            router,
            listen: self.listen,
            anonymous,
            allow_anonymous_network: self.allow_anonymous_network,
        })
    }

    /// Builds, binds the listen address and serves until ctrl-c or SIGTERM, then drains.
    ///
    /// # Errors
    /// See [`AppBuilder::build`] and [`App::serve`].
    pub async fn run(self) -> Result<(), AppError> {
        let app = self.build()?;
        app.check_listen_address(app.listen)?;
        let listener = bind(app.listen).await?;
        app.serve(listener, shutdown_signal()).await
    }
}

/// A built application: its router and engine.
pub struct App {
    engine: Arc<Engine>,
    credentials: Credentials,
    router: Router,
    listen: SocketAddr,
    anonymous: bool,
    allow_anonymous_network: bool,
}

impl App {
    /// The axum router (for tests through `tower::ServiceExt::oneshot`, or to nest elsewhere).
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// Serves `routes` beside the HTTP API, e.g. the MCP front's `/mcp` (docs/semantics.md §11).
    /// The routes keep their own layers; paths they do not claim still get the HTTP API's
    /// answers (its fallback). [`App::serve`] serves the merged router.
    ///
    /// # Panics
    /// When `routes` claims a path the HTTP API already serves, or has a fallback of its own.
    #[must_use]
    pub fn merge_routes(mut self, routes: Router) -> Self {
        self.router = self.router.merge(routes);
        self
    }

    /// The engine behind the router.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The API keys and operator keys this application checks (docs/semantics.md §6): the one
    /// check for every front, for routes merged in ([`App::merge_routes`], e.g. `/mcp`).
    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// Starts what runs beside the router: the listener that forwards other processes' cancel
    /// requests to this engine's executions, the follower of changes made to finished records
    /// behind the store's back ([`Engine::follow_record_changes`]: a replay cache drops its
    /// copies, docs/semantics.md §8.4), the watch that stops running tools when the lease
    /// lapses ([`Engine::stop_tools_on_lease_loss`]), the pruner of retention
    /// ([`Engine::start_pruner`], docs/semantics.md §12.9) and the reconciler
    /// ([`Engine::start_reconciler`], §12.10). [`App::serve`] calls it; an embedder that serves
    /// the [`App::router`] itself calls it once, inside a Tokio runtime.
    pub fn start_background(&self) {
        self.engine.listen_for_remote_cancels();
        self.engine.follow_record_changes();
        self.engine.stop_tools_on_lease_loss();
        self.engine.start_pruner();
        self.engine.start_reconciler();
    }

    /// The configured listen address.
    pub fn listen_address(&self) -> SocketAddr {
        self.listen
    }

    fn check_listen_address(&self, address: SocketAddr) -> Result<(), AppError> {
        if self.anonymous && !self.allow_anonymous_network && !address.ip().is_loopback() {
            return Err(AppError::AnonymousOnNetwork(address));
        }
        Ok(())
    }

    /// Starts the background work ([`App::start_background`]) and serves on `listener` until
    /// `shutdown` completes; then stops accepting, lets running executions finish within the
    /// drain period, records the rest `cancelled`, shuts the store down (ending its lease) and
    /// returns.
    ///
    /// # Errors
    /// [`AppError::AnonymousOnNetwork`] (docs/semantics.md §6) or [`AppError::Io`].
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), AppError> {
        self.check_listen_address(listener.local_addr()?)?;
        self.start_background();
        let stopping = CancellationToken::new();
        let drain = {
            let engine = Arc::clone(&self.engine);
            let stopping = stopping.clone();
            tokio::spawn(async move {
                stopping.cancelled().await;
                engine.drain(RECORD_GRACE).await;
            })
        };
        tracing::info!(address = %listener.local_addr()?, "serving");
        if let Err(reason) = self.engine.readiness().await {
            tracing::warn!(%reason, "the idempotency store is not ready: calls answer 503 and /readyz says why until it is");
        }
        // With each connection's peer address: the console's login limits count by it.
        let service = self
            .router
            .into_make_service_with_connect_info::<SocketAddr>();
        let server = axum::serve(listener, service).with_graceful_shutdown({
            let stopping = stopping.clone();
            async move {
                shutdown.await;
                tracing::info!("shutting down: no new connections; draining executions");
                stopping.cancel();
            }
        });
        // A client that never finishes its request must not hold the process forever: once
        // executions had their drain period and grace, open connections are dropped.
        let give_up = self.engine.drain_period() + RECORD_GRACE + CONNECTION_GRACE;
        tokio::select! {
            served = server => served?,
            () = async {
                stopping.cancelled().await;
                tokio::time::sleep(give_up).await;
            } => tracing::warn!("connections still open after the drain; closing them"),
        }
        if let Err(error) = drain.await {
            tracing::error!(%error, "drain task failed");
        }
        if let Err(refusal) = self.engine.shutdown_store().await {
            tracing::warn!(%refusal, "could not shut the idempotency store down");
        }
        Ok(())
    }
}

/// Binds `address` for [`App::serve`].
///
/// # Errors
/// [`AppError::Bind`] naming the address and the cause (e.g. `cannot listen on 127.0.0.1:8080:
/// Address already in use (os error 98)`).
pub async fn bind(address: SocketAddr) -> Result<TcpListener, AppError> {
    TcpListener::bind(address)
        .await
        .map_err(|source| AppError::Bind { address, source })
}

/// Completes on ctrl-c or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}
