//! Field checks of the tools file (docs/semantics.md §10), each giving a message that says what
//! to write instead: names, methods, takeover policies, positive numbers, status lists and
//! redactions.

use crate::config::RawTool;
use carmy::arguments::Redaction;
use carmy::OnInterrupted;
use reqwest::Method;
use std::collections::BTreeSet;
use toml::Spanned;

/// A tool's `on_interrupted` (default `uncertain`). `rerun` runs the tool a second time for
/// one execution (docs/semantics.md §12.7), so it needs an idempotency header or a read-only or
/// idempotent hint; the error is the field's span and what to do.
pub(crate) fn on_interrupted(
    tool: &RawTool,
    has_idempotency_header: bool,
) -> Result<OnInterrupted, (std::ops::Range<usize>, String)> {
    let Some(spanned) = &tool.on_interrupted else {
        return Ok(OnInterrupted::Uncertain);
    };
    let policy = policy_named(spanned.get_ref()).map_err(|message| (spanned.span(), message))?;
    let hinted = tool.annotations.as_ref().is_some_and(|hints| {
        hints.read_only_hint == Some(true) || hints.idempotent_hint == Some(true)
    });
    if policy == OnInterrupted::Rerun && !has_idempotency_header && !hinted {
        return Err((
            spanned.span(),
            "\"rerun\" runs the tool a second time for one execution, so it needs an \
             idempotency_header (the upstream then sees the same key twice) or annotations \
             readOnlyHint or idempotentHint = true; keep \"uncertain\" otherwise"
                .into(),
        ));
    }
    Ok(policy)
}

/// The policy named `name` (docs/semantics.md §12.7).
///
/// # Errors
/// A message naming the accepted values, for any other name.
pub(crate) fn policy_named(name: &str) -> Result<OnInterrupted, String> {
    match name {
        "uncertain" => Ok(OnInterrupted::Uncertain),
        "rerun" => Ok(OnInterrupted::Rerun),
        other => Err(format!(
            "{other:?} is not a policy; use \"uncertain\" (the default: an interrupted \
             execution stays uncertain until an operator decides) or \"rerun\" (the next \
             attempt runs the tool again)"
        )),
    }
}

/// A tool name usable by every front: 1 to 128 of `A-Z a-z 0-9 _ - .` (the MCP rule).
///
/// # Errors
/// A message saying what is allowed.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} must be 1 to 128 characters of letters, digits, _, - and ."
        ))
    }
}

pub(crate) fn parse_method(method: &str) -> Result<Method, String> {
    match method {
        "GET" => Ok(Method::GET),
        "POST" => Ok(Method::POST),
        "PUT" => Ok(Method::PUT),
        "PATCH" => Ok(Method::PATCH),
        "DELETE" => Ok(Method::DELETE),
        other => Err(format!(
            "{other:?} is not one of GET, POST, PUT, PATCH, DELETE (upper case)"
        )),
    }
}

/// A setting that must be at least 1 when given; the error is its span.
pub(crate) fn positive<T: Copy + Into<u64>>(
    value: &Option<Spanned<T>>,
) -> Result<Option<T>, std::ops::Range<usize>> {
    match value {
        Some(value) if (*value.get_ref()).into() == 0 => Err(value.span()),
        Some(value) => Ok(Some(*value.get_ref())),
        None => Ok(None),
    }
}

/// The statuses of a status-list field (`not_executed_statuses`, `effect_unknown_statuses`),
/// each from 400 to 599; the error is the field's span and what to do.
fn statuses(
    value: &Option<Spanned<Vec<u16>>>,
    meaning: &str,
) -> Result<BTreeSet<u16>, (std::ops::Range<usize>, String)> {
    let mut out = BTreeSet::new();
    if let Some(statuses) = value {
        for status in statuses.get_ref() {
            if !(400..=599).contains(status) {
                return Err((
                    statuses.span(),
                    format!("{status} is not an error status; list statuses from 400 to 599 that {meaning}"),
                ));
            }
            out.insert(*status);
        }
    }
    Ok(out)
}

/// A mistake in a field: its span, its name and what to do.
pub(crate) type FieldError = (std::ops::Range<usize>, &'static str, String);

/// A tool's `not_executed_statuses` and `effect_unknown_statuses`, which may not share a status;
/// the error is the span, the field and what to do.
pub(crate) fn status_lists(tool: &RawTool) -> Result<(BTreeSet<u16>, BTreeSet<u16>), FieldError> {
    let not_executed = statuses(
        &tool.not_executed_statuses,
        "the upstream documents as \"nothing happened\"",
    )
    .map_err(|(span, message)| (span, "not_executed_statuses", message))?;
    let effect_unknown = statuses(
        &tool.effect_unknown_statuses,
        "leave the effect unknown (every 5xx and 408 already do)",
    )
    .map_err(|(span, message)| (span, "effect_unknown_statuses", message))?;
    if let (Some(both), Some(field)) = (
        not_executed.intersection(&effect_unknown).next(),
        &tool.effect_unknown_statuses,
    ) {
        return Err((
            field.span(),
            "effect_unknown_statuses",
            format!("{both} is also in not_executed_statuses; a status either proves that nothing happened or leaves the effect unknown, list it in one of them"),
        ));
    }
    Ok((not_executed, effect_unknown))
}

/// `redact_arguments`: `"all"`, or a list of JSON pointers (docs/semantics.md §8.5).
pub(crate) fn redaction(
    value: &Option<Spanned<toml::Value>>,
) -> Result<Option<Redaction>, (std::ops::Range<usize>, String)> {
    let Some(value) = value else {
        return Ok(None);
    };
    let wrong = |message: String| (value.span(), message);
    match value.get_ref() {
        toml::Value::String(text) if text == "all" => Ok(Some(Redaction::Whole)),
        toml::Value::Array(items) => {
            let mut pointers = Vec::with_capacity(items.len());
            for item in items {
                let toml::Value::String(pointer) = item else {
                    return Err(wrong(format!("{item} is not a JSON pointer string")));
                };
                Redaction::check_pointer(pointer).map_err(wrong)?;
                pointers.push(pointer.clone());
            }
            Ok(Some(Redaction::Pointers(pointers)))
        }
        other => Err(wrong(format!(
            "{other} is neither \"all\" nor a list of JSON pointers (e.g. [\"/card/number\"])"
        ))),
    }
}
