//! Header values from the tools file: `${NAME}` expanded from the environment at start, the
//! result kept as a [`Secret`] that never prints (docs/semantics.md §10).

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
}

/// Expands every `${NAME}` in `template` with `lookup(NAME)`; `$$` is a literal `$`, any other
/// `$` stays as it is. Returns the text and the names it used.
///
/// # Errors
/// [`ExpandError::Unset`] for the first name `lookup` does not know, [`ExpandError::Malformed`]
/// for a reference that is not `${NAME}`.
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
        let (value, names) = expand("Bearer ${TOKEN} costs $$5 or $x", lookup).unwrap();
        assert_eq!(value.expose(), "Bearer s3cret costs $5 or $x");
        assert_eq!(names, ["TOKEN"]);
        assert_eq!(format!("{value} {value:?}"), "*** ***");
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
        assert!(matches!(
            expand("${1A}", lookup),
            Err(ExpandError::Malformed(text)) if text == "${1A}"
        ));
    }
}
