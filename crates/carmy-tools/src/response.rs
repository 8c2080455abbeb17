//! An upstream HTTP response turned into a tool outcome (docs/semantics.md §10): the body read
//! with a bound, never buffered past it; 2xx → the value, any other status → `UPSTREAM_STATUS`
//! with the status and the body in `error.details` (and `effect: "unknown"` for a status that
//! does not prove the effect absent).

use carmy::ToolError;
use serde_json::{json, Value};
use std::time::Duration;

/// How a bounded read ended without a whole body.
pub(crate) enum ReadFailure {
    /// The body is longer than the bound (`declared` when Content-Length said so up front).
    TooLarge,
    /// The connection failed while the body was arriving.
    Disconnected(String),
}

/// Reads at most `limit` bytes of `response`'s body.
pub(crate) async fn read_bounded(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, ReadFailure> {
    if response
        .content_length()
        .is_some_and(|length| length > limit as u64)
    {
        return Err(ReadFailure::TooLarge);
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > limit {
                    return Err(ReadFailure::TooLarge);
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(error) => return Err(ReadFailure::Disconnected(describe(&error))),
        }
    }
}

/// A body as recorded: its JSON when it is strict JSON, else its text (invalid UTF-8
/// replaced), `null` when empty.
pub(crate) fn body_value(body: &[u8]) -> Value {
    if body.is_empty() {
        return Value::Null;
    }
    let text = String::from_utf8_lossy(body);
    carmy::strict_json::parse(&text).unwrap_or_else(|_| Value::String(text.into_owned()))
}

/// The failure recorded for a non-2xx status; with `effect_unknown` (a status that does not
/// prove the effect absent, docs/semantics.md §10) it says so and is recorded with
/// `effect: "unknown"`.
pub(crate) fn status_error(
    status: reqwest::StatusCode,
    body: &[u8],
    effect_unknown: bool,
) -> ToolError {
    let details = json!({"status": status.as_u16(), "body": body_value(body)});
    if effect_unknown {
        ToolError::effect_unknown(
            "UPSTREAM_STATUS",
            format!("the upstream answered {status}, which does not prove that nothing happened: the effect is unknown; check the upstream before acting again; see error.details for its status and body"),
        )
        .with_details(details)
    } else {
        ToolError::new(
            "UPSTREAM_STATUS",
            format!("the upstream answered {status}; see error.details for its status and body"),
        )
        .with_details(details)
    }
}

/// A `Retry-After` in its delay-seconds form (the HTTP-date form is not used).
pub(crate) fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    response
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// An error with its causes, for messages (reqwest's own text omits them). Never includes
/// headers: reqwest errors carry at most the URL, whose arguments are the caller's own.
pub(crate) fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_json_text_or_null() {
        assert_eq!(body_value(b""), Value::Null);
        assert_eq!(body_value(br#"{"a":[1,2]}"#), json!({"a": [1, 2]}));
        assert_eq!(body_value(b"plain text"), json!("plain text"));
        assert_eq!(body_value(br#"{"a":1,"a":2}"#), json!(r#"{"a":1,"a":2}"#));
    }
}
