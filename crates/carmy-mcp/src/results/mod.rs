//! The one mapping of the engine's answers to MCP results (docs/semantics.md §11), as
//! `carmy_http::error` is for HTTP. Every answer to a `tools/call` Carmy handles is a
//! `CallToolResult`, input errors included (SEP-1303); only a request the SDK cannot read at all
//! is a JSON-RPC error.
//!
//! One shape for every answer (docs/semantics.md §11, "Results"):
//! - `content`: the tool's data as JSON text (an outcome with data), then each text a model must
//!   read (Carmy's guidance), one text block each;
//! - `structuredContent`: the machine object (the tool's data when it is an object, else
//!   Carmy's fields such as `code`), with the guidance texts joined by a blank line in the member
//!   [`GUIDANCE_MEMBER`] whenever there are any, so that frameworks that show the model
//!   `structuredContent` instead of the text (Pydantic AI) show the guidance too;
//! - `isError`: `true` for a failure or refusal, `false` for an outcome and for an answer that
//!   is not an outcome yet (still running: the model is to call again, and frameworks count
//!   error results against a retry budget);
//! - `_meta["io.carmy/execution"]` = `{execution_id, status, replayed, expires_at}`: `expires_at`
//!   is when a recorded outcome's record stops holding its identity (docs/semantics.md §12.9;
//!   UTC, RFC 3339 with milliseconds), `null` for a record kept forever and for every answer
//!   without a recorded outcome.
//!
//! Modules: `recorded` (recorded outcomes), `refusals` (everything else).

mod recorded;
mod refusals;
#[cfg(test)]
mod tests;

pub(crate) use recorded::{from_answer, from_result};
pub(crate) use refusals::{
    from_refusal, input_error, key_refused, key_reused, request_id_required, still_running,
};

use crate::texts::{GUIDANCE_MEMBER, UNPROTECTED};
use crate::EXECUTION_META;
use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde_json::{json, Map, Value};

/// Adds a text a model must read: a text block, and the same text in `structuredContent`'s
/// [`GUIDANCE_MEMBER`] when `structuredContent` is an object (after the texts added before,
/// separated by a blank line). A tool's data that has a member of that name already keeps it
/// unchanged, and the texts are then in the text blocks only.
pub(crate) fn add_guidance(result: &mut CallToolResult, text: &str) {
    if let Some(Value::Object(fields)) = result.structured_content.as_mut() {
        let last = result
            .content
            .last()
            .and_then(|block| block.as_text())
            .map(|block| block.text.as_str());
        match fields.get_mut(GUIDANCE_MEMBER) {
            None => {
                fields.insert(GUIDANCE_MEMBER.to_owned(), Value::String(text.to_owned()));
            }
            // Carmy's own: it ends with the text block added before this one.
            Some(Value::String(earlier)) if last.is_some_and(|last| earlier.ends_with(last)) => {
                earlier.push_str("\n\n");
                earlier.push_str(text);
            }
            Some(_) => {}
        }
    }
    result.content.push(ContentBlock::text(text.to_owned()));
}

/// Adds the line of a write called without any request id (docs/semantics.md §11, "No silent
/// unprotected writes"): Carmy could not protect it, and how the model makes a retry safe with
/// the tool's request id argument `key`.
pub(crate) fn unprotected(mut result: CallToolResult, key: &str) -> CallToolResult {
    add_guidance(&mut result, &UNPROTECTED.replace("{key}", key));
    result
}

/// A refusal or failure: `isError: true`, the text for the model, and `structured` with the
/// text as its guidance.
fn error_result(text: &str, structured: Value) -> CallToolResult {
    let mut result = CallToolResult::error(Vec::new());
    result.structured_content = Some(structured);
    add_guidance(&mut result, text);
    result
}

/// An answer that is not an outcome yet (the call is still running, its outcome is being
/// recorded or reconciled): `isError: false`, since the model is to call again, and frameworks
/// count error results against a retry budget that would end the run (docs/semantics.md §11).
fn pending_result(text: &str, structured: Value) -> CallToolResult {
    let mut result = CallToolResult::success(Vec::new());
    result.structured_content = Some(structured);
    add_guidance(&mut result, text);
    result
}

/// Whole seconds, rounded up, at least 1: as HTTP's Retry-After.
fn whole_seconds(pause: std::time::Duration) -> u64 {
    (pause.as_secs() + u64::from(pause.subsec_nanos() > 0)).max(1)
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
