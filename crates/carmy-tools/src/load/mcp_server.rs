//! Validating an `[[mcp_servers]]` entry (docs/semantics.md §10): one transport, Streamable HTTP
//! (`url`, `headers`) or stdio (`command`, `args`, `env`, expanded from the environment), the
//! prefix, the deadline and the policies; each mistake a [`ConfigError`] naming the server and
//! the field.

use super::{task_always, Checker, Environment};
use crate::config::RawMcpServer;
use crate::error::ConfigError;
use crate::fields::{check_name, policy_named, positive, redaction};
use crate::secret::{expand, Secret};
use crate::spec::{McpServerSpec, McpTransport};
use carmy::key_argument::KeySetting;
use carmy::OnInterrupted;
use std::collections::BTreeMap;
use std::time::Duration;
use toml::Spanned;

impl Checker<'_> {
    /// A stdio server's environment, expanded, and the values of its `${NAME}` references.
    fn environment(
        &self,
        env: &BTreeMap<String, Spanned<String>>,
        label: &str,
    ) -> Result<(Environment, Vec<Secret>), ConfigError> {
        let mut out = Vec::new();
        let mut secrets = Vec::new();
        for (key, value) in env {
            let (expanded, names) = expand(value.get_ref(), self.lookup).map_err(|error| {
                self.report.error(
                    Some(value.span().start),
                    Some(label),
                    Some(&format!("env.{key}")),
                    error.to_string(),
                )
            })?;
            secrets.extend(self.values_of(&names));
            out.push((key.clone(), expanded));
        }
        Ok((out, secrets))
    }

    /// An `[[mcp_servers]]` entry checked: its transport (Streamable HTTP with headers, or
    /// stdio with its environment), prefix, deadline and policies, and the secrets it holds.
    pub(super) fn mcp_server(
        &self,
        entry: &Spanned<RawMcpServer>,
    ) -> Result<McpServerSpec, ConfigError> {
        let server = entry.get_ref();
        let name = server.name.get_ref().clone();
        let label = format!("mcp server {name:?}");
        let at = |span: std::ops::Range<usize>, field: &str, message: String| {
            self.report
                .error(Some(span.start), Some(&label), Some(field), message)
        };
        if name.is_empty() {
            return Err(at(server.name.span(), "name", "must not be empty".into()));
        }
        if !server.prefix.is_empty() {
            check_name(&server.prefix)
                .map_err(|message| at(server.name.span(), "prefix", message))?;
        }
        let mut secrets = Vec::new();
        let transport = match (&server.url, &server.command) {
            (Some(url), None) => {
                let parsed = url::Url::parse(url.get_ref())
                    .ok()
                    .filter(|parsed| {
                        matches!(parsed.scheme(), "http" | "https") && parsed.has_host()
                    })
                    .ok_or_else(|| {
                        at(
                            url.span(),
                            "url",
                            format!("{:?} is not an http:// or https:// URL", url.get_ref()),
                        )
                    })?;
                let headers = self.headers(&server.headers, &label)?;
                secrets.extend(headers.iter().flat_map(|h| h.secrets.iter().cloned()));
                McpTransport::Http {
                    url: parsed,
                    headers,
                }
            }
            (None, Some(command)) => {
                if !server.headers.is_empty() {
                    return Err(at(
                        command.span(),
                        "headers",
                        "headers apply to url (Streamable HTTP) servers only".into(),
                    ));
                }
                let (env, names) = self.environment(&server.env, &label)?;
                secrets.extend(names);
                McpTransport::Stdio {
                    command: command.get_ref().clone(),
                    args: server.args.clone(),
                    env,
                }
            }
            _ => {
                return Err(at(
                    entry.span(),
                    "url",
                    "give exactly one of url (Streamable HTTP) or command (stdio)".into(),
                ))
            }
        };
        Ok(McpServerSpec {
            name,
            transport,
            prefix: server.prefix.clone(),
            timeout: positive(&server.timeout_ms)
                .map_err(|span| at(span, "timeout_ms", "must be at least 1".into()))?
                .map(Duration::from_millis),
            idempotency_argument: server.idempotency_argument.clone(),
            on_interrupted: match &server.on_interrupted {
                None => OnInterrupted::default(),
                Some(policy) => policy_named(policy.get_ref())
                    .map_err(|message| at(policy.span(), "on_interrupted", message))?,
            },
            task_always: task_always(&server.task)
                .map_err(|(span, message)| at(span, "task", message))?,
            key: KeySetting {
                argument: server.key_argument.clone(),
                required: server.key_required,
            },
            redaction: redaction(&server.redact_arguments)
                .map_err(|(span, message)| at(span, "redact_arguments", message))?,
            secrets,
        })
    }
}
