//! MCP tasks (the `io.modelcontextprotocol/tasks` extension, protocol 2026-07-28) answered from
//! Carmy's records (docs/semantics.md §11, "Tasks"): a task's `taskId` is the execution id, so
//! `tasks/get` and `tasks/cancel` read and act on the store and any replica answers for any task,
//! across restarts. A task belongs to the principal of its execution; another principal's id is
//! answered as unknown, like `GET /v1/executions/{id}`.
//!
//! Mapping of a record to a task:
//! - running → `working`;
//! - interrupted (its owner died; §12) → `failed`, with the uncertain text and the execution id
//!   in the error: the effect may have happened, and it is never shown `completed` until a
//!   decision (§12) records an outcome;
//! - recorded `cancelled` → `cancelled`;
//! - any other recorded outcome → `completed` with the `tools/call` result a retry would get
//!   (`isError: true` for `failed` and `timed_out`, as the extension asks for tool errors);
//! - released (§12) → `failed`, saying the identity was freed by a decision.
//!
//! `ttlMs` is the record's remaining retention (`null` while the execution has no outcome, and
//! for records kept forever).

use crate::results;
use crate::texts::{entry, Facts, KeyText, Situation};
use carmy::engine::{Engine, Refusal};
use carmy::store::{ExecutionLookup, InFlightState, RecordState};
use carmy::{ExecutionId, ExecutionStatus};
use rmcp::model::{
    CreateTaskResult, DetailedTask, ErrorCode, ErrorData, GetTaskResult, JsonObject, Task,
    TaskPayload, TaskStatus,
};
use serde_json::{json, Value};
use std::time::Duration;

/// The JSON-RPC error code of a `failed` task whose execution is uncertain or released (an
/// implementation-defined server error, as JSON-RPC reserves -32000 to -32099 for them).
pub const TASK_UNCERTAIN_CODE: i32 = -32001;

/// The poll interval suggested to clients of a `working` task, in milliseconds.
pub const POLL_INTERVAL_MS: u64 = 500;

/// UTC, RFC 3339 with milliseconds, as every timestamp Carmy writes.
fn timestamp(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The seed task of a `tools/call` answered with a task: `working`, id = `execution_id`.
pub(crate) fn created(execution_id: &ExecutionId) -> CreateTaskResult {
    let now = timestamp(chrono::Utc::now());
    let task = Task::new(execution_id.as_str(), TaskStatus::Working, now.clone(), now)
        .with_poll_interval_ms(POLL_INTERVAL_MS)
        .with_status_message(format!(
            "running as execution {execution_id}; poll tasks/get with this taskId on any Carmy replica"
        ));
    CreateTaskResult::new(task)
}

/// The execution a task id names, or an invalid-params error for an id no store holds.
fn execution_id(task_id: &str) -> Result<ExecutionId, ErrorData> {
    ExecutionId::parse(task_id).ok_or_else(|| unknown(task_id))
}

/// The error for a task that does not exist or is another principal's (the same answer, so a
/// principal cannot learn of another's tasks).
fn unknown(task_id: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!("no task {task_id:?} for this API key: task ids are execution ids, visible only to the principal that made the call. A task also ends this way when its call did not run after all (the tool said nothing happened: repeat the call with the same request id to run it) or when its record expired"),
        None,
    )
}

/// A store failure or refusal while reading a task, as a JSON-RPC error.
fn store_error(task_id: &str, refusal: Refusal) -> ErrorData {
    match refusal {
        Refusal::NotFound => unknown(task_id),
        other => {
            tracing::warn!(%other, task_id, "a task could not be read");
            ErrorData::new(
                ErrorCode::INTERNAL_ERROR,
                format!(
                    "the task's record could not be read ({other}); poll tasks/get again later"
                ),
                None,
            )
        }
    }
}

/// Answers `tasks/get` for `principal` from the store.
///
/// # Errors
/// Invalid params for an unknown task (or another principal's); internal error when the store
/// could not be read.
pub(crate) async fn get(
    engine: &Engine,
    principal: &str,
    task_id: &str,
    read_tools: impl FnOnce() -> Vec<String>,
) -> Result<GetTaskResult, ErrorData> {
    let id = execution_id(task_id)?;
    let found = engine
        .find(principal, &id)
        .await
        .map_err(|refusal| store_error(task_id, refusal))?;
    Ok(GetTaskResult::new(detailed(engine, &found, read_tools)))
}

/// The task state of a found execution (module docs).
fn detailed(
    engine: &Engine,
    found: &ExecutionLookup,
    read_tools: impl FnOnce() -> Vec<String>,
) -> DetailedTask {
    let record = &found.record;
    let id = record.execution_id.as_str();
    let now = timestamp(chrono::Utc::now());
    let base =
        |created: String, updated: String| Task::new(id, TaskStatus::Working, created, updated);
    if let Some(resolution) = &found.released {
        let error = json!({
            "code": TASK_UNCERTAIN_CODE,
            "message": format!("execution {id} was released by a decision ({}): its identity was freed and its outcome was not recorded; check the target system before calling the tool again", resolution.note),
            "data": {"code": "EXECUTION_RELEASED", "execution_id": id, "effect_may_have_happened": true},
        });
        return DetailedTask::new(
            base(now.clone(), now),
            TaskPayload::Failed {
                error: object(error),
            },
        );
    }
    match &record.state {
        RecordState::InFlight(InFlightState::Running) => DetailedTask::new(
            base(now.clone(), now)
                .with_poll_interval_ms(POLL_INTERVAL_MS)
                .with_status_message(format!("running as execution {id}")),
            TaskPayload::Working,
        ),
        RecordState::InFlight(InFlightState::Interrupted) => {
            let tools = read_tools();
            let key = key_argument(engine, &record.tool);
            let text = entry(Situation::Interrupted).render(&Facts {
                execution_id: Some(id),
                read_tools: &tools,
                key_argument: key.as_deref().map(KeyText::held),
                ..Facts::default()
            });
            let error = json!({
                "code": TASK_UNCERTAIN_CODE,
                "message": text,
                "data": {
                    "code": "EXECUTION_UNCERTAIN",
                    "state": "interrupted",
                    "execution_id": id,
                    "effect_may_have_happened": true,
                },
            });
            DetailedTask::new(
                base(now.clone(), now),
                TaskPayload::Failed {
                    error: object(error),
                },
            )
        }
        RecordState::Finished(result) => {
            let created = timestamp(result.started_at);
            let updated = timestamp(result.finished_at);
            let expires_at = engine.expires_at(result);
            let mut task = base(created, updated);
            if let Some(at) = expires_at {
                let left = (at - chrono::Utc::now()).to_std().unwrap_or(Duration::ZERO);
                task = task.with_ttl_ms(u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
            }
            if result.status == ExecutionStatus::Cancelled {
                return DetailedTask::new(
                    // A recorded cancel stopped a running tool: its effect is unknown (§4).
                    task.with_status_message(format!("execution {id} was cancelled while its tool ran: its effect may or may not have happened; check with a read-only tool before doing it again")),
                    TaskPayload::Cancelled,
                );
            }
            let key = key_argument(engine, &record.tool);
            let call = results::from_result(
                result,
                true,
                expires_at,
                read_tools,
                key.as_deref().map(KeyText::held),
            );
            let value = serde_json::to_value(&call).unwrap_or(Value::Null);
            DetailedTask::new(
                task,
                TaskPayload::Completed {
                    result: object(value),
                },
            )
        }
    }
}

/// The request id argument of the tool named `tool`, named in texts.
fn key_argument(engine: &Engine, tool: &str) -> Option<String> {
    let tools = engine.tools();
    let tool = tools.iter().find(|candidate| candidate.name() == tool)?;
    engine
        .key_argument(tool.as_ref())
        .ok()
        .flatten()
        .map(|key| key.name)
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(members) => members,
        _ => JsonObject::new(),
    }
}

/// Answers `tasks/cancel` for `principal`: Carmy's cancel of the execution
/// ([`Engine::cancel`]). The acknowledgement is sent once the cancel was delivered; the
/// recorded outcome is read with `tasks/get`.
///
/// # Errors
/// Invalid params for an unknown task, a task already finished (its outcome is recorded and
/// unchanged), and an interrupted one (nothing can stop it; its effect is uncertain); internal
/// error when the store could not be reached.
pub(crate) async fn cancel(
    engine: &Engine,
    principal: &str,
    task_id: &str,
) -> Result<(), ErrorData> {
    let id = execution_id(task_id)?;
    match engine.cancel(principal, &id).await {
        Ok(_) => Ok(()),
        Err(Refusal::Finished { .. }) => Err(ErrorData::invalid_params(
            format!("task {task_id} already finished: its outcome is recorded and was not changed; read it with tasks/get"),
            None,
        )),
        Err(Refusal::Uncertain { .. }) => Err(ErrorData::invalid_params(
            format!("task {task_id} cannot be cancelled: the process running it died and its effect is uncertain (execution {task_id}); an operator decides it (docs/semantics.md §12)"),
            None,
        )),
        Err(refusal) => Err(store_error(task_id, refusal)),
    }
}
