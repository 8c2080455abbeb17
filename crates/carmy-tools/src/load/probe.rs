//! Validating a tool's `[tools.reconcile]` (docs/semantics.md §12.10): the keys of
//! [`RawReconcile`], an HTTP probe (`method`, `url`) or a tool probe (`tool`, `arguments`), each
//! mistake a [`ConfigError`] naming the tool and the field.

use super::{parse_method, positive, Checker};
use crate::config::{RawReconcile, RawTool};
use crate::error::{ConfigError, Reporter};
use crate::fields::check_name;
use crate::spec::{HttpToolSpec, ProbeAsk, ProbeSpec};
use crate::template::UrlTemplate;
use crate::tool_probe::check_placeholders;
use reqwest::Method;
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;
use toml::Spanned;

/// A probe's deadline when `timeout_ms` is omitted.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_millis(2000);

impl Checker<'_> {
    /// The validated probe of the tool `label`.
    pub(super) fn probe(
        &self,
        entry: &Spanned<RawReconcile>,
        label: &str,
    ) -> Result<ProbeSpec, ConfigError> {
        let raw = entry.get_ref();
        let at = |start: usize, field: &str, message: String| {
            self.report.error(
                Some(start),
                Some(label),
                Some(&format!("reconcile.{field}")),
                message,
            )
        };
        let absent_status = statuses(&raw.absent_status, 404)
            .map_err(|(start, message)| at(start, "absent_status", message))?;
        let absent_not_executed = match &raw.absent_means {
            None => false,
            Some(means) => match means.get_ref().as_str() {
                "unknown" => false,
                "not_executed" => true,
                other => return Err(at(means.span().start, "absent_means", format!("{other:?} is not \"unknown\" (leave it for a person) or \"not_executed\" (the upstream's absent proves the effect did not happen)"))),
            },
        };
        let timeout = positive(&raw.timeout_ms)
            .map_err(|span| at(span.start, "timeout_ms", "must be at least 1".into()))?
            .map_or(DEFAULT_PROBE_TIMEOUT, Duration::from_millis);
        let ask = match &raw.tool {
            Some(tool) => tool_ask(raw, tool, label, &at)?,
            None => {
                if let Some(pointer) = &raw.found_pointer {
                    return Err(at(
                        pointer.span().start,
                        "found_pointer",
                        "goes with tool (a probe that calls another tool); an HTTP probe's found is found_status".into(),
                    ));
                }
                self.http_ask(entry, &absent_status, label, &at)?
            }
        };
        Ok(ProbeSpec {
            ask,
            absent_status,
            absent_not_executed,
            timeout,
        })
    }

    /// `method`, `url`, `found_status` and headers: an HTTP probe.
    fn http_ask(
        &self,
        entry: &Spanned<RawReconcile>,
        absent_status: &BTreeSet<u16>,
        label: &str,
        at: &dyn Fn(usize, &str, String) -> ConfigError,
    ) -> Result<ProbeAsk, ConfigError> {
        let raw = entry.get_ref();
        if let Some(arguments) = &raw.arguments {
            return Err(at(
                arguments.span().start,
                "arguments",
                "go with tool (a probe that calls another tool); an HTTP probe puts its values in url".into(),
            ));
        }
        let url = raw.url.as_ref().ok_or_else(|| {
            at(
                entry.span().start,
                "url",
                "is required: the URL that looks the execution up, e.g. https://host/v1/payments?idempotency_key={execution_id}".into(),
            )
        })?;
        let url = UrlTemplate::parse_with_query(url.get_ref())
            .map_err(|message| at(url.span().start, "url", message))?;
        let method = match &raw.method {
            None => Method::GET,
            Some(method) => parse_method(method.get_ref())
                .map_err(|message| at(method.span().start, "method", message))?,
        };
        let found_status = statuses(&raw.found_status, 200)
            .map_err(|(start, message)| at(start, "found_status", message))?;
        if let Some(both) = found_status.intersection(absent_status).next() {
            let start = raw
                .absent_status
                .as_ref()
                .map_or(entry.span().start, |s| s.span().start);
            return Err(at(
                start,
                "absent_status",
                format!("{both} is also in found_status; a status means found or absent, not both"),
            ));
        }
        Ok(ProbeAsk::Http {
            method,
            url,
            found_status,
            headers: self.headers(&raw.headers, label)?,
        })
    }
}

/// `tool` and `arguments`: the named tool is checked against the file later
/// ([`check_probe_tools`]); here, that nothing of an HTTP probe goes with it.
fn tool_ask(
    raw: &RawReconcile,
    tool: &Spanned<String>,
    label: &str,
    at: &dyn Fn(usize, &str, String) -> ConfigError,
) -> Result<ProbeAsk, ConfigError> {
    let http_only = [
        ("method", raw.method.as_ref().map(|m| m.span().start)),
        ("url", raw.url.as_ref().map(|u| u.span().start)),
        (
            "found_status",
            raw.found_status.as_ref().map(|f| f.span().start),
        ),
        (
            "headers",
            raw.headers.values().next().map(|h| h.span().start),
        ),
    ];
    if let Some((field, start)) = http_only
        .iter()
        .find_map(|(field, start)| start.map(|start| (field, start)))
    {
        let why = if *field == "found_status" {
            "a tool probe's found is a value at found_pointer in a result that is not an error"
        } else if *field == "headers" {
            "the called tool sends its own headers"
        } else {
            "give either tool (and arguments) or method and url"
        };
        return Err(at(
            start,
            field,
            format!("does not go with tool: {why}; remove it"),
        ));
    }
    check_name(tool.get_ref()).map_err(|message| at(tool.span().start, "tool", message))?;
    if label == format!("tool {:?}", tool.get_ref()) {
        return Err(at(tool.span().start, "tool", "names the tool itself; a probe calls another tool, one that only reads (annotations = { readOnlyHint = true })".into()));
    }
    let arguments = match &raw.arguments {
        None => Value::Object(serde_json::Map::new()),
        Some(arguments) => {
            let fail = |message: String| at(arguments.span().start, "arguments", message);
            if !arguments.get_ref().is_table() {
                return Err(fail("must be a table of the tool's arguments, e.g. arguments = { key = \"{execution_id}\" }".into()));
            }
            let value = serde_json::to_value(arguments.get_ref())
                .map_err(|error| fail(format!("cannot be JSON: {error}")))?;
            check_placeholders(&value).map_err(fail)?;
            value
        }
    };
    // A lookup tool often answers "not found" as a success (an empty list, a text), so a result
    // proves the effect only where the operator says what a found one holds (§12.10).
    let found_pointer = match &raw.found_pointer {
        None => return Err(at(tool.span().start, "found_pointer", "is required with tool: the JSON Pointer into the tool's result that holds a value only when the effect is found, e.g. found_pointer = \"/payment_id\" (a lookup that answers \"not found\" as a success must not count as found)".into())),
        Some(pointer) if !pointer.get_ref().starts_with('/') => {
            return Err(at(pointer.span().start, "found_pointer", format!("{:?} is not a JSON Pointer: it starts with /, e.g. \"/payment_id\" or \"/results/0\"", pointer.get_ref())))
        }
        Some(pointer) => pointer.get_ref().clone(),
    };
    Ok(ProbeAsk::Tool {
        tool: tool.get_ref().clone(),
        arguments,
        found_pointer,
    })
}

/// Checks the tool each tool probe of `tools` calls, once the whole file is read: a
/// `[[tools]]` entry of this file must be annotated read-only; a name no entry has must be
/// left for an `[[mcp_servers]]` entry (checked when its tools are listed,
/// [`crate::tool_probe::check_served`]), and there must be one.
///
/// # Errors
/// The first probe whose tool is not acceptable, at its `tool` key.
pub(super) fn check_probe_tools(
    report: &Reporter<'_>,
    raw: &[Spanned<RawTool>],
    tools: &[HttpToolSpec],
    has_mcp_servers: bool,
    builtin: &[&str],
) -> Result<(), ConfigError> {
    for (entry, spec) in raw.iter().zip(tools) {
        let Some(ProbeSpec {
            ask: ProbeAsk::Tool { tool: called, .. },
            ..
        }) = &spec.reconcile
        else {
            continue;
        };
        let start = entry
            .get_ref()
            .reconcile
            .as_ref()
            .and_then(|probe| probe.get_ref().tool.as_ref())
            .map(|tool| tool.span().start);
        let fail = |message: String| {
            report.error(
                start,
                Some(&format!("tool {:?}", spec.name)),
                Some("reconcile.tool"),
                message,
            )
        };
        match tools.iter().find(|other| &other.name == called) {
            Some(other) => {
                let read_only = other
                    .annotations
                    .as_ref()
                    .and_then(|annotations| annotations.read_only_hint)
                    == Some(true);
                if !read_only {
                    return Err(fail(format!("{called:?} is not annotated read-only; a probe calls only a tool that changes nothing: give that tool annotations = {{ readOnlyHint = true }} if it only reads, or probe with method and url")));
                }
            }
            None if builtin.contains(&called.as_str()) => {
                return Err(fail(format!("{called:?} is a built-in example tool; a probe calls a tool of this file ([[tools]] or an [[mcp_servers]] entry's)")));
            }
            None if !has_mcp_servers => {
                return Err(fail(format!("no [[tools]] entry is named {called:?} and there is no [[mcp_servers]] entry whose tools could be; name a read-only tool of this file")));
            }
            None => {}
        }
    }
    Ok(())
}

/// The listed statuses (100 to 599), or `default` alone when the key is omitted.
fn statuses(
    listed: &Option<Spanned<Vec<u16>>>,
    default: u16,
) -> Result<BTreeSet<u16>, (usize, String)> {
    let Some(listed) = listed else {
        return Ok(BTreeSet::from([default]));
    };
    if listed.get_ref().is_empty() {
        return Err((listed.span().start, "must list at least one status".into()));
    }
    listed
        .get_ref()
        .iter()
        .map(|status| {
            if (100..=599).contains(status) {
                Ok(*status)
            } else {
                Err((
                    listed.span().start,
                    format!("{status} is not an HTTP status"),
                ))
            }
        })
        .collect()
}
