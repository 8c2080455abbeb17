//! `POST /v1/executions/{execution_id}/reconcile` (docs/semantics.md §12.10): runs
//! the tool's probe for an interrupted execution now and answers what it found and decided.

use crate::bodies::{ExecutionPath, NO_SUCH_EXECUTION};
use crate::error::ApiError;
use crate::extractors::AuthenticatedCaller;
use crate::openapi;
use crate::routes::{execution_id_from_path, json_response, AppState};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use carmy::engine::reconcile::Reconciled;
use serde::Serialize;
use serde_json::Value;

/// What a probe found and what came of it.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct ReconcileAnswer {
    /// The execution probed.
    execution_id: String,
    /// `resolved` (found: the record below), `released` (absent, `not_executed`), `rerun` (absent,
    /// `not_executed`, a `rerun` tool: the next attempt takes it over), `too_early` (absent,
    /// `not_executed`, but asked before the interrupted attempt's deadline, when it may still
    /// land: it stays interrupted and is probed again at `evidence.conclusive_at`), `absent` or
    /// `inconclusive` (it stays interrupted), `decided_elsewhere` (someone decided first).
    result: String,
    /// The probe's answer as kept on the record: `answer` (found, absent, error), `request`,
    /// `status`, `body`, `detail`, `at`, `attempts`, `conclusive_at` (`too_early`); never a
    /// header value.
    #[schema(value_type = Object)]
    evidence: Value,
    /// The record as it now replays, for `resolved`; else `null`.
    #[schema(value_type = Object)]
    record: Value,
}

/// Runs the execution's probe now and decides what it found, as the reconciler would
/// (docs/semantics.md §12.10): for operators (any principal's execution) and the
/// owning principal.
#[utoipa::path(
    post,
    path = "/v1/executions/{execution_id}/reconcile",
    tag = "recovery",
    security(("bearer" = [])),
    params(ExecutionPath),
    responses(
        (status = 200, description = "What the probe found and what came of it", body = ReconcileAnswer),
        (status = 400, description = "`INVALID_REQUEST`: not an interrupted execution of a tool with a `[tools.reconcile]` probe (it has an outcome, a live owner, no probe, or is being probed right now)", body = openapi::Problem, content_type = "application/problem+json"),
        (status = 401, response = openapi::Unauthorized),
        (status = 404, description = NO_SUCH_EXECUTION, body = openapi::Problem, content_type = "application/problem+json"),
        (status = 503, response = openapi::Unavailable),
    )
)]
pub(super) async fn reconcile_execution(
    State(state): State<AppState>,
    AuthenticatedCaller(caller): AuthenticatedCaller,
    execution_id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let execution_id = execution_id_from_path(execution_id)?;
    let (reconciled, evidence) = state.engine.reconcile_now(&caller, &execution_id).await?;
    let record = match &reconciled {
        Reconciled::Resolved(result) => {
            serde_json::from_str(&result.to_body_json(state.engine.expires_at(result)))
                .unwrap_or(Value::Null)
        }
        _ => Value::Null,
    };
    let answer = ReconcileAnswer {
        execution_id: execution_id.as_str().to_owned(),
        result: reconciled.label(&evidence).to_owned(),
        evidence,
        record,
    };
    let body = serde_json::to_string(&answer).unwrap_or_default();
    Ok(json_response(StatusCode::OK, body))
}
