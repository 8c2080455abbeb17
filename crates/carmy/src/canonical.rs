//! The bytes that fingerprint `v1` hashes (docs/semantics.md §2), written in one walk over the
//! call's values without copying them.
//!
//! The output is the RFC 8785 (JCS) canonical form of the array
//! `["carmy-fingerprint", "v1", tool, arguments, metadata, exact_numbers]`, byte for byte what a
//! general JCS serializer writes for that array (a unit test of `fingerprint` checks this against
//! one): members sorted by their UTF-16 code units, strings escaped as ECMAScript's
//! `JSON.stringify` does, numbers written as the shortest ECMAScript form of their double. The
//! `exact_numbers` list, `[json_pointer, exact_decimal]` for every number whose exact value the
//! double does not hold, is collected in the same walk, in canonical member order.

use crate::fingerprint::{ExactDecimal, FingerprintError, FINGERPRINT_VERSION};
use serde_json::{Number, Value};
use std::fmt::Write as _;

/// The canonical bytes of the framed call, with where its parts are (for the part digests of
/// `differs`, docs/semantics.md §12.8).
pub(crate) struct Framed {
    /// The canonical bytes that fingerprint `v1` hashes.
    pub(crate) bytes: Vec<u8>,
    /// Where the tool name (a JSON string) is in `bytes`.
    pub(crate) tool: std::ops::Range<usize>,
    /// Where the arguments are in `bytes`.
    pub(crate) arguments: std::ops::Range<usize>,
    /// Where the metadata are in `bytes`.
    pub(crate) metadata: std::ops::Range<usize>,
    /// Where the `exact_numbers` entries of the arguments (`/3/…`) are in `bytes`.
    pub(crate) exact_arguments: std::ops::Range<usize>,
    /// Where the `exact_numbers` entries of the metadata (`/4/…`) are in `bytes`.
    pub(crate) exact_metadata: std::ops::Range<usize>,
}

/// The canonical bytes of the framed call; `metadata` is the caller's object or `{}`.
///
/// # Errors
/// [`FingerprintError::NumberOutOfRange`] for a number that is not finite as a double or whose
/// exponent does not fit 64 bits.
pub(crate) fn framed(
    tool: &str,
    arguments: &Value,
    metadata: Option<&Value>,
) -> Result<Framed, FingerprintError> {
    let mut walk = Walk {
        out: Vec::with_capacity(256),
        root: 3,
        path: Vec::new(),
        exact: Vec::new(),
        numbers_as_sent: false,
    };
    walk.out.extend_from_slice(b"[\"carmy-fingerprint\",");
    write_string(&mut walk.out, FINGERPRINT_VERSION);
    walk.out.push(b',');
    let tool_start = walk.out.len();
    write_string(&mut walk.out, tool);
    let tool_range = tool_start..walk.out.len();
    walk.out.push(b',');
    let arguments_start = walk.out.len();
    walk.value(arguments)?;
    let arguments_range = arguments_start..walk.out.len();
    let exact_in_arguments = walk.exact.len();
    walk.out.push(b',');
    walk.root = 4;
    let metadata_start = walk.out.len();
    match metadata {
        Some(metadata) => walk.value(metadata)?,
        None => walk.out.extend_from_slice(b"{}"),
    }
    let metadata_range = metadata_start..walk.out.len();
    walk.out.extend_from_slice(b",[");
    // The entries of each part, without the commas between the parts' entries.
    let mut exact_arguments = walk.out.len()..walk.out.len();
    let mut exact_metadata = exact_arguments.clone();
    for (index, (pointer, exact)) in walk.exact.iter().enumerate() {
        if index > 0 {
            walk.out.push(b',');
        }
        if index == exact_in_arguments {
            exact_metadata.start = walk.out.len();
        }
        walk.out.push(b'[');
        write_string(&mut walk.out, pointer);
        walk.out.push(b',');
        write_string(&mut walk.out, exact);
        walk.out.push(b']');
        if index < exact_in_arguments {
            exact_arguments.end = walk.out.len();
        }
    }
    exact_metadata.end = walk.out.len();
    if exact_in_arguments == walk.exact.len() {
        exact_metadata.start = exact_metadata.end;
    }
    walk.out.extend_from_slice(b"]]");
    Ok(Framed {
        bytes: walk.out,
        tool: tool_range,
        arguments: arguments_range,
        metadata: metadata_range,
        exact_arguments,
        exact_metadata,
    })
}

/// The canonical text of one value as the fingerprint writes it (members sorted, strings
/// escaped as RFC 8785 says), except that a number whose exact value its double does not hold
/// is written as the caller sent it instead of as its double: the value the fingerprint covers
/// (the double and the `exact_numbers` entry together), in one JSON text. The arguments kept
/// with an execution are this text (docs/semantics.md §8.5).
///
/// # Errors
/// As [`framed`].
pub(crate) fn exact_text(value: &Value) -> Result<String, FingerprintError> {
    let mut walk = Walk {
        out: Vec::with_capacity(128),
        root: 0,
        path: Vec::new(),
        exact: Vec::new(),
        numbers_as_sent: true,
    };
    walk.value(value)?;
    // Only JSON text and whole UTF-8 strings were written.
    String::from_utf8(walk.out).map_err(|_| FingerprintError::NumberOutOfRange(String::new()))
}

/// One step from a value to a member or an item, for the JSON pointer of an inexact number.
enum Segment<'v> {
    Member(&'v str),
    Item(usize),
}

struct Walk<'v> {
    out: Vec<u8>,
    /// The element of the framed array being walked: 3 (arguments) or 4 (metadata).
    root: u8,
    /// Where the walk is, below the framed array's element `root`.
    path: Vec<Segment<'v>>,
    /// `[pointer, exact decimal]` of every inexact number so far.
    exact: Vec<(String, String)>,
    /// Write an inexact number as sent instead of listing it in `exact` ([`exact_text`]).
    numbers_as_sent: bool,
}

impl<'v> Walk<'v> {
    fn value(&mut self, value: &'v Value) -> Result<(), FingerprintError> {
        match value {
            Value::Null => self.out.extend_from_slice(b"null"),
            Value::Bool(true) => self.out.extend_from_slice(b"true"),
            Value::Bool(false) => self.out.extend_from_slice(b"false"),
            Value::Number(number) => self.number(number)?,
            Value::String(text) => write_string(&mut self.out, text),
            Value::Array(items) => {
                self.out.push(b'[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        self.out.push(b',');
                    }
                    self.path.push(Segment::Item(index));
                    self.value(item)?;
                    self.path.pop();
                }
                self.out.push(b']');
            }
            Value::Object(members) => {
                self.out.push(b'{');
                if in_canonical_order(members) {
                    self.members(members.iter())?;
                } else {
                    // RFC 8785 §3.2.3: by UTF-16 code units.
                    let mut sorted: Vec<(&'v String, &'v Value)> = members.iter().collect();
                    sorted.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
                    self.members(sorted.into_iter())?;
                }
                self.out.push(b'}');
            }
        }
        Ok(())
    }

    /// Writes `name:value` for each member, in the order given.
    fn members(
        &mut self,
        members: impl Iterator<Item = (&'v String, &'v Value)>,
    ) -> Result<(), FingerprintError> {
        for (index, (name, member)) in members.enumerate() {
            if index > 0 {
                self.out.push(b',');
            }
            write_string(&mut self.out, name);
            self.out.push(b':');
            self.path.push(Segment::Member(name));
            self.value(member)?;
            self.path.pop();
        }
        Ok(())
    }

    fn number(&mut self, number: &Number) -> Result<(), FingerprintError> {
        let text = number.as_str();
        let held = held_exactly(text);
        if held {
            if let Some(written) = plain_shortest(text) {
                self.out.extend_from_slice(written.as_bytes());
                return Ok(());
            }
        }
        let out_of_range = || FingerprintError::NumberOutOfRange(text.to_owned());
        let double: f64 = text.parse().map_err(|_| out_of_range())?;
        if !double.is_finite() {
            return Err(out_of_range());
        }
        if !held {
            let exact = ExactDecimal::parse(text).ok_or_else(out_of_range)?;
            let written = ExactDecimal::parse(&format!("{double:e}")).ok_or_else(out_of_range)?;
            if exact != written && self.numbers_as_sent {
                self.out.extend_from_slice(text.as_bytes());
                return Ok(());
            }
            if exact != written {
                let pointer = self.pointer();
                self.exact.push((pointer, exact.to_string()));
            }
        }
        let mut buffer = ryu_js::Buffer::new();
        self.out
            .extend_from_slice(buffer.format_finite(double).as_bytes());
        Ok(())
    }

    /// The RFC 6901 pointer of the current position in the framed array.
    fn pointer(&self) -> String {
        let mut pointer = String::new();
        let _ = write!(pointer, "/{}", self.root);
        for segment in &self.path {
            match segment {
                Segment::Item(index) => {
                    let _ = write!(pointer, "/{index}");
                }
                Segment::Member(name) => {
                    pointer.push('/');
                    // `~` as `~0`, `/` as `~1`.
                    pointer.push_str(&name.replace('~', "~0").replace('/', "~1"));
                }
            }
        }
        pointer
    }
}

/// A quick "yes" for the common case: a plain decimal (no exponent) of at most 15 digits and 16
/// characters is written back exactly by its double (any decimal of 15 significant digits
/// survives a round trip through a double, and 16 characters keep it far from the subnormal
/// range). `false` means "check the slow way".
fn held_exactly(text: &str) -> bool {
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    let mut digits = 0;
    for byte in unsigned.bytes() {
        match byte {
            b'0'..=b'9' => digits += 1,
            b'.' => {}
            _ => return false,
        }
    }
    digits > 0 && digits <= 15 && unsigned.len() <= 16
}

/// Whether iterating `members` gives RFC 8785's order (§3.2.3, by UTF-16 code units) as it is,
/// so that no sort is needed. Comparing bytes compares code points, and code points sort as
/// UTF-16 code units do unless one of the two names holds a character from U+E000 up (UTF-16
/// puts U+10000 and above, as surrogates, before U+E000-U+FFFF); such characters start with a
/// byte of at least 0xEE. So: names strictly ascending by bytes, none with such a byte. Checked
/// rather than assumed from serde_json's map (ordered by bytes unless a dependency turns on
/// its `preserve_order` feature).
fn in_canonical_order(members: &serde_json::Map<String, Value>) -> bool {
    let mut previous: Option<&str> = None;
    for name in members.keys() {
        if !name.is_ascii() && name.bytes().any(|byte| byte >= 0xEE) {
            return false;
        }
        if previous.is_some_and(|previous| previous >= name.as_str()) {
            return false;
        }
        previous = Some(name);
    }
    true
}

/// What ECMAScript writes for a number [`held_exactly`] accepts, without going through its
/// double: the text without its fraction's trailing zeros (and without a fraction of zeros
/// only), `0` for a zero of either sign. `None` below 1e-6 (more than five zeros after the
/// point), where ECMAScript writes an exponent.
///
/// Why this is the shortest round-trip form: two different decimals of at most 15 significant
/// digits never round to the same double, so no other decimal as short or shorter reads back as
/// this one's double, and the shortest form's digits are this decimal's own. From 1e-6 up to
/// 1e21 ECMAScript writes those digits without an exponent, with a point where the value puts
/// it and `0.` plus zeros below 1 (ECMA-262 Number::toString); 15 digits stay below 1e21.
fn plain_shortest(text: &str) -> Option<&str> {
    let trimmed = if text.contains('.') {
        let without_zeros = text.trim_end_matches('0');
        without_zeros.strip_suffix('.').unwrap_or(without_zeros)
    } else {
        text
    };
    let unsigned = trimmed.strip_prefix('-').unwrap_or(trimmed);
    if unsigned == "0" {
        return Some("0");
    }
    if let Some(fraction) = unsigned.strip_prefix("0.") {
        let zeros = fraction.bytes().take_while(|&byte| byte == b'0').count();
        if zeros > 5 {
            return None;
        }
    }
    Some(trimmed)
}

/// Writes `text` as a JSON string the way ECMAScript's `JSON.stringify` does (RFC 8785
/// §3.2.2.2): `"` and `\` escaped, the control characters below U+0020 as `\b \t \n \f \r` or
/// `\u00xx` (lowercase hex), everything else as it is. Runs without escapes are copied whole.
fn write_string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut plain_from = 0;
    while let Some(offset) = bytes[plain_from..]
        .iter()
        .position(|&byte| ESCAPED[usize::from(byte)])
    {
        let at = plain_from + offset;
        out.extend_from_slice(&bytes[plain_from..at]);
        write_escape(out, bytes[at]);
        plain_from = at + 1;
    }
    out.extend_from_slice(&bytes[plain_from..]);
    out.push(b'"');
}

/// The bytes [`write_string`] escapes: `"`, `\` and those below 0x20.
const ESCAPED: [bool; 256] = {
    let mut escaped = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        escaped[byte] = true;
        byte += 1;
    }
    escaped[b'"' as usize] = true;
    escaped[b'\\' as usize] = true;
    escaped
};

/// The escape of one byte that [`ESCAPED`] marks.
fn write_escape(out: &mut Vec<u8>, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let short = match byte {
        b'"' => b'"',
        b'\\' => b'\\',
        0x08 => b'b',
        0x09 => b't',
        0x0A => b'n',
        0x0C => b'f',
        0x0D => b'r',
        _ => {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xF)],
            ]);
            return;
        }
    };
    out.extend_from_slice(&[b'\\', short]);
}

#[cfg(test)]
mod tests;
