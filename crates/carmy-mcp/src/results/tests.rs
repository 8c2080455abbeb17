//! Checks of the one shape of every answer (docs/semantics.md §11).

use super::*;
use crate::texts::{KeyText, GUIDANCE_MEMBER};
use crate::EXECUTION_META;
use carmy::engine::{Answer, Refusal};
use carmy::store::InFlightState;
use carmy::{ExecutionError, ExecutionId, RecordedResult};
use carmy::{ExecutionResult, ExecutionStatus};
use serde_json::json;
use std::time::Duration;

fn id() -> ExecutionId {
    ExecutionId::from_stored("exec_1")
}

/// The fields, the execution meta and the text of a refusal's result; an answer that is not an
/// outcome yet (`state: running`) is no error result, every other refusal is one.
fn refused(refusal: Refusal) -> (Value, Value, String) {
    let result = from_refusal(refusal, &["find_orders".to_owned()], None).unwrap();
    let fields = result.structured_content.clone().unwrap();
    let pending = fields.get("state") == Some(&json!("running"));
    assert_eq!(result.is_error, Some(!pending), "{fields}");
    let meta = result.meta.clone().unwrap().0[EXECUTION_META].clone();
    let text = serde_json::to_value(&result.content[0]).unwrap()["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(fields[GUIDANCE_MEMBER], text);
    (fields, meta, text)
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
fn input_errors_are_tool_results_and_impossible_refusals_json_rpc_errors() {
    let (fields, meta, text) = refused(Refusal::Invalid(
        "arguments do not match the tool's schema: /ms: \"soon\" is not of type \"integer\"".into(),
    ));
    assert_eq!(fields["code"], "INVALID_REQUEST");
    assert_eq!(fields["effect_may_have_happened"], false);
    assert_eq!(meta["execution_id"], Value::Null);
    assert!(
        text.starts_with("Carmy refused this call before running it: arguments do not match the tool's schema: /ms: \"soon\" is not of type \"integer\". Nothing ran"),
        "{text}"
    );
    assert_eq!(fields[GUIDANCE_MEMBER], text);
    let (fields, _, text) = refused(Refusal::UnknownTool {
        tool: "x".into(),
        closest: None,
    });
    assert_eq!(fields["code"], "UNKNOWN_TOOL");
    assert!(
        text.contains("Call one of the tools this server lists now"),
        "{text}"
    );
    let code = |refusal| from_refusal(refusal, &[], None).unwrap_err().code.0;
    assert_eq!(code(Refusal::Lost { execution_id: id() }), -32603);
    assert_eq!(code(Refusal::NotFound), -32603);
}

#[test]
fn an_answer_that_is_not_an_outcome_yet_is_no_error_and_says_so() {
    let running = from_refusal(
        Refusal::Uncertain {
            execution_id: id(),
            state: InFlightState::Running,
            reconciling: false,
            retry_after: None,
        },
        &[],
        Some(KeyText::held("request_id")),
    )
    .unwrap();
    assert_eq!(running.is_error, Some(false));
    let fields = running.structured_content.unwrap();
    assert_eq!(fields["code"], "EXECUTION_UNCERTAIN");
    let guidance = fields[GUIDANCE_MEMBER].as_str().unwrap();
    assert!(
        guidance
            .contains("Call the tool again now with the same arguments and the same `request_id`"),
        "{guidance}"
    );
    let still = still_running(Some(&id()), Duration::from_secs(5), None);
    assert_eq!(still.is_error, Some(false));
    assert_eq!(still.structured_content.unwrap()["retry_after_seconds"], 5);
    // An interrupted execution is uncertain for good: an error result.
    let (fields, _, _) = refused(Refusal::Uncertain {
        execution_id: id(),
        state: InFlightState::Interrupted,
        reconciling: false,
        retry_after: None,
    });
    assert_eq!(fields["state"], "interrupted");
}

#[test]
fn a_success_carries_its_notes_beside_the_data_and_a_tools_own_member_wins() {
    let mut answer = recorded(ExecutionStatus::Completed, json!({"order_id": 7}), None);
    let replay = from_answer(&answer, None, Vec::new, Some(KeyText::held("request_id")));
    let fields = replay.structured_content.clone().unwrap();
    assert_eq!(fields["order_id"], 7);
    let note = fields[GUIDANCE_MEMBER].as_str().unwrap();
    assert!(note.contains("it was not done again"), "{note}");
    assert_eq!(replay.content.len(), 2);
    let unprotected = super::unprotected(replay, "request_id");
    let fields = unprotected.structured_content.unwrap();
    let both = fields[GUIDANCE_MEMBER].as_str().unwrap();
    assert!(
        both.starts_with(note) && both.contains("\n\nThis call carried no `request_id`"),
        "{both}"
    );
    // The tool's data keeps a member of that name as it is.
    answer = recorded(
        ExecutionStatus::Completed,
        json!({"order_id": 7, GUIDANCE_MEMBER: "the tool's"}),
        None,
    );
    let own = from_answer(&answer, None, Vec::new, Some(KeyText::held("request_id")));
    let own = super::unprotected(own, "request_id");
    assert_eq!(
        own.structured_content.unwrap()[GUIDANCE_MEMBER],
        "the tool's"
    );
    assert_eq!(own.content.len(), 3);
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
        rerun_of: None,
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

/// A rerun says so (docs/semantics.md §12.1): `_meta` names the released execution and the
/// model reads who released it and why; a takeover names its attempt.
#[test]
fn a_rerun_names_the_execution_it_replaced() {
    let released = carmy::outcome::ExecutionId::from_stored("exec_released");
    let mut answer = recorded(ExecutionStatus::Completed, json!({"order_id": 8}), None);
    answer.replayed = false;
    answer.rerun_of = Some(carmy::store::Replaced {
        execution_id: released.clone(),
        ended: carmy::store::ReplacedEnd::Released {
            by: "operator:ops".into(),
            note: "no order upstream".into(),
        },
    });
    let result = from_answer(&answer, None, Vec::new, None);
    assert_eq!(result.is_error, Some(false));
    assert_eq!(
        result.meta.as_ref().unwrap().0[EXECUTION_META]["rerun_of"],
        json!({"execution_id": "exec_released", "ended": "released",
               "by": "operator:ops", "note": "no order upstream"})
    );
    let text = result
        .content
        .last()
        .unwrap()
        .as_text()
        .unwrap()
        .text
        .clone();
    assert!(
        text.contains("exec_released")
            && text.contains("released by operator:ops (no order upstream)"),
        "{text}"
    );
    answer.rerun_of = Some(carmy::store::Replaced {
        execution_id: released,
        ended: carmy::store::ReplacedEnd::TakenOver { attempt: 2 },
    });
    let result = from_answer(&answer, None, Vec::new, None);
    assert_eq!(
        result.meta.as_ref().unwrap().0[EXECUTION_META]["rerun_of"],
        json!({"execution_id": "exec_released", "ended": "taken_over", "attempt": 2})
    );
    let text = result
        .content
        .last()
        .unwrap()
        .as_text()
        .unwrap()
        .text
        .clone();
    assert!(
        text.contains("attempt 2 of execution exec_released"),
        "{text}"
    );
    // A replay is no rerun.
    let replay = from_answer(
        &recorded(ExecutionStatus::Completed, json!({"order_id": 8}), None),
        None,
        Vec::new,
        None,
    );
    assert!(replay.meta.unwrap().0[EXECUTION_META]
        .get("rerun_of")
        .is_none());
}
