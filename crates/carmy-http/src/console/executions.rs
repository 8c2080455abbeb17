//! The console's reading pages: executions by state across principals, with filters, and one
//! execution's page (its record as the API shows it, the audit trail, the probe's evidence and
//! the decision forms).

use super::{page, pages, Operator, SHOWN};
use crate::error::ApiError;
use crate::routes::AppState;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use carmy::decision::{ExecutionQuery, ListOrder};
use carmy::outcome::ExecutionId;
use carmy::store::InFlightState;
use pages::ListFilter;
use serde::Deserialize;

/// A page for a refusal of the engine's (its code and detail, as the API's problem says).
pub(super) fn refusal_text(error: &ApiError) -> String {
    format!("{}: {error}", error.code())
}

pub(super) fn store_problem(operator: &Operator, error: &ApiError) -> Response {
    page(
        error.status(),
        pages::message(
            "Cannot read the executions",
            Some(&operator.who()),
            &refusal_text(error),
        ),
    )
}

/// `GET /console/executions`: executions by state across principals, with filters.
pub(super) async fn list(
    State(state): State<AppState>,
    operator: Operator,
    query: Result<Query<ListFilter>, QueryRejection>,
) -> Response {
    let Ok(Query(filter)) = query else {
        return page(
            StatusCode::BAD_REQUEST,
            pages::message(
                "Bad filter",
                Some(&operator.who()),
                "The filters could not be read.",
            ),
        );
    };
    let (in_flight, failures) = match filter.state() {
        "interrupted" => (Some(InFlightState::Interrupted), false),
        "running" => (Some(InFlightState::Running), false),
        "failures" => (None, true),
        "all" => (None, false),
        _ => {
            return page(
                StatusCode::BAD_REQUEST,
                pages::message(
                    "Bad filter",
                    Some(&operator.who()),
                    "state must be interrupted, running, failures or all.",
                ),
            )
        }
    };
    let given = |value: &Option<String>| value.clone().filter(|value| !value.is_empty());
    let arguments = match given(&filter.arguments)
        .as_deref()
        .map(carmy::arguments::search_value)
        .transpose()
    {
        Ok(arguments) => arguments,
        Err(problem) => {
            return page(
                StatusCode::BAD_REQUEST,
                pages::message("Bad filter", Some(&operator.who()), &problem),
            )
        }
    };
    // Every filter is the store's (ExecutionQuery), newest first: what is shown is the newest
    // matching records, however many the store holds. One more than shown tells whether more
    // match.
    let query = ExecutionQuery {
        principal: given(&filter.principal),
        in_flight,
        session_id: given(&filter.session_id),
        request_id: given(&filter.request_id),
        tool: given(&filter.tool),
        arguments,
        failures_only: failures,
        order: ListOrder::NewestFirst,
        limit: SHOWN + 1,
    };
    let mut rows = match state.engine.list_matching(&operator.caller(), query).await {
        Ok(found) => found,
        Err(refusal) => return store_problem(&operator, &ApiError::from(refusal)),
    };
    let more = rows.len() > SHOWN;
    rows.truncate(SHOWN);
    let mut note = if failures {
        "Finished executions whose outcome is not completed (failed, timed out, cancelled), newest first.".to_owned()
    } else {
        "Newest first.".to_owned()
    };
    if more {
        note.push_str(&format!(
            " More executions match than the {SHOWN} shown; narrow the filters to see older ones."
        ));
    }
    page(
        StatusCode::OK,
        pages::listing(&operator.who(), &filter, &rows, &note),
    )
}

pub(super) fn execution_id(path: &str) -> Option<ExecutionId> {
    ExecutionId::parse(path)
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ShowQuery {
    done: Option<String>,
}

/// What a `done` word after a decision says (a fixed list: the query never reaches the page).
fn done_sentence(done: &str) -> Option<String> {
    Some(
        match done {
            "resolved" => "Resolved: the outcome is recorded and replays to the agent's retry; the audit row is below.",
            "released" => "Released: the identity is free; the agent's next attempt runs the tool.",
            "reconcile-resolved" => "Reconciled: the probe found the effect; the outcome is recorded.",
            "reconcile-released" => "Reconciled: the probe found no effect; the execution was released.",
            "reconcile-rerun" => "Reconciled: the probe found no effect; the next attempt takes the execution over.",
            "reconcile-too_early" => "Probed: the effect is absent so far, but the interrupted attempt may still land until its deadline; it stays interrupted and is probed again then.",
            "reconcile-absent" => "Probed: the effect is absent, not yet proven not executed; it stays interrupted.",
            "reconcile-inconclusive" => "Probed: inconclusive; it stays interrupted. The evidence is below.",
            "reconcile-decided_elsewhere" => "Someone decided it first; nothing changed.",
            _ => return None,
        }
        .to_owned(),
    )
}

/// `GET /console/executions/{id}`.
pub(super) async fn show(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<String>,
    query: Result<Query<ShowQuery>, QueryRejection>,
) -> Response {
    let notice = query
        .ok()
        .and_then(|Query(query)| query.done)
        .and_then(|done| done_sentence(&done))
        .map(|text| (true, text));
    execution_page(&state, &operator, &path, StatusCode::OK, notice).await
}

pub(super) async fn execution_page(
    state: &AppState,
    operator: &Operator,
    path: &str,
    status: StatusCode,
    notice: Option<(bool, String)>,
) -> Response {
    let Some(id) = execution_id(path) else {
        return not_found(operator);
    };
    let detail = match state.engine.operator_detail(&operator.caller(), &id).await {
        Ok(detail) => detail,
        Err(carmy::engine::Refusal::NotFound) => return not_found(operator),
        Err(refusal) => return store_problem(operator, &ApiError::from(refusal)),
    };
    let record_json = serde_json::from_str(&crate::recovery::record_body(
        &state.engine,
        &detail.view.lookup,
    ))
    .unwrap_or(serde_json::Value::Null);
    let tool = &detail.view.lookup.record.tool;
    let tools = state.engine.tools();
    let probed = tools
        .iter()
        .any(|candidate| candidate.name() == tool && candidate.probe().is_some());
    let held_by_client = tools
        .iter()
        .any(|candidate| candidate.name() == tool && candidate.held_by_client());
    let markup = pages::execution(
        &operator.who(),
        &pages::Detail {
            view: &detail.view,
            record_json,
            audit: &detail.audit,
            evidence: detail.evidence.as_ref(),
            probed,
            held_by_client,
            notice,
        },
    );
    page(status, markup)
}

pub(super) fn not_found(operator: &Operator) -> Response {
    page(
        StatusCode::NOT_FOUND,
        pages::message(
            "No such execution",
            Some(&operator.who()),
            "No execution of any principal has this id (it may have expired).",
        ),
    )
}
