//! The MCP front (docs/semantics.md §11) through the official SDK's client and raw HTTP, on one
//! process and across replicas, and MCP upstreams behind the gateway (§10).

pub(crate) mod mcp_client;
mod mcp_front;
mod mcp_hints;
mod mcp_http;
mod mcp_ids;
mod mcp_key;
mod mcp_records;
mod mcp_replicas;
mod mcp_rmcp;
mod mcp_tools;
mod mcp_upstream_tasks;
mod mcp_upstreams;
pub(crate) mod upstream_servers;
