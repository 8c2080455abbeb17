//! The tool table `carmy-gateway check-config` prints: one line per tool with its kind, method,
//! URL template, deadline, headers (values masked) and `redact_arguments`; one per client-held
//! tool and one per MCP server.

use crate::spec::{McpTransport, ProbeAsk, ProbeSpec, ToolsConfig};
use carmy::arguments::Redaction;
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
            "http  {:<24} {:<6} {}  timeout={}  idempotency_header={}  headers=[{}]{}",
            tool.name,
            tool.method.as_str(),
            tool.url.as_str(),
            tool.timeout
                .map_or("default".to_owned(), |t| format!("{}ms", t.as_millis())),
            tool.idempotency_header
                .as_ref()
                .map_or("(none)", |h| h.as_str()),
            headers.join(", "),
            redaction_text(tool.redaction.as_ref()),
        );
        if let Some(probe) = &tool.reconcile {
            let _ = writeln!(out, "      {:<24} {}", "", probe_line(probe));
        }
    }
    for tool in &config.client_tools {
        let _ = writeln!(
            out,
            "client {:<23} held by its caller (POST /v1/held){}",
            tool.name,
            redaction_text(tool.redaction.as_ref()),
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
            "mcp   {:<24} {}  prefix={:?}{}",
            server.name,
            reach.trim_end(),
            server.prefix,
            redaction_text(server.redaction.as_ref()),
        );
    }
    out
}

/// `  redact_arguments="all"` or `  redact_arguments=["/card/number"]` (docs/semantics.md §8.5);
/// nothing when the entry hides nothing.
fn redaction_text(redaction: Option<&Redaction>) -> String {
    match redaction {
        None => String::new(),
        Some(Redaction::Whole) => "  redact_arguments=\"all\"".to_owned(),
        Some(Redaction::Pointers(pointers)) => {
            format!("  redact_arguments={}", serde_json::json!(pointers))
        }
    }
}

/// A tool's probe as the table shows it: `reconcile GET <url> found=[200] absent=[404]
/// absent_means=unknown timeout=2000ms headers=[…]` (header values masked), or `reconcile tool
/// <name> arguments={…} absent=[404] absent_means=unknown timeout=2000ms`.
fn probe_line(probe: &ProbeSpec) -> String {
    let list = |statuses: &std::collections::BTreeSet<u16>| {
        statuses
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let means = if probe.absent_not_executed {
        "not_executed"
    } else {
        "unknown"
    };
    match &probe.ask {
        ProbeAsk::Http {
            method,
            url,
            found_status,
            headers,
        } => {
            let headers: Vec<String> = headers
                .iter()
                .map(|header| format!("{}: {}", header.name, header.masked()))
                .collect();
            format!(
                "reconcile {} {}  found=[{}] absent=[{}] absent_means={means}  timeout={}ms  headers=[{}]",
                method.as_str(),
                url.as_str(),
                list(found_status),
                list(&probe.absent_status),
                probe.timeout.as_millis(),
                headers.join(", "),
            )
        }
        ProbeAsk::Tool {
            tool,
            arguments,
            found_pointer,
        } => format!(
            "reconcile tool {tool} arguments={arguments}  found_pointer={found_pointer}  absent=[{}] absent_means={means}  timeout={}ms",
            list(&probe.absent_status),
            probe.timeout.as_millis(),
        ),
    }
}
