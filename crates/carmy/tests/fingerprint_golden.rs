//! Golden fingerprints (docs/semantics.md §2): the digest and the part digests of fixed calls,
//! pinned as fingerprint `v1` computed them when they were recorded. Stored rows carry these
//! values, so any change to the canonical writer that moves one of them would turn existing
//! identities into false conflicts: a failure here is never fixed by updating the value.

use carmy::fingerprint::fingerprint_with_parts;
use carmy::strict_json::parse;
use std::fmt::Write;

/// `(tool, arguments, metadata, digest, parts)`.
const GOLDEN: &[(&str, &str, Option<&str>, &str, &str)] = &[
    (
        "create_order",
        r#"{"sku":"KB-01","quantity":2,"ship":{"city":"Lyon","express":true},"note":"leave at the door"}"#,
        None,
        "769230b812c77126cc34c1d3ebe00bf203655f707c4a47e9e6e40ee778cd3b5e",
        "083ccfd2da03c3f6.f27f45d165026a91.ca3d163bab055381",
    ),
    (
        "echo",
        r#"{"b":[1,1.0,1e0,-0,0.000001,1e-7,1e21,123456789012345678901234567890],"big":9007199254740993,"frac":0.1000000000000000055511151231257827}"#,
        Some(r#"{"m":[18446744073709551616,{"z":1,"y":2}]}"#),
        "7b3944c512b4763e0552e15d2814aefbc9817bfad4a0b3f0a56da44ca68fff98",
        "2cce4a684da298d9.bda4611e5f365f99.0f3a4c745d03d834",
    ),
    (
        "echo",
        r#"{"\ue000":1,"\ud83d\ude00":2,"\uffff":3,"a":4,"":5,"\u00e9":6,"z":7}"#,
        None,
        "4fe37fdef17215ec83fbe5fd72846d62e7c6ef9388d87e71f41cdfed6bc9744d",
        "2cce4a684da298d9.9667a6eed746f2cd.ca3d163bab055381",
    ),
    (
        "echo",
        r#"{"s":"quote\" backslash\\ slash\/ \u0000\u0001\b\t\n\u000b\f\r\u001f\u007f\u2028 \u00e9 \ud83d\ude00"}"#,
        None,
        "5453e9d88acf998d7d39c3defcd670da40c0f7ba506bba6e2165bb5ebe0cd697",
        "2cce4a684da298d9.782596687767aeb6.ca3d163bab055381",
    ),
    (
        "echo",
        r#"{"~/":{"a/b":[{"~0":12345678901234567890}]},"x":[[],[{}],null,true,false]}"#,
        Some(r#"{"n":9007199254740993,"a":{"b":[0.1,0e-400]}}"#),
        "33d0c1e2945a5081ec9ab0fe5d0854bc327feafa5abd0bb28fac3f3a81abc66c",
        "2cce4a684da298d9.009569abd1b43dc9.12009763382441fd",
    ),
    (
        "echo",
        r#"{"n":[5e-324,1.7976931348623157e308,2.2250738585072014e-308,-1.5e300,0.1,100,1e22,123e-20,-0.0,1E+2,4.35,0.30000000000000004,1152921504606846976,-9223372036854775809]}"#,
        None,
        "03ef63dd1b3a5edb34568f2632372962f83902a2c7f502c7f03d42377d4b2d1b",
        "2cce4a684da298d9.a3ea693b9d23e4f9.ca3d163bab055381",
    ),
    (
        "echo",
        r#"{"d":[12.500,-0.000001,0.0000012,0.00000012,123456789012345,1234567890123456,100.0,-3.140,0.5,-0,7,999999999999999.9,0.000100]}"#,
        None,
        "9d924d50f9e2141537db01ff1f8e6f34411232ea1314f4f57fccf10d27c522f0",
        "2cce4a684da298d9.1b9ae439bdcaebae.ca3d163bab055381",
    ),
    (
        "tool \"x\"",
        "{}",
        Some("{}"),
        "0c223fec84465e25969477695ae0c9236e3b10eabebefa011f95f7fefb42c099",
        "f040eb2b28f3cffd.ca3d163bab055381.ca3d163bab055381",
    ),
    (
        "",
        "{}",
        None,
        "b379439e1aad8306327fc2c3d25db289d897391670da4eb317ab624d62f17dd6",
        "12ae32cb1ec02d01.ca3d163bab055381.ca3d163bab055381",
    ),
];

/// A deterministic object of about `members` members of every kind, in reverse name order.
fn large(members: usize) -> String {
    let mut text = String::from("{");
    for index in 0..members {
        if index > 0 {
            text.push(',');
        }
        let _ = write!(text, "\"k{:04}\":", members - index);
        let _ = match index % 7 {
            0 => write!(text, "\"text {index} \\u00e9\\n\""),
            1 => write!(text, "{}", index * 7_919),
            2 => write!(text, "{index}.{:03}", index % 1000),
            3 => write!(text, "{}e{}", index, index % 30),
            4 => write!(text, "{{\"z\":[{index},null,true],\"a\":{{}}}}"),
            5 => write!(text, "9007199254740{index:03}"),
            _ => write!(text, "-0.{index}e-{}", index % 9),
        };
    }
    text.push('}');
    text
}

fn digests(tool: &str, arguments: &str, metadata: Option<&str>) -> (String, String) {
    let arguments = parse(arguments).unwrap();
    let metadata = metadata.map(|text| parse(text).unwrap());
    let (fingerprint, parts) = fingerprint_with_parts(tool, &arguments, metadata.as_ref()).unwrap();
    assert_eq!(fingerprint.version, "v1");
    (fingerprint.digest, parts.encode())
}

#[test]
fn golden_fingerprints_are_unchanged() {
    for &(tool, arguments, metadata, digest, parts) in GOLDEN {
        let got = digests(tool, arguments, metadata);
        assert_eq!(
            got,
            (digest.to_owned(), parts.to_owned()),
            "{tool} {arguments} {metadata:?}"
        );
    }
}

#[test]
fn golden_fingerprint_of_a_large_object_is_unchanged() {
    let text = large(400);
    assert!(text.len() > 8 * 1024, "{}", text.len());
    let got = digests("create_order", &text, Some(r#"{"trace":"x"}"#));
    assert_eq!(
        got,
        (
            "519bffb8e07e64de3283357ec2e9498409a5c9162fcf0082629cc94bb8d092e5".to_owned(),
            "083ccfd2da03c3f6.f09c71c24378d074.72e96cf5e5d5d2eb".to_owned()
        )
    );
}
