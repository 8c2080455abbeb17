//! The real gateway in-process: `carmy_gateway::build` from gateway flags, served through its
//! router (`tower::ServiceExt::oneshot`), never a router rebuilt by hand.

use carmy::memory::InMemoryIdempotencyStore;
use carmy_gateway::config::Config;
use carmy_gateway::Gateway;
use clap::Parser;

/// A gateway built in-process.
pub struct InProcess {
    /// What `carmy_gateway::build` returned.
    pub gateway: Gateway,
}

/// Parses `flags` as the gateway's command line. `DATABASE_URL`, `CARMY_API_KEYS`,
/// `CARMY_API_KEYS_FILE` and `CARMY_OPERATOR_KEYS` from the test's environment are ignored: only `flags` choose the store
/// and the keys.
///
/// # Panics
/// When the flags are invalid.
pub fn gateway_config(flags: &[&str]) -> Config {
    let mut config =
        Config::try_parse_from(std::iter::once("carmy-gateway").chain(flags.iter().copied()))
            .unwrap_or_else(|error| panic!("gateway flags {flags:?}: {error}"));
    let given = |flag: &str| flags.iter().any(|given| given.starts_with(flag));
    if !given("--database-url") {
        config.database_url = None;
    }
    if !given("--api-keys") {
        config.api_keys = None;
        config.api_keys_file = None;
    }
    if !given("--operator-keys") {
        config.operator_keys = None;
    }
    config
}

impl InProcess {
    /// Builds the gateway from `flags` (e.g. `["--memory-capacity", "1"]`); without
    /// `--database-url` it uses the in-memory store.
    ///
    /// # Panics
    /// When the flags are invalid or the gateway cannot be built.
    pub async fn start(flags: &[&str]) -> Self {
        let config = gateway_config(flags);
        let gateway = carmy_gateway::build(&config)
            .await
            .unwrap_or_else(|error| panic!("gateway flags {flags:?}: {error}"));
        Self { gateway }
    }

    /// The gateway's router (cheap to clone; each `oneshot` consumes one).
    pub fn router(&self) -> axum::Router {
        self.gateway.app.router()
    }

    /// The Carmy application.
    pub fn app(&self) -> &carmy_http::App {
        &self.gateway.app
    }

    /// How many times `tool` started (the engine's metrics).
    pub fn tool_runs(&self, tool: &str) -> u64 {
        self.gateway.app.engine().metrics().tool_runs(tool)
    }

    /// The in-memory store.
    ///
    /// # Panics
    /// When the gateway was built with `--database-url`.
    pub fn memory_store(&self) -> &InMemoryIdempotencyStore {
        self.gateway
            .memory_store()
            .expect("a gateway on the in-memory store")
    }
}
