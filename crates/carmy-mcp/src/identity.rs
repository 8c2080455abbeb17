//! The request id and session of a `tools/call` (docs/semantics.md §11).
//!
//! The request id is, first found: `params.idempotencyKey`; `_meta["io.carmy/request_id"]`; the
//! request id argument the model holds ([`carmy::key_argument`]); then the configured `_meta`
//! keys that agent clients already send (by default `claudecode/toolUseId`), which protect only
//! the client's own transport retries. [`IdSource`] says which gave it.
//!
//! The session is `_meta["io.carmy/session_id"]`; else, for an id from the model or the
//! client's `_meta`, the conversation a known client names in `_meta` (the configured
//! conversation keys, by default VS Code's `vscode.conversationId` and Codex's
//! `x-codex-turn-metadata` member `session_id`), as the session `<key>:<value>`, so that two
//! conversations never share a model's id (docs/semantics.md §11); else the default session,
//! and [`Scope::Unscoped`] says so. A member that is present must be a string (a conversation
//! value that is not a usable identifier is ignored: the client is not Carmy-aware); the
//! identifier rules themselves are [`carmy::call::ValidatedCall`]'s.

use crate::{REQUEST_ID_META, SESSION_ID_META};
use serde_json::{Map, Value};

/// Where a call's request id came from, as `_meta["io.carmy/execution"].source` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IdSource {
    /// `params.idempotencyKey`.
    IdempotencyKey,
    /// `_meta["io.carmy/request_id"]`.
    CarmyMeta,
    /// The model's request id argument.
    Argument,
    /// One of the configured client `_meta` keys.
    ClientMeta,
}

impl IdSource {
    /// `idempotency_key`, `carmy_meta`, `argument` or `client_meta`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::IdempotencyKey => "idempotency_key",
            Self::CarmyMeta => "carmy_meta",
            Self::Argument => "argument",
            Self::ClientMeta => "client_meta",
        }
    }

    /// A Carmy-aware client chose the id on purpose.
    pub(crate) fn is_explicit(self) -> bool {
        matches!(self, Self::IdempotencyKey | Self::CarmyMeta)
    }
}

/// What scopes a call's request id beyond its principal (docs/semantics.md §11).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The default session: every conversation of the principal shares the id.
    #[default]
    Unscoped,
    /// `_meta["io.carmy/session_id"]`, chosen by a Carmy-aware client.
    Session,
    /// The conversation a known client named in `_meta`.
    Conversation,
}

/// The identity parts a call carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CallIdentity {
    /// `None`: the call runs unprotected (or is refused when a request id is required).
    pub(crate) request_id: Option<String>,
    /// Where the request id came from; `None` without one.
    pub(crate) source: Option<IdSource>,
    /// `None`: the default session.
    pub(crate) session_id: Option<String>,
    /// What the session is.
    pub(crate) scope: Scope,
}

/// Finds the identity of a call from `params.idempotencyKey` (`idempotency_key`), the call's
/// `_meta` and the model's request id argument (`model`, already checked), reading
/// `meta_keys` last; `conversation_keys` name the conversation (module documentation).
///
/// # Errors
/// A message naming the member that is present but not a string.
pub(crate) fn call_identity(
    idempotency_key: Option<&Value>,
    meta: &Map<String, Value>,
    meta_keys: &[String],
    conversation_keys: &[String],
    model: Option<&str>,
) -> Result<CallIdentity, String> {
    let mut request_id = string("params.idempotencyKey", idempotency_key)?;
    let mut source = request_id.as_ref().map(|_| IdSource::IdempotencyKey);
    if request_id.is_none() {
        let key = format!("_meta[\"{REQUEST_ID_META}\"]");
        request_id = string(&key, meta.get(REQUEST_ID_META))?;
        source = request_id.as_ref().map(|_| IdSource::CarmyMeta);
    }
    if request_id.is_none() {
        request_id = model.map(str::to_owned);
        source = request_id.as_ref().map(|_| IdSource::Argument);
    }
    for key in meta_keys {
        if request_id.is_some() {
            break;
        }
        request_id = string(&format!("_meta[\"{key}\"]"), meta.get(key))?;
        source = request_id.as_ref().map(|_| IdSource::ClientMeta);
    }
    let session_id = string(
        &format!("_meta[\"{SESSION_ID_META}\"]"),
        meta.get(SESSION_ID_META),
    )?;
    let (session_id, scope) = match session_id {
        Some(session) => (Some(session), Scope::Session),
        None if matches!(source, Some(IdSource::Argument | IdSource::ClientMeta)) => {
            match conversation(meta, conversation_keys) {
                Some(session) => (Some(session), Scope::Conversation),
                None => (None, Scope::Unscoped),
            }
        }
        None => (None, Scope::Unscoped),
    };
    Ok(CallIdentity {
        request_id,
        source,
        session_id,
        scope,
    })
}

/// The session of the first of `keys` whose conversation `meta` names: `<key>:<value>`. A key
/// is a `_meta` member (`vscode.conversationId`) or a member of one (`x-codex-turn-metadata[session_id]`,
/// whose value may also be an object encoded as a JSON string). A value that is not a string
/// of 1 to 255 bytes without control characters once prefixed (docs/semantics.md §2.1) is
/// passed over.
fn conversation(meta: &Map<String, Value>, keys: &[String]) -> Option<String> {
    keys.iter().find_map(|key| {
        let value = match key.strip_suffix(']').and_then(|key| key.split_once('[')) {
            Some((outer, member)) => match meta.get(outer)? {
                Value::Object(fields) => fields.get(member)?.as_str()?.to_owned(),
                Value::String(encoded) => serde_json::from_str::<Map<String, Value>>(encoded)
                    .ok()?
                    .get(member)?
                    .as_str()?
                    .to_owned(),
                _ => return None,
            },
            None => meta.get(key)?.as_str()?.to_owned(),
        };
        let session = format!("{key}:{value}");
        let usable = !value.is_empty()
            && session.len() <= carmy::identity::MAX_IDENTIFIER_BYTES
            && !session.chars().any(char::is_control);
        usable.then_some(session)
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
        let found = |key: Option<Value>, meta: &Map<String, Value>, model: Option<&str>| {
            call_identity(key.as_ref(), meta, &keys, &[], model).unwrap()
        };
        let model = Some("k7Qz2mXv9LpR4tYw");
        assert_eq!(
            found(Some(json!("param")), &all, model),
            CallIdentity {
                request_id: Some("param".into()),
                source: Some(IdSource::IdempotencyKey),
                session_id: Some("s1".into()),
                scope: Scope::Session,
            }
        );
        let carmy = found(None, &all, model);
        assert_eq!(carmy.request_id.as_deref(), Some("carmy"));
        assert_eq!(carmy.source, Some(IdSource::CarmyMeta));
        let client_only = meta(json!({"other/id": "o", "claudecode/toolUseId": "toolu_1"}));
        let argument = found(None, &client_only, model);
        assert_eq!(argument.request_id.as_deref(), model);
        assert_eq!(argument.source, Some(IdSource::Argument));
        let client = found(None, &client_only, None);
        assert_eq!(client.request_id.as_deref(), Some("toolu_1"));
        assert_eq!(client.source, Some(IdSource::ClientMeta));
        assert_eq!(found(None, &Map::new(), None), CallIdentity::default());
    }

    #[test]
    fn a_present_member_must_be_a_string() {
        let refused = |key: Option<Value>, meta: Value| {
            call_identity(key.as_ref(), &self::meta(meta), &[], &[], None).unwrap_err()
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

    #[test]
    fn a_known_clients_conversation_scopes_the_models_and_the_clients_ids() {
        let keys: Vec<String> = ["vscode.conversationId", "x-codex-turn-metadata[session_id]"]
            .map(String::from)
            .to_vec();
        let found = |meta: Value, key: Option<Value>, model: Option<&str>| {
            call_identity(
                key.as_ref(),
                &self::meta(meta),
                &["claudecode/toolUseId".to_owned()],
                &keys,
                model,
            )
            .unwrap()
        };
        let model = Some("k7Qz2mXv9LpR4tYw");
        let vscode = json!({"vscode.conversationId": "c-1", "vscode.requestId": "r-9"});
        let scoped = found(vscode.clone(), None, model);
        assert_eq!(
            scoped.session_id.as_deref(),
            Some("vscode.conversationId:c-1")
        );
        assert_eq!(scoped.scope, Scope::Conversation);
        // Codex sends its turn metadata as an object (older builds: as JSON text).
        for codex in [
            json!({"x-codex-turn-metadata": {"session_id": "s-2", "turn_id": "t"}}),
            json!({"x-codex-turn-metadata": "{\"session_id\":\"s-2\",\"turn_id\":\"t\"}"}),
        ] {
            let scoped = found(codex, None, model);
            assert_eq!(
                scoped.session_id.as_deref(),
                Some("x-codex-turn-metadata[session_id]:s-2")
            );
        }
        // The client's own tool-use id is scoped too.
        let client = found(
            json!({"vscode.conversationId": "c-1", "claudecode/toolUseId": "toolu_1"}),
            None,
            None,
        );
        assert_eq!(
            (client.source, client.scope),
            (Some(IdSource::ClientMeta), Scope::Conversation)
        );
        // A Carmy-aware client's session wins; its explicit ids are never scoped by the
        // client's conversation.
        let mut explicit = vscode.clone();
        explicit["io.carmy/session_id"] = json!("mine");
        let session = found(explicit, None, model);
        assert_eq!(
            (session.session_id.as_deref(), session.scope),
            (Some("mine"), Scope::Session)
        );
        let keyed = found(vscode, Some(json!("k")), model);
        assert_eq!((keyed.session_id, keyed.scope), (None, Scope::Unscoped));
        // Nothing usable: unscoped, never refused.
        for meta in [
            json!({}),
            json!({"vscode.conversationId": ""}),
            json!({"vscode.conversationId": 7}),
            json!({"vscode.conversationId": "x".repeat(250)}),
            json!({"vscode.conversationId": "a\u{7}b"}),
            json!({"x-codex-turn-metadata": "not json"}),
        ] {
            let unscoped = found(meta.clone(), None, model);
            assert_eq!(
                (unscoped.session_id, unscoped.scope),
                (None, Scope::Unscoped),
                "{meta}"
            );
        }
    }
}
