//! # carmy-tools
//!
//! Tools from configuration (docs/semantics.md §10): a TOML tools file (`CARMY_TOOLS_FILE`)
//! declares HTTP tools and upstream MCP servers, so an operator puts Carmy in front of the
//! agents' real tools without writing Rust.
//!
//! Modules: [`config`] (the file as written), [`load`] (validation, [`ConfigError`]), [`spec`]
//! (the validated form), [`secret`] (`${NAME}` expansion, masked values), [`template`] (URL
//! templates, percent-encoded path arguments), [`client`] (the pooled upstream client),
//! [`http_tool`] (the HTTP tool), [`mcp`] (upstream MCP servers), [`probe`] and [`tool_probe`] (reconciliation probes), `response` (responses to outcomes), [`table`] (the tool table
//! of `carmy-gateway check-config`).

pub mod client;
pub mod config;
pub mod error;
mod fields;
pub mod http_tool;
pub mod load;
pub mod mcp;
pub mod probe;
mod response;
pub mod secret;
pub mod spec;
pub mod table;
pub mod template;
pub mod tool_probe;

pub use error::ConfigError;
pub use fields::check_name;
pub use http_tool::HttpTool;
pub use load::load;
pub use spec::{HttpToolSpec, McpServerSpec, ToolsConfig};
