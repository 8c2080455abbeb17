//! The gateway's integration tests, in one test binary (one link): in-process through the real
//! router (`carmy_gateway::build`), and against real `carmy-gateway` processes on PostgreSQL.
//! The harness is `carmy-test-support`. The soak (`tests/soak.rs`) is a binary of its own.

mod config;
#[cfg(feature = "fault-injection")]
mod crash_points;
mod decision_limits;
mod effect_unknown;
mod example_orders;
mod executions_cli;
mod executions_cli_failures;
mod failover;
mod frozen_orders;
mod hostile_input;
mod http_tool_faults;
mod http_tools;
mod lease_starvation;
mod mcp_client;
mod mcp_front;
mod mcp_http;
mod mcp_key;
mod mcp_replicas;
mod mcp_rmcp;
mod mcp_tools;
mod mcp_upstreams;
mod memory_cases;
mod operator_keys;
mod order_errors;
mod partition;
mod payments;
mod pgbouncer;
mod postgres_outages;
mod postgres_replicas;
mod readiness_replication;
mod readme_tools;
mod reconcile;
mod record_damaged;
mod recovery_http;
mod recovery_replicas;
mod replay_cache_replicas;
mod round_trips;
mod runtime_role;
mod security;
mod shutdown_and_cancel;
mod takeover;
mod test_script;
mod tools_file;
mod upstream;
