//! The limits a decision's values must keep to be recorded and replayed on every store
//! (docs/semantics.md §12.1, rules 5 and 6): one set for every door. The API and the CLI check
//! them here; PostgreSQL's `carmy.resolve_execution` (migration `V12`) refuses the same with the
//! same words, so a DBA's SQL cannot write a record that the gateway cannot replay.

use crate::outcome::ExecutionError;
use serde_json::Value;

/// Most nested objects and arrays a decision's `data` (or its `error`, counted from the error
/// object itself) may have: a record is one object around them, and the JSON library reads at
/// most 127 levels.
pub const MAX_VALUE_DEPTH: usize = 126;

/// Most digits after the decimal point (after applying the exponent) PostgreSQL's `numeric`, and
/// so `jsonb`, can store.
pub const MAX_NUMERIC_SCALE: i128 = 16_383;

/// Most digits before the decimal point PostgreSQL's `numeric` can store.
pub const MAX_NUMERIC_WEIGHT: i128 = 131_072;

/// Member names the JSON library gives a special meaning (docs/semantics.md §2.3).
const RESERVED_MEMBERS: [&str; 2] = [
    "$serde_json::private::Number",
    "$serde_json::private::RawValue",
];

/// Checks `value`, a decision's `field` (`data` or `error`): at most `max_bytes` of compact
/// JSON, nested at most [`MAX_VALUE_DEPTH`] levels, no reserved member name, and every number
/// one PostgreSQL's `numeric` can hold exactly (at most [`MAX_NUMERIC_SCALE`] digits after the
/// point, [`MAX_NUMERIC_WEIGHT`] before it), so that both stores record it losslessly.
///
/// # Errors
/// A sentence naming `field` and what is wrong, e.g. `data is nested deeper than 126 levels`.
pub fn check_value(field: &str, value: &Value, max_bytes: usize) -> Result<(), String> {
    let size = serde_json::to_string(value).map_or(usize::MAX, |text| text.len());
    if size > max_bytes {
        return Err(format!("{field} is larger than {max_bytes} bytes of JSON"));
    }
    walk(field, value, MAX_VALUE_DEPTH, &mut String::new())
}

/// Checks a resolution's `data` and `error` with [`check_value`].
///
/// # Errors
/// As [`check_value`].
pub fn check_outcome_values(
    data: &Value,
    error: Option<&ExecutionError>,
    max_bytes: usize,
) -> Result<(), String> {
    check_value("data", data, max_bytes)?;
    if let Some(error) = error {
        let error = serde_json::to_value(error).map_err(|e| format!("error: {e}"))?;
        check_value("error", &error, max_bytes)?;
    }
    Ok(())
}

fn walk(field: &str, value: &Value, levels: usize, pointer: &mut String) -> Result<(), String> {
    let children: Vec<(String, &Value)> = match value {
        Value::Number(number) => {
            let text = number.to_string();
            return if numeric_holds(&text) {
                Ok(())
            } else {
                let at = if pointer.is_empty() { "/" } else { pointer };
                Err(format!(
                    "{field} holds a number PostgreSQL cannot store exactly (more than {MAX_NUMERIC_SCALE} digits after the decimal point or {MAX_NUMERIC_WEIGHT} before it) at {at}"
                ))
            };
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(index, item)| (index.to_string(), item))
            .collect(),
        Value::Object(members) => {
            if let Some(name) = members
                .keys()
                .find(|name| RESERVED_MEMBERS.contains(&name.as_str()))
            {
                return Err(format!("{field} uses the reserved member name {name}"));
            }
            members
                .iter()
                .map(|(name, item)| (name.replace('~', "~0").replace('/', "~1"), item))
                .collect()
        }
        _ => return Ok(()),
    };
    if levels == 0 {
        return Err(format!(
            "{field} is nested deeper than {MAX_VALUE_DEPTH} levels"
        ));
    }
    for (step, child) in children {
        let length = pointer.len();
        pointer.push('/');
        pointer.push_str(&step);
        walk(field, child, levels - 1, pointer)?;
        pointer.truncate(length);
    }
    Ok(())
}

/// Whether PostgreSQL's `numeric` holds the JSON number `text` exactly.
fn numeric_holds(text: &str) -> bool {
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => {
            let Ok(exponent) = exponent
                .strip_prefix('+')
                .unwrap_or(exponent)
                .parse::<i128>()
            else {
                return false;
            };
            (mantissa, exponent)
        }
        None => (unsigned, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |part: &str| i128::try_from(part.len()).unwrap_or(i128::MAX);
    let scale = digits(fraction).saturating_sub(exponent);
    let weight = digits(whole.trim_start_matches('0')).saturating_add(exponent);
    scale <= MAX_NUMERIC_SCALE && weight <= MAX_NUMERIC_WEIGHT
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |inner, _| json!([inner]))
    }

    #[test]
    fn numbers_numeric_cannot_hold_are_refused() {
        assert!(numeric_holds("1"));
        assert!(numeric_holds("-1.5e300"));
        assert!(numeric_holds(&format!("0.{}", "1".repeat(16_383))));
        assert!(!numeric_holds(&format!("0.{}", "1".repeat(16_384))));
        assert!(!numeric_holds(&format!("1{}e-16384", "0".repeat(16_384))));
        assert!(!numeric_holds("1e131073"));
        assert!(!numeric_holds(
            "1e99999999999999999999999999999999999999999"
        ));
    }

    #[test]
    fn depth_size_and_reserved_names() {
        assert_eq!(
            check_value("data", &nested(MAX_VALUE_DEPTH), 1 << 20),
            Ok(())
        );
        assert_eq!(
            check_value("data", &nested(MAX_VALUE_DEPTH + 1), 1 << 20),
            Err("data is nested deeper than 126 levels".into())
        );
        assert_eq!(
            check_value("data", &json!("abcd"), 5),
            Err("data is larger than 5 bytes of JSON".into())
        );
        assert_eq!(
            check_value(
                "error",
                &json!({"a": {"$serde_json::private::Number": "1"}}),
                99
            ),
            Err("error uses the reserved member name $serde_json::private::Number".into())
        );
    }
}
