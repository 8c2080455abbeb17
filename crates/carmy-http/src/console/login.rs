//! The console's login and logout: an operator key opens a server-side session; the login
//! form's token is stateless (`session`), so showing the form keeps nothing on the server.

use super::session::{self, LoginRefusal};
use super::{forbidden, form_fields, page, pages, set_cookie, too_large, CsrfForm, Operator};
use crate::routes::AppState;
use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, Extensions, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;

/// `GET /console/login`: the form. Its CSRF token is stateless (`session`): showing it keeps
/// nothing on the server.
pub(super) async fn login_form(State(state): State<AppState>, headers: HeaderMap) -> Response {
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
pub(super) struct LoginForm {
    key: String,
    csrf: String,
}

/// `POST /console/login`: an operator key opens a session; an agent's API key, an unknown key
/// or a login form's token that does not verify is refused; past the login limits
/// ([`super::throttle`]) every post is refused (429) before its key is checked.
pub(super) async fn login(
    State(state): State<AppState>,
    extensions: Extensions,
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
    let peer = extensions
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map(|ConnectInfo(peer)| peer.ip());
    let client = state.console_logins.client(peer, &headers);
    if let Err(wait) = state.console_logins.attempt(client, &form.key) {
        tracing::warn!(client = ?client, "console login refused: over the login limits");
        let problem = format!(
            "Too many login attempts from your address, or with keys that begin like this one. Nothing was checked; wait {} seconds and log in again (the limits are in docs/operations.md, \"The operator console\").",
            wait.as_secs()
        );
        let mut response = login_page(
            &state,
            &headers,
            StatusCode::TOO_MANY_REQUESTS,
            Some(&problem),
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(wait.as_secs()));
        return response;
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

/// `POST /console/logout`.
pub(super) async fn logout(
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
