//! The digests of a call's three parts (docs/semantics.md §12.8): its tool name, its arguments
//! and its metadata, stored beside the fingerprint so that a conflict can name what differs.
//! Computed on first use ([`LazyParts`]: a replay never needs them) from the canonical bytes the
//! fingerprint was computed from; the tool's and the metadata's digests are taken from the last
//! ones the thread computed when the input is the same (issue 39).

use sha2::{Digest, Sha256};
use std::fmt;

/// A call's [`FingerprintParts`], computed from its canonical bytes the first time they are
/// asked for and kept after; the same digests [`fingerprint_with_parts`](super::fingerprint_with_parts) returns. A clone shares
/// the bytes.
#[derive(Clone)]
pub struct LazyParts {
    framed: std::sync::Arc<crate::canonical::Framed>,
    parts: std::sync::OnceLock<FingerprintParts>,
}

impl LazyParts {
    /// The parts of `framed`, computed on first use.
    pub(super) fn new(framed: crate::canonical::Framed) -> Self {
        Self {
            framed: std::sync::Arc::new(framed),
            parts: std::sync::OnceLock::new(),
        }
    }

    /// The digests (computed on the first call).
    pub fn parts(&self) -> FingerprintParts {
        *self.parts.get_or_init(|| part_digests(&self.framed))
    }
}

impl fmt::Debug for LazyParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LazyParts")
            .field("parts", &self.parts.get())
            .finish_non_exhaustive()
    }
}

/// The digests of §12.8 over the framed call's canonical bytes.
fn part_digests(framed: &crate::canonical::Framed) -> FingerprintParts {
    let bytes = &framed.bytes;
    let part = |value: std::ops::Range<usize>, exact: std::ops::Range<usize>| {
        let mut hasher = Sha256::new();
        hasher.update(&bytes[value]);
        hasher.update(b"\n");
        hasher.update(&bytes[exact]);
        short_hex(&hasher.finalize())
    };
    FingerprintParts {
        tool: TOOL_DIGEST.with(|last| {
            last.digest(&bytes[framed.tool.clone()], &[], |tool, _| {
                short_hex(&Sha256::digest(tool))
            })
        }),
        arguments: part(framed.arguments.clone(), framed.exact_arguments.clone()),
        metadata: METADATA_DIGEST.with(|last| {
            last.digest(
                &bytes[framed.metadata.clone()],
                &bytes[framed.exact_metadata.clone()],
                |value, exact| {
                    let mut hasher = Sha256::new();
                    hasher.update(value);
                    hasher.update(b"\n");
                    hasher.update(exact);
                    short_hex(&hasher.finalize())
                },
            )
        }),
    }
}

/// The last part digest a thread computed, with its input: consecutive calls mostly name the
/// same tool and send the same metadata (`{}` when none), so their digests are taken from here
/// instead of hashed again (issue 39). Inputs longer than [`MEMO_MAX_BYTES`] are not kept.
#[derive(Default)]
struct LastDigest(std::cell::RefCell<Option<KeptDigest>>);

/// A kept input (value and exact numbers, one after the other), where the value ends, and the
/// digest.
type KeptDigest = (Vec<u8>, usize, [u8; 8]);

/// The longest input (value and exact numbers together, bytes) a [`LastDigest`] keeps.
const MEMO_MAX_BYTES: usize = 256;

impl LastDigest {
    /// The digest of `value` and `exact` by `compute`, from the last input when it is the same.
    fn digest(
        &self,
        value: &[u8],
        exact: &[u8],
        compute: impl Fn(&[u8], &[u8]) -> [u8; 8],
    ) -> [u8; 8] {
        let mut last = self.0.borrow_mut();
        if let Some((input, split, digest)) = last.as_ref() {
            if *split == value.len() && input[..*split] == *value && input[*split..] == *exact {
                return *digest;
            }
        }
        let digest = compute(value, exact);
        if value.len() + exact.len() <= MEMO_MAX_BYTES {
            let mut input = Vec::with_capacity(value.len() + exact.len());
            input.extend_from_slice(value);
            input.extend_from_slice(exact);
            *last = Some((input, value.len(), digest));
        }
        digest
    }
}

thread_local! {
    static TOOL_DIGEST: LastDigest = LastDigest::default();
    static METADATA_DIGEST: LastDigest = LastDigest::default();
}

/// The first 8 bytes of `digest`.
fn short_hex(digest: &[u8]) -> [u8; 8] {
    let mut short = [0; 8];
    short.copy_from_slice(&digest[..8]);
    short
}

/// Digests of a call's three parts (docs/semantics.md §12.8, `differs`): its tool name, its
/// arguments and its metadata, each the first 64 bits of a SHA-256 over that part's canonical
/// bytes (and its exact numbers) as fingerprint `v1` writes them. Stored beside the fingerprint
/// so that an `IDEMPOTENCY_CONFLICT` can name which parts differ without keeping, or showing,
/// the recorded values. Diagnostic only: the fingerprint alone decides a conflict. `Copy`, 24
/// bytes: it costs a reservation no allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FingerprintParts {
    /// Of the tool name.
    pub tool: [u8; 8],
    /// Of the arguments.
    pub arguments: [u8; 8],
    /// Of the metadata (`{}` when none was sent).
    pub metadata: [u8; 8],
}

impl FingerprintParts {
    /// The stored form: `<tool>.<arguments>.<metadata>`, 16 lowercase hex digits each (50
    /// characters).
    pub fn encode(&self) -> String {
        let mut text = [b'.'; 50];
        for (at, digest) in [(0, &self.tool), (17, &self.arguments), (34, &self.metadata)] {
            hex::encode_to_slice(digest, &mut text[at..at + 16])
                .expect("16 places hold 8 bytes as hex");
        }
        String::from_utf8(text.to_vec()).expect("hex digits and dots are ASCII")
    }

    /// Reads [`FingerprintParts::encode`]'s form; `None` for anything else (a row written by
    /// hand), which then names no part.
    pub fn decode(text: &str) -> Option<Self> {
        let mut pieces = text.split('.');
        let mut next = || -> Option<[u8; 8]> {
            let piece = pieces.next()?;
            if piece.len() != 16 || piece.bytes().any(|b| b.is_ascii_uppercase()) {
                return None;
            }
            let mut bytes = [0; 8];
            hex::decode_to_slice(piece, &mut bytes).ok()?;
            Some(bytes)
        };
        let parts = Self {
            tool: next()?,
            arguments: next()?,
            metadata: next()?,
        };
        pieces.next().is_none().then_some(parts)
    }

    /// The names of the parts that differ between `self` and `other`, in the order `tool`,
    /// `arguments`, `metadata`.
    pub fn differs(&self, other: &Self) -> Vec<&'static str> {
        [
            ("tool", self.tool == other.tool),
            ("arguments", self.arguments == other.arguments),
            ("metadata", self.metadata == other.metadata),
        ]
        .into_iter()
        .filter(|(_, same)| !same)
        .map(|(name, _)| name)
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::fingerprint_with_parts;
    use crate::strict_json::parse;

    fn parts(tool: &str, arguments: &str, metadata: Option<&str>) -> FingerprintParts {
        let metadata = metadata.map(|text| parse(text).unwrap());
        fingerprint_with_parts(tool, &parse(arguments).unwrap(), metadata.as_ref())
            .unwrap()
            .1
    }

    #[test]
    fn part_digests_name_exactly_the_parts_that_differ() {
        let base = parts(
            "echo",
            r#"{"a":1,"n":9007199254740993}"#,
            Some(r#"{"m":1}"#),
        );
        // (tool, arguments, metadata, the parts named as different from `base`)
        #[rustfmt::skip]
        let cases: [(&str, &str, Option<&str>, &[&str]); 4] = [
            // The same call written differently is the same in every part.
            ("echo", r#"{"n":9007199254740993,"a":1.0}"#, Some(r#"{"m":1}"#), &[]),
            ("echo", r#"{"a":1,"n":9007199254740992}"#, Some(r#"{"m":1}"#), &["arguments"]),
            ("echo", r#"{"a":1,"n":9007199254740993}"#, Some(r#"{"m":2}"#), &["metadata"]),
            ("other", r#"{"a":1,"n":9007199254740993}"#, None, &["tool", "metadata"]),
        ];
        for (tool, arguments, metadata, expected) in cases {
            let other = parts(tool, arguments, metadata);
            assert_eq!(
                base.differs(&other),
                expected,
                "{tool} {arguments} {metadata:?}"
            );
        }
        // An exact number in the metadata does not touch the arguments' digest, and the other
        // way round.
        let exact_meta = parts("echo", "{}", Some(r#"{"n":9007199254740993}"#));
        let plain_meta = parts("echo", "{}", Some(r#"{"n":9007199254740992}"#));
        assert_eq!(exact_meta.differs(&plain_meta), ["metadata"]);
        let exact_args = parts(
            "echo",
            r#"{"n":9007199254740993}"#,
            Some(r#"{"n":9007199254740993}"#),
        );
        let plain_args = parts(
            "echo",
            r#"{"n":9007199254740992}"#,
            Some(r#"{"n":9007199254740993}"#),
        );
        assert_eq!(exact_args.differs(&plain_args), ["arguments"]);
        // No metadata is `{}`.
        assert_eq!(parts("echo", "{}", None), parts("echo", "{}", Some("{}")));
    }

    /// The last digest a thread keeps answers only the same input: calls that alternate
    /// tools and metadata get what a thread with nothing kept computes.
    #[test]
    fn kept_part_digests_answer_only_the_same_input() {
        #[rustfmt::skip]
        let calls: [(&str, &str, Option<&str>); 6] = [
            ("echo", r#"{"a":1}"#, None),
            ("echo", r#"{"a":2}"#, None),
            ("other", r#"{"a":2}"#, Some(r#"{"m":1}"#)),
            ("echo", r#"{"a":2}"#, Some(r#"{"m":1}"#)),
            ("echo", r#"{"a":2}"#, Some(r#"{"m":10000000000000000000001}"#)),
            ("echo", r#"{"a":2}"#, Some(r#"{"m":10000000000000000000002}"#)),
        ];
        for (tool, arguments, metadata) in calls {
            let here = parts(tool, arguments, metadata);
            let fresh = std::thread::spawn(move || parts(tool, arguments, metadata))
                .join()
                .unwrap();
            assert_eq!(here, fresh, "{tool} {arguments} {metadata:?}");
        }
        let a = parts("echo", "{}", Some(r#"{"m":10000000000000000000001}"#));
        let b = parts("echo", "{}", Some(r#"{"m":10000000000000000000002}"#));
        assert_eq!(a.differs(&b), ["metadata"]);
    }

    #[test]
    fn part_digests_round_trip_their_stored_form() {
        let stored = parts("echo", r#"{"a":1}"#, None);
        let text = stored.encode();
        assert_eq!(text.len(), 50);
        assert_eq!(FingerprintParts::decode(&text), Some(stored));
        for bad in [
            "",
            "x",
            &text[..49],
            &format!("{text}.00"),
            &text.to_uppercase(),
            &text.replace('.', ":"),
        ] {
            assert_eq!(FingerprintParts::decode(bad), None, "{bad}");
        }
    }
}
