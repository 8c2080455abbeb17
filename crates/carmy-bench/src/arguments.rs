//! Argument objects for the fingerprint benchmarks, as a caller would send them.

/// A small arguments object, like the README's `create_order` call.
pub const SMALL: &str = r#"{"sku":"KB-01","quantity":2,"ship":{"city":"Lyon","express":true},"note":"leave at the door"}"#;

/// An arguments object whose compact JSON text is at least `bytes` long: members holding
/// strings, integers, decimals, booleans, nulls and nested objects and arrays, in no sorted
/// order, so that canonicalization has work to do. The same `bytes` always gives the same text.
pub fn of_size(bytes: usize) -> String {
    let mut text = String::from("{");
    let mut index = 0usize;
    while text.len() + 1 < bytes {
        if index > 0 {
            text.push(',');
        }
        // Descending names: JCS sorts them back.
        let name = format!("field_{:05}", 99_999 - index);
        let value = match index % 6 {
            0 => format!("\"value number {index} with some ordinary text in it\""),
            1 => format!("{}", index * 7_919),
            2 => format!("{}.{:03}", index, index % 1000),
            3 => format!("{}", index.is_multiple_of(2)),
            4 => format!(
                "{{\"z\":{index},\"a\":\"nested {index}\",\"m\":[1,2.5,\"three\",null,{{\"k\":false}}]}}"
            ),
            _ => "null".to_owned(),
        };
        text.push_str(&format!("\"{name}\":{value}"));
        index += 1;
    }
    text.push('}');
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn objects_parse_strictly() {
        for text in [super::SMALL.to_owned(), super::of_size(10 * 1024)] {
            let value = carmy::strict_json::parse(&text).unwrap();
            assert!(value.is_object());
        }
        let big = super::of_size(10 * 1024);
        assert!(big.len() >= 10 * 1024 && big.len() < 10 * 1024 + 200);
    }
}
