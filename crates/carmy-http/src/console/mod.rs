//! The operator console at `/console` (docs/operations.md, "The operator console";
//! docs/semantics.md §12): executions by state across principals, one execution's page, and
//! the decisions as HTML forms. Server-rendered ([`pages`], `maud`), no JavaScript, no asset
//! from elsewhere.
//!
//! Only operator keys (`CARMY_OPERATOR_KEYS`) log in; the session ([`session`]) keeps the
//! operator's name on the server, the cookie only a random id. Every POST must carry the
//! session's CSRF token, the login post its form's stateless token (403 otherwise); a form over
//! the body limit is 413; every answer carries a strict Content-Security-Policy.
//! Decisions go through the same engine calls as `POST /v1/executions/{id}/resolve|release|
//! reconcile`, so the same checks, the same compare-and-set and the same audit row, recorded as
//! `operator:<name>`.

mod pages;
mod session;

use session::LoginRefusal;
pub(crate) use session::Sessions;

use crate::error::ApiError;
use crate::routes::AppState;
use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use carmy::auth::Caller;
use carmy::decision::{ExecutionQuery, ListOrder};
use carmy::engine::{Release, Resolve};
use carmy::outcome::{ExecutionError, ExecutionId, ExecutionStatus};
use carmy::store::InFlightState;
use maud::Markup;
use pages::{ListFilter, Who};
use serde::Deserialize;

/// The Content-Security-Policy of every console answer: nothing but this origin's stylesheet,
/// forms posting to this origin, no framing, no script at all.
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// How many executions one listing shows at most.
const SHOWN: usize = 200;

/// The console's routes (mounted beside the API by [`crate::routes::router`]).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::to("/console/executions") }),
        )
        .route(
            "/console/",
            get(|| async { Redirect::to("/console/executions") }),
        )
        .route("/console/style.css", get(style))
        .route("/console/login", get(login_form).post(login))
        .route("/console/logout", post(logout))
        .route("/console/executions", get(list))
        .route("/console/executions/{execution_id}", get(show))
        .route("/console/executions/{execution_id}/resolve", post(resolve))
        .route("/console/executions/{execution_id}/release", post(release))
        .route(
            "/console/executions/{execution_id}/reconcile",
            post(reconcile),
        )
        .layer(axum::middleware::map_response(security_headers))
}

/// Adds the console's security headers to every answer.
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
        ("cache-control", "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        pages::STYLE,
    )
        .into_response()
}

/// An HTML page with `status`.
fn page(status: StatusCode, markup: Markup) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        markup.into_string(),
    )
        .into_response()
}

fn set_cookie(mut response: Response, cookie: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

/// A logged-in operator: its session's id and contents. Without one, the request is sent to the
/// login form (303).
struct Operator {
    name: String,
    csrf: String,
}

impl Operator {
    fn caller(&self) -> Caller {
        Caller::operator(self.name.clone())
    }

    fn who(&self) -> Who<'_> {
        Who {
            operator: &self.name,
            csrf: &self.csrf,
        }
    }

    /// Whether a form's `csrf` is this session's token (constant time); a form without it is
    /// answered with [`forbidden`] (403).
    fn csrf_ok(&self, presented: &str) -> bool {
        let (mine, theirs) = (self.csrf.as_bytes(), presented.as_bytes());
        mine.len() == theirs.len() && bool::from(subtle::ConstantTimeEq::ct_eq(mine, theirs))
    }
}

fn forbidden(who: Option<&Who<'_>>) -> Response {
    page(
        StatusCode::FORBIDDEN,
        pages::message(
            "Refused",
            who,
            "This form did not carry this session's token (a forged or stale form). Nothing changed; open the page again and resubmit.",
        ),
    )
}

impl FromRequestParts<AppState> for Operator {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let session = session::cookie_id(&parts.headers).and_then(|id| state.console.get(&id));
        match session {
            Some(session) => Ok(Self {
                name: session.operator,
                csrf: session.csrf,
            }),
            None => Err(Redirect::to("/console/login").into_response()),
        }
    }
}

/// A form post's fields; `None` when its body was over the limit (answer [`too_large`]: nothing
/// read, nothing changed). A body that cannot be read otherwise gives the empty form, which no
/// token check accepts (403).
fn form_fields<T: Default>(form: Result<Form<T>, FormRejection>) -> Option<T> {
    match form {
        Ok(Form(form)) => Some(form),
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => None,
        Err(_) => Some(T::default()),
    }
}

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

/// The 413 page of a form over the body limit.
fn too_large(state: &AppState, who: Option<&Who<'_>>) -> Response {
    page(
        StatusCode::PAYLOAD_TOO_LARGE,
        pages::message(
            "Form too large",
            who,
            &format!(
                "This form was larger than the gateway accepts: {} bytes at most (CARMY_MAX_BODY_BYTES). Nothing changed; go back, shorten what you entered (the data or the note) and submit again.",
                state.max_body_bytes
            ),
        ),
    )
}

/// `GET /console/login`: the form. Its CSRF token is stateless (`session`): showing it keeps
/// nothing on the server.
async fn login_form(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let logged_in = session::cookie_id(&headers)
        .and_then(|id| state.console.get(&id))
        .is_some();
    if logged_in {
        return Redirect::to("/console/executions").into_response();
    }
    login_page(&state, &headers, StatusCode::OK, None)
}

/// The login form with a fresh token (bound to the browser's login cookie, set again).
fn login_page(
    state: &AppState,
    headers: &HeaderMap,
    status: StatusCode,
    problem: Option<&str>,
) -> Response {
    let (nonce, token) = state
        .console
        .login_form(session::login_nonce(headers).as_deref());
    set_cookie(
        page(status, pages::login(&token, problem)),
        &state.console.login_cookie(Some(&nonce)),
    )
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct LoginForm {
    key: String,
    csrf: String,
}

/// `POST /console/login`: an operator key opens a session; an agent's API key, an unknown key
/// or a login form's token that does not verify is refused.
async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    let Some(form) = form_fields(form) else {
        return too_large(&state, None);
    };
    let checked = state
        .console
        .check_login(session::login_nonce(&headers).as_deref(), &form.csrf);
    if let Err(refusal) = checked {
        let problem = match refusal {
            LoginRefusal::Forged => "This login post did not carry the login form's token with its cookie (a forged post, or a browser that refuses cookies). Nothing changed; log in with the form below.".to_owned(),
            LoginRefusal::OtherProcess => "This login form was shown by another gateway process (another replica behind the load balancer, or this one before a restart). Log in again with the form below; behind a load balancer, reach the console on one replica.".to_owned(),
            LoginRefusal::Expired => format!(
                "This login form expired (a form is valid for {} minutes). Log in again with the form below.",
                session::LOGIN_LIFETIME.as_secs() / 60
            ),
        };
        tracing::warn!(?refusal, "console login form refused");
        return login_page(&state, &headers, StatusCode::FORBIDDEN, Some(&problem));
    }
    let bearer = format!("Bearer {}", form.key.trim());
    // The one credential check of both fronts (carmy::auth::Credentials): only an operator
    // key opens the console.
    let caller = state
        .credentials
        .authenticate(std::iter::once(bearer.as_bytes()));
    let Some(name) = caller
        .as_ref()
        .ok()
        .and_then(|caller| caller.operator.clone())
    else {
        let problem = if caller.is_ok() && !state.credentials.is_anonymous() {
            "This is an agent's API key. The console takes operator keys (CARMY_OPERATOR_KEYS) only."
        } else {
            "Unknown key. The console takes operator keys (CARMY_OPERATOR_KEYS) only."
        };
        tracing::warn!("console login refused");
        return login_page(&state, &headers, StatusCode::UNAUTHORIZED, Some(problem));
    };
    tracing::info!(operator = %name, "console login");
    if let Some(previous) = session::cookie_id(&headers) {
        state.console.end(&previous);
    }
    let (id, _) = state.console.start(name);
    let response = set_cookie(
        Redirect::to("/console/executions").into_response(),
        &state.console.cookie(Some(&id)),
    );
    set_cookie(response, &state.console.login_cookie(None))
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct CsrfForm {
    csrf: String,
}

/// `POST /console/logout`.
async fn logout(
    State(state): State<AppState>,
    operator: Operator,
    headers: HeaderMap,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Response {
    let Some(CsrfForm { csrf: presented }) = form_fields(form) else {
        return too_large(&state, Some(&operator.who()));
    };
    if !operator.csrf_ok(&presented) {
        return forbidden(Some(&operator.who()));
    }
    if let Some(id) = session::cookie_id(&headers) {
        state.console.end(&id);
    }
    set_cookie(
        Redirect::to("/console/login").into_response(),
        &state.console.cookie(None),
    )
}

/// A page for a refusal of the engine's (its code and detail, as the API's problem says).
fn refusal_text(error: &ApiError) -> String {
    format!("{}: {error}", error.code())
}

fn store_problem(operator: &Operator, error: &ApiError) -> Response {
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
async fn list(
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
    // Every filter is the store's (ExecutionQuery), newest first: what is shown is the newest
    // matching records, however many the store holds. One more than shown tells whether more
    // match.
    let query = ExecutionQuery {
        principal: given(&filter.principal),
        in_flight,
        session_id: given(&filter.session_id),
        request_id: given(&filter.request_id),
        tool: given(&filter.tool),
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

fn execution_id(path: &str) -> Option<ExecutionId> {
    ExecutionId::parse(path)
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ShowQuery {
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
async fn show(
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

async fn execution_page(
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
    let probed = state
        .engine
        .tools()
        .iter()
        .any(|candidate| candidate.name() == tool && candidate.probe().is_some());
    let markup = pages::execution(
        &operator.who(),
        &pages::Detail {
            view: &detail.view,
            record_json,
            audit: &detail.audit,
            evidence: detail.evidence.as_ref(),
            probed,
            notice,
        },
    );
    page(status, markup)
}

fn not_found(operator: &Operator) -> Response {
    page(
        StatusCode::NOT_FOUND,
        pages::message(
            "No such execution",
            Some(&operator.who()),
            "No execution of any principal has this id (it may have expired).",
        ),
    )
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
struct ResolveForm {
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
async fn resolve(
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
struct ReleaseForm {
    csrf: String,
    note: String,
    force: Option<String>,
}

/// `POST /console/executions/{id}/release`: [`carmy::engine::Engine::release`], as
/// `POST /v1/executions/{id}/release`.
async fn release(
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
async fn reconcile(
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
