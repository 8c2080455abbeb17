//! Unit tests of the canonical writer (`super`): the writer against the definition, the
//! framed array built as a `Value` (cloning the arguments) and written by a general JCS
//! serializer, with the exact-number list collected by a separate walk, as fingerprint `v1`
//! was first computed.

use super::*;
use proptest::prelude::*;
use serde_json::Map;

fn reference(tool: &str, arguments: &Value, metadata: Option<&Value>) -> Vec<u8> {
    let empty = Value::Object(Map::new());
    let metadata = metadata.unwrap_or(&empty);
    let mut exact_numbers = Vec::new();
    collect(arguments, &mut "/3".to_owned(), &mut exact_numbers);
    collect(metadata, &mut "/4".to_owned(), &mut exact_numbers);
    let framed = Value::Array(vec![
        Value::from("carmy-fingerprint"),
        Value::from(FINGERPRINT_VERSION),
        Value::from(tool),
        arguments.clone(),
        metadata.clone(),
        Value::Array(exact_numbers),
    ]);
    serde_json_canonicalizer::to_vec(&framed).unwrap()
}

fn collect(value: &Value, pointer: &mut String, out: &mut Vec<Value>) {
    match value {
        Value::Number(number) => {
            let text = number.to_string();
            let exact = ExactDecimal::parse(&text).unwrap();
            let as_double: f64 = text.parse().unwrap();
            let written = ExactDecimal::parse(&format!("{as_double:e}")).unwrap();
            if exact != written {
                out.push(Value::Array(vec![
                    Value::from(pointer.as_str()),
                    Value::from(exact.to_string()),
                ]));
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                let len = pointer.len();
                pointer.push_str(&format!("/{index}"));
                collect(item, pointer, out);
                pointer.truncate(len);
            }
        }
        Value::Object(members) => {
            let mut names: Vec<&String> = members.keys().collect();
            names.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            for name in names {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&name.replace('~', "~0").replace('/', "~1"));
                collect(&members[name.as_str()], pointer, out);
                pointer.truncate(len);
            }
        }
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
}

fn parse(text: &str) -> Value {
    crate::strict_json::parse(text).unwrap()
}

#[test]
fn tricky_values_are_written_as_the_reference_writes_them() {
    let cases = [
        r#"{}"#,
        r#"{"b":[1,1.0,1e0,-0,0.000001,1e-7,1e21,123456789012345678901234567890]}"#,
        r#"{"big":9007199254740993,"neg":-9007199254740993,"frac":0.1000000000000000055511151231257827}"#,
        "{\"\u{e000}\":1,\"\u{1f600}\":2,\"\u{ffff}\":3,\"a\":4,\"\":5}",
        r#"{"s":"quote\" backslash\\ slash/ \u0000\u0001\b\t\n\u000b\f\r\u001f\u007f\u2028 é"}"#,
        r#"{"~/":{"a/b":[{"~0":12345678901234567890}]},"x":[[],[{}],null,true,false]}"#,
        r#"{"d":[12.500,-0.000001,0.0000012,0.00000012,100.0,-0.0,0.000100,999999999999999.9,7]}"#,
    ];
    for case in cases {
        let value = parse(case);
        let metadata = parse(r#"{"m":[18446744073709551616,{"z":1,"y":2}]}"#);
        for metadata in [None, Some(&metadata)] {
            assert_eq!(
                String::from_utf8(framed("tool \"x\"", &value, metadata).unwrap().bytes).unwrap(),
                String::from_utf8(reference("tool \"x\"", &value, metadata)).unwrap(),
                "{case}"
            );
        }
    }
}

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        "-?[1-9][0-9]{14,40}",
        "-?(0|[1-9][0-9]{0,5})\\.[0-9]{1,20}",
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:e}")),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number().prop_map(|text| Value::Number(text.parse().unwrap())),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn every_value_is_written_as_the_reference_writes_it(arguments in value(), metadata in value()) {
        let arguments = Value::Array(vec![arguments]);
        let metadata = serde_json::json!({ "m": metadata });
        prop_assert_eq!(
            framed("t", &arguments, Some(&metadata)).unwrap().bytes,
            reference("t", &arguments, Some(&metadata))
        );
    }
}
