//! [`Call`]: one tool call and its identity (docs/semantics.md §2, §7).

use serde::Serialize;
use serde_json::{Map, Value};

/// One tool call: the body of `POST /v1/executions`.
///
/// Its identity is (principal, `session_id`, `request_id`). [`Call::new`] gives the call a fresh
/// request_id (a UUID v4) at once, so every attempt made with this value, by
/// [`Client::execute`](crate::Client::execute)'s own retries or by the caller executing it
/// again later, carries the same identity and gets the recorded outcome instead of running the
/// tool twice. Keep the `Call` (or its [`request_id`](Self::request_id)) until you have an
/// outcome.
///
/// ```
/// use carmy_client::Call;
/// use serde_json::json;
///
/// let call = Call::new("create_order", json!({"sku": "A-1", "quantity": 2}))
///     .with_request_id("order-42")
///     .with_session_id("agent-run-7")
///     .with_metadata_entry("user", json!("u-1"));
/// assert_eq!(call.request_id(), "order-42");
/// ```
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Call {
    tool: String,
    arguments: Value,
    request_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<Map<String, Value>>,
}

impl Call {
    /// A call of `tool` with `arguments` (a JSON object, checked by the gateway against the
    /// tool's schema) and a freshly generated request_id.
    pub fn new(tool: impl Into<String>, arguments: Value) -> Self {
        Self {
            tool: tool.into(),
            arguments,
            request_id: uuid::Uuid::new_v4().to_string(),
            session_id: None,
            metadata: None,
        }
    }

    /// Uses `request_id` instead of the generated one: 1 to 255 bytes of UTF-8 without control
    /// characters (the gateway answers 400 otherwise). Derive it from what makes the call
    /// unique in your agent (e.g. the model's tool-call id) to keep it across process restarts.
    #[must_use]
    pub fn with_request_id(mut self, request_id: impl Into<String>) -> Self {
        self.request_id = request_id.into();
        self
    }

    /// Puts the call in session `session_id` (same rules as a request_id); without one the
    /// gateway uses the principal's default session.
    #[must_use]
    pub fn with_session_id(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Some(session_id.into());
        self
    }

    /// Sets the call's `metadata` object. Metadata is part of the fingerprint: the same
    /// request_id with different metadata is a conflict.
    #[must_use]
    pub fn with_metadata(mut self, metadata: Map<String, Value>) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// Adds one member to the call's `metadata` object.
    #[must_use]
    pub fn with_metadata_entry(mut self, name: impl Into<String>, value: Value) -> Self {
        self.metadata
            .get_or_insert_with(Map::new)
            .insert(name.into(), value);
        self
    }

    /// The tool's name.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The arguments.
    pub fn arguments(&self) -> &Value {
        &self.arguments
    }

    /// The request_id every attempt of this call carries.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// The session, when one was set.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// The metadata, when set.
    pub fn metadata(&self) -> Option<&Map<String, Value>> {
        self.metadata.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_new_call_has_its_own_request_id_and_keeps_it() {
        let first = Call::new("echo", json!({}));
        let second = Call::new("echo", json!({}));
        assert_ne!(first.request_id(), second.request_id());
        assert_eq!(
            uuid::Uuid::parse_str(first.request_id())
                .unwrap()
                .get_version_num(),
            4
        );
        let copy = first.clone();
        assert_eq!(copy.request_id(), first.request_id());
    }

    #[test]
    fn the_body_has_exactly_the_members_set() {
        let call = Call::new("echo", json!({"a": 1})).with_request_id("r");
        assert_eq!(
            serde_json::to_value(&call).unwrap(),
            json!({"tool": "echo", "arguments": {"a": 1}, "request_id": "r"})
        );
        let call = call
            .with_session_id("s")
            .with_metadata_entry("k", json!("v"));
        assert_eq!(
            serde_json::to_value(&call).unwrap(),
            json!({"tool": "echo", "arguments": {"a": 1}, "request_id": "r",
                   "session_id": "s", "metadata": {"k": "v"}})
        );
    }
}
