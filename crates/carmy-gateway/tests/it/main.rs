//! The gateway's integration tests, in one test binary (one link): in-process through the real
//! router (`carmy_gateway::build`), and against real `carmy-gateway` processes on PostgreSQL.
//! The harness is `carmy-test-support`. The crash-injection tests and the soak are the target
//! `crash` (`tests/crash/`, feature `fault-injection`).
//!
//! Grouped by area: [`front`] (the HTTP front and the binary), [`mcp`] (the MCP front and MCP
//! upstreams), [`tools`] (tools files, HTTP tools and their upstreams), [`recovery`]
//! (decisions, the operator CLI, reconciliation, takeover) and [`postgres`] (replicas, outages,
//! failover on a real PostgreSQL).

// At the top level for its `include_str!` paths (fixtures, migrations).
mod example_orders;
mod front;
mod mcp;
mod postgres;
mod recovery;
mod tools;

// The helpers other areas use, at the paths they had before the grouping (`crate::upstream`, …).
use mcp::mcp_client;
use postgres::round_trips;
use recovery::{executions_cli, recovery_replicas};
use tools::{http_tools, payments, tools_file, upstream};
