//! Carmy's refusals and its answers that are not an outcome yet, as MCP results
//! (docs/semantics.md §11): each a text for the model and `structuredContent` =
//! `{code, execution_id, state?, retry_after_seconds?, differs?, effect_may_have_happened}` with
//! the text as its guidance. Input errors (arguments failing the schema, a malformed request id or
//! session, an unknown tool) are tool results too (MCP 2025-11-25, SEP-1303), so the model reads
//! the reason in every framework; an answer that is not an outcome yet is not an error result.

use super::{error_result, execution_meta, pending_result, whole_seconds};
use crate::texts::{entry, Effect, Facts, KeyText, Situation};
use carmy::engine::Refusal;
use carmy::store::InFlightState;
use rmcp::model::{CallToolResult, ErrorData};
use serde_json::{json, Value};

/// Whether `situation` is an answer that is not an outcome yet: the model is to call again with
/// the same request id, so it is no error result (frameworks count those against a retry
/// budget, docs/semantics.md §11).
pub(crate) fn is_pending(situation: Situation) -> bool {
    matches!(
        situation,
        Situation::Running
            | Situation::StillRunning
            | Situation::RecordingPending
            | Situation::Reconciling
    )
}

/// The result of `situation` with `text` and `structured`: pending or an error.
fn answer(situation: Situation, text: &str, structured: Value) -> CallToolResult {
    if is_pending(situation) {
        pending_result(text, structured)
    } else {
        error_result(text, structured)
    }
}

/// A refusal of the engine as a tool result for the model.
///
/// # Errors
/// [`ErrorData`] (internal error) only for refusals `execute` never gives.
pub(crate) fn from_refusal(
    refusal: Refusal,
    read_tools: &[String],
    key: Option<KeyText<'_>>,
) -> Result<CallToolResult, ErrorData> {
    let (situation, execution_id, state) = match &refusal {
        Refusal::Invalid(message) => return Ok(input_error(message, key)),
        // HTTP's 413 code, with the same text (docs/semantics.md §8.5).
        Refusal::ArgumentsTooLarge { .. } => {
            return Ok(refused_input(
                Situation::ArgumentsTooLarge,
                &refusal.to_string(),
                key,
            ));
        }
        // The engine's text, as HTTP's detail: it names the closest tool ("did you mean").
        Refusal::UnknownTool { .. } => {
            let text = entry(Situation::UnknownTool).render(&Facts {
                message: &refusal.to_string(),
                read_tools,
                key_argument: key,
                ..Facts::default()
            });
            let structured = json!({
                "code": entry(Situation::UnknownTool).code,
                "execution_id": null,
                "effect_may_have_happened": false,
            });
            let mut result = error_result(&text, structured);
            result.meta = Some(execution_meta(None, None, false));
            return Ok(result);
        }
        Refusal::Conflict { execution_id, .. } => (Situation::Conflict, Some(execution_id), None),
        Refusal::Uncertain {
            execution_id,
            state,
            reconciling,
            ..
        } => {
            let situation = match state {
                InFlightState::Running => Situation::Running,
                InFlightState::Interrupted if *reconciling => Situation::Reconciling,
                InFlightState::Interrupted => Situation::Interrupted,
            };
            (situation, Some(execution_id), Some(state.as_str()))
        }
        Refusal::RecordingPending { execution_id } => (
            Situation::RecordingPending,
            Some(execution_id),
            Some(InFlightState::Running.as_str()),
        ),
        Refusal::Superseded { execution_id, .. } => {
            (Situation::Superseded, Some(execution_id), None)
        }
        Refusal::RecordDamaged { execution_id, .. } => {
            (Situation::RecordDamaged, Some(execution_id), None)
        }
        Refusal::Capacity => (Situation::Capacity, None, None),
        Refusal::StoreUnavailable => (Situation::StoreUnavailable, None, None),
        Refusal::NotExecuted {
            execution_id,
            code,
            message,
            retry_after,
            handed_back,
            ..
        } => {
            let facts = NotExecutedFacts {
                execution_id,
                code,
                message,
                retry_after: *retry_after,
                handed_back: *handed_back,
            };
            return Ok(not_executed(&facts, read_tools, key));
        }
        Refusal::Finished { .. }
        | Refusal::StillRunning { .. }
        | Refusal::NotFound
        | Refusal::Lost { .. } => {
            tracing::error!(%refusal, "tools/call got a refusal that execute never gives");
            return Err(ErrorData::internal_error("internal error", None));
        }
        // `Refusal` is non-exhaustive: one added to carmy later is logged, never guessed at.
        _ => {
            tracing::error!(%refusal, "tools/call got a refusal this front does not know");
            return Err(ErrorData::internal_error("internal error", None));
        }
    };
    let copy = entry(situation);
    let execution_id = execution_id.map(carmy::ExecutionId::as_str);
    let differs = match &refusal {
        Refusal::Conflict { differs, .. } => differs.as_deref(),
        _ => None,
    };
    let text = copy.render(&Facts {
        execution_id,
        read_tools,
        differs,
        key_argument: key,
        ..Facts::default()
    });
    let mut structured = json!({
        "code": copy.code,
        "execution_id": execution_id,
        "effect_may_have_happened": copy.effect != Effect::DidNotHappen,
    });
    if let Some(differs) = differs {
        structured["differs"] = json!(differs);
    }
    if let Some(state) = state {
        structured["state"] = json!(state);
    }
    if let Refusal::Uncertain {
        retry_after: Some(pause),
        ..
    } = &refusal
    {
        structured["retry_after_seconds"] = json!(whole_seconds(*pause));
    }
    let mut result = answer(situation, &text, structured);
    result.meta = Some(execution_meta(execution_id, state, false));
    Ok(result)
}

/// An input error (docs/semantics.md §11): arguments failing the tool's schema, a malformed
/// request id or session, a tool whose own property collides with the request id argument.
/// `INVALID_REQUEST` with `message` (what is wrong); nothing ran and nothing was reserved.
pub(crate) fn input_error(message: &str, key: Option<KeyText<'_>>) -> CallToolResult {
    refused_input(Situation::InvalidRequest, message, key)
}

/// A call refused before anything ran, in `situation` (an input error's kind), with `message`.
fn refused_input(situation: Situation, message: &str, key: Option<KeyText<'_>>) -> CallToolResult {
    let copy = entry(situation);
    let message = message.trim_end_matches('.');
    let text = copy.render(&Facts {
        message,
        key_argument: key,
        ..Facts::default()
    });
    let structured = json!({
        "code": copy.code,
        "message": message,
        "execution_id": null,
        "effect_may_have_happened": false,
    });
    let mut result = error_result(&text, structured);
    result.meta = Some(execution_meta(None, None, false));
    result
}

/// The tool's own "nothing happened" failure: the identity is free again.
fn not_executed(
    facts: &NotExecutedFacts<'_>,
    read_tools: &[String],
    key: Option<KeyText<'_>>,
) -> CallToolResult {
    let NotExecutedFacts {
        execution_id,
        code,
        message,
        retry_after,
        handed_back,
    } = *facts;
    let seconds = retry_after.map(whole_seconds);
    let situation = if handed_back {
        Situation::HandedBack
    } else {
        Situation::NotExecuted
    };
    let text = entry(situation).render(&Facts {
        execution_id: Some(execution_id.as_str()),
        read_tools,
        code,
        message,
        retry_after_seconds: seconds,
        key_argument: key,
        ..Facts::default()
    });
    let mut structured = json!({
        "code": code,
        "message": message,
        "execution_id": execution_id,
        "retry_after_seconds": seconds,
        "effect_may_have_happened": handed_back,
    });
    // Handed back: the execution reads interrupted again (docs/semantics.md §12.7).
    let state = handed_back.then_some(InFlightState::Interrupted.as_str());
    if let Some(state) = state {
        structured["state"] = json!(state);
    }
    let mut result = error_result(&text, structured);
    result.meta = Some(execution_meta(Some(execution_id.as_str()), state, false));
    result
}

/// What a tool's "not executed" answer tells ([`Refusal::NotExecuted`]).
#[derive(Clone, Copy)]
struct NotExecutedFacts<'a> {
    execution_id: &'a carmy::ExecutionId,
    code: &'a str,
    message: &'a str,
    retry_after: Option<std::time::Duration>,
    /// A takeover's attempt: the earlier attempt's effect is unknown.
    handed_back: bool,
}

/// A call with a request id still running after `CARMY_MCP_ANSWER_WITHIN_MS`
/// (docs/semantics.md §11): not an outcome yet, so no error result; the model is told to call
/// again with the same id (`retry_after`: the pause a program would wait, in the fields).
pub(crate) fn still_running(
    execution_id: Option<&carmy::ExecutionId>,
    retry_after: std::time::Duration,
    key: Option<KeyText<'_>>,
) -> CallToolResult {
    let copy = entry(Situation::StillRunning);
    let execution_id = execution_id.map(carmy::ExecutionId::as_str);
    let seconds = whole_seconds(retry_after);
    let text = copy.render(&Facts {
        execution_id,
        retry_after_seconds: Some(seconds),
        key_argument: key,
        ..Facts::default()
    });
    let running = InFlightState::Running.as_str();
    let structured = json!({
        "code": copy.code,
        "execution_id": execution_id,
        "state": running,
        "retry_after_seconds": seconds,
        "effect_may_have_happened": true,
    });
    let mut result = pending_result(&text, structured);
    result.meta = Some(execution_meta(execution_id, Some(running), false));
    result
}

/// A call refused before anything ran because of the model's request id argument `key`:
/// [`Situation::KeyInvalid`] with `problem`, or [`Situation::KeyMissing`] without.
pub(crate) fn key_refused(key: &str, problem: Option<&str>) -> CallToolResult {
    let situation = problem.map_or(Situation::KeyMissing, |_| Situation::KeyInvalid);
    let copy = entry(situation);
    let text = copy.render(&Facts {
        message: problem.unwrap_or_default(),
        key_argument: Some(KeyText::held(key)),
        ..Facts::default()
    });
    let structured = json!({
        "code": copy.code,
        "argument": key,
        "execution_id": null,
        "effect_may_have_happened": false,
    });
    let mut result = error_result(&text, structured);
    result.meta = Some(execution_meta(None, None, false));
    result
}

/// A model's unscoped id whose record was made `age` ago, past the replay window `window`
/// (docs/semantics.md §11): nothing ran, and the earlier outcome is not shown (it may be
/// another conversation's); the model is sent to check with a read-only tool (`read_tools`),
/// and only a new action to a new id.
pub(crate) fn key_reused(
    key: &str,
    execution_id: &carmy::ExecutionId,
    age: std::time::Duration,
    window: std::time::Duration,
    read_tools: &[String],
) -> CallToolResult {
    let copy = entry(Situation::KeyReused);
    let (age_text, window_text) = (crate::texts::age(age), crate::texts::age(window));
    let text = copy.render(&Facts {
        execution_id: Some(execution_id.as_str()),
        read_tools,
        key_argument: Some(KeyText::held(key)),
        reused: Some((&age_text, &window_text)),
        ..Facts::default()
    });
    let structured = json!({
        "code": copy.code,
        "argument": key,
        "execution_id": execution_id.as_str(),
        "age_seconds": age.as_secs(),
        "replay_window_seconds": window.as_secs(),
        "effect_may_have_happened": false,
    });
    let mut result = error_result(&text, structured);
    result.meta = Some(execution_meta(Some(execution_id.as_str()), None, false));
    result
}

/// A call refused because the operator requires a request id and it had none.
pub(crate) fn request_id_required() -> CallToolResult {
    let copy = entry(Situation::RequestIdRequired);
    let structured = json!({
        "code": copy.code,
        "execution_id": null,
        "effect_may_have_happened": false,
    });
    let mut result = error_result(&copy.render(&Facts::default()), structured);
    result.meta = Some(execution_meta(None, None, false));
    result
}
