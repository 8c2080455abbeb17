//! A `tools/call` made ready for the engine (docs/semantics.md §11): the tool's request id
//! argument taken out of `arguments` (or read from them when adopted), the identity found in
//! its order of precedence (scoped by the client's conversation where one is named), the model's
//! id checked for randomness, and its replay window set. What the model sent
//! wrongly is answered with a tool result it can act on; protocol mistakes are JSON-RPC
//! errors.

use crate::identity::{call_identity, IdSource, Scope};
use crate::results;
use crate::transport::RequestFacts;
use crate::McpConfig;
use carmy::call::{CallValues, ValidatedCall};
use carmy::engine::Engine;
use carmy::key_argument::KeyArgument;
use carmy::random_id::{self, Vocabulary};
use rmcp::model::{CallToolRequestParams, CallToolResult, ErrorData};
use serde_json::{Map, Value};
use std::time::Duration;

/// A call the engine may run.
pub(crate) struct Ready {
    /// The call.
    pub(crate) call: ValidatedCall,
    /// The tool's request id argument, named in the texts; `None` for none.
    pub(crate) key: Option<String>,
    /// Where the request id came from; `None` without one.
    pub(crate) source: Option<IdSource>,
    /// For a model's id that no session or conversation scopes: how long after its outcome
    /// was recorded a repeat still replays it (docs/semantics.md §11).
    pub(crate) replay_window: Option<Duration>,
}

/// What the handler does with a call.
pub(crate) enum Prepared {
    /// Run it.
    Run(Ready),
    /// Answer at once with this result: nothing ran.
    Answer(CallToolResult),
}

/// Prepares `request` from `facts` with `meta` (the request's and the call's `_meta`) and
/// the `traceparent` it came with (docs/semantics.md §13; a malformed one is dropped).
///
/// # Errors
/// [`ErrorData`] (invalid params) for a malformed identity member, a tool whose own property
/// collides with the request id argument, and a call the stateless checks refuse.
pub(crate) fn prepare(
    engine: &Engine,
    config: &McpConfig,
    facts: &RequestFacts,
    meta: &Map<String, Value>,
    traceparent: Option<&str>,
    request: CallToolRequestParams,
) -> Result<Prepared, ErrorData> {
    let tool = engine
        .tools()
        .into_iter()
        .find(|tool| tool.name() == request.name.as_ref());
    let mut arguments = request.arguments.unwrap_or_default();
    let key = match &tool {
        Some(tool) => engine
            .key_argument(tool.as_ref())
            .map_err(|collision| ErrorData::invalid_params(collision.to_string(), None))?,
        None => removed_tool_key(engine, &arguments),
    };
    let model = match &key {
        Some(key) => match take(&mut arguments, key) {
            Ok(model) => model,
            Err(problem) => {
                return Ok(Prepared::Answer(results::key_refused(
                    &key.name,
                    Some(&problem),
                )))
            }
        },
        None => None,
    };
    let identity = call_identity(
        facts.idempotency_key.as_ref(),
        meta,
        &config.request_id_meta_keys,
        &config.conversation_meta_keys,
        model.as_deref(),
    )
    .map_err(|message| ErrorData::invalid_params(message, None))?;
    if let (Some(key), Some(IdSource::Argument), Some(id)) = (&key, identity.source, &model) {
        // The call's words, without the id itself (an adopted argument stays in `arguments`).
        let mut words = arguments.clone();
        words.remove(&key.name);
        let vocabulary = Vocabulary::of_call(&request.name, &words);
        if let Err(problem) = random_id::check(id, &vocabulary) {
            let problem = format!("{} is not random enough: it {problem}", shown(id));
            return Ok(Prepared::Answer(results::key_refused(
                &key.name,
                Some(&problem),
            )));
        }
    }
    if let Some(key) = &key {
        let explicit = identity.source.is_some_and(IdSource::is_explicit);
        if key.required && model.is_none() && !explicit {
            return Ok(Prepared::Answer(results::key_refused(&key.name, None)));
        }
    }
    if identity.request_id.is_none() && config.require_request_id {
        return Ok(Prepared::Answer(results::request_id_required()));
    }
    let values = CallValues {
        tool: request.name.into_owned(),
        arguments: Value::Object(arguments),
        request_id: identity.request_id,
        session_id: identity.session_id,
        metadata: None,
    };
    let mut call = ValidatedCall::from_values(facts.principal.clone(), values)
        .map_err(|rejected| ErrorData::invalid_params(rejected.into_message(), None))?
        .with_traceparent(traceparent);
    if identity.source == Some(IdSource::Argument) {
        // The model's retry of a call that is still running waits a little for its outcome
        // (as `Prefer: wait` does), within the time the answer is due.
        call = call.with_wait(config.answer_within * 9 / 10);
    }
    let replay_window = match (identity.source, identity.scope) {
        (Some(IdSource::Argument), Scope::Unscoped) => config.argument_replay_window,
        _ => None,
    };
    Ok(Prepared::Run(Ready {
        call,
        key: key.map(|key| key.name),
        source: identity.source,
        replay_window,
    }))
}

/// For a tool that is not (or no longer) served: the gateway's request id argument when the
/// call carries it as a string, so that a model's retry of a call made before the tool was
/// removed finds its record (docs/semantics.md §3: an honest retry gets its record even after
/// the tool is gone); with no record the call is refused as an unknown tool as before.
fn removed_tool_key(engine: &Engine, arguments: &Map<String, Value>) -> Option<KeyArgument> {
    let name = &engine.key_argument_config().name;
    let id = arguments.get(name).and_then(Value::as_str)?;
    if name.is_empty() || random_id::check(id, &Vocabulary::none()).is_err() {
        return None;
    }
    Some(KeyArgument {
        name: name.clone(),
        required: false,
        adopted: false,
        description: carmy::key_argument::DESCRIPTION,
    })
}

/// `id` as a text quotes it: at most 40 characters, so a long refused value is not echoed whole.
fn shown(id: &str) -> String {
    const MOST: usize = 40;
    if id.chars().count() <= MOST {
        format!("{id:?}")
    } else {
        let head: String = id.chars().take(MOST).collect();
        format!("{head:?}… ({} characters)", id.chars().count())
    }
}

/// The model's request id from `arguments`: taken out, or read when the tool's own property is
/// adopted (it then stays, and is forwarded).
///
/// # Errors
/// The problem with a value that is not a string.
fn take(arguments: &mut Map<String, Value>, key: &KeyArgument) -> Result<Option<String>, String> {
    let value = if key.adopted {
        arguments.get(&key.name).cloned()
    } else {
        arguments.remove(&key.name)
    };
    match value {
        None => Ok(None),
        Some(Value::String(id)) => Ok(Some(id)),
        Some(other) => Err(format!("must be a string, not {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn a_refused_id_is_quoted_whole_only_when_short() {
        assert_eq!(shown("order-1"), "\"order-1\"");
        let long = "x".repeat(256);
        assert_eq!(
            shown(&long),
            format!("\"{}\"… (256 characters)", "x".repeat(40))
        );
    }
}
