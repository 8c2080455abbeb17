//! Request fingerprints (docs/semantics.md §2).
//!
//! Fingerprint `v1` = SHA-256 over the RFC 8785 (JCS) canonical form of the JSON array
//! `["carmy-fingerprint", "v1", tool, arguments, metadata, exact_numbers]`, where `metadata` is
//! `{}` when the call sent none, and `exact_numbers` lists, as `[json_pointer, exact_decimal]`
//! pairs in canonical member order, every number whose exact decimal value differs from the value
//! JCS writes for it (JCS writes numbers as IEEE doubles, so `9007199254740993` would otherwise
//! collide with `9007199254740992`). Numbers that a double holds exactly (`1`, `1.0`, `1e0`, `0.5`)
//! add nothing, so the fingerprint equals that of plain JCS for them.
//!
//! Nothing else enters the fingerprint: no headers, trace ids, timestamps or retry counters.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt;

mod parts;

pub use parts::{FingerprintParts, LazyParts};

/// The algorithm version written beside every stored fingerprint (docs/semantics.md §2).
pub const FINGERPRINT_VERSION: &str = "v1";

/// A request fingerprint: the algorithm version and the lowercase hex SHA-256 digest (64 chars).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fingerprint {
    /// The algorithm, e.g. `v1`.
    pub version: String,
    /// 64 lowercase hex digits.
    pub digest: String,
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.version, self.digest)
    }
}

/// Why a fingerprint could not be computed; the text is safe to show to the caller.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum FingerprintError {
    /// A number that no exact decimal can be formed for (an exponent beyond 64 bits).
    #[error("number {0} is out of range")]
    NumberOutOfRange(String),
}

/// Computes the `v1` fingerprint of a call.
///
/// `arguments` and `metadata` must come from [`crate::strict_json::parse`] (numbers exact, no
/// duplicate members, no unrepresentable numbers); `metadata` `None` means `{}`.
///
/// # Errors
/// [`FingerprintError::NumberOutOfRange`] for a number whose exponent does not fit 64 bits.
pub fn fingerprint(
    tool: &str,
    arguments: &Value,
    metadata: Option<&Value>,
) -> Result<Fingerprint, FingerprintError> {
    fingerprint_with_parts(tool, arguments, metadata).map(|(fingerprint, _)| fingerprint)
}

/// [`fingerprint`] and the call's [`FingerprintParts`], from one canonical walk.
///
/// # Errors
/// As [`fingerprint`].
pub fn fingerprint_with_parts(
    tool: &str,
    arguments: &Value,
    metadata: Option<&Value>,
) -> Result<(Fingerprint, FingerprintParts), FingerprintError> {
    fingerprint_with_lazy_parts(tool, arguments, metadata)
        .map(|(fingerprint, parts)| (fingerprint, parts.parts()))
}

/// [`fingerprint`] and what the call's [`FingerprintParts`] are computed from, when asked
/// ([`LazyParts::parts`]): a replay never needs them (docs/semantics.md §12.8), so it does not
/// hash its parts again (three more SHA-256 runs, about 7,000 instructions, issue 39).
///
/// # Errors
/// As [`fingerprint`].
pub fn fingerprint_with_lazy_parts(
    tool: &str,
    arguments: &Value,
    metadata: Option<&Value>,
) -> Result<(Fingerprint, LazyParts), FingerprintError> {
    let framed = crate::canonical::framed(tool, arguments, metadata)?;
    let fingerprint = Fingerprint {
        version: FINGERPRINT_VERSION.to_owned(),
        digest: lower_hex(&Sha256::digest(&framed.bytes)),
    };
    let parts = LazyParts::new(framed);
    Ok((fingerprint, parts))
}

/// `bytes` as lowercase hex, written into one buffer (`hex::encode` collects a `String`
/// character by character, which cost a call about 2,000 instructions, issue 39).
fn lower_hex(bytes: &[u8]) -> String {
    let mut text = vec![0; bytes.len() * 2];
    hex::encode_to_slice(bytes, &mut text).expect("the buffer holds two digits per byte");
    String::from_utf8(text).expect("hex digits are ASCII")
}

/// A decimal number in a unique form: sign, digits without leading or trailing zeros, exponent.
/// Zero is always `(false, "0", 0)`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ExactDecimal {
    negative: bool,
    digits: String,
    exponent: i64,
}

impl ExactDecimal {
    /// Parses JSON number text (or Rust's `{:e}` output). `None` if the exponent overflows.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let (negative, unsigned) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (mantissa, exponent_text) = match unsigned.find(['e', 'E']) {
            Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
            None => (unsigned, None),
        };
        let (integer, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all_digits = format!("{integer}{fraction}");
        let trimmed_leading = all_digits.trim_start_matches('0');
        if trimmed_leading.is_empty() {
            // Zero, whatever its exponent (even one beyond 64 bits).
            return Some(Self {
                negative: false,
                digits: "0".to_owned(),
                exponent: 0,
            });
        }
        let exponent = match exponent_text {
            Some(text) => text.trim_start_matches('+').parse::<i64>().ok()?,
            None => 0,
        };
        let mut exponent = exponent.checked_sub(i64::try_from(fraction.len()).ok()?)?;
        let digits = trimmed_leading.trim_end_matches('0');
        exponent =
            exponent.checked_add(i64::try_from(trimmed_leading.len() - digits.len()).ok()?)?;
        Some(Self {
            negative,
            digits: digits.to_owned(),
            exponent,
        })
    }
}

impl fmt::Display for ExactDecimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.negative { "-" } else { "" };
        write!(f, "{sign}{}e{}", self.digits, self.exponent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strict_json::parse;

    fn fp(tool: &str, arguments: &str) -> String {
        fingerprint(tool, &parse(arguments).unwrap(), None)
            .unwrap()
            .digest
    }

    #[test]
    fn exact_decimal_is_unique_per_value() {
        let forms = ["1", "1.0", "1e0", "10e-1", "0.1e1", "1.000E+0"];
        for form in forms {
            assert_eq!(
                ExactDecimal::parse(form).unwrap().to_string(),
                "1e0",
                "{form}"
            );
        }
        assert_eq!(ExactDecimal::parse("-0.0").unwrap().to_string(), "0e0");
        assert_eq!(ExactDecimal::parse("1200").unwrap().to_string(), "12e2");
        assert_eq!(ExactDecimal::parse("0.0012").unwrap().to_string(), "12e-4");
        assert_eq!(ExactDecimal::parse("1e99999999999999999999"), None);
        assert_eq!(
            ExactDecimal::parse("0e99999999999999999999")
                .unwrap()
                .to_string(),
            "0e0"
        );
        assert_eq!(
            ExactDecimal::parse("-0.0E-99999999999999999999")
                .unwrap()
                .to_string(),
            "0e0"
        );
    }

    #[test]
    fn member_order_whitespace_and_escapes_do_not_matter() {
        let a = fp(
            "t",
            r#"{"sku":"A-1","quantity":2,"ship":{"city":"X","zip":"1"}}"#,
        );
        let b = fp(
            "t",
            "{ \"ship\" : { \"zip\":\"1\",\n\"city\":\"\\u0058\" }, \"quantity\":2, \"sku\":\"A-1\" }",
        );
        assert_eq!(a, b);
    }

    #[test]
    fn equal_numbers_match_and_unequal_numbers_differ() {
        let q = |number: &str| fp("t", &format!("{{\"q\":{number}}}"));
        for (a, b) in [
            ("1", "1.0"),
            ("1", "1e0"),
            ("9007199254740993", "9007199254740993.0"),
        ] {
            assert_eq!(q(a), q(b), "{a} and {b}");
        }
        for (a, b) in [
            ("1", "\"1\""),
            ("9007199254740993", "9007199254740992"),
            ("1152921504606846976", "1152921504606847000"),
            ("0.1", "0.10000000000000001"),
            ("0.30000000000000004", "0.30000000000000007"),
        ] {
            assert_ne!(q(a), q(b), "{a} and {b}");
        }
    }

    #[test]
    fn array_order_tool_and_metadata_matter() {
        assert_ne!(fp("t", r#"{"i":["a","b"]}"#), fp("t", r#"{"i":["b","a"]}"#));
        assert_ne!(
            fp("create_order", r#"{"sku":"A"}"#),
            fp("find_orders", r#"{"sku":"A"}"#)
        );
        let args = parse(r#"{"a":1}"#).unwrap();
        let meta = parse(r#"{"m":1}"#).unwrap();
        let empty = parse("{}").unwrap();
        assert_ne!(
            fingerprint("t", &args, Some(&meta)).unwrap(),
            fingerprint("t", &args, None).unwrap()
        );
        assert_eq!(
            fingerprint("t", &args, Some(&empty)).unwrap(),
            fingerprint("t", &args, None).unwrap()
        );
    }

    #[test]
    fn no_unicode_normalization() {
        assert_ne!(
            fp("t", "{\"n\":\"\u{e9}\"}"),
            fp("t", "{\"n\":\"e\u{301}\"}")
        );
    }

    #[test]
    fn known_digest_is_stable() {
        // Pinned so an accidental change of the v1 algorithm fails loudly: stored fingerprints
        // would otherwise turn into false conflicts.
        let canonical = r#"["carmy-fingerprint","v1","echo",{"a":1},{},[]]"#;
        assert_eq!(
            fp("echo", r#"{"a":1.0}"#),
            hex::encode(Sha256::digest(canonical))
        );
    }
}
