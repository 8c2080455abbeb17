//! A tool call as every front hands it to the engine, checked once (docs/semantics.md §2, §3).
//!
//! [`ValidatedCall`] can only be made by [`ValidatedCall::parse`] (raw JSON text, as the HTTP
//! front receives it) or [`ValidatedCall::from_values`] (already parsed JSON, as a front that
//! decodes its own envelope has it). Both run the same stateless checks, and the fields are
//! private, so a call's fingerprint is always the fingerprint of its own tool, arguments and
//! metadata. Everything here is stateless: a refused call reserves nothing (docs/semantics.md §3).

use crate::fingerprint::{fingerprint_with_lazy_parts, Fingerprint, FingerprintParts, LazyParts};
use crate::identity::validate_identifier;
use crate::store::{IdempotencyKey, DEFAULT_SESSION};
use crate::strict_json;
use serde_json::Value;

/// Longest tool name accepted, in bytes.
pub const MAX_TOOL_NAME_BYTES: usize = 255;

/// Longest part of a parser message echoed back to the caller, in bytes.
pub const MAX_DETAIL_BYTES: usize = 300;

/// Why a call was refused before anything was reserved. The message names the field and is
/// safe to show to the caller (at most [`MAX_DETAIL_BYTES`] of it, then `…`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CallRejected(String);

impl CallRejected {
    /// A rejection with `message`, cut to [`MAX_DETAIL_BYTES`] on a character boundary.
    pub fn new(message: impl std::fmt::Display) -> Self {
        let mut text = message.to_string();
        if text.len() > MAX_DETAIL_BYTES {
            let mut cut = MAX_DETAIL_BYTES;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
        }
        Self(text)
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0
    }

    /// The message, owned.
    pub fn into_message(self) -> String {
        self.0
    }
}

/// What a front received for one call, as raw JSON text where the call carries JSON.
#[derive(Clone, Copy, Debug)]
pub struct CallRequest<'a> {
    /// The tool's name.
    pub tool: &'a str,
    /// The JSON text of the arguments (must be an object).
    pub arguments: &'a str,
    /// The caller's `request_id`; `None` runs without replay protection.
    pub request_id: Option<&'a str>,
    /// The session; `None` means [`DEFAULT_SESSION`].
    pub session_id: Option<&'a str>,
    /// The JSON text of the metadata (an object or `null`), if sent.
    pub metadata: Option<&'a str>,
}

/// A call whose parts a front already parsed into JSON values.
#[derive(Clone, Debug)]
pub struct CallValues {
    /// The tool's name.
    pub tool: String,
    /// The arguments (must be an object).
    pub arguments: Value,
    /// The caller's `request_id`; `None` runs without replay protection.
    pub request_id: Option<String>,
    /// The session; `None` means [`DEFAULT_SESSION`].
    pub session_id: Option<String>,
    /// The metadata: an object, or `None` (`null` is read as `None`).
    pub metadata: Option<Value>,
}

/// A call that passed every stateless check: identifiers valid, JSON strict, arguments and
/// metadata objects, fingerprint made from exactly these parts.
#[derive(Clone, Debug)]
pub struct ValidatedCall {
    principal: String,
    tool: String,
    arguments: Value,
    request_id: Option<String>,
    session_id: String,
    fingerprint: Fingerprint,
    /// Digests of the tool, arguments and metadata, stored for `differs` (docs/semantics.md §12.8);
    /// computed only when asked (a replay does not).
    parts: LazyParts,
    traceparent: Option<String>,
    /// How long the caller is willing to wait for a running duplicate (docs/semantics.md §12.6).
    wait: Option<std::time::Duration>,
}

impl ValidatedCall {
    /// The same call, willing to wait up to `wait` for a running duplicate's outcome instead of
    /// getting `EXECUTION_UNCERTAIN` `running` at once (HTTP: `Prefer: wait=N`, RFC 7240). The
    /// engine caps it ([`crate::engine::EngineConfig::max_wait`]).
    #[must_use]
    pub fn with_wait(mut self, wait: std::time::Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// How long the caller waits for a running duplicate; `None` for not at all.
    pub fn wait(&self) -> Option<std::time::Duration> {
        self.wait
    }

    /// Checks a call received as JSON text: strict JSON (no duplicate members,
    /// docs/semantics.md §2), identifiers per [`crate::identity`], arguments an object, metadata an
    /// object or `null`.
    ///
    /// # Errors
    /// [`CallRejected`] naming the first field that broke a rule.
    pub fn parse(principal: String, request: CallRequest<'_>) -> Result<Self, CallRejected> {
        check_names(request.tool, request.request_id, request.session_id)?;
        let arguments = strict_json::parse(request.arguments)
            .map_err(|error| CallRejected::new(format!("arguments: {error}")))?;
        check_object("arguments", &arguments)?;
        let metadata = match request.metadata {
            None | Some("null") => None,
            Some(text) => Some(
                strict_json::parse(text)
                    .map_err(|error| CallRejected::new(format!("metadata: {error}")))?,
            ),
        };
        Self::checked(
            principal,
            CallValues {
                tool: request.tool.to_owned(),
                arguments,
                request_id: request.request_id.map(str::to_owned),
                session_id: request.session_id.map(str::to_owned),
                metadata,
            },
        )
    }

    /// Checks a call whose JSON is already parsed (the front is responsible for having parsed
    /// it strictly): the same rules as [`ValidatedCall::parse`] after parsing.
    ///
    /// # Errors
    /// [`CallRejected`] naming the first field that broke a rule.
    pub fn from_values(principal: String, call: CallValues) -> Result<Self, CallRejected> {
        check_names(
            &call.tool,
            call.request_id.as_deref(),
            call.session_id.as_deref(),
        )?;
        check_object("arguments", &call.arguments)?;
        Self::checked(principal, call)
    }

    /// The checks that follow the arguments': metadata, then the fingerprint.
    fn checked(principal: String, call: CallValues) -> Result<Self, CallRejected> {
        let metadata = call.metadata.filter(|metadata| !metadata.is_null());
        if let Some(metadata) = &metadata {
            check_object("metadata", metadata)?;
        }
        let (fingerprint, parts) =
            fingerprint_with_lazy_parts(&call.tool, &call.arguments, metadata.as_ref())
                .map_err(CallRejected::new)?;
        Ok(Self {
            principal,
            tool: call.tool,
            arguments: call.arguments,
            request_id: call.request_id,
            session_id: call
                .session_id
                .unwrap_or_else(|| DEFAULT_SESSION.to_owned()),
            fingerprint,
            parts,
            traceparent: None,
            wait: None,
        })
    }

    /// The digests of the call's parts (docs/semantics.md §12.8, `differs`), computed on the
    /// first call (a replay never asks for them).
    pub fn parts(&self) -> FingerprintParts {
        self.parts.parts()
    }

    /// The authenticated principal.
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// The tool's name (it may still be unknown).
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The arguments object.
    pub fn arguments(&self) -> &Value {
        &self.arguments
    }

    /// The caller's `request_id`; `None` runs without replay protection.
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// The session ([`DEFAULT_SESSION`] when the call named none).
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The call's fingerprint (docs/semantics.md §2).
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// Attaches the W3C `traceparent` the call arrived with, if it is well formed
    /// ([`crate::trace::parse_traceparent`]; a malformed one is dropped, as the Trace Context
    /// specification asks). Not part of the identity or the fingerprint: a retry may carry another
    /// trace (docs/semantics.md §13).
    #[must_use]
    pub fn with_traceparent(mut self, traceparent: Option<&str>) -> Self {
        self.traceparent = traceparent
            .and_then(crate::trace::parse_traceparent)
            .map(str::to_owned);
        self
    }

    /// The checked `traceparent`, if the call carried one.
    pub fn traceparent(&self) -> Option<&str> {
        self.traceparent.as_deref()
    }

    /// The call's identity, when it carries a `request_id`.
    pub fn key(&self) -> Option<IdempotencyKey> {
        self.request_id.as_ref().map(|request_id| {
            IdempotencyKey::new(
                self.principal.clone(),
                self.session_id.clone(),
                request_id.clone(),
            )
        })
    }

    /// The arguments, taken out of the call (the tool gets them by value).
    pub fn into_arguments(self) -> Value {
        self.arguments
    }
}

/// The tool name's length and the identifiers' rules, checked before any JSON is read.
fn check_names(
    tool: &str,
    request_id: Option<&str>,
    session_id: Option<&str>,
) -> Result<(), CallRejected> {
    if tool.is_empty() || tool.len() > MAX_TOOL_NAME_BYTES {
        return Err(CallRejected::new("tool must be 1 to 255 bytes long"));
    }
    if let Some(request_id) = request_id {
        validate_identifier("request_id", request_id).map_err(CallRejected::new)?;
    }
    if let Some(session_id) = session_id {
        validate_identifier("session_id", session_id).map_err(CallRejected::new)?;
    }
    Ok(())
}

fn check_object(field: &str, value: &Value) -> Result<(), CallRejected> {
    if value.is_object() {
        Ok(())
    } else {
        Err(CallRejected::new(format!("{field} must be a JSON object")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::fingerprint;

    fn request<'a>(arguments: &'a str, metadata: Option<&'a str>) -> CallRequest<'a> {
        CallRequest {
            tool: "echo",
            arguments,
            request_id: Some("r1"),
            session_id: None,
            metadata,
        }
    }

    #[test]
    fn the_fingerprint_is_that_of_the_parts() {
        let call = ValidatedCall::parse("p".into(), request(r#"{"a":1}"#, Some("null"))).unwrap();
        let expected = fingerprint("echo", &serde_json::json!({"a": 1}), None).unwrap();
        assert_eq!(call.fingerprint(), &expected);
        assert_eq!(call.session_id(), DEFAULT_SESSION);
        assert_eq!(
            call.key(),
            Some(IdempotencyKey::new("p", DEFAULT_SESSION, "r1"))
        );
    }

    #[test]
    fn refusals_name_the_field() {
        let refuse = |arguments, metadata| {
            ValidatedCall::parse("p".into(), request(arguments, metadata))
                .unwrap_err()
                .into_message()
        };
        assert_eq!(refuse("[1]", None), "arguments must be a JSON object");
        assert_eq!(refuse("{}", Some("1")), "metadata must be a JSON object");
        assert!(refuse(r#"{"a":1,"a":2}"#, None).starts_with("arguments: "));
        assert!(refuse("{}", Some("{")).starts_with("metadata: "));
        let long = ValidatedCall::from_values(
            "p".into(),
            CallValues {
                tool: String::new(),
                arguments: serde_json::json!({}),
                request_id: None,
                session_id: None,
                metadata: None,
            },
        );
        assert_eq!(
            long.unwrap_err().message(),
            "tool must be 1 to 255 bytes long"
        );
    }

    #[test]
    fn only_well_formed_traceparents_are_kept() {
        let call = || ValidatedCall::parse("p".into(), request("{}", None)).unwrap();
        let good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        assert_eq!(
            call().with_traceparent(Some(good)).traceparent(),
            Some(good)
        );
        for bad in [
            "",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\nx: y",
        ] {
            assert_eq!(
                call().with_traceparent(Some(bad)).traceparent(),
                None,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let text = "é".repeat(200);
        let message = CallRejected::new(&text).into_message();
        assert!(message.ends_with('…'));
        assert!(message.len() <= MAX_DETAIL_BYTES + '…'.len_utf8());
    }
}
