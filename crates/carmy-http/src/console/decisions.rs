//! The console's decisions (docs/semantics.md §12.1, §12.10): resolve, release and reconcile
//! as HTML forms, through the same engine calls as the API's recovery routes; after a decision
//! the execution's page says what happened, after a refusal it shows the API's refusal.

use super::executions::{execution_id, execution_page, not_found, refusal_text};
use super::{forbidden, form_fields, pages, too_large, CsrfForm, Operator};
use crate::error::ApiError;
use crate::routes::AppState;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use carmy::engine::{Release, Resolve};
use carmy::outcome::{ExecutionError, ExecutionId, ExecutionStatus};
use serde::Deserialize;

/// The checks every decision form passes first, in this order: its size (413), its CSRF token
/// (`csrf` reads it from the form; 403) and the execution id in `path` (404). Returns the form
/// and the execution, or the page that refuses it; nothing is decided on a refusal.
#[allow(clippy::result_large_err)] // the refusal is the response itself, made once per post
fn decision_form<T: Default>(
    state: &AppState,
    operator: &Operator,
    path: &str,
    form: Result<Form<T>, FormRejection>,
    csrf: impl FnOnce(&T) -> &str,
) -> Result<(T, ExecutionId), Response> {
    let Some(form) = form_fields(form) else {
        return Err(too_large(state, Some(&operator.who())));
    };
    if !operator.csrf_ok(csrf(&form)) {
        return Err(forbidden(Some(&operator.who())));
    }
    let Some(id) = execution_id(path) else {
        return Err(not_found(operator));
    };
    Ok((form, id))
}

fn redirect_done(path: &str, done: &str) -> Response {
    Redirect::to(&format!(
        "/console/executions/{}?done={done}",
        pages::percent(path)
    ))
    .into_response()
}

/// After a refused decision: the execution's page with the refusal (the API's status).
async fn refused(state: &AppState, operator: &Operator, path: &str, error: ApiError) -> Response {
    let status = error.status();
    execution_page(
        state,
        operator,
        path,
        status,
        Some((false, refusal_text(&error))),
    )
    .await
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ResolveForm {
    csrf: String,
    status: String,
    data: String,
    error_code: String,
    error_message: String,
    note: String,
    force: Option<String>,
}

/// `POST /console/executions/{id}/resolve`: [`carmy::engine::Engine::resolve`], as
/// `POST /v1/executions/{id}/resolve`.
pub(super) async fn resolve(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<String>,
    form: Result<Form<ResolveForm>, FormRejection>,
) -> Response {
    let (form, id) = match decision_form(&state, &operator, &path, form, |form| &form.csrf) {
        Ok(checked) => checked,
        Err(refused) => return refused,
    };
    let decided = async {
        let status = ExecutionStatus::parse(&form.status).ok_or_else(|| {
            ApiError::InvalidRequest(
                "status must be one of completed, failed, timed_out, cancelled".into(),
            )
        })?;
        let data = if form.data.trim().is_empty() {
            serde_json::Value::Null
        } else {
            carmy::strict_json::parse(form.data.trim())
                .map_err(|error| ApiError::InvalidRequest(format!("data is not JSON: {error}")))?
        };
        let error = (!form.error_code.trim().is_empty()).then(|| ExecutionError {
            code: form.error_code.trim().to_owned(),
            message: form.error_message.clone(),
            effect: None,
            details: None,
        });
        let resolve = Resolve {
            status,
            data,
            error,
            note: form.note.clone(),
            force: form.force.is_some(),
        };
        state
            .engine
            .resolve(&operator.caller(), &id, resolve)
            .await
            .map_err(ApiError::from)
    }
    .await;
    match decided {
        Ok(_) => redirect_done(&path, "resolved"),
        Err(error) => refused(&state, &operator, &path, error).await,
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(super) struct ReleaseForm {
    csrf: String,
    note: String,
    force: Option<String>,
}

/// `POST /console/executions/{id}/release`: [`carmy::engine::Engine::release`], as
/// `POST /v1/executions/{id}/release`.
pub(super) async fn release(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<String>,
    form: Result<Form<ReleaseForm>, FormRejection>,
) -> Response {
    let (form, id) = match decision_form(&state, &operator, &path, form, |form| &form.csrf) {
        Ok(checked) => checked,
        Err(refused) => return refused,
    };
    let release = Release {
        note: form.note,
        force: form.force.is_some(),
    };
    match state.engine.release(&operator.caller(), &id, release).await {
        Ok(_) => redirect_done(&path, "released"),
        Err(refusal) => refused(&state, &operator, &path, ApiError::from(refusal)).await,
    }
}

/// `POST /console/executions/{id}/reconcile`: [`carmy::engine::Engine::reconcile_now`], as
/// `POST /v1/executions/{id}/reconcile`.
pub(super) async fn reconcile(
    State(state): State<AppState>,
    operator: Operator,
    Path(path): Path<String>,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Response {
    let id = match decision_form(&state, &operator, &path, form, |form| &form.csrf) {
        Ok((_, id)) => id,
        Err(refused) => return refused,
    };
    match state.engine.reconcile_now(&operator.caller(), &id).await {
        Ok((reconciled, evidence)) => {
            redirect_done(&path, &format!("reconcile-{}", reconciled.label(&evidence)))
        }
        Err(refusal) => refused(&state, &operator, &path, ApiError::from(refusal)).await,
    }
}
