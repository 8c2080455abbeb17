//! Gateway configuration: command-line flags, each also read from its environment variable
//! (docs/semantics.md §9).
//!
//! Defaults are the crates' own (`EngineConfig::default()`, `carmy_postgres::DEFAULT_*`,
//! `carmy::http::DEFAULT_*`, …). A value outside its accepted range stops the gateway before it
//! starts, with a message naming the environment variable, the flag and the range ([`InRange`]);
//! nothing is clamped. Those value parsers are in `values`.

mod oauth;
mod values;

pub use oauth::OAuthArgs;

pub use values::{
    Bounded, DurationOrZeroParser, InRange, Retention, RetentionParser, WindowParser,
};

use carmy::engine::EngineConfig;
use clap::{Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// `carmy-gateway [OPTIONS] [COMMAND]`. Every option can be given as a flag or through the
/// environment variable shown in `--help`. Only `--database-url` and `--log-format` also follow
/// the subcommand (`carmy-gateway migrate --database-url …`): they are all `migrate` and
/// `executions` read, so `carmy-gateway migrate --help` lists only them (and `executions list
/// --help` them and its own flags).
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
    #[arg(long, env = "CARMY_LISTEN", default_value = carmy_http::app::DEFAULT_LISTEN)]
    pub listen: SocketAddr,

    /// PostgreSQL URL. Serving without it uses the in-memory store; `migrate` and `executions`
    /// need it.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, global = true)]
    pub database_url: Option<String>,

    /// PostgreSQL URL of the session-bound connections (docs/semantics.md §14.3): the lease,
    /// the LISTEN connection, migrations and the example orders' table setup. Needed when
    /// `DATABASE_URL` goes through a transaction-mode pooler (PgBouncer `pool_mode =
    /// transaction`); it must reach PostgreSQL directly or through a session-mode pooler.
    /// Unset: `DATABASE_URL` serves everything.
    #[arg(
        long,
        env = "CARMY_DATABASE_SESSION_URL",
        hide_env_values = true,
        global = true
    )]
    pub database_session_url: Option<String>,

    /// API keys as `key=principal` pairs, comma separated; unset (with no keys file) means
    /// anonymous mode, loopback only.
    #[arg(long, env = "CARMY_API_KEYS", hide_env_values = true)]
    pub api_keys: Option<String>,

    /// A file of `key=principal` lines (`#` starts a comment), added to `--api-keys`.
    #[arg(long, env = "CARMY_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,

    /// Operator keys as `key=name` pairs, comma separated (docs/semantics.md §12.1): an operator
    /// may resolve, release and list any principal's executions, recorded as
    /// `operator:<name>`. A key must not also be an API key.
    #[arg(long, env = "CARMY_OPERATOR_KEYS", hide_env_values = true)]
    pub operator_keys: Option<String>,

    /// Mark the operator console's session cookie `Secure` (browsers then send it over HTTPS
    /// only): set it when the console is reached through TLS (docs/operations.md).
    #[arg(long, env = "CARMY_CONSOLE_SECURE_COOKIE")]
    pub console_secure_cookie: bool,

    /// Addresses of the reverse proxies in front of the gateway, comma separated: from them,
    /// `X-Forwarded-For` names the client whose console logins are counted (docs/operations.md,
    /// "The operator console"). Unset: every client is the connection's peer.
    #[arg(long, env = "CARMY_TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// OAuth 2.1 access tokens beside API keys (docs/operations.md "OAuth access tokens").
    #[command(flatten)]
    pub oauth: OAuthArgs,

    /// Serve without API keys on a non-loopback address (every caller is `anonymous`).
    #[arg(long, env = "CARMY_ALLOW_ANONYMOUS_NETWORK")]
    pub allow_anonymous_network: bool,

    /// Entries of the in-memory store (used when `DATABASE_URL` is unset).
    #[arg(long, env = "CARMY_MEMORY_CAPACITY", default_value_t = carmy::memory::DEFAULT_MEMORY_CAPACITY,
          value_parser = InRange::<usize>::at_least(1))]
    pub memory_capacity: usize,

    /// Default tool deadline in milliseconds; a tool still running then is recorded `timed_out`.
    #[arg(long, env = "CARMY_TOOL_TIMEOUT_MS", default_value_t = millis(EngineConfig::default().default_tool_timeout),
          value_parser = InRange::<u64>::at_least(1))]
    pub tool_timeout_ms: u64,

    /// Largest recorded result in bytes of JSON; larger results are recorded as
    /// `RESULT_TOO_LARGE`.
    #[arg(long, env = "CARMY_MAX_RESULT_BYTES", default_value_t = EngineConfig::default().max_result_bytes,
          value_parser = InRange::<usize>::at_least(1))]
    pub max_result_bytes: usize,

    /// Which arguments are kept with each execution, for the API, the CLI, the console and SQL
    /// (docs/semantics.md §8.5): `none`; `redacted` (each tool's `redact_arguments` replaced by
    /// "[redacted]" before storage); or `all` (the tools' redactions ignored: test systems
    /// only). Kept arguments over CARMY_MAX_RESULT_BYTES refuse the call (413
    /// `ARGUMENTS_TOO_LARGE`).
    #[arg(long, env = "CARMY_KEEP_ARGUMENTS", default_value = "redacted",
          value_parser = |text: &str| text.parse::<carmy::arguments::KeepArguments>())]
    pub keep_arguments: carmy::arguments::KeepArguments,

    /// Largest request body in bytes; larger bodies get 413.
    #[arg(long, env = "CARMY_MAX_BODY_BYTES", default_value_t = carmy::http::DEFAULT_MAX_BODY_BYTES,
          value_parser = InRange::<usize>::at_least(1))]
    pub max_body_bytes: usize,

    /// How long a request body may take to arrive after its headers (ms); slower bodies get 408.
    #[arg(long, env = "CARMY_BODY_TIMEOUT_MS", default_value_t = millis(carmy::http::DEFAULT_BODY_TIMEOUT),
          value_parser = InRange::<u64>::at_least(1))]
    pub body_timeout_ms: u64,

    /// On shutdown, how long running executions may finish (ms) before they are recorded
    /// `cancelled` (0: at once).
    #[arg(long, env = "CARMY_DRAIN_MS", default_value_t = millis(EngineConfig::default().drain_period))]
    pub drain_ms: u64,

    /// PostgreSQL connections in the pool; the store opens as many again for its hot path
    /// (reserve and complete), so a replica uses up to twice this many.
    #[arg(long, env = "CARMY_DB_POOL_SIZE", default_value_t = carmy_postgres::DEFAULT_MAX_CONNECTIONS,
          value_parser = InRange::<u32>::at_least(1))]
    pub db_pool_size: u32,

    /// Longest wait for a pooled connection (ms) before answering 503.
    #[arg(long, env = "CARMY_DB_ACQUIRE_TIMEOUT_MS", default_value_t = millis(carmy_postgres::DEFAULT_ACQUIRE_TIMEOUT),
          value_parser = InRange::<u64>::at_least(1))]
    pub db_acquire_timeout_ms: u64,

    /// `statement_timeout` and `idle_in_transaction_session_timeout` (ms) of this process's
    /// database sessions (docs/semantics.md §14.1); 0 leaves the server's or role's settings.
    #[arg(long, env = "CARMY_DB_STATEMENT_TIMEOUT_MS", default_value_t = millis(carmy_postgres::DEFAULT_STATEMENT_TIMEOUT))]
    pub db_statement_timeout_ms: u64,

    /// Refuse to start when the primary has standbys and its commits do not wait for a
    /// synchronous one (a failover could lose reported outcomes; docs/semantics.md §14).
    /// Without it, the gateway only warns.
    #[arg(long, env = "CARMY_REQUIRE_SYNC_REPLICA")]
    pub require_sync_replica: bool,

    /// Group commit (docs/semantics.md §8): the most reservations (and, separately, the most
    /// outcomes) PostgreSQL takes in one statement and one commit. A batch is whatever queued
    /// while the previous one was in flight, never waited for; 1 turns batching off.
    #[arg(long, env = "CARMY_DB_BATCH_MAX_ROWS", default_value_t = carmy_postgres::DEFAULT_BATCH_MAX_ROWS,
          value_parser = InRange::<usize>::new(1, carmy_postgres::MAX_BATCH_MAX_ROWS as u64))]
    pub db_batch_max_rows: usize,

    /// Longest wait (ms) a call may ask for with `Prefer: wait=N` for a running duplicate's
    /// outcome (docs/semantics.md §12.6); longer waits are cut to it, 0 turns waiting off.
    #[arg(long, env = "CARMY_MAX_WAIT_MS", default_value_t = millis(EngineConfig::default().max_wait),
          value_parser = InRange::<u64>::new(0, 3_600_000))]
    pub max_wait_ms: u64,

    /// How long a finished record holds its identity (docs/semantics.md §12.9): e.g. `7d`, `36h`,
    /// `90min`, `30s`; `0` keeps records forever. Then a call with the same request_id runs as
    /// new and the record is pruned (running and interrupted ones never are). Set the same value
    /// on every replica.
    #[arg(long, env = "CARMY_RETENTION", default_value = "7days", value_parser = RetentionParser)]
    pub retention: Retention,

    /// How often (ms) this replica looks for records past their retention and prunes them in
    /// batches of 1000 (one replica at a time).
    #[arg(long, env = "CARMY_PRUNE_INTERVAL_MS", default_value_t = millis(EngineConfig::default().prune_interval),
          value_parser = InRange::<u64>::at_least(1))]
    pub prune_interval_ms: u64,

    /// How often (ms) this replica looks for interrupted executions of tools with a
    /// `[tools.reconcile]` probe and probes them (docs/semantics.md §12.10); also
    /// the first pause between two probes of one execution, doubled after each.
    #[arg(long, env = "CARMY_RECONCILE_INTERVAL_MS", default_value_t = millis(EngineConfig::default().reconcile_interval),
          value_parser = InRange::<u64>::new(1, 3_600_000))]
    pub reconcile_interval_ms: u64,

    /// Probes of one interrupted execution before it is left for a person.
    #[arg(long, env = "CARMY_RECONCILE_MAX_ATTEMPTS", default_value_t = EngineConfig::default().reconcile_max_attempts,
          value_parser = InRange::<u32>::new(1, 1000))]
    pub reconcile_max_attempts: u32,

    /// The longest (ms) a retry that meets an interrupted execution waits for its probe
    /// before answering `EXECUTION_UNCERTAIN` (being reconciled).
    #[arg(long, env = "CARMY_RECONCILE_INLINE_MS", default_value_t = millis(EngineConfig::default().reconcile_inline),
          value_parser = InRange::<u64>::new(1, 60_000))]
    pub reconcile_inline_ms: u64,

    /// Lease of this process's executions (ms): another replica reports an execution
    /// `interrupted` once its owner has not renewed for this long. From 3 ms (the shortest
    /// lease a renewal fits in: a third of it between renewals plus half of that to get the
    /// lease's connection) to 24 h (the store's limits).
    #[arg(long, env = "CARMY_LEASE_TTL_MS", default_value_t = millis(carmy_postgres::DEFAULT_LEASE_TTL),
          value_parser = InRange::<u64>::new(MIN_LEASE_TTL_MS, MAX_LEASE_TTL_MS))]
    pub lease_ttl_ms: u64,

    /// Finished records kept in this process's replay cache (PostgreSQL only; 0 disables it).
    /// Replays and conflicts of cached records need no database round trip.
    #[arg(long, env = "CARMY_REPLAY_CACHE_ENTRIES", default_value_t = carmy::cache::DEFAULT_CACHE_ENTRIES)]
    pub replay_cache_entries: u64,

    /// How long a cached record is served (ms) before the database is asked again; bounds how
    /// long an operator's SQL change to a finished row can go unseen by this process.
    #[arg(long, env = "CARMY_REPLAY_CACHE_TTL_MS", default_value_t = millis(carmy::cache::DEFAULT_CACHE_TTL),
          value_parser = InRange::<u64>::at_least(1))]
    pub replay_cache_ttl_ms: u64,

    /// Allowed `Host` values of `/mcp` (docs/semantics.md §11), comma-separated, each `host` or
    /// `host:port`; `*` allows every host. Default: the MCP SDK's loopback names (`localhost`,
    /// `127.0.0.1`, `::1`), which guard a local server against DNS rebinding.
    #[arg(long, env = "CARMY_MCP_ALLOWED_HOSTS", value_delimiter = ',')]
    pub mcp_allowed_hosts: Vec<String>,

    /// Allowed `Origin` values of `/mcp` (docs/semantics.md §11), comma-separated, each
    /// `scheme://host`, `scheme://host:port` or `scheme://host:*`; `*` allows every origin.
    /// Default: the loopback origins on any port. Requests without `Origin` (agents, SDK
    /// clients) are never refused by it; a browser page of any other origin gets 403.
    #[arg(long, env = "CARMY_MCP_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub mcp_allowed_origins: Vec<String>,

    /// `_meta` keys of a `tools/call` read for its request id, in order, after
    /// `params.idempotencyKey` and `_meta["io.carmy/request_id"]` (comma-separated; empty for
    /// none).
    #[arg(
        long,
        env = "CARMY_MCP_REQUEST_ID_META",
        value_delimiter = ',',
        default_value = "claudecode/toolUseId"
    )]
    pub mcp_request_id_meta: Vec<String>,

    /// `_meta` keys of a `tools/call` that name the client's conversation, read in order
    /// (`key`, or `key[member]` for a member of an object): the conversation scopes the ids of
    /// the model and of the client's `_meta` when `_meta["io.carmy/session_id"]` does not
    /// (docs/semantics.md §11; comma-separated, empty for none).
    #[arg(
        long,
        env = "CARMY_MCP_CONVERSATION_META",
        value_delimiter = ',',
        default_value = "vscode.conversationId,x-codex-turn-metadata[session_id]"
    )]
    pub mcp_conversation_meta: Vec<String>,

    /// How long after its outcome was recorded a request id the model chose, with no session
    /// or conversation scoping it, still replays it (docs/semantics.md §11): e.g. `10min`,
    /// `1h`; `0` replays for as long as the record is kept. A later repeat is refused with
    /// `REQUEST_ID_REUSED`, a text sending the model to check before acting again.
    #[arg(long, env = "CARMY_MCP_ARGUMENT_REPLAY_WINDOW", default_value = "10min",
          value_parser = WindowParser)]
    pub mcp_argument_replay_window: Retention,

    /// Refuse MCP calls that carry no request id instead of running them unprotected.
    #[arg(long, env = "CARMY_MCP_REQUIRE_REQUEST_ID")]
    pub mcp_require_request_id: bool,

    /// The argument through which a model holds a request id (docs/semantics.md §11): added to
    /// the schema of every tool not annotated read-only that `/mcp` lists, unless the tools
    /// file chooses otherwise per tool (`key_argument`).
    #[arg(long, env = "CARMY_MCP_KEY_ARGUMENT", default_value = carmy::key_argument::DEFAULT_KEY_ARGUMENT)]
    pub mcp_key_argument: String,

    /// Make that argument required: a call without it is refused with a text asking for one
    /// (per tool: `key_required` in the tools file).
    #[arg(long, env = "CARMY_MCP_KEY_REQUIRED")]
    pub mcp_key_required: bool,

    /// How long an MCP call with a request id may take before it is answered "still running,
    /// call again with the same request id" (the tool keeps running; docs/semantics.md §11), in
    /// milliseconds. Below common client timeouts (60 s).
    #[arg(long, env = "CARMY_MCP_ANSWER_WITHIN_MS", default_value_t = 45_000,
          value_parser = InRange::<u64>::at_least(1))]
    pub mcp_answer_within_ms: u64,

    /// How long an MCP call with a request id, from a client that declared the tasks extension
    /// (`io.modelcontextprotocol/tasks`), may take before it is answered with a task that any
    /// replica answers `tasks/get` for (docs/semantics.md §11), in milliseconds.
    #[arg(long, env = "CARMY_MCP_TASK_AFTER_MS", default_value_t = 1_000,
          value_parser = InRange::<u64>::at_least(0))]
    pub mcp_task_after_ms: u64,

    /// A TOML file declaring the tools to serve (HTTP upstreams, MCP servers; see
    /// docs/tools-file.md). Unset serves the example tools.
    #[arg(long, env = "CARMY_TOOLS_FILE")]
    pub tools_file: Option<PathBuf>,

    /// Log format.
    #[arg(long, env = "CARMY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
}

/// Subcommands.
#[derive(Clone, Debug, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Serve the API (the default).
    Serve,
    /// Apply the database migrations under the migration lock, then exit; optionally spread
    /// the schema over Citus nodes (docs/scale.md) and grant the least-privilege roles
    /// (docs/semantics.md §14.2). Run it as the schema's owner.
    Migrate(MigrateArgs),
    /// Validate the tools file (and reach each MCP server), print the tool table with secrets
    /// masked, then exit without serving.
    CheckConfig,
    /// Find, inspect and decide on executions in DATABASE_URL (docs/semantics.md §12.5): list,
    /// show, resolve, release. Exit codes: 0 done, 2 bad input, 3 no such execution, 4 already
    /// decided, 5 still running, 6 database unavailable, 7 decision may or may not have been
    /// applied, 1 anything else.
    Executions(crate::executions::args::ExecutionsArgs),
}

/// The flags of `carmy-gateway migrate`.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct MigrateArgs {
    /// After migrating, give this existing role exactly what a gateway needs (no DDL, no
    /// DELETE or UPDATE of audit rows; docs/semantics.md §14.2); run gateways as it.
    #[arg(long, value_name = "ROLE")]
    pub grant_runtime: Option<String>,
    /// After migrating, give this existing role read access to every table and view of the
    /// schema carmy, and nothing else.
    #[arg(long, value_name = "ROLE")]
    pub grant_reader: Option<String>,
    /// After migrating, spread the schema over the nodes of this engine, by principal
    /// (docs/scale.md); run against the Citus coordinator, whose database has `CREATE
    /// EXTENSION citus` and its workers. Checked before migrating: without the extension
    /// nothing is changed. Repeatable.
    #[arg(long, value_enum, value_name = "ENGINE")]
    pub distribute: Option<DistributeEngine>,
}

/// The engines of `carmy-gateway migrate --distribute`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DistributeEngine {
    /// Citus: reservations, released executions and the audit log distributed by principal,
    /// instances and outcome waiters as reference tables.
    Citus,
}

impl From<DistributeEngine> for carmy_postgres::Distribution {
    fn from(engine: DistributeEngine) -> Self {
        match engine {
            DistributeEngine::Citus => carmy_postgres::Distribution::Citus,
        }
    }
}

/// How logs are written to standard error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The store's shortest lease that leaves room for a renewal, in milliseconds
/// (`carmy_postgres::MIN_RENEWABLE_LEASE_TTL`, 3 ms).
const MIN_LEASE_TTL_MS: u64 = carmy_postgres::MIN_RENEWABLE_LEASE_TTL.as_millis() as u64;

/// The store's longest lease, in milliseconds (`carmy_postgres::MAX_LEASE_TTL`, 24 h).
const MAX_LEASE_TTL_MS: u64 = carmy_postgres::MAX_LEASE_TTL.as_millis() as u64;

/// `duration` in whole milliseconds (saturating), the unit of the `*_MS` settings.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_reads_durations_and_zero_is_forever() {
        let parse = |value: &str| {
            Config::try_parse_from(["carmy-gateway", "--retention", value])
                .map(|config| config.retention.0)
        };
        assert_eq!(parse("7d").unwrap(), Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse("36h").unwrap(), Some(Duration::from_secs(36 * 3_600)));
        assert_eq!(parse("1h 30m").unwrap(), Some(Duration::from_secs(5_400)));
        assert_eq!(parse("0").unwrap(), None);
        assert_eq!(parse("0s").unwrap(), None);
        assert!(parse("soon").is_err());
        let default = Config::try_parse_from(["carmy-gateway"]).unwrap();
        assert_eq!(
            default.retention.0,
            Some(carmy::retention::DEFAULT_RETENTION)
        );
    }
}
