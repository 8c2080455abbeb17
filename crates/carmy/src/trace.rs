//! W3C Trace Context (docs/semantics.md §13): the `traceparent` a call arrives with is checked
//! here, carried by [`ValidatedCall`](crate::call::ValidatedCall) and handed to tools in
//! [`ToolContext::traceparent`](crate::tool::ToolContext), which forward it to their upstreams.
//! It is never part of a call's identity or fingerprint.
//!
//! With OpenTelemetry export on (the gateway installs a `tracing-opentelemetry` layer when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, docs/operations.md "Traces"), the `carmy.call` span is
//! made a child of that incoming `traceparent` ([`link_to_caller`]) and an upstream request
//! names its own span in the `traceparent` it sends ([`outgoing_traceparent`]). Without the
//! layer both are no-ops that cost a lookup: the incoming value is forwarded unchanged.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The names of the spans exported to OpenTelemetry (docs/operations.md "Traces"); others
/// (`carmy.execution`, the HTTP layer's, the libraries') stay in the logs only.
pub const EXPORTED_SPANS: [&str; 7] = [
    "carmy.call",
    "carmy.reserve",
    "carmy.tool",
    "carmy.upstream",
    "carmy.complete",
    "carmy.decision",
    "carmy.reconcile",
];

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

/// Whether the spans that exist only for export are made ([`set_exporting`]).
static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Tells the engine that spans are exported (the gateway calls it once it installed its
/// OpenTelemetry layer; an embedding application with its own layer does the same). Until then
/// the spans that only serve export (`carmy.reserve`, `carmy.tool`, `carmy.upstream`,
/// `carmy.complete`, `carmy.decision`, `carmy.reconcile`) are not made at all, so a call costs
/// and logs what it did without export; `carmy.call` and `carmy.execution` always are.
pub fn set_exporting(exporting: bool) {
    EXPORTING.store(exporting, std::sync::atomic::Ordering::Relaxed);
}

/// `make()` when spans are exported ([`set_exporting`]), else a disabled span (free to enter).
pub fn exported_span(make: impl FnOnce() -> tracing::Span) -> tracing::Span {
    if EXPORTING.load(std::sync::atomic::Ordering::Relaxed) {
        make()
    } else {
        tracing::Span::none()
    }
}

/// The remote span context a well-formed `traceparent` (as [`parse_traceparent`] admits it)
/// names; `None` for anything else.
pub fn remote_span_context(traceparent: &str) -> Option<SpanContext> {
    let value = parse_traceparent(traceparent)?;
    let mut parts = value.split('-').skip(1);
    let trace_id = TraceId::from_hex(parts.next()?).ok()?;
    let span_id = SpanId::from_hex(parts.next()?).ok()?;
    let flags = u8::from_str_radix(parts.next()?, 16).ok()?;
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    ))
}

/// Makes `span` (a call's, not yet entered) a child of the caller's `traceparent` in the
/// exported trace; does nothing without one, or without the OpenTelemetry layer.
pub fn link_to_caller(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(remote) = traceparent.and_then(remote_span_context) else {
        return;
    };
    // Without the layer (export off) or for a span the layer filters out there is nothing to
    // link: the call is still logged with its `traceparent` field.
    let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote));
}

/// The `traceparent` to send to an upstream from within `span`: the span's own (version 00,
/// its trace id, its span id, its sampling flag) when it is exported, so the upstream's spans
/// hang below it; else `incoming` unchanged (export off: the caller's value is handed on).
pub fn outgoing_traceparent(span: &tracing::Span, incoming: Option<&str>) -> Option<String> {
    let context = span.context();
    let own = context.span().span_context().clone();
    if own.is_valid() {
        return Some(format!(
            "00-{:032x}-{:016x}-{:02x}",
            own.trace_id(),
            own.span_id(),
            own.trace_flags().to_u8()
        ));
    }
    incoming.map(str::to_owned)
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
            assert!(remote_span_context(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn a_traceparent_names_its_remote_span() {
        let remote = remote_span_context(GOOD).unwrap();
        assert_eq!(
            format!("{:032x}", remote.trace_id()),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(format!("{:016x}", remote.span_id()), "00f067aa0ba902b7");
        assert!(remote.is_sampled());
        assert!(remote.is_remote());
    }

    #[test]
    fn without_export_the_incoming_value_is_handed_on() {
        let span = tracing::info_span!("carmy.upstream");
        assert_eq!(
            outgoing_traceparent(&span, Some(GOOD)).as_deref(),
            Some(GOOD)
        );
        assert_eq!(outgoing_traceparent(&span, None), None);
        link_to_caller(&span, Some(GOOD));
    }
}
