//! The JSON bodies the HTTP API answers with (docs/semantics.md §7), as the handlers serialise
//! them; their `ToSchema` derives are what `GET /openapi.json` describes (docs/semantics.md §13).

use carmy::outcome::ExecutionId;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// The body of `GET /v1/executions/{id}` for an execution without an outcome: the members of a
/// record, in the same order, with `status` `running`, `interrupted` or `released` (and, for a
/// released one, `resolution: {by, at, note}`; docs/semantics.md §12.1).
#[derive(Serialize, ToSchema)]
#[schema(as = InFlightExecution)]
pub(super) struct InFlightBody<'a> {
    #[schema(value_type = String)]
    pub(super) execution_id: &'a ExecutionId,
    #[schema(schema_with = crate::openapi::in_flight_state_schema)]
    pub(super) status: &'static str,
    #[schema(schema_with = crate::openapi::null_schema)]
    pub(super) data: (),
    #[schema(schema_with = crate::openapi::null_schema)]
    pub(super) error: (),
    pub(super) tool: &'a str,
    pub(super) request_id: &'a str,
    pub(super) session_id: &'a str,
    /// Who released it, when and why (released executions only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) resolution: Option<&'a carmy::decision::Resolution>,
    /// `null` while running or interrupted (such an execution is never pruned); for a released
    /// one, when its history is pruned: the release time plus the retention (`null` when kept
    /// forever). UTC, RFC 3339 with milliseconds (docs/semantics.md §12.9).
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(super) expires_at: Option<String>,
    /// What the call asked: its arguments as kept with the execution (canonical JSON, values
    /// the tool's `redact_arguments` names shown as `"[redacted]"`, docs/semantics.md §8.5);
    /// absent when none were kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub(super) arguments: Option<&'a serde_json::value::RawValue>,
}

/// A finished execution's record as the API shows it: the stored record followed by
/// `expires_at` (docs/semantics.md §12.9). The body is made by
/// [`crate::outcome::ExecutionResult::to_body_json`]; this type only describes it.
// (`crate::outcome` above is the core's `carmy::outcome`: the text is served in
// /openapi.json as it was written when this lived in the core, so it is kept.)
#[derive(Serialize, ToSchema)]
#[allow(dead_code)] // describes the body only
pub(crate) struct RecordBody {
    #[serde(flatten)]
    pub(crate) record: carmy::outcome::ExecutionResult,
    /// When the record stops holding its identity: its `finished_at` plus the retention
    /// (`CARMY_RETENTION`); from then on the same request_id runs as new and the record is
    /// pruned. `null` when records are kept forever. UTC, RFC 3339 with milliseconds.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) expires_at: Option<String>,
    /// What the call asked: its arguments as kept with the execution (canonical JSON, values
    /// the tool's `redact_arguments` names shown as `"[redacted]"`, docs/semantics.md §8.5);
    /// absent when none were kept. Only in answers that read a record back, never in the
    /// answer to a call.
    #[schema(value_type = Option<Object>)]
    pub(crate) arguments: Option<Value>,
}

/// What `GET /v1/executions/{id}` answers: a record, or an execution without an outcome yet.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // describes the body only
pub(super) enum ExecutionState {
    /// Finished: the record (no `replayed`) with `expires_at`.
    Finished(RecordBody),
    /// Running, interrupted or released.
    InFlight(InFlightBody<'static>),
}

/// The body of `GET /v1/executions` without `request_id`: the caller's records (an operator's:
/// every principal's), newest first (docs/semantics.md §12.4).
#[derive(Serialize, ToSchema)]
#[allow(dead_code)] // describes the body only
pub(super) struct ExecutionList {
    pub(super) executions: Vec<ExecutionState>,
}

/// What `GET /v1/executions` answers: one record (with `request_id`) or a list.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code, clippy::large_enum_variant)] // describes the body only
pub(super) enum ListAnswer {
    /// The record of the identity named by `request_id` and `session_id`.
    One(ExecutionState),
    /// The listing.
    Many(ExecutionList),
}

/// The 404 of routes with an execution id.
pub(super) const NO_SUCH_EXECUTION: &str = "`NOT_FOUND`: no execution with that id for this principal (a call without `request_id` is not recorded, so its execution cannot be read or cancelled)";

/// The path parameter of execution routes.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)] // describes the path only
pub(super) struct ExecutionPath {
    /// An execution id (`exec_` and 32 hex digits); anything that is not 1 to 64 ASCII letters,
    /// digits, `_` or `-` is 404.
    #[param(pattern = "^[A-Za-z0-9_-]{1,64}$")]
    pub(super) execution_id: String,
}

/// The 202 body of a cancel whose outcome was not recorded in time.
#[derive(Serialize, ToSchema)]
pub(super) struct CancellingBody<'a> {
    #[schema(value_type = String)]
    pub(super) execution_id: &'a ExecutionId,
    /// Always `cancelling`.
    #[schema(example = "cancelling", pattern = "^cancelling$")]
    pub(super) status: &'static str,
}

/// The body of `GET /v1/tools`.
#[derive(Serialize, ToSchema)]
pub(super) struct ToolList<'a> {
    pub(super) tools: Vec<ToolEntry<'a>>,
}

/// One tool of `GET /v1/tools`.
#[derive(Serialize, ToSchema)]
pub(super) struct ToolEntry<'a> {
    pub(super) name: &'a str,
    pub(super) description: &'a str,
    /// The JSON Schema the call's `arguments` must satisfy.
    pub(super) input_schema: &'a Value,
    /// Behaviour hints (MCP style), when the tool declares any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) annotations: Option<&'a carmy::tool::ToolAnnotations>,
    /// The request id argument the tool offers a model (docs/semantics.md §11), `null` for
    /// none: a framework that shows the tool to a model over this API adds this string property
    /// to `input_schema` with its `description` (unless `adopted`: then it is already there),
    /// takes it out of the arguments before the call unless `adopted`, and sends it as the
    /// call's `request_id`.
    pub(super) request_id_argument: Option<carmy::key_argument::KeyArgument>,
    /// `true` for a tool its caller runs itself (docs/semantics.md §16): reserve it with
    /// `POST /v1/held`, not `POST /v1/executions`. Absent otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(super) held_by_client: bool,
}

/// The body of `/healthz` and `/readyz`.
#[derive(Serialize, ToSchema)]
pub(super) struct ProbeBody {
    /// `ok` (`/healthz`) or `ready` (`/readyz`).
    #[schema(pattern = "^(ok|ready)$")]
    pub(super) status: &'static str,
    /// `/readyz` only, left out when empty: what the store warns about while ready, one
    /// sentence each (e.g. the database's commits do not wait for a synchronous standby,
    /// docs/semantics.md §14).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) warnings: Vec<String>,
}

/// The optional request headers of `POST /v1/executions`.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // describes the headers only
pub(super) struct CallHeaders {
    /// `wait=N` (RFC 7240): wait up to N seconds for a running duplicate's outcome instead of an
    /// immediate `EXECUTION_UNCERTAIN` (docs/semantics.md §12.6). Preferences the server does not
    /// support are ignored.
    #[param(rename = "Prefer", required = false)]
    pub(super) prefer: String,
    /// W3C Trace Context: joins the execution's span to the caller's trace and is forwarded to
    /// upstream tools. Not part of the identity; a malformed value is ignored.
    #[param(required = false)]
    pub(super) traceparent: String,
}

/// The `rerun_of` member of a call's answer (docs/semantics.md §12.1, "A rerun says so"): the
/// execution this one replaced and how it ended.
pub(crate) fn rerun_of(replaced: &carmy::store::Replaced) -> Value {
    match &replaced.ended {
        carmy::store::ReplacedEnd::Released { by, note } => serde_json::json!({
            "execution_id": replaced.execution_id.as_str(),
            "ended": replaced.ended.as_str(),
            "by": by,
            "note": note,
        }),
        carmy::store::ReplacedEnd::TakenOver { attempt } => serde_json::json!({
            "execution_id": replaced.execution_id.as_str(),
            "ended": replaced.ended.as_str(),
            "attempt": attempt,
        }),
    }
}

/// `body` (a JSON object's text) with `"rerun_of": …` added when the answer replaced an
/// execution.
pub(crate) fn with_rerun_of(body: String, replaced: Option<&carmy::store::Replaced>) -> String {
    match (replaced, body.strip_suffix('}')) {
        (Some(replaced), Some(open)) => format!("{open},\"rerun_of\":{}}}", rerun_of(replaced)),
        _ => body,
    }
}
