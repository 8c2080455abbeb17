//! The arguments kept with each execution (docs/semantics.md §8.5): which ones the gateway keeps
//! ([`KeepArguments`], `CARMY_KEEP_ARGUMENTS`), what a tool hides before anything is stored
//! ([`Redaction`], `redact_arguments` in the tools file), and the text a store keeps
//! ([`kept_text`]): the canonical JSON the fingerprint covers, with hidden values replaced by
//! [`REDACTED`].

use crate::fingerprint::FingerprintError;
use serde_json::Value;

/// What stands in the kept arguments for a value a tool's redaction hides.
pub const REDACTED: &str = "[redacted]";

/// Which arguments the gateway keeps with an execution (`CARMY_KEEP_ARGUMENTS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KeepArguments {
    /// Keep none: the record holds only the fingerprint's digests, as before schema V15.
    None,
    /// Keep them, with each tool's [`Redaction`] applied before storage (the default).
    #[default]
    Redacted,
    /// Keep them whole, ignoring the tools' redactions (for a test system only).
    All,
}

impl KeepArguments {
    /// `none`, `redacted` or `all`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Redacted => "redacted",
            Self::All => "all",
        }
    }
}

impl std::str::FromStr for KeepArguments {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "none" => Ok(Self::None),
            "redacted" => Ok(Self::Redacted),
            "all" => Ok(Self::All),
            other => Err(format!(
                "{other:?} is not one of none, redacted, all (lower case)"
            )),
        }
    }
}

/// What a tool hides from its kept arguments (docs/semantics.md §8.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Redaction {
    /// The whole arguments: the record keeps only [`REDACTED`].
    Whole,
    /// The values at these RFC 6901 JSON pointers (each starts with `/`); a pointer that names
    /// nothing in a call's arguments hides nothing there.
    Pointers(Vec<String>),
}

impl Redaction {
    /// Checks one pointer as the tools file gives it: `""` is refused (the whole arguments are
    /// `"all"`), anything else must start with `/` and use `~` only as `~0` or `~1`.
    ///
    /// # Errors
    /// What is wrong with it, to show with the file and line.
    pub fn check_pointer(pointer: &str) -> Result<(), String> {
        if !pointer.starts_with('/') {
            return Err(format!(
                "{pointer:?} is not a JSON pointer: it must start with \"/\" (e.g. \"/card/number\"); \
                 write redact_arguments = \"all\" to hide the whole arguments"
            ));
        }
        let mut rest = pointer;
        while let Some(at) = rest.find('~') {
            match rest.as_bytes().get(at + 1) {
                Some(b'0' | b'1') => rest = &rest[at + 2..],
                _ => {
                    return Err(format!(
                        "{pointer:?}: \"~\" must be written \"~0\" (and \"/\" inside a name \"~1\")"
                    ))
                }
            }
        }
        Ok(())
    }
}

/// The text a store keeps as a call's arguments, or `None` when `keep` keeps none.
///
/// `Redacted` applies `redaction` first: `Whole` keeps the JSON string [`REDACTED`], `Pointers`
/// replace each named value by it. The text is the canonical JSON of what is left
/// ([`crate::canonical`]: members sorted, numbers as the fingerprint writes them, a number a
/// double cannot hold as sent).
///
/// # Errors
/// As the fingerprint's: a number out of range (a call that got this far was fingerprinted
/// already, so this does not happen for a validated call).
pub fn kept_text(
    keep: KeepArguments,
    redaction: Option<&Redaction>,
    arguments: &Value,
) -> Result<Option<String>, FingerprintError> {
    let redaction = match keep {
        KeepArguments::None => return Ok(None),
        KeepArguments::All => None,
        KeepArguments::Redacted => redaction,
    };
    match redaction {
        None => crate::canonical::exact_text(arguments).map(Some),
        Some(Redaction::Whole) => crate::canonical::exact_text(&Value::from(REDACTED)).map(Some),
        Some(Redaction::Pointers(pointers)) => {
            let mut hidden = arguments.clone();
            for pointer in pointers {
                if let Some(value) = hidden.pointer_mut(pointer) {
                    *value = Value::from(REDACTED);
                }
            }
            crate::canonical::exact_text(&hidden).map(Some)
        }
    }
}

/// The value a search by arguments looks for (docs/semantics.md §8.5), from the text a caller
/// gave (`?arguments=`, `--arguments`, the console's field): strict JSON, an object, in the
/// canonical form the kept arguments are written in (so `1.0` finds `1`).
///
/// # Errors
/// A sentence saying what to fix.
pub fn search_value(text: &str) -> Result<Value, String> {
    let example = "e.g. {\"customer\":\"cus_42\"}";
    let value = crate::strict_json::parse(text)
        .map_err(|error| format!("arguments must be a JSON object ({example}): {error}"))?;
    if !value.is_object() {
        return Err(format!("arguments must be a JSON object ({example})"));
    }
    let canonical = crate::canonical::exact_text(&value).map_err(|error| error.to_string())?;
    serde_json::from_str(&canonical).map_err(|error| error.to_string())
}

/// Whether `kept` (kept arguments' text) contains `needle` as jsonb's `@>` says: an object every
/// member of `needle`'s object, recursively; an array an element for each of `needle`'s
/// elements; anything else an equal value. Both must be canonical ([`kept_text`],
/// [`search_value`]), so numbers compare by their text. Text that is not JSON contains nothing.
pub fn contains_text(kept: &str, needle: &Value) -> bool {
    serde_json::from_str::<Value>(kept).is_ok_and(|kept| contains(&kept, needle))
}

fn contains(kept: &Value, needle: &Value) -> bool {
    match (kept, needle) {
        (Value::Object(kept), Value::Object(needle)) => needle
            .iter()
            .all(|(name, wanted)| kept.get(name).is_some_and(|value| contains(value, wanted))),
        (Value::Array(kept), Value::Array(needle)) => needle
            .iter()
            .all(|wanted| kept.iter().any(|value| contains(value, wanted))),
        (kept, needle) => kept == needle,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strict_json::parse;

    #[test]
    fn kept_text_is_canonical_exact_and_redacted_before_storage() {
        let arguments =
            parse(r#"{"z":1.0,"card":{"number":"4242","exp":"12/30"},"n":9007199254740993}"#)
                .unwrap();
        assert_eq!(
            kept_text(KeepArguments::Redacted, None, &arguments).unwrap(),
            Some(r#"{"card":{"exp":"12/30","number":"4242"},"n":9007199254740993,"z":1}"#.into())
        );
        let hide = Redaction::Pointers(vec!["/card/number".into(), "/absent/x".into()]);
        assert_eq!(
            kept_text(KeepArguments::Redacted, Some(&hide), &arguments).unwrap(),
            Some(
                r#"{"card":{"exp":"12/30","number":"[redacted]"},"n":9007199254740993,"z":1}"#
                    .into()
            )
        );
        assert_eq!(
            kept_text(KeepArguments::Redacted, Some(&Redaction::Whole), &arguments).unwrap(),
            Some(r#""[redacted]""#.into())
        );
        assert!(
            kept_text(KeepArguments::All, Some(&Redaction::Whole), &arguments)
                .unwrap()
                .unwrap()
                .contains("4242")
        );
        assert_eq!(
            kept_text(KeepArguments::None, None, &arguments).unwrap(),
            None
        );
    }

    #[test]
    fn searches_contain_as_jsonb_does() {
        let kept = r#"{"amount":500,"customer":"cus_42","items":[{"sku":"a","n":1},{"sku":"b"}]}"#;
        let found = |text: &str| contains_text(kept, &search_value(text).unwrap());
        assert!(found(r#"{"customer":"cus_42"}"#));
        assert!(found(r#"{"amount":500.0,"customer":"cus_42"}"#));
        assert!(found(r#"{"items":[{"sku":"b"}]}"#));
        assert!(found("{}"));
        assert!(!found(r#"{"customer":"cus_4"}"#));
        assert!(!found(r#"{"amount":"500"}"#));
        assert!(!found(r#"{"items":[{"sku":"c"}]}"#));
        assert!(!contains_text("not json", &search_value("{}").unwrap()));
        assert!(search_value("[1]").is_err());
        assert!(search_value(r#"{"a":1,"a":2}"#).is_err());
    }

    #[test]
    fn pointers_are_checked() {
        assert!(Redaction::check_pointer("/card/number").is_ok());
        assert!(Redaction::check_pointer("/a~1b/~0").is_ok());
        assert!(Redaction::check_pointer("").is_err());
        assert!(Redaction::check_pointer("card").is_err());
        assert!(Redaction::check_pointer("/a~2").is_err());
        assert_eq!("all".parse(), Ok(KeepArguments::All));
        assert!("ALL".parse::<KeepArguments>().is_err());
    }
}
