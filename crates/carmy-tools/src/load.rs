//! Reading and validating the tools file in full, before anything serves (docs/semantics.md
//! §10): every mistake is a [`ConfigError`] naming the file, line, entry and field.

use crate::config::{EntryNames, RawClientTool, RawFile, RawTool};
use crate::error::{ConfigError, Reporter};
use crate::fields::{check_name, on_interrupted, parse_method, positive, redaction, status_lists};
use crate::secret::{expand, Secret};
use crate::spec::{ClientToolSpec, Header, HttpToolSpec, ToolsConfig, DEFAULT_IDEMPOTENCY_HEADER};
use crate::template::UrlTemplate;
use carmy::key_argument::KeySetting;
use reqwest::header::{HeaderName, HeaderValue};
use reqwest::Method;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;
use toml::Spanned;

mod mcp_server;
mod probe;

/// Headers a tools file may not set: the HTTP client owns them.
const RESERVED_HEADERS: [&str; 6] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "traceparent",
    "content-type",
];

/// Reads `file` and validates it in full. `lookup` resolves `${NAME}` (the environment, in the
/// gateway); `builtin` are the names of the example tools, which configured tools may not
/// reuse when `example_tools = true`.
///
/// # Errors
/// The first [`ConfigError`] found: unreadable file, TOML syntax or unknown key (with its
/// line), invalid JSON Schema, duplicate name, unset variable, bad method, bad URL template, …
pub fn load(
    file: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
    builtin: &[&str],
) -> Result<ToolsConfig, ConfigError> {
    let text = std::fs::read_to_string(file).map_err(|error| ConfigError {
        file: file.to_owned(),
        line: None,
        entry: None,
        field: None,
        message: format!("cannot be read: {error}"),
    })?;
    let report = Reporter { file, text: &text };
    let raw: RawFile = toml::from_str(&text)
        .map_err(|error| single_table(&report).unwrap_or_else(|| parse_error(&report, &error)))?;
    if raw.tools.is_empty()
        && raw.mcp_servers.is_empty()
        && raw.client_tools.is_empty()
        && !raw.example_tools
    {
        return Err(report.error(
            None,
            None,
            None,
            "declares no tools: add [[tools]], [[mcp_servers]] or [[client_tools]] entries, or set example_tools = true to serve only the built-in example tools",
        ));
    }
    let checker = Checker {
        report: &report,
        lookup,
        base: file.parent().unwrap_or(Path::new(".")),
    };
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    if raw.example_tools {
        for name in builtin {
            names.insert((*name).to_owned(), "a built-in example tool".to_owned());
        }
    }
    let mut http_tools = Vec::new();
    for tool in &raw.tools {
        let spec = checker.tool(tool)?;
        if let Some(other) = names.insert(spec.name.clone(), "another [[tools]] entry".into()) {
            return Err(report.error(
                Some(tool.get_ref().name.span().start),
                Some(&format!("tool {:?}", spec.name)),
                Some("name"),
                format!("the name is already used by {other}; tool names must be unique"),
            ));
        }
        http_tools.push(spec);
    }
    let mut client_tools = Vec::new();
    for tool in &raw.client_tools {
        let spec = checker.client_tool(tool)?;
        if let Some(other) = names.insert(spec.name.clone(), "another tool entry".into()) {
            return Err(report.error(
                Some(tool.get_ref().name.span().start),
                Some(&format!("client tool {:?}", spec.name)),
                Some("name"),
                format!("the name is already used by {other}; tool names must be unique"),
            ));
        }
        client_tools.push(spec);
    }
    let example_names: &[&str] = if raw.example_tools { builtin } else { &[] };
    probe::check_probe_tools(
        &report,
        &raw.tools,
        &http_tools,
        !raw.mcp_servers.is_empty(),
        example_names,
    )?;
    let mut mcp_servers = Vec::new();
    let mut server_names = BTreeSet::new();
    for server in &raw.mcp_servers {
        let spec = checker.mcp_server(server)?;
        if !server_names.insert(spec.name.clone()) {
            return Err(report.error(
                Some(server.get_ref().name.span().start),
                Some(&format!("mcp server {:?}", spec.name)),
                Some("name"),
                "two [[mcp_servers]] entries have this name; names must be unique",
            ));
        }
        mcp_servers.push(spec);
    }
    Ok(ToolsConfig {
        file: file.to_owned(),
        example_tools: raw.example_tools,
        http_tools,
        mcp_servers,
        client_tools,
    })
}

/// `[tools]` or `[mcp_servers]` written as a single table where a list of entries is meant.
fn single_table(report: &Reporter<'_>) -> Option<ConfigError> {
    let table: toml::Table = toml::from_str(report.text).ok()?;
    let key = ["tools", "mcp_servers"]
        .into_iter()
        .find(|key| table.get(*key).is_some_and(toml::Value::is_table))?;
    let offset = report
        .text
        .lines()
        .scan(0, |start, line| {
            let at = *start;
            *start += line.len() + 1;
            Some((at, line))
        })
        .find(|(_, line)| {
            line.trim()
                .strip_prefix('[')
                .and_then(|rest| rest.strip_suffix(']'))
                .is_some_and(|name| name.trim() == key)
        })
        .map(|(at, _)| at);
    Some(report.error(
        offset,
        None,
        Some(key),
        format!("[{key}] is a single table; write [[{key}]] (double brackets) before each entry"),
    ))
}

/// A TOML or shape error, with its line and, when it lies inside an entry, the entry's name.
fn parse_error(report: &Reporter<'_>, error: &toml::de::Error) -> ConfigError {
    let span = error.span();
    // The entry an error is in: the last one starting before it (an entry's span may cover
    // only its `[[tools]]` header).
    let entry = span.as_ref().and_then(|span| {
        let names: EntryNames = toml::from_str(report.text).ok()?;
        let label = |kind: &str, entry: &Spanned<crate::config::EntryName>| {
            let label = match &entry.get_ref().name {
                Some(toml::Value::String(name)) => format!("{kind} {name:?}"),
                _ => format!("a {kind} without a name"),
            };
            (entry.span().start, label)
        };
        names
            .tools
            .iter()
            .map(|entry| label("tool", entry))
            .chain(
                names
                    .mcp_servers
                    .iter()
                    .map(|entry| label("mcp server", entry)),
            )
            .chain(
                names
                    .client_tools
                    .iter()
                    .map(|entry| label("client tool", entry)),
            )
            .filter(|(start, _)| *start <= span.start)
            .max_by_key(|(start, _)| *start)
            .map(|(_, label)| label)
    });
    let plain = |key: &str| {
        !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    // The span is the key itself (unknown or missing keys) or the value of `key = value` (type
    // errors): then the key is the one on the value's line before its `=`.
    let field = span.as_ref().and_then(|span| {
        let key = report.text.get(span.clone())?.trim();
        let after = report.text[span.end..].trim_start_matches([' ', '\t', '\r']);
        if plain(key) && !after.is_empty() && !after.starts_with(['\n', ',', '}', '#']) {
            return Some(key.to_owned());
        }
        let line_start = report.text[..span.start].rfind('\n').map_or(0, |at| at + 1);
        let before = report.text.get(line_start..span.start)?;
        let (key, _) = before.rsplit_once('=')?;
        let key = key.rsplit(['{', ',']).next()?.trim();
        plain(key).then(|| key.to_owned())
    });
    ConfigError {
        file: report.file.to_owned(),
        line: span.map(|span| report.line_of(span.start)),
        entry,
        field,
        message: error.message().trim().to_owned(),
    }
}

/// A stdio server's environment: names and expanded values.
type Environment = Vec<(String, Secret)>;

/// Validates entries of one file.
struct Checker<'a> {
    report: &'a Reporter<'a>,
    lookup: &'a dyn Fn(&str) -> Option<String>,
    base: &'a Path,
}

impl Checker<'_> {
    fn tool(&self, entry: &Spanned<RawTool>) -> Result<HttpToolSpec, ConfigError> {
        let tool = entry.get_ref();
        let name = tool.name.get_ref().clone();
        let label = format!("tool {name:?}");
        let at = |span: std::ops::Range<usize>, field: &str, message: String| {
            self.report
                .error(Some(span.start), Some(&label), Some(field), message)
        };
        check_name(&name).map_err(|message| at(tool.name.span(), "name", message))?;
        let method = match &tool.method {
            None => Method::POST,
            Some(method) => parse_method(method.get_ref())
                .map_err(|message| at(method.span(), "method", message))?,
        };
        let url = UrlTemplate::parse(tool.url.get_ref())
            .map_err(|message| at(tool.url.span(), "url", message))?;
        let input_schema = self.schema(tool, &label, entry.span().start)?;
        if let Some(undeclared) = url
            .placeholders()
            .find(|name| !declares(&input_schema, name))
        {
            return Err(at(tool.url.span(), "url", format!(
                "placeholder {{{undeclared}}} is not declared in input_schema; add {undeclared:?} to its properties (and required), so agents know to send it"
            )));
        }
        let idempotency_header = match &tool.idempotency_header {
            None => Some(HeaderName::from_static(DEFAULT_IDEMPOTENCY_HEADER)),
            Some(header) if header.get_ref().is_empty() => None,
            Some(header) => Some(HeaderName::from_bytes(header.get_ref().as_bytes()).map_err(
                |_| {
                    at(
                        header.span(),
                        "idempotency_header",
                        format!("{:?} is not a valid header name", header.get_ref()),
                    )
                },
            )?),
        };
        let on_interrupted = on_interrupted(tool, idempotency_header.is_some())
            .map_err(|(span, message)| at(span, "on_interrupted", message))?;
        let (not_executed_statuses, effect_unknown_statuses) =
            status_lists(tool).map_err(|(span, field, message)| at(span, field, message))?;
        Ok(HttpToolSpec {
            name,
            description: tool.description.clone(),
            method,
            url,
            timeout: positive(&tool.timeout_ms)
                .map_err(|span| at(span, "timeout_ms", "must be at least 1".into()))?
                .map(Duration::from_millis),
            idempotency_header,
            not_executed_statuses,
            effect_unknown_statuses,
            input_schema,
            annotations: tool.annotations.clone(),
            max_response_bytes: positive(&tool.max_response_bytes)
                .map_err(|span| at(span, "max_response_bytes", "must be at least 1".into()))?
                .map(|bytes| usize::try_from(bytes).unwrap_or(usize::MAX)),
            on_interrupted,
            task_always: task_always(&tool.task)
                .map_err(|(span, message)| at(span, "task", message))?,
            key: KeySetting {
                argument: tool.key_argument.clone(),
                required: tool.key_required,
            },
            headers: self.headers(&tool.headers, &label)?,
            redaction: redaction(&tool.redact_arguments)
                .map_err(|(span, message)| at(span, "redact_arguments", message))?,
            reconcile: tool
                .reconcile
                .as_ref()
                .map(|probe| self.probe(probe, &label))
                .transpose()?,
        })
    }

    /// The inline schema or the schema file's, checked to be a valid JSON Schema.
    fn schema(&self, tool: &RawTool, label: &str, start: usize) -> Result<Value, ConfigError> {
        self.schema_of((&tool.input_schema, &tool.input_schema_file), label, start)
    }

    /// A `[[client_tools]]` entry (docs/semantics.md §16).
    fn client_tool(&self, entry: &Spanned<RawClientTool>) -> Result<ClientToolSpec, ConfigError> {
        let tool = entry.get_ref();
        let name = tool.name.get_ref().clone();
        let label = format!("client tool {name:?}");
        check_name(&name).map_err(|message| {
            self.report.error(
                Some(tool.name.span().start),
                Some(&label),
                Some("name"),
                message,
            )
        })?;
        if let Some(policy) = &tool.on_interrupted {
            if policy.get_ref() != "uncertain" {
                return Err(self.report.error(
                    Some(policy.span().start),
                    Some(&label),
                    Some("on_interrupted"),
                    format!(
                        "{:?} is not available for a client tool: only \"uncertain\" (the holder's reconcile hook or an operator decides an interrupted execution)",
                        policy.get_ref()
                    ),
                ));
            }
        }
        let input_schema = self.schema_of(
            (&tool.input_schema, &tool.input_schema_file),
            &label,
            entry.span().start,
        )?;
        let redaction = redaction(&tool.redact_arguments).map_err(|(span, message)| {
            self.report.error(
                Some(span.start),
                Some(&label),
                Some("redact_arguments"),
                message,
            )
        })?;
        Ok(ClientToolSpec {
            name,
            description: tool.description.clone(),
            input_schema,
            annotations: tool.annotations.clone(),
            redaction,
        })
    }

    /// A schema given inline or in a file (`input_schema`, `input_schema_file`).
    fn schema_of(
        &self,
        given: (&Option<Spanned<Value>>, &Option<Spanned<String>>),
        label: &str,
        start: usize,
    ) -> Result<Value, ConfigError> {
        let (schema, offset, field) = match given {
            (Some(_), Some(file)) => {
                return Err(self.report.error(
                    Some(file.span().start),
                    Some(label),
                    Some("input_schema_file"),
                    "give input_schema or input_schema_file, not both",
                ));
            }
            (Some(schema), None) => (
                schema.get_ref().clone(),
                schema.span().start,
                "input_schema",
            ),
            (None, Some(file)) => {
                let path = self.base.join(file.get_ref());
                let fail = |message: String| {
                    self.report.error(
                        Some(file.span().start),
                        Some(label),
                        Some("input_schema_file"),
                        message,
                    )
                };
                let text = std::fs::read_to_string(&path)
                    .map_err(|error| fail(format!("{} cannot be read: {error}", path.display())))?;
                let schema = carmy::strict_json::parse(&text)
                    .map_err(|error| fail(format!("{} is not JSON: {error}", path.display())))?;
                (schema, file.span().start, "input_schema_file")
            }
            (None, None) => (json!({"type": "object"}), start, "input_schema"),
        };
        let fail = |message: String| {
            self.report
                .error(Some(offset), Some(label), Some(field), message)
        };
        if !schema.is_object() {
            return Err(fail(
                "a JSON Schema for the arguments must be an object".into(),
            ));
        }
        jsonschema::validator_for(&schema)
            .map_err(|error| fail(format!("not a valid JSON Schema: {error}")))?;
        Ok(schema)
    }

    /// Header names checked, values expanded from the environment and checked.
    fn headers(
        &self,
        headers: &BTreeMap<String, Spanned<String>>,
        label: &str,
    ) -> Result<Vec<Header>, ConfigError> {
        let mut out = Vec::with_capacity(headers.len());
        for (name, value) in headers {
            let field = format!("headers.{name}");
            let fail = |message: String| {
                self.report
                    .error(Some(value.span().start), Some(label), Some(&field), message)
            };
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| fail(format!("{name:?} is not a valid header name")))?;
            if RESERVED_HEADERS.contains(&header.as_str()) {
                return Err(fail(format!(
                    "{name} is set by Carmy's HTTP client and cannot be configured"
                )));
            }
            let (expanded, variables) =
                expand(value.get_ref(), self.lookup).map_err(|error| fail(error.to_string()))?;
            let mut checked = HeaderValue::from_str(expanded.expose()).map_err(|_| {
                fail("the value (after expanding ${…}) holds characters a header cannot carry (control characters, newlines)".into())
            })?;
            checked.set_sensitive(true);
            out.push(Header {
                name: header,
                value: checked,
                secrets: self.values_of(&variables),
                variables,
            });
        }
        Ok(out)
    }

    /// The values of the environment variables `names`, as secrets.
    pub(super) fn values_of(&self, names: &[String]) -> Vec<Secret> {
        names
            .iter()
            .filter_map(|name| (self.lookup)(name))
            .map(Secret::new)
            .collect()
    }
}

/// `task`: `auto` (the default) or `always` (docs/semantics.md §11, "Tasks").
fn task_always(task: &Option<Spanned<String>>) -> Result<bool, (std::ops::Range<usize>, String)> {
    match task.as_ref().map(|task| (task.span(), task.get_ref().as_str())) {
        None | Some((_, "auto")) => Ok(false),
        Some((_, "always")) => Ok(true),
        Some((span, other)) => Err((
            span,
            format!("{other:?} is not a task policy: use \"auto\" (a task when a call outlasts CARMY_MCP_TASK_AFTER_MS) or \"always\""),
        )),
    }
}

/// Whether `schema` declares the argument `name` (in `properties` or `required`).
fn declares(schema: &Value, name: &str) -> bool {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|properties| properties.contains_key(name))
        || schema
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|required| required.iter().any(|entry| entry == name))
}
