//! # carmy-gateway
//!
//! The gateway binary's library: configuration ([`config`]), the example tools of
//! docs/semantics.md §9 (`tools`) and their order book (`orders`), and the wiring of the Carmy
//! runtime to the in-memory store (no `DATABASE_URL`) or to `PostgresStore` (with one).
//!
//! The example tools are demo code: they and their table `carmy.example_orders` are compiled in
//! only with the cargo feature `example-tools` (on by default). A build without it
//! (`--no-default-features`) serves no example tools, never creates that table, and refuses a
//! tools file that says `example_tools = true`.
//!
//! With `CARMY_TOOLS_FILE` it serves the tools that file declares instead ([`configured`],
//! crate `carmy-tools`, docs/semantics.md §10).
//!
//! `carmy-gateway` serves; `carmy-gateway migrate` applies the database migrations and exits;
//! `carmy-gateway check-config` validates the tools file and prints the tool table;
//! `carmy-gateway executions list|show|resolve|release` is the operator's recovery loop
//! ([`executions`], docs/semantics.md §12.5). Logs and OpenTelemetry trace export: [`telemetry`].

pub mod config;
pub mod configured;
mod database;
pub mod executions;
#[cfg(feature = "example-tools")]
pub mod orders;
pub mod telemetry;
#[cfg(feature = "example-tools")]
pub mod tools;

use carmy::auth::ApiKeys;
use carmy::engine::EngineConfig;
use carmy::memory::InMemoryIdempotencyStore;
use carmy::store::IdempotencyStore;
use carmy_http::App;
use carmy_mcp::McpConfig;
use clap::Parser;
use config::{Command, Config};
use database::{distribute, grant_roles, postgres_stores};
#[cfg(feature = "example-tools")]
use orders::{MemoryOrderBook, OrderBook, PostgresOrderBook};
use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The API key list or file is malformed or unreadable.
    #[error("API keys: {0}")]
    ApiKeys(String),
    /// Migrations failed.
    #[error(transparent)]
    Migrate(#[from] carmy_postgres::MigrateError),
    /// `migrate --distribute` refused (no Citus, schema behind) or failed; its text says what
    /// to do.
    #[error(transparent)]
    Distribute(#[from] carmy_postgres::DistributeError),
    /// The database cannot be reached.
    #[error("database: {0}")]
    Database(String),
    /// `migrate` needs `DATABASE_URL`.
    #[error("DATABASE_URL is required for this command")]
    NoDatabase,
    /// The tools file is unreadable or has a mistake (named with file, line, tool and field).
    #[error(transparent)]
    ToolsFile(#[from] carmy_tools::ConfigError),
    /// An MCP server could not be reached or listed at start.
    #[error("{0}")]
    Mcp(String),
    /// A tool probe (`[tools.reconcile] tool = …`) names a tool that is not served or not
    /// read-only, found once the MCP servers' tools are listed (docs/semantics.md §12).
    #[error("{0}")]
    ProbeTool(String),
    /// A tool's own property has the name of the request id argument (docs/semantics.md §11).
    #[error(transparent)]
    KeyArgument(#[from] carmy::key_argument::KeyCollision),
    /// The upstream HTTP client could not be built.
    #[error("{0}")]
    UpstreamClient(String),
    /// The OAuth settings are incomplete or wrong (docs/operations.md "OAuth access tokens").
    #[error(transparent)]
    OAuth(#[from] carmy_oauth::OAuthConfigError),
    /// Building or serving the application failed.
    #[error(transparent)]
    App(#[from] carmy_http::AppError),
}

/// A built gateway: the application, whose `serve` also shuts the store down (ending the
/// PostgreSQL lease) after the drain.
pub struct Gateway {
    /// The Carmy application with its tools.
    pub app: App,
    memory: Option<Arc<InMemoryIdempotencyStore>>,
}

impl Gateway {
    /// The in-memory store, when the gateway runs without `DATABASE_URL` (tests count its
    /// entries).
    pub fn memory_store(&self) -> Option<&Arc<InMemoryIdempotencyStore>> {
        self.memory.as_ref()
    }
}

/// Reads the configured API keys: `--api-keys` plus the lines of `--api-keys-file`.
///
/// # Errors
/// [`GatewayError::ApiKeys`] naming the malformed entry (never the key) or the unreadable file.
pub fn load_api_keys(config: &Config) -> Result<ApiKeys, GatewayError> {
    let mut text = config.api_keys.clone().unwrap_or_default();
    if let Some(path) = &config.api_keys_file {
        let file = std::fs::read_to_string(path)
            .map_err(|error| GatewayError::ApiKeys(format!("{}: {error}", path.display())))?;
        text.push('\n');
        text.push_str(&file);
    }
    ApiKeys::parse(&text).map_err(|error| GatewayError::ApiKeys(error.to_string()))
}

/// Builds the gateway for `config`: the tools file first (a mistake stops here, before any
/// store is touched); with `DATABASE_URL`, migrates (under the migration lock),
/// creates `carmy.example_orders` for the example tools if it is missing and the example tools
/// are served (`PostgresOrderBook::prepare`; never with `example_tools = false` or without the
/// cargo feature `example-tools`) and uses `PostgresStore` and that table; without, the
/// in-memory store and orders.
///
/// # Errors
/// [`GatewayError`] when keys, migrations or the database fail.
pub async fn build(config: &Config) -> Result<Gateway, GatewayError> {
    let keys = load_api_keys(config)?;
    let tools_file = configured::load(config)?;
    let configured_tools = match &tools_file {
        Some(file) => configured::tools(file, config.max_result_bytes)?,
        None => Vec::new(),
    };
    let operators = ApiKeys::parse(config.operator_keys.as_deref().unwrap_or_default())
        .map_err(|error| GatewayError::ApiKeys(format!("CARMY_OPERATOR_KEYS: {error}")))?;
    // Without the feature `configured::load` already refused `example_tools = true`.
    let examples = cfg!(feature = "example-tools")
        && tools_file.as_ref().is_none_or(|file| file.example_tools);
    let mut memory = None;
    let (store, db): (Arc<dyn IdempotencyStore>, Option<carmy_postgres::Db>) =
        match &config.database_url {
            None => {
                let store = Arc::new(InMemoryIdempotencyStore::new(config.memory_capacity));
                memory = Some(Arc::clone(&store));
                (store, None)
            }
            Some(url) => {
                let (store, db) = postgres_stores(config, url, examples).await?;
                (store, Some(db))
            }
        };
    let mut builder = carmy_http::app()
        .idempotency_store(store)
        .api_keys(keys.clone())
        .operator_keys(operators)
        .listen(config.listen)
        .allow_anonymous_network(config.allow_anonymous_network)
        .console_secure_cookie(config.console_secure_cookie)
        .trusted_proxies(config.trusted_proxies.clone())
        .max_body_bytes(config.max_body_bytes)
        .body_timeout(Duration::from_millis(config.body_timeout_ms))
        .engine_config(engine_config(config));
    let oauth = config.oauth.config()?;
    if let Some(oauth) = &oauth {
        builder = builder.token_verifier(Arc::new(carmy_oauth::JwtVerifier::new(oauth.clone())?));
    }
    #[cfg(feature = "example-tools")]
    if examples {
        let orders: Arc<dyn OrderBook> = match db {
            Some(db) => Arc::new(PostgresOrderBook::new(db)),
            None => Arc::new(MemoryOrderBook::default()),
        };
        for tool in tools::example_tools(orders) {
            builder = builder.tool(tool);
        }
    }
    #[cfg(not(feature = "example-tools"))]
    let _ = db;
    for tool in configured_tools {
        builder = builder.shared_tool(tool);
    }
    let app = builder.build()?;
    if let Some(file) = &tools_file {
        configured::start_mcp_servers(file, app.engine()).await?;
        carmy_tools::tool_probe::check_served(file, &app.engine().tools())
            .map_err(GatewayError::ProbeTool)?;
    }
    check_key_arguments(app.engine())?;
    let mcp = carmy_mcp::router(
        Arc::clone(app.engine()),
        app.credentials().clone(),
        mcp_config(config),
    );
    let mut app = app.merge_routes(mcp);
    if let Some(oauth) = &oauth {
        app = app.merge_routes(carmy_oauth::routes(oauth));
    }
    Ok(Gateway { app, memory })
}

/// Refuses to start when a tool's own property has the name of the request id argument
/// (docs/semantics.md §11): the error names the tool and the two ways out.
///
/// # Errors
/// [`GatewayError::KeyArgument`] for the first such tool.
fn check_key_arguments(engine: &carmy::engine::Engine) -> Result<(), GatewayError> {
    for tool in engine.tools() {
        engine.key_argument(tool.as_ref())?;
    }
    Ok(())
}

/// The engine's settings from the gateway's.
fn engine_config(config: &Config) -> EngineConfig {
    EngineConfig {
        default_tool_timeout: Duration::from_millis(config.tool_timeout_ms),
        max_result_bytes: config.max_result_bytes,
        drain_period: Duration::from_millis(config.drain_ms),
        max_wait: Duration::from_millis(config.max_wait_ms),
        retention: config.retention.0,
        prune_interval: Duration::from_millis(config.prune_interval_ms),
        key_argument: key_argument_config(config),
        reconcile_interval: Duration::from_millis(config.reconcile_interval_ms),
        reconcile_max_attempts: config.reconcile_max_attempts,
        reconcile_inline: Duration::from_millis(config.reconcile_inline_ms),
        keep_arguments: config.keep_arguments,
        ..EngineConfig::default()
    }
}

/// The request id argument's settings from the gateway's (docs/semantics.md §11).
pub(crate) fn key_argument_config(config: &Config) -> carmy::key_argument::KeyArgumentConfig {
    carmy::key_argument::KeyArgumentConfig {
        name: config.mcp_key_argument.trim().to_owned(),
        required: config.mcp_key_required,
    }
}

/// The MCP front's settings from the gateway's (docs/semantics.md §11).
pub fn mcp_config(config: &Config) -> McpConfig {
    let listed = |values: &[String]| -> Vec<String> {
        values
            .iter()
            .map(|value| value.trim().to_owned())
            .filter(|value| !value.is_empty())
            .collect()
    };
    let hosts = listed(&config.mcp_allowed_hosts);
    let allowed_hosts = if hosts.iter().any(|host| host == "*") {
        Some(Vec::new())
    } else {
        Some(hosts).filter(|hosts| !hosts.is_empty())
    };
    let origins = listed(&config.mcp_allowed_origins);
    let allowed_origins = if origins.iter().any(|origin| origin == "*") {
        Some(Vec::new())
    } else {
        Some(origins).filter(|origins| !origins.is_empty())
    };
    McpConfig {
        allowed_hosts,
        allowed_origins,
        request_id_meta_keys: listed(&config.mcp_request_id_meta),
        conversation_meta_keys: listed(&config.mcp_conversation_meta),
        argument_replay_window: config.mcp_argument_replay_window.0,
        require_request_id: config.mcp_require_request_id,
        answer_within: Duration::from_millis(config.mcp_answer_within_ms),
        task_after: Duration::from_millis(config.mcp_task_after_ms),
        max_body_bytes: config.max_body_bytes,
        body_timeout: Duration::from_millis(config.body_timeout_ms),
    }
}

/// Runs the gateway with command-line `args` (the first is the program name); returns the exit
/// code. Errors are logged (a tools-file mistake is printed as one line), never with secrets.
pub async fn main_with_args(
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
) -> ExitCode {
    let config = Config::parse_from(args);
    // An `executions` command's output is its answer: only warnings are logged, and none of
    // sqlx's about the connection a failure already explained.
    let level = match config.command {
        Some(Command::Executions(_)) => "warn,sqlx=error",
        // rmcp logs every MCP request at INFO: one line per call is noise in production.
        _ => "info,rmcp=warn",
    };
    // Traces are exported when OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/operations.md
    // "Traces"); flushed below, after the drain.
    let telemetry = telemetry::init(config.log_format, level);
    #[cfg(feature = "fault-injection")]
    let _fault_scenario = {
        tracing::warn!("built with fault injection: FAILPOINTS is honoured; never use this build in production");
        fail::FailScenario::setup()
    };
    let code = match run(config).await {
        Ok(code) => code,
        // A mistake in the tools file is the operator's to fix: the CLI's own one-line message
        // (docs/semantics.md §10), not a log line.
        Err(GatewayError::ToolsFile(error)) => {
            eprintln!("carmy-gateway: {}", error.to_string().replace('\n', " "));
            ExitCode::FAILURE
        }
        Err(GatewayError::ProbeTool(message)) => {
            eprintln!("carmy-gateway: {message}");
            ExitCode::FAILURE
        }
        // As plain a line: the operator's to act on (install Citus, migrate first).
        Err(GatewayError::Distribute(error)) => {
            eprintln!("carmy-gateway: {error}");
            ExitCode::FAILURE
        }
        Err(error) => {
            tracing::error!(%error, "carmy-gateway failed");
            ExitCode::FAILURE
        }
    };
    telemetry.shutdown().await;
    code
}

async fn run(config: Config) -> Result<ExitCode, GatewayError> {
    match config.command.clone().unwrap_or(Command::Serve) {
        Command::Migrate(args) => {
            let url = config
                .database_url
                .as_deref()
                .ok_or(GatewayError::NoDatabase)?;
            // Migrations hold a session lock: the session URL when there is one (§14.3).
            let url = config.database_session_url.as_deref().unwrap_or(url);
            // A distribution that would be refused is refused before anything changes.
            if let Some(engine) = args.distribute {
                carmy_postgres::check_distribution(url, engine.into()).await?;
            }
            carmy_postgres::migrate(url).await?;
            tracing::info!(
                version = carmy_postgres::latest_migration_version(),
                "migrations applied"
            );
            if let Some(engine) = args.distribute {
                distribute(url, engine.into()).await?;
            }
            grant_roles(url, &args).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::CheckConfig => configured::check_config(&config)
            .await
            .map(|()| ExitCode::SUCCESS),
        // Prints its own failures, with its own exit codes.
        Command::Executions(executions) => Ok(executions::main(&config, executions).await),
        Command::Serve => {
            let gateway = build(&config).await?;
            let listener = carmy_http::app::bind(config.listen).await?;
            gateway
                .app
                .serve(listener, carmy_http::app::shutdown_signal())
                .await
                .map_err(GatewayError::from)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
