//! Strict JSON reading for fingerprinted values (docs/semantics.md §2).
//!
//! `serde_json` is the parser; this module only adds the rules a fingerprint needs and plain
//! `serde_json::Value` does not keep:
//! - an object with a duplicate member name is rejected (serde_json would keep the last one);
//! - numbers keep their exact text (the workspace enables `arbitrary_precision`), and a number a
//!   double cannot represent at all (`1e400`, `1e-400`) is rejected;
//! - the member name serde_json reserves for its exact numbers is rejected, so a caller's object
//!   can never pass for a number.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// The member name `serde_json` uses internally to carry an exact number (its `arbitrary_precision`
/// feature); a caller's object may not use it.
const RESERVED_NUMBER_MEMBER: &str = "$serde_json::private::Number";

/// The member name `serde_json` uses internally for raw JSON text (its `raw_value` feature): a
/// stored value holding it would read back as the parsed text, so a caller's object may not use it.
const RESERVED_RAW_MEMBER: &str = "$serde_json::private::RawValue";

/// Why a value was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum StrictJsonError {
    /// Not JSON, or JSON with a duplicate member, a reserved member name or too deep a nesting.
    /// The text is safe to show to the caller.
    #[error("{0}")]
    Invalid(String),
}

/// Parses `text` as one JSON value under the strict rules above.
///
/// # Errors
/// [`StrictJsonError::Invalid`] with a caller-facing explanation (including serde_json's line and
/// column for syntax errors).
pub fn parse(text: &str) -> Result<Value, StrictJsonError> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let value = StrictValue
        .deserialize(&mut deserializer)
        .and_then(|value| deserializer.end().map(|()| value))
        .map_err(|error| StrictJsonError::Invalid(error.to_string()))?;
    Ok(value)
}

/// Checks that a number's text stands for a value a double can hold in range: not infinite after
/// rounding (`1e400`) and not a non-zero value that rounds to zero (`1e-400`).
///
/// # Errors
/// A caller-facing explanation.
pub fn check_number_range(text: &str) -> Result<f64, String> {
    let parsed: f64 = text
        .parse()
        .map_err(|_| format!("number {text} is not a JSON number"))?;
    if !parsed.is_finite() {
        return Err(format!("number {text} is out of range"));
    }
    let mantissa = text.split(['e', 'E']).next().unwrap_or(text);
    let is_zero = !mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
    if parsed == 0.0 && !is_zero {
        return Err(format!("number {text} is too small to represent"));
    }
    Ok(parsed)
}

struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        Number::from_f64(value)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        StrictValue.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element_seed(StrictValue)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        let mut first = true;
        while let Some(name) = map.next_key::<String>()? {
            if name == RESERVED_NUMBER_MEMBER {
                // serde_json hands an exact number to a visitor as a one-member map whose value
                // arrives through `visit_string`; a caller's member of that name never does.
                if !first {
                    return Err(de::Error::custom(format!(
                        "member name {RESERVED_NUMBER_MEMBER:?} is reserved"
                    )));
                }
                let text = map.next_value_seed(NumberText)?;
                if map.next_key::<String>()?.is_some() {
                    return Err(de::Error::custom(format!(
                        "member name {RESERVED_NUMBER_MEMBER:?} is reserved"
                    )));
                }
                check_number_range(&text).map_err(de::Error::custom)?;
                let number: Number = text.parse().map_err(de::Error::custom)?;
                return Ok(Value::Number(number));
            }
            first = false;
            if name == RESERVED_RAW_MEMBER {
                return Err(de::Error::custom(format!(
                    "member name {RESERVED_RAW_MEMBER:?} is reserved"
                )));
            }
            if object.contains_key(&name) {
                return Err(de::Error::custom(format!(
                    "duplicate member name {name:?} in an object"
                )));
            }
            let value = map.next_value_seed(StrictValue)?;
            object.insert(name, value);
        }
        Ok(Value::Object(object))
    }
}

/// Accepts only an owned string (how serde_json passes an exact number's text).
struct NumberText;

impl<'de> DeserializeSeed<'de> for NumberText {
    type Value = String;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_any(NumberTextVisitor)
    }
}

struct NumberTextVisitor;

// Only `visit_string` on purpose: a borrowed or escaped string is a caller's member, not a number.
#[allow(clippy::serde_api_misuse)]
impl<'de> Visitor<'de> for NumberTextVisitor {
    type Value = String;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "no member named {RESERVED_NUMBER_MEMBER:?}")
    }

    fn visit_string<E>(self, value: String) -> Result<String, E> {
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_exact_numbers() {
        let value = parse(r#"{"a":123456789012345678901234567890,"b":1.0}"#).unwrap();
        assert_eq!(
            value.to_string(),
            r#"{"a":123456789012345678901234567890,"b":1.0}"#
        );
    }

    #[test]
    fn rejects_duplicates_at_any_depth() {
        assert!(parse(r#"{"a":1,"a":2}"#).is_err());
        assert!(parse(r#"{"x":[{"a":1,"b":{"c":1,"c":1}}]}"#).is_err());
        assert!(parse(r#"{"a":1,"b":{"a":2}}"#).is_ok());
    }

    #[test]
    fn rejects_unrepresentable_numbers() {
        let Err(StrictJsonError::Invalid(message)) = parse(r#"{"x":1e400}"#) else {
            panic!("1e400 was accepted");
        };
        assert!(message.contains("is out of range"), "{message}");
        assert!(parse(r#"{"x":-1e400}"#).is_err());
        assert!(parse(r#"{"x":1e-400}"#).is_err());
        assert!(parse(r#"{"x":0e-400}"#).is_ok());
        assert!(parse(r#"{"x":0.0e999}"#).is_ok());
    }

    #[test]
    fn rejects_the_reserved_member_name_in_every_spelling() {
        assert!(parse(r#"{"$serde_json::private::Number":"5"}"#).is_err());
        assert!(parse(r#"{"\u0024serde_json::private::Number":"5"}"#).is_err());
        assert!(parse(r#"{"$serde_json::private::Number":5}"#).is_err());
        assert!(parse(r#"{"a":1,"$serde_json::private::Number":"5"}"#).is_err());
        assert!(parse(r#"{"$serde_json::private::RawValue":"[1,2]"}"#).is_err());
        assert!(parse(r#"{"a":{"\u0024serde_json::private::RawValue":"{}"}}"#).is_err());
    }

    #[test]
    fn rejects_trailing_text_and_lone_surrogates() {
        assert!(parse(r#"{"a":1} x"#).is_err());
        assert!(parse(r#"{"a":"\ud800"}"#).is_err());
    }
}
