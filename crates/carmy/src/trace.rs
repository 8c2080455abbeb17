//! W3C Trace Context (docs/semantics.md §13): the `traceparent` a call arrives with is checked
//! here, carried by [`ValidatedCall`](crate::call::ValidatedCall) and handed to tools in
//! [`ToolContext::traceparent`](crate::tool::ToolContext), which forward it to their upstreams.
//! It is never part of a call's identity or fingerprint.

/// The longest `traceparent` accepted, in bytes: version 00 is exactly 55; later versions may
/// append fields, which are kept.
pub const MAX_TRACEPARENT_BYTES: usize = 256;

/// Returns `value` (trimmed of surrounding spaces and tabs) when it is a well-formed
/// `traceparent` (`version-traceid-parentid-flags`, lowercase hex, trace id and parent id not all
/// zeros, version not `ff`); `None` otherwise. A version above `00` may carry further
/// `-`-separated fields after the flags, as the specification allows.
pub fn parse_traceparent(value: &str) -> Option<&str> {
    let value = value.trim_matches([' ', '\t']);
    if value.len() > MAX_TRACEPARENT_BYTES {
        return None;
    }
    let mut parts = value.split('-');
    let version = parts.next()?;
    let trace_id = parts.next()?;
    let parent_id = parts.next()?;
    let flags = parts.next()?;
    let rest_allowed = version != "00";
    let well_formed = is_hex(version, 2)
        && version != "ff"
        && is_hex(trace_id, 32)
        && is_hex(parent_id, 16)
        && is_hex(flags, 2)
        && trace_id.bytes().any(|b| b != b'0')
        && parent_id.bytes().any(|b| b != b'0')
        && (rest_allowed || parts.next().is_none());
    well_formed.then_some(value)
}

fn is_hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn well_formed_values_pass() {
        assert_eq!(parse_traceparent(GOOD), Some(GOOD));
        assert_eq!(parse_traceparent(&format!(" {GOOD}\t")), Some(GOOD));
        let future = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra";
        assert_eq!(parse_traceparent(future), Some(future));
    }

    #[test]
    fn malformed_values_are_dropped() {
        for bad in [
            "",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad:?}");
        }
    }
}
