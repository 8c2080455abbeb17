//! The request id and session of a `tools/call` (docs/semantics.md §11).
//!
//! The request id is, first found: `params.idempotencyKey`; `_meta["io.carmy/request_id"]`; then
//! the configured `_meta` keys that agent clients already send (by default
//! `claudecode/toolUseId`). The session is `_meta["io.carmy/session_id"]`, else the default
//! session. A member that is present must be a string; the identifier rules themselves are
//! [`carmy::call::ValidatedCall`]'s.

use crate::{REQUEST_ID_META, SESSION_ID_META};
use serde_json::{Map, Value};

/// The identity parts a call carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CallIdentity {
    /// `None`: the call runs unprotected (or is refused when a request id is required).
    pub(crate) request_id: Option<String>,
    /// `None`: the default session.
    pub(crate) session_id: Option<String>,
}

/// Finds the identity of a call from `params.idempotencyKey` (`idempotency_key`) and the call's
/// `_meta`, reading `meta_keys` after Carmy's own key.
///
/// # Errors
/// A message naming the member that is present but not a string.
pub(crate) fn call_identity(
    idempotency_key: Option<&Value>,
    meta: &Map<String, Value>,
    meta_keys: &[String],
) -> Result<CallIdentity, String> {
    let mut request_id = string("params.idempotencyKey", idempotency_key)?;
    let keys = std::iter::once(REQUEST_ID_META).chain(meta_keys.iter().map(String::as_str));
    for key in keys {
        if request_id.is_some() {
            break;
        }
        request_id = string(&format!("_meta[\"{key}\"]"), meta.get(key))?;
    }
    let session_id = string(
        &format!("_meta[\"{SESSION_ID_META}\"]"),
        meta.get(SESSION_ID_META),
    )?;
    Ok(CallIdentity {
        request_id,
        session_id,
    })
}

fn string(field: &str, value: Option<&Value>) -> Result<Option<String>, String> {
    match value {
        None => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(format!("{field} must be a string")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn the_first_found_wins() {
        let keys = vec!["claudecode/toolUseId".to_owned(), "other/id".to_owned()];
        let all = meta(json!({
            "io.carmy/request_id": "carmy",
            "claudecode/toolUseId": "toolu_1",
            "other/id": "o",
            "io.carmy/session_id": "s1",
        }));
        let found = |key: Option<Value>, meta: &Map<String, Value>| {
            call_identity(key.as_ref(), meta, &keys).unwrap()
        };
        assert_eq!(
            found(Some(json!("param")), &all),
            CallIdentity {
                request_id: Some("param".into()),
                session_id: Some("s1".into())
            }
        );
        assert_eq!(found(None, &all).request_id.as_deref(), Some("carmy"));
        let client_only = meta(json!({"other/id": "o", "claudecode/toolUseId": "toolu_1"}));
        assert_eq!(
            found(None, &client_only).request_id.as_deref(),
            Some("toolu_1")
        );
        assert_eq!(found(None, &Map::new()), CallIdentity::default());
    }

    #[test]
    fn a_present_member_must_be_a_string() {
        let refused = |key: Option<Value>, meta: Value| {
            call_identity(key.as_ref(), &self::meta(meta), &[]).unwrap_err()
        };
        assert_eq!(
            refused(Some(json!(7)), json!({})),
            "params.idempotencyKey must be a string"
        );
        assert_eq!(
            refused(None, json!({"io.carmy/request_id": null})),
            "_meta[\"io.carmy/request_id\"] must be a string"
        );
        assert_eq!(
            refused(None, json!({"io.carmy/session_id": {}})),
            "_meta[\"io.carmy/session_id\"] must be a string"
        );
    }
}
