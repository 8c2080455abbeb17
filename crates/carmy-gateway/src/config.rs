//! Gateway configuration: command-line flags, each also read from its environment variable
//! (contract §9).

use clap::{Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;

/// `carmy-gateway [OPTIONS] [COMMAND]`. Every option can be given as a flag or through the
/// environment variable shown in `--help`.
#[derive(Clone, Parser)]
#[command(
    name = "carmy-gateway",
    version,
    about = "Serves Carmy's HTTP API: retry-safe tool calls for AI agents"
)]
pub struct Config {
    /// What to do; `serve` when omitted.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Address to serve on.
    #[arg(long, env = "CARMY_LISTEN", default_value = carmy::app::DEFAULT_LISTEN, global = true)]
    pub listen: SocketAddr,

    /// PostgreSQL URL; unset uses the in-memory store.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, global = true)]
    pub database_url: Option<String>,

    /// API keys as `key=principal` pairs, comma separated; unset (with no keys file) means
    /// anonymous mode, loopback only.
    #[arg(long, env = "CARMY_API_KEYS", hide_env_values = true, global = true)]
    pub api_keys: Option<String>,

    /// A file of `key=principal` lines (`#` starts a comment), added to `--api-keys`.
    #[arg(long, env = "CARMY_API_KEYS_FILE", global = true)]
    pub api_keys_file: Option<PathBuf>,

    /// Serve without API keys on a non-loopback address (every caller is `anonymous`).
    #[arg(long, env = "CARMY_ALLOW_ANONYMOUS_NETWORK", global = true)]
    pub allow_anonymous_network: bool,

    /// Entries of the in-memory store (used when `DATABASE_URL` is unset).
    #[arg(long, env = "CARMY_MEMORY_CAPACITY", default_value_t = carmy::memory::DEFAULT_MEMORY_CAPACITY, global = true)]
    pub memory_capacity: usize,

    /// Default tool deadline in milliseconds; a tool still running then is recorded `timed_out`.
    #[arg(
        long,
        env = "CARMY_TOOL_TIMEOUT_MS",
        default_value_t = 30_000,
        global = true
    )]
    pub tool_timeout_ms: u64,

    /// Largest recorded result in bytes of JSON; larger results are recorded as
    /// `RESULT_TOO_LARGE`.
    #[arg(long, env = "CARMY_MAX_RESULT_BYTES", default_value_t = 1024 * 1024, global = true)]
    pub max_result_bytes: usize,

    /// Largest request body in bytes; larger bodies get 413.
    #[arg(long, env = "CARMY_MAX_BODY_BYTES", default_value_t = carmy::http::DEFAULT_MAX_BODY_BYTES, global = true)]
    pub max_body_bytes: usize,

    /// How long a request body may take to arrive after its headers (ms); slower bodies get 408.
    #[arg(
        long,
        env = "CARMY_BODY_TIMEOUT_MS",
        default_value_t = 30_000,
        global = true
    )]
    pub body_timeout_ms: u64,

    /// On shutdown, how long running executions may finish (ms) before they are recorded
    /// `cancelled`.
    #[arg(long, env = "CARMY_DRAIN_MS", default_value_t = 30_000, global = true)]
    pub drain_ms: u64,

    /// PostgreSQL connections in the pool; the store opens as many again for its hot path
    /// (reserve and complete), so a replica uses up to twice this many.
    #[arg(long, env = "CARMY_DB_POOL_SIZE", default_value_t = 10, global = true)]
    pub db_pool_size: u32,

    /// Longest wait for a pooled connection (ms) before answering 503.
    #[arg(
        long,
        env = "CARMY_DB_ACQUIRE_TIMEOUT_MS",
        default_value_t = 5_000,
        global = true
    )]
    pub db_acquire_timeout_ms: u64,

    /// Lease of this process's executions (ms): another replica reports an execution
    /// `interrupted` once its owner has not renewed for this long.
    #[arg(
        long,
        env = "CARMY_LEASE_TTL_MS",
        default_value_t = 30_000,
        global = true
    )]
    pub lease_ttl_ms: u64,

    /// Finished records kept in this process's replay cache (PostgreSQL only; 0 disables it).
    /// Replays and conflicts of cached records need no database round trip.
    #[arg(long, env = "CARMY_REPLAY_CACHE_ENTRIES", default_value_t = carmy::cache::DEFAULT_CACHE_ENTRIES, global = true)]
    pub replay_cache_entries: u64,

    /// How long a cached record is served (ms) before the database is asked again; bounds how
    /// long an operator's SQL change to a finished row can go unseen by this process.
    #[arg(
        long,
        env = "CARMY_REPLAY_CACHE_TTL_MS",
        default_value_t = 60_000,
        global = true
    )]
    pub replay_cache_ttl_ms: u64,

    /// Log format.
    #[arg(long, env = "CARMY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
}

/// Subcommands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Serve the API (the default).
    Serve,
    /// Apply the database migrations under the migration lock, then exit.
    Migrate,
}

/// How logs are written to standard error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}
