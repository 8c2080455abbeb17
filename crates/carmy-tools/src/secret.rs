//! Header values from the tools file: `${NAME}` expanded from the environment at start, the
//! result kept as a [`Secret`] that never prints, and [`mask`] for anything an upstream sends
//! back (docs/semantics.md §10).

use std::fmt;

/// A value that must not appear in logs, records, errors or `GET /v1/tools`: its `Debug` and
/// `Display` print `***`. Only [`Secret::expose`] gives the text, for the one place that sends
/// it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret text, for sending it upstream only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Why a value could not be expanded. The message names the variable, never a value.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    /// `${NAME}` names a variable that is not set (or not valid Unicode).
    #[error("environment variable {0} is not set")]
    Unset(String),
    /// A `${` without a closing `}`, or a name that is not `[A-Za-z_][A-Za-z0-9_]*`.
    #[error("malformed reference {0:?}: write ${{NAME}} with NAME of letters, digits and _ (not starting with a digit); $$ is a literal $")]
    Malformed(String),
    /// `$NAME` without braces: it would be sent as written, so it is refused.
    #[error("${0} is not expanded: write ${{{0}}} for the environment variable, or $${0} for a literal $")]
    Unbraced(String),
}

/// Expands every `${NAME}` in `template` with `lookup(NAME)`; `$$` is a literal `$`, a `$` not
/// followed by a letter or `_` stays as it is. Returns the text and the names it used.
///
/// # Errors
/// [`ExpandError::Unset`] for the first name `lookup` does not know, [`ExpandError::Malformed`]
/// for a reference that is not `${NAME}`, [`ExpandError::Unbraced`] for `$NAME`.
pub fn expand(
    template: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<(Secret, Vec<String>), ExpandError> {
    let mut out = String::with_capacity(template.len());
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$$") {
            out.push('$');
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let end = after
                .find('}')
                .ok_or_else(|| ExpandError::Malformed(clip(tail)))?;
            let name = &after[..end];
            if !is_name(name) {
                return Err(ExpandError::Malformed(clip(&tail[..end + 3])));
            }
            let value = lookup(name).ok_or_else(|| ExpandError::Unset(name.to_owned()))?;
            out.push_str(&value);
            names.push(name.to_owned());
            rest = &after[end + 1..];
        } else {
            let name: String = tail[1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if is_name(&name) {
                return Err(ExpandError::Unbraced(name));
            }
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok((Secret(out), names))
}

/// The environment as [`expand`]'s lookup.
pub fn from_environment(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// What a secret is replaced by wherever it would be recorded or logged.
pub const MASK: &str = "***";

/// `value` with every occurrence of each of `secrets` (the values of the `${NAME}` references
/// of a tool's configuration) in its strings and member names replaced by [`MASK`]: an
/// upstream that echoes a request header back never gets the secret into a record.
pub fn mask(value: serde_json::Value, secrets: &[Secret]) -> serde_json::Value {
    use serde_json::Value;
    if secrets.is_empty() {
        return value;
    }
    match value {
        Value::String(text) => Value::String(mask_text(&text, secrets)),
        Value::Array(items) => Value::Array(items.into_iter().map(|v| mask(v, secrets)).collect()),
        Value::Object(members) => Value::Object(
            members
                .into_iter()
                .map(|(name, v)| (mask_text(&name, secrets), mask(v, secrets)))
                .collect(),
        ),
        other => other,
    }
}

/// `text` with every occurrence of each of `secrets` replaced by [`MASK`].
pub fn mask_text(text: &str, secrets: &[Secret]) -> String {
    let mut out = text.to_owned();
    for secret in secrets {
        if !secret.0.is_empty() && out.contains(&secret.0) {
            out = out.replace(&secret.0, MASK);
        }
    }
    out
}

/// A tool's outcome with [`mask`] applied to its value, or to its error's message and details.
pub fn mask_outcome(
    outcome: Result<serde_json::Value, carmy::ToolError>,
    secrets: &[Secret],
) -> Result<serde_json::Value, carmy::ToolError> {
    match outcome {
        Ok(value) => Ok(mask(value, secrets)),
        Err(mut error) => {
            error.message = mask_text(&error.message, secrets);
            error.details = error.details.map(|details| mask(details, secrets));
            Err(error)
        }
    }
}

fn is_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The reference as written, at most 40 characters (it is template text, not a secret).
fn clip(text: &str) -> String {
    text.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(name: &str) -> Option<String> {
        (name == "TOKEN").then(|| "s3cret".to_owned())
    }

    #[test]
    fn references_expand_and_secrets_never_print() {
        let (value, names) = expand("Bearer ${TOKEN} costs $$5 or $5 $", lookup).unwrap();
        assert_eq!(value.expose(), "Bearer s3cret costs $5 or $5 $");
        assert_eq!(names, ["TOKEN"]);
        assert_eq!(format!("{value} {value:?}"), "*** ***");
    }

    #[test]
    fn echoed_secrets_are_masked_in_strings_and_names() {
        let secrets = [Secret::new("s3cret")];
        let echoed = serde_json::json!({"auth": "Bearer s3cret", "s3cret": [1, "xs3cretx"]});
        assert_eq!(
            mask(echoed, &secrets),
            serde_json::json!({"auth": "Bearer ***", "***": [1, "x***x"]})
        );
    }

    #[test]
    fn unset_and_malformed_references_are_named() {
        assert_eq!(
            expand("Bearer ${MISSING}", lookup).unwrap_err(),
            ExpandError::Unset("MISSING".into())
        );
        assert!(matches!(
            expand("${TOKEN", lookup),
            Err(ExpandError::Malformed(_))
        ));
        assert_eq!(
            expand("Bearer $TOKEN", lookup).unwrap_err().to_string(),
            "$TOKEN is not expanded: write ${TOKEN} for the environment variable, or $$TOKEN for a literal $"
        );
        assert!(matches!(
            expand("${1A}", lookup),
            Err(ExpandError::Malformed(text)) if text == "${1A}"
        ));
    }
}
