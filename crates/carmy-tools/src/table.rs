//! The tool table `carmy-gateway check-config` prints: one line per tool with its kind, method,
//! URL template, deadline and headers, header values masked.

use crate::spec::{McpTransport, ToolsConfig};
use std::fmt::Write;

/// The table of `config` as text, one tool or server per line; never a secret.
pub fn tool_table(config: &ToolsConfig) -> String {
    let mut out = String::new();
    for tool in &config.http_tools {
        let headers: Vec<String> = tool
            .headers
            .iter()
            .map(|header| format!("{}: {}", header.name, header.masked()))
            .collect();
        let _ = writeln!(
            out,
            "http  {:<24} {:<6} {}  timeout={}  idempotency_header={}  headers=[{}]",
            tool.name,
            tool.method.as_str(),
            tool.url.as_str(),
            tool.timeout
                .map_or("default".to_owned(), |t| format!("{}ms", t.as_millis())),
            tool.idempotency_header
                .as_ref()
                .map_or("(none)", |h| h.as_str()),
            headers.join(", "),
        );
    }
    for server in &config.mcp_servers {
        let reach = match &server.transport {
            McpTransport::Http { url, .. } => format!("http {url}"),
            McpTransport::Stdio { command, args, .. } => {
                format!("stdio {command} {}", args.join(" "))
            }
        };
        let _ = writeln!(
            out,
            "mcp   {:<24} {}  prefix={:?}",
            server.name,
            reach.trim_end(),
            server.prefix
        );
    }
    out
}
