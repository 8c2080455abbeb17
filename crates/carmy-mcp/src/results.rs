//! The one mapping of the engine's answers to MCP (docs/semantics.md §11), as
//! `carmy::http::error` is for HTTP: a recorded outcome or a Carmy refusal becomes a
//! `CallToolResult` (`isError` for everything but `completed`), and a protocol mistake (unknown
//! tool, arguments failing the schema, malformed identity) a JSON-RPC error.
//!
//! Every result carries `_meta["io.carmy/execution"]` = `{execution_id, status, replayed,
//! expires_at}`: `expires_at` is when a recorded outcome's record stops holding its identity
//! (docs/semantics.md §12.9; UTC, RFC 3339 with milliseconds), `null` for a record kept forever
//! and for every answer without a recorded outcome.

use crate::texts::{entry, Effect, Facts, KeyHold, KeyText, Situation};
use crate::EXECUTION_META;
use carmy::engine::{Answer, Refusal};
use carmy::store::InFlightState;
use carmy::{ExecutionResult, ExecutionStatus};
use rmcp::model::{CallToolResult, ContentBlock, ErrorData, MetaObject};
use serde_json::{json, Map, Value};

/// The result of a recorded (or unprotected) outcome whose record expires at `expires_at`
/// ([`carmy::engine::Engine::expires_at`]); `read_tools` is asked only for the text of a
/// failure; `key` is the tool's request id argument (docs/semantics.md §11), named in the texts.
pub(crate) fn from_answer(
    answer: &Answer,
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
    read_tools: impl FnOnce() -> Vec<String>,
    key: Option<KeyText<'_>>,
) -> CallToolResult {
    from_result(
        answer.result.result(),
        answer.replayed,
        expires_at,
        read_tools,
        key,
    )
}

/// The result of the recorded outcome `result` (`replayed`: the tool did not run for this
/// answer), as [`from_answer`] and `tasks/get` (crate::tasks) give it.
pub(crate) fn from_result(
    result: &ExecutionResult,
    replayed: bool,
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
    read_tools: impl FnOnce() -> Vec<String>,
    key: Option<KeyText<'_>>,
) -> CallToolResult {
    let mut meta = execution_meta(
        Some(result.execution_id.as_str()),
        Some(result.status.as_str()),
        replayed,
    );
    if let (Some(at), Some(execution)) = (expires_at, meta.0.get_mut(EXECUTION_META)) {
        execution["expires_at"] =
            Value::String(at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    }
    // An outcome a decision recorded (an operator, a DBA's SQL, the reconciler): said as such,
    // never passed off as the tool's own report (docs/semantics.md §12.1).
    if let (Some(resolution), Some(execution)) =
        (&result.resolution, meta.0.get_mut(EXECUTION_META))
    {
        execution["resolution"] = json!(resolution);
    }
    let mut call_result = if result.status == ExecutionStatus::Completed {
        let text = result.data.to_string();
        let mut content = vec![ContentBlock::text(text)];
        if let Some(key) = key {
            let note = if replayed {
                crate::texts::DONE_EARLIER
            } else {
                crate::texts::DONE
            };
            // The record answers retries until it expires (docs/semantics.md §12.9).
            let until = expires_at.map_or_else(String::new, |at| {
                format!(
                    " until {}",
                    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                )
            });
            let again = match key.hold {
                KeyHold::Unseen => String::new(),
                _ => format!(
                    "; calling again{} returns this same result without doing it again{until}",
                    key.same_key()
                ),
            };
            let note = note
                .replace("{execution_id}", result.execution_id.as_str())
                .replace("{again}", &again)
                .replace("{key}", key.name);
            content.push(ContentBlock::text(note));
        }
        if let Some(resolution) = &result.resolution {
            let at = resolution
                .at
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            content.push(ContentBlock::text(
                crate::texts::DECIDED
                    .replace("{by}", &resolution.by)
                    .replace("{at}", &at)
                    .replace("{note}", &resolution.note),
            ));
        }
        let mut success = CallToolResult::success(content);
        // MCP's structuredContent is an object; other values are in the text only.
        if result.data.is_object() {
            success.structured_content = Some(result.data.clone());
        }
        success
    } else {
        recorded_failure(result, &read_tools(), key)
    };
    call_result.meta = Some(meta);
    call_result
}

/// A recorded `failed`, `timed_out` or `cancelled` outcome, with the recorded error.
fn recorded_failure(
    result: &ExecutionResult,
    read_tools: &[String],
    key: Option<KeyText<'_>>,
) -> CallToolResult {
    let (code, message, unknown) = result.error.as_ref().map_or(("", "", true), |error| {
        (
            error.code.as_str(),
            error.message.as_str(),
            error.effect.is_some(),
        )
    });
    let situation = if unknown || result.status != ExecutionStatus::Failed {
        Situation::EffectUnknown
    } else {
        Situation::Failed
    };
    let text = entry(situation).render(&Facts {
        execution_id: Some(result.execution_id.as_str()),
        read_tools,
        code,
        message,
        retry_after_seconds: None,
        differs: None,
        key_argument: key,
        decided_by: result
            .resolution
            .as_ref()
            .map(|resolution| resolution.by.as_str()),
    });
    let mut structured = json!({
        "code": code,
        "message": message,
        "status": result.status.as_str(),
        "execution_id": result.execution_id,
        "effect_may_have_happened": situation == Situation::EffectUnknown,
    });
    if let Some(error) = &result.error {
        structured["error"] = json!(error);
    }
    error_result(text, structured)
}

/// A refusal of the engine: a tool result for the model, or a JSON-RPC error for a protocol
/// mistake.
///
/// # Errors
/// [`ErrorData`] for [`Refusal::Invalid`] and [`Refusal::UnknownTool`] (invalid params, as
/// the MCP specification answers an unknown tool) and for refusals `execute` never gives.
pub(crate) fn from_refusal(
    refusal: Refusal,
    read_tools: &[String],
    key: Option<KeyText<'_>>,
) -> Result<CallToolResult, ErrorData> {
    let (situation, execution_id, state) = match &refusal {
        Refusal::Invalid(message) => return Err(ErrorData::invalid_params(message.clone(), None)),
        // The engine's text, as HTTP's detail: it names the closest tool ("did you mean").
        Refusal::UnknownTool { .. } => {
            return Err(ErrorData::invalid_params(
                format!("{refusal}; tools/list lists the tools"),
                None,
            ))
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
    let mut result = error_result(text, structured);
    result.meta = Some(execution_meta(execution_id, state, false));
    Ok(result)
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
    let mut result = error_result(text, structured);
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

/// Whole seconds, rounded up, at least 1: as HTTP's Retry-After.
fn whole_seconds(pause: std::time::Duration) -> u64 {
    (pause.as_secs() + u64::from(pause.subsec_nanos() > 0)).max(1)
}

/// A call with a request id still running after `CARMY_MCP_ANSWER_WITHIN_MS`
/// (docs/semantics.md §11): the model is told to retry with the same id after `retry_after`.
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
    let mut result = error_result(text, structured);
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
    let mut result = error_result(text, structured);
    result.meta = Some(execution_meta(None, None, false));
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
    let mut result = error_result(copy.render(&Facts::default()), structured);
    result.meta = Some(execution_meta(None, None, false));
    result
}

fn error_result(text: String, structured: Value) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    result
}

/// `{"io.carmy/execution": {execution_id, status, replayed, expires_at}}`.
fn execution_meta(execution_id: Option<&str>, status: Option<&str>, replayed: bool) -> MetaObject {
    let mut meta = Map::new();
    meta.insert(
        EXECUTION_META.to_owned(),
        json!({
            "execution_id": execution_id,
            "status": status,
            "replayed": replayed,
            "expires_at": null,
        }),
    );
    MetaObject(meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use carmy::{ExecutionError, ExecutionId, RecordedResult};
    use std::time::Duration;

    fn id() -> ExecutionId {
        ExecutionId::from_stored("exec_1")
    }

    fn refused(refusal: Refusal) -> (Value, Value, String) {
        let result = from_refusal(refusal, &["find_orders".to_owned()], None).unwrap();
        assert_eq!(result.is_error, Some(true));
        let meta = result.meta.clone().unwrap().0[EXECUTION_META].clone();
        let text = serde_json::to_value(&result.content[0]).unwrap()["text"]
            .as_str()
            .unwrap()
            .to_owned();
        (result.structured_content.unwrap(), meta, text)
    }

    #[test]
    fn every_carmy_refusal_is_a_tool_result_with_its_code() {
        let running = InFlightState::Running;
        let cases = [
            (
                Refusal::Conflict {
                    execution_id: id(),
                    differs: None,
                },
                "IDEMPOTENCY_CONFLICT",
                Value::Null,
            ),
            (
                Refusal::Uncertain {
                    execution_id: id(),
                    state: running,
                    reconciling: false,
                    retry_after: None,
                },
                "EXECUTION_UNCERTAIN",
                json!("running"),
            ),
            (
                Refusal::Uncertain {
                    execution_id: id(),
                    state: InFlightState::Interrupted,
                    reconciling: false,
                    retry_after: None,
                },
                "EXECUTION_UNCERTAIN",
                json!("interrupted"),
            ),
            (
                Refusal::RecordingPending { execution_id: id() },
                "EXECUTION_UNCERTAIN",
                json!("running"),
            ),
            (Refusal::Capacity, "IDEMPOTENCY_CAPACITY", Value::Null),
            (Refusal::StoreUnavailable, "STORE_UNAVAILABLE", Value::Null),
        ];
        for (refusal, code, state) in cases {
            let (fields, meta, text) = refused(refusal);
            assert_eq!(fields["code"], code, "{text}");
            assert_eq!(fields.get("state").cloned().unwrap_or(Value::Null), state);
            assert_eq!(meta["status"], state);
            assert_eq!(meta["replayed"], false);
            assert_eq!(meta["expires_at"], Value::Null);
        }
        let (fields, meta, text) = refused(Refusal::NotExecuted {
            execution_id: id(),
            handed_back: false,
            code: "UPSTREAM_UNAVAILABLE".into(),
            message: "connection refused".into(),
            retry_after: Some(Duration::from_millis(1500)),
        });
        assert_eq!(fields["code"], "UPSTREAM_UNAVAILABLE");
        assert_eq!(fields["retry_after_seconds"], 2);
        assert_eq!(fields["effect_may_have_happened"], false);
        assert_eq!(meta["execution_id"], "exec_1");
        assert!(
            text.contains("Retry the same call unchanged after 2 s"),
            "{text}"
        );
        // A takeover's attempt that reached nothing: the earlier attempt's effect is unknown.
        let (fields, meta, text) = refused(Refusal::NotExecuted {
            execution_id: id(),
            handed_back: true,
            code: "UPSTREAM_UNAVAILABLE".into(),
            message: "connection refused".into(),
            retry_after: None,
        });
        assert_eq!(fields["effect_may_have_happened"], true);
        assert_eq!(fields["state"], "interrupted");
        assert_eq!(meta["status"], "interrupted");
        assert!(
            text.contains("the earlier attempt's effect may have happened"),
            "{text}"
        );
        assert!(!text.contains("did not happen"), "{text}");
    }

    #[test]
    fn protocol_mistakes_and_impossible_refusals_are_json_rpc_errors() {
        let code = |refusal| from_refusal(refusal, &[], None).unwrap_err().code.0;
        assert_eq!(code(Refusal::Invalid("bad".into())), -32602);
        let unknown = Refusal::UnknownTool {
            tool: "x".into(),
            closest: None,
        };
        assert_eq!(code(unknown), -32602);
        assert_eq!(code(Refusal::Lost { execution_id: id() }), -32603);
        assert_eq!(code(Refusal::NotFound), -32603);
    }

    fn recorded(status: ExecutionStatus, data: Value, error: Option<ExecutionError>) -> Answer {
        Answer {
            result: RecordedResult::new(ExecutionResult {
                execution_id: id(),
                status,
                data,
                error,
                tool: "t".into(),
                request_id: Some("r".into()),
                session_id: "default".into(),
                started_at: chrono::Utc::now(),
                finished_at: chrono::Utc::now(),
                resolution: None,
            }),
            replayed: true,
            expires_at: None,
        }
    }

    #[test]
    fn recorded_outcomes() {
        let expires = chrono::DateTime::parse_from_rfc3339("2026-01-09T03:04:05.678Z")
            .unwrap()
            .to_utc();
        let done = from_answer(
            &recorded(ExecutionStatus::Completed, json!([1]), None),
            Some(expires),
            Vec::new,
            None,
        );
        assert_eq!(done.is_error, Some(false));
        assert_eq!(done.structured_content, None, "an array is text only");
        let meta = &done.meta.unwrap().0[EXECUTION_META];
        assert_eq!(meta["replayed"], true);
        assert_eq!(meta["expires_at"], "2026-01-09T03:04:05.678Z");
        let timeout = ExecutionError::timeout(Duration::from_secs(1));
        let timed_out = from_answer(
            &recorded(ExecutionStatus::TimedOut, Value::Null, Some(timeout)),
            None,
            || vec!["find_orders".to_owned()],
            Some(KeyText::held("request_id")),
        );
        assert_eq!(timed_out.is_error, Some(true));
        assert_eq!(
            timed_out.meta.as_ref().unwrap().0[EXECUTION_META]["expires_at"],
            Value::Null
        );
        let fields = timed_out.structured_content.unwrap();
        assert_eq!(fields["code"], "TIMEOUT");
        assert_eq!(fields["status"], "timed_out");
        assert_eq!(fields["effect_may_have_happened"], true);
        assert_eq!(fields["error"]["effect"], "unknown");
    }
}
