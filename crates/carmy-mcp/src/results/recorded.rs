//! Recorded outcomes as MCP results (docs/semantics.md §11): a `completed` one is the tool's data
//! (with the success note of a tool with a request id argument, and the note of an outcome a
//! decision recorded), a `failed`, `timed_out` or `cancelled` one an error result with the
//! recorded error.

use super::{add_guidance, error_result, execution_meta};
use crate::texts::{entry, Facts, KeyHold, KeyText, Situation};
use crate::EXECUTION_META;
use carmy::engine::Answer;
use carmy::{ExecutionResult, ExecutionStatus};
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{json, Value};

/// The result of a recorded (or unprotected) outcome whose record expires at `expires_at`
/// ([`carmy::engine::Engine::expires_at`]); `read_tools` is asked only for the text of a
/// failure; `key` is the tool's request id argument (docs/semantics.md §11), named in the texts.
pub(crate) fn from_answer(
    answer: &Answer,
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
    read_tools: impl FnOnce() -> Vec<String>,
    key: Option<KeyText<'_>>,
) -> CallToolResult {
    let mut result = from_result(
        answer.result.result(),
        answer.replayed,
        expires_at,
        read_tools,
        key,
    );
    if let Some(replaced) = &answer.rerun_of {
        say_rerun(&mut result, replaced);
    }
    result
}

/// What a model reads when this run replaced another execution (docs/semantics.md §12.1, "A
/// rerun says so"): released, then run anew.
const RERUN_AFTER_RELEASE: &str = "This call ran again: an earlier execution of it, \
    {execution_id}, ended without a known outcome and was released by {by} ({note}), so the \
    tool ran anew for this answer. If the earlier attempt did take effect, it happened twice: \
    check before acting on both.";

/// As [`RERUN_AFTER_RELEASE`], for an attempt that took an interrupted execution over.
const RERUN_AFTER_TAKEOVER: &str = "This call ran again: it is attempt {attempt} of execution \
    {execution_id}, whose earlier attempt was interrupted (its process died) and was taken \
    over; the upstream got the same idempotency key both times.";

/// Adds `rerun_of` to the result's `_meta["io.carmy/execution"]` and the sentence saying so.
fn say_rerun(result: &mut CallToolResult, replaced: &carmy::store::Replaced) {
    let (rerun_of, text) = match &replaced.ended {
        carmy::store::ReplacedEnd::Released { by, note } => (
            json!({"execution_id": replaced.execution_id.as_str(), "ended": "released",
                   "by": by, "note": note}),
            RERUN_AFTER_RELEASE
                .replace("{execution_id}", replaced.execution_id.as_str())
                .replace("{by}", by)
                .replace("{note}", note),
        ),
        carmy::store::ReplacedEnd::TakenOver { attempt } => (
            json!({"execution_id": replaced.execution_id.as_str(), "ended": "taken_over",
                   "attempt": attempt}),
            RERUN_AFTER_TAKEOVER
                .replace("{execution_id}", replaced.execution_id.as_str())
                .replace("{attempt}", &attempt.to_string()),
        ),
    };
    if let Some(execution) = result
        .meta
        .as_mut()
        .and_then(|meta| meta.0.get_mut(EXECUTION_META))
    {
        execution["rerun_of"] = rerun_of;
    }
    add_guidance(result, &text);
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
        completed(result, replayed, expires_at, key)
    } else {
        recorded_failure(result, &read_tools(), key)
    };
    call_result.meta = Some(meta);
    call_result
}

/// A recorded `completed` outcome: the data as text (and as `structuredContent` when it is an
/// object), then the notes a model must read.
fn completed(
    result: &ExecutionResult,
    replayed: bool,
    expires_at: Option<chrono::DateTime<chrono::Utc>>,
    key: Option<KeyText<'_>>,
) -> CallToolResult {
    let mut success = CallToolResult::success(vec![ContentBlock::text(result.data.to_string())]);
    // MCP's structuredContent is an object; other values are in the text only.
    if result.data.is_object() {
        success.structured_content = Some(result.data.clone());
    }
    if let Some(key) = key {
        let note = if replayed {
            // How long ago the replayed outcome was recorded (docs/semantics.md §11).
            let age = (chrono::Utc::now() - result.finished_at)
                .to_std()
                .unwrap_or_default();
            crate::texts::fill(
                crate::texts::DONE_EARLIER,
                &[
                    ("age", &crate::texts::age(age)),
                    ("execution_id", result.execution_id.as_str()),
                    ("key", key.name),
                ],
            )
        } else {
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
            crate::texts::fill(
                crate::texts::DONE,
                &[
                    ("execution_id", result.execution_id.as_str()),
                    ("again", &again),
                ],
            )
        };
        add_guidance(&mut success, &note);
    }
    if let Some(resolution) = &result.resolution {
        let at = resolution
            .at
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let note = crate::texts::DECIDED
            .replace("{by}", &resolution.by)
            .replace("{at}", &at)
            .replace("{note}", &resolution.note);
        add_guidance(&mut success, &note);
    }
    success
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
        reused: None,
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
    error_result(&text, structured)
}
