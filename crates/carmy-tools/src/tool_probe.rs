//! The tool probe of a tool (`[tools.reconcile]` with `tool` and `arguments`,
//! docs/semantics.md §12.10): a call of another tool the gateway serves, one
//! annotated read-only, with `{execution_id}`, `{request_id}` and the call's arguments filled
//! into the strings of its arguments. A result that is not an error and holds a value at the
//! probe's `found_pointer` means found (the result is the outcome's data); a result without one
//! proves nothing (a lookup may answer "not found" as a success); an error carrying an upstream status listed in `absent_status` (an HTTP
//! tool's `error.details.status`) means absent; anything else proves nothing.
//!
//! The call is not an execution: nothing is reserved or recorded for it, so no agent's retry
//! can ever replay it, and the tool sees a fresh id of its own (`probe_…`) where an execution
//! id goes, never the probed execution's: an upstream that keeps idempotency keys for reads too
//! cannot confuse the probe with the agent's call. The called tool masks its own secrets.

use crate::probe::{inconclusive, placeholder_values};
use crate::spec::{ProbeAsk, ProbeSpec, ToolsConfig};
use carmy::outcome::ExecutionId;
use carmy::reconcile::{Probe, ProbeAnswer, ProbeFuture, ProbeTarget, ProbeTools, ProbeVerdict};
use carmy::tool::{Tool, ToolContext, ToolErrorKind};
use futures::FutureExt;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

/// Whether `tool` may serve as a probe: its annotations say `readOnlyHint: true` (a
/// `[[tools]]` entry's `annotations = { readOnlyHint = true }`, an MCP server's own annotation).
pub fn is_read_only(tool: &dyn Tool) -> bool {
    tool.annotations()
        .and_then(|annotations| annotations.read_only_hint)
        == Some(true)
}

/// Checks, once every tool is served (the file's and its MCP servers'), the tool each tool
/// probe of `config` calls: it must be served and annotated read-only ([`is_read_only`]).
///
/// # Errors
/// One line naming the probing tool, the called one and what to do.
pub fn check_served(config: &ToolsConfig, served: &[Arc<dyn Tool>]) -> Result<(), String> {
    for spec in &config.http_tools {
        let Some(ProbeSpec {
            ask: ProbeAsk::Tool { tool: called, .. },
            ..
        }) = &spec.reconcile
        else {
            continue;
        };
        match served.iter().find(|tool| tool.name() == called) {
            None => {
                return Err(format!(
                    "tool {:?}: reconcile.tool names {called:?}, which neither the tools file's [[tools]] nor its MCP servers serve; name a read-only tool they serve (an MCP tool with its prefix)",
                    spec.name
                ))
            }
            Some(tool) if !is_read_only(tool.as_ref()) => {
                return Err(format!(
                    "tool {:?}: reconcile.tool names {called:?}, which is not annotated read-only (readOnlyHint: true); a probe calls only a tool that changes nothing, or probe with method and url",
                    spec.name
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// A probe that calls another tool.
pub struct ToolProbe {
    tool: String,
    arguments: Value,
    found_pointer: String,
    absent_status: BTreeSet<u16>,
    absent_not_executed: bool,
    timeout: Duration,
}

impl ToolProbe {
    /// The probe calling `tool` with `arguments` (placeholders checked by
    /// [`check_placeholders`]).
    pub fn new(
        tool: String,
        arguments: Value,
        found_pointer: String,
        absent_status: BTreeSet<u16>,
        absent_not_executed: bool,
        timeout: Duration,
    ) -> Self {
        Self {
            tool,
            arguments,
            found_pointer,
            absent_status,
            absent_not_executed,
            timeout,
        }
    }

    async fn ask(&self, target: &ProbeTarget, tools: &dyn ProbeTools) -> ProbeAnswer {
        let request = format!("tool {}", self.tool);
        let Some(tool) = tools.find_tool(&self.tool) else {
            return inconclusive(
                json!({"answer": "error", "request": request, "detail": format!(
                "no tool named {:?} is served right now (is its MCP server connected?)", self.tool)}),
            );
        };
        if !is_read_only(tool.as_ref()) {
            return inconclusive(
                json!({"answer": "error", "request": request, "detail": format!(
                "the tool {:?} is no longer annotated read-only (readOnlyHint), so it is not called as a probe", self.tool)}),
            );
        }
        let arguments = match render(&self.arguments, &placeholder_values(target)) {
            Ok(arguments) => arguments,
            Err(message) => {
                return inconclusive(
                    json!({"answer": "error", "request": request, "detail": format!(
                    "the probe's arguments cannot be filled: {message} (an argument is known only when the call is retried)")}),
                )
            }
        };
        let request = format!("tool {} {arguments}", self.tool);
        let context = ToolContext {
            principal: target.key.principal.clone(),
            session_id: target.key.session_id.clone(),
            request_id: None,
            execution_id: probe_id(),
            traceparent: None,
            timeout: self.timeout,
        };
        let called = AssertUnwindSafe(tool.call(context, arguments))
            .catch_unwind()
            .await;
        match called {
            Ok(Ok(result)) if holds_a_value(result.pointer(&self.found_pointer)) => ProbeAnswer {
                verdict: ProbeVerdict::Found(result.clone()),
                evidence: json!({"answer": "found", "request": request, "body": result}),
            },
            Ok(Ok(result)) => inconclusive(json!({"answer": "not_found", "request": request,
                "body": result, "detail": format!(
                "the tool answered without a value at found_pointer {}: not proof that the effect happened, nor that it did not",
                self.found_pointer)})),
            Ok(Err(error)) => {
                let status = error
                    .details
                    .as_ref()
                    .and_then(|details| details.get("status"))
                    .and_then(Value::as_u64)
                    .and_then(|status| u16::try_from(status).ok());
                let shown = json!({"code": error.code, "message": error.message,
                                   "details": error.details});
                let mut evidence = json!({"request": request, "error": shown});
                if let Some(status) = status {
                    evidence["status"] = json!(status);
                }
                let absent = error.kind != ToolErrorKind::EffectUnknown
                    && status.is_some_and(|status| self.absent_status.contains(&status));
                if absent {
                    evidence["answer"] = json!("absent");
                    ProbeAnswer {
                        verdict: ProbeVerdict::Absent,
                        evidence,
                    }
                } else {
                    evidence["answer"] = json!("error");
                    evidence["detail"] = json!(match status {
                        Some(status) => format!("the tool failed with upstream status {status}, which is not in absent_status"),
                        None => "the tool failed without an upstream status in absent_status".to_owned(),
                    });
                    inconclusive(evidence)
                }
            }
            Err(_panic) => inconclusive(
                json!({"answer": "error", "request": request, "detail": "the tool panicked"}),
            ),
        }
    }
}

impl Probe for ToolProbe {
    fn absent_means_not_executed(&self) -> bool {
        self.absent_not_executed
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn probe<'a>(&'a self, target: &'a ProbeTarget, tools: &'a dyn ProbeTools) -> ProbeFuture<'a> {
        Box::pin(self.ask(target, tools))
    }
}

/// A fresh id for one probe's call, `probe_` and 32 hex digits: never an execution's id.
fn probe_id() -> ExecutionId {
    let minted = ExecutionId::generate();
    let hex = minted
        .as_str()
        .strip_prefix("exec_")
        .unwrap_or(minted.as_str());
    ExecutionId::from_stored(format!("probe_{hex}"))
}

/// One piece of an argument string.
enum Piece<'a> {
    Text(&'a str),
    Placeholder(&'a str),
}

/// The pieces of `text`: literal text and `{name}` placeholders (letters, digits, `_`).
///
/// # Errors
/// A message for an unbalanced brace or a bad placeholder name.
fn pieces(text: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err(format!("{text:?} has a }} without its {{"));
        }
        if open > 0 {
            out.push(Piece::Text(&rest[..open]));
        }
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| format!("{text:?} has a {{ without its }}"))?;
        let name = &after[..close];
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!(
                "{text:?}: {{{name}}} is not a placeholder ({{execution_id}}, {{request_id}} or an argument's name: letters, digits, _)"
            ));
        }
        out.push(Piece::Placeholder(name));
        rest = &after[close + 1..];
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest));
    }
    Ok(out)
}

/// Checks the placeholders in the strings of `arguments` (members' values, at any depth).
///
/// # Errors
/// A message naming the string that is wrong.
pub fn check_placeholders(arguments: &Value) -> Result<(), String> {
    match arguments {
        Value::String(text) => pieces(text).map(drop),
        Value::Array(items) => items.iter().try_for_each(check_placeholders),
        Value::Object(members) => members.values().try_for_each(check_placeholders),
        _ => Ok(()),
    }
}

/// `arguments` with each string's placeholders filled from `values`: a string that is one
/// placeholder alone becomes the value itself (a number stays a number); otherwise each value
/// (a string, number or boolean) is put in as text.
///
/// # Errors
/// A message naming a placeholder without a value or with a value that cannot be text.
pub fn render(arguments: &Value, values: &Value) -> Result<Value, String> {
    Ok(match arguments {
        Value::String(text) => {
            let pieces = pieces(text)?;
            let value_of = |name: &str| {
                values
                    .get(name)
                    .filter(|value| !value.is_null())
                    .ok_or_else(|| format!("{{{name}}} has no value"))
            };
            if let [Piece::Placeholder(name)] = pieces.as_slice() {
                return value_of(name).cloned();
            }
            let mut out = String::new();
            for piece in &pieces {
                match piece {
                    Piece::Text(text) => out.push_str(text),
                    Piece::Placeholder(name) => match value_of(name)? {
                        Value::String(value) => out.push_str(value),
                        value @ (Value::Number(_) | Value::Bool(_)) => {
                            out.push_str(&value.to_string());
                        }
                        _ => {
                            return Err(format!(
                            "{{{name}}} is an object or a list, which cannot be put into {text:?}"
                        ))
                        }
                    },
                }
            }
            Value::String(out)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| render(item, values))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(members) => Value::Object(
            members
                .iter()
                .map(|(name, value)| Ok((name.clone(), render(value, values)?)))
                .collect::<Result<Map<_, _>, String>>()?,
        ),
        other => other.clone(),
    })
}

/// Whether the value at a probe's `found_pointer` says "found": present, and not `null`,
/// `false`, `""`, `[]` or `{}`.
fn holds_a_value(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(text)) => !text.is_empty(),
        Some(Value::Array(items)) => !items.is_empty(),
        Some(Value::Object(members)) => !members.is_empty(),
        Some(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result proves "found" only with a value at the pointer: a lookup that answers "not
    /// found" as a success (an empty list, `found: false`, no member) proves nothing (§12.10).
    #[test]
    fn only_a_value_at_found_pointer_means_found() {
        let found = |result: Value| holds_a_value(result.pointer("/payment"));
        assert!(found(json!({"payment": {"id": 1}})));
        assert!(found(json!({"payment": "pay_1"})));
        assert!(found(json!({"payment": 0})));
        assert!(found(json!({"payment": true})));
        assert!(found(json!({"payment": [1]})));
        for nothing in [
            json!({}),
            json!({"payment": null}),
            json!({"payment": false}),
            json!({"payment": ""}),
            json!({"payment": []}),
            json!({"payment": {}}),
            json!("No payment found"),
            json!([]),
        ] {
            assert!(!found(nothing.clone()), "{nothing}");
        }
    }

    #[test]
    fn placeholders_are_filled_keeping_the_type_of_a_lone_one() {
        let values = json!({"execution_id": "exec_1", "request_id": "r-1", "amount": 5});
        let arguments = json!({"key": "{execution_id}", "note": "req {request_id}/{amount}",
                               "amount": "{amount}", "list": ["{request_id}", 3], "fixed": true});
        assert_eq!(
            render(&arguments, &values).unwrap(),
            json!({"key": "exec_1", "note": "req r-1/5", "amount": 5,
                   "list": ["r-1", 3], "fixed": true})
        );
        assert_eq!(
            render(&json!({"k": "{customer}"}), &values).unwrap_err(),
            "{customer} has no value"
        );
    }

    #[test]
    fn bad_placeholders_are_refused() {
        assert!(check_placeholders(&json!({"k": "{execution_id}"})).is_ok());
        for bad in ["{", "}", "{a-b}", "{}", "x{execution_id"] {
            assert!(check_placeholders(&json!({"k": bad})).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_probe_id_is_never_an_execution_id() {
        let id = probe_id();
        assert!(id.as_str().starts_with("probe_"), "{}", id.as_str());
        assert_eq!(id.as_str().len(), 38);
    }
}
