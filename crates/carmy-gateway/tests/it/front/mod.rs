//! The HTTP front and the binary: configuration, hostile input, security, operator keys, the
//! field cases on the in-memory store, `scripts/test`, the README's code blocks, the
//! architecture page's crate diagram, and traces.

// `operator_keys` reaches the MCP client as `super::mcp_client`.
use crate::mcp_client;

mod architecture;
mod config;
pub(crate) mod console;
mod hostile_input;
mod memory_cases;
mod memory_requests;
mod oauth;
mod operator_keys;
mod readme;
mod security;
mod test_script;
mod traces;
