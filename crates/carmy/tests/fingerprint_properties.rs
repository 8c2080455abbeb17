//! Property tests of the fingerprint (docs/semantics.md §2): invariant under member order,
//! whitespace, escape spelling and number spelling; changed values never collide; nothing panics.

use carmy::fingerprint::fingerprint;
use carmy::strict_json;
use proptest::prelude::*;
use serde_json::{Map, Number, Value};
use std::fmt::Write;

/// Numbers as exact text: small and huge integers, and finite doubles in Rust's shortest form.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        // integers far beyond 64 bits
        "[1-9][0-9]{20,40}",
        "-[1-9][0-9]{20,40}",
        // plain decimals
        "-?(0|[1-9][0-9]{0,5})\\.[0-9]{1,8}",
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:e}")),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number().prop_map(|text| Value::Number(text.parse::<Number>().unwrap())),
        any::<String>().prop_map(Value::String),
        "[a-z\u{e9}\u{1F600}\"\\\\/\n\u{0}]{0,8}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z~/\u{e9}]{0,4}", inner, 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A xorshift step: the test's own reproducible randomness.
fn step(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Writes `value` as JSON text in another spelling: members in the order given by `seed`,
/// whitespace, every string character escaped or not, numbers re-spelt with an exponent.
fn respell(value: &Value, seed: &mut u64, out: &mut String) {
    let space = |n: u64| [" ", "", "\n\t", "  "][(n % 4) as usize];
    match value {
        Value::Null | Value::Bool(_) => out.push_str(&value.to_string()),
        Value::Number(number) => {
            let text = number.to_string();
            let (mantissa, exponent) = match text.split_once(['e', 'E']) {
                Some((mantissa, exponent)) => (mantissa, Some(exponent.trim_start_matches('+'))),
                None => (text.as_str(), None),
            };
            // The same value, spelt differently: 12 → 12.0, 1.5 → 1.50, 2e5 → 2E+5, 7 → 70e-1.
            match step(seed) % 3 {
                0 if mantissa.contains('.') => write!(out, "{mantissa}0").unwrap(),
                0 => write!(out, "{mantissa}.0").unwrap(),
                1 if exponent.is_none() && !mantissa.contains('.') => {
                    write!(out, "{mantissa}0e-1").unwrap();
                    return;
                }
                _ => out.push_str(mantissa),
            }
            let choice = step(seed) % 3;
            match exponent {
                Some(exponent) if choice == 0 => write!(out, "E{exponent}").unwrap(),
                Some(exponent) if choice == 1 && !exponent.starts_with('-') => {
                    write!(out, "e+{exponent}").unwrap();
                }
                Some(exponent) => write!(out, "e{exponent}").unwrap(),
                None => out.push_str(["", "e0", "E-0"][choice as usize]),
            }
        }
        Value::String(text) => {
            out.push('"');
            for c in text.chars() {
                let escape = step(seed).is_multiple_of(2);
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    c if (c as u32) < 0x20 || escape => {
                        let mut units = [0u16; 2];
                        for unit in c.encode_utf16(&mut units) {
                            write!(out, "\\u{unit:04x}").unwrap();
                        }
                    }
                    '/' if step(seed).is_multiple_of(2) => out.push_str("\\/"),
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(space(step(seed)));
                respell(item, seed, out);
            }
            out.push(']');
        }
        Value::Object(members) => {
            let mut entries: Vec<(&String, &Value)> = members.iter().collect();
            // a seeded shuffle
            for i in (1..entries.len()).rev() {
                let j = (step(seed) % (i as u64 + 1)) as usize;
                entries.swap(i, j);
            }
            out.push('{');
            for (index, (name, member)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(space(step(seed)));
                respell(&Value::String(name.clone()), seed, out);
                out.push_str(space(step(seed)));
                out.push(':');
                respell(member, seed, out);
            }
            out.push('}');
        }
    }
}

fn fp_of_text(arguments: &str) -> String {
    let parsed = strict_json::parse(arguments).expect("valid JSON");
    fingerprint("t", &parsed, None).unwrap().digest
}

fn object(value: Value) -> Value {
    serde_json::json!({ "v": value })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn invariant_under_spelling(value in json_value(), seed in 1u64..) {
        let value = object(value);
        let plain = value.to_string();
        let mut seed = seed;
        let mut respelt = String::new();
        respell(&value, &mut seed, &mut respelt);
        prop_assert_eq!(fp_of_text(&plain), fp_of_text(&respelt), "{} vs {}", plain, respelt);
    }

    #[test]
    fn a_changed_leaf_changes_the_fingerprint(value in json_value(), other in leaf()) {
        let before = object(value.clone());
        let after = object(Value::Array(vec![value.clone(), other.clone()]));
        prop_assert_ne!(fp_of_text(&before.to_string()), fp_of_text(&after.to_string()));
        if other != value && !(other.is_number() && value.is_number()) {
            prop_assert_ne!(
                fp_of_text(&object(value).to_string()),
                fp_of_text(&object(other).to_string())
            );
        }
    }

    #[test]
    fn doubles_one_ulp_apart_differ(bits in any::<u64>()) {
        let a = f64::from_bits(bits);
        let b = f64::from_bits(bits.wrapping_add(1));
        prop_assume!(a.is_finite() && b.is_finite() && a != b);
        prop_assert_ne!(fp_of_text(&format!("{{\"v\":{a:e}}}")), fp_of_text(&format!("{{\"v\":{b:e}}}")));
    }

    #[test]
    fn big_integers_differ_from_their_neighbours(digits in "[1-9][0-9]{16,60}") {
        let next = increment(&digits);
        prop_assert_ne!(fp_of_text(&format!("{{\"v\":{digits}}}")), fp_of_text(&format!("{{\"v\":{next}}}")));
        prop_assert_eq!(fp_of_text(&format!("{{\"v\":{digits}}}")), fp_of_text(&format!("{{\"v\":{digits}.000}}")));
    }

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        if let Ok(value) = strict_json::parse(&text) {
            let _ = fingerprint("t", &value, None);
        }
    }

    #[test]
    fn arbitrary_json_like_text_never_panics(text in r#"[\[\]{}":,0-9eE.+\-a-z\\ ]{0,64}"#) {
        if let Ok(value) = strict_json::parse(&text) {
            let _ = fingerprint("t", &value, None);
        }
    }
}

/// The decimal digits of `digits + 1`.
fn increment(digits: &str) -> String {
    let mut bytes = digits.as_bytes().to_vec();
    for byte in bytes.iter_mut().rev() {
        if *byte == b'9' {
            *byte = b'0';
        } else {
            *byte += 1;
            return String::from_utf8(bytes).unwrap();
        }
    }
    format!("1{}", String::from_utf8(bytes).unwrap())
}
