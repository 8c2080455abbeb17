//! The operator console at `/console` (docs/operations.md, "The operator console";
//! docs/semantics.md §12): executions by state across principals, one execution's page, and
//! the decisions as HTML forms. Server-rendered ([`pages`], `maud`), no JavaScript, no asset
//! from elsewhere.
//!
//! Only operator keys (`CARMY_OPERATOR_KEYS`) log in, at a limited pace per client address and
//! per key prefix ([`throttle`]); the session ([`session`]) keeps the
//! operator's name on the server, the cookie only a random id. Every POST must carry the
//! session's CSRF token, the login post its form's stateless token (403 otherwise); a form over
//! the body limit is 413; every answer carries a strict Content-Security-Policy.
//! Decisions go through the same engine calls as `POST /v1/executions/{id}/resolve|release|
//! reconcile`, so the same checks, the same compare-and-set and the same audit row, recorded as
//! `operator:<name>`.
//!
//! Here: the routes, the security headers, the logged-in [`Operator`] and the checks every form
//! post passes; the login and logout in `login`, the listing and one execution's page in
//! `executions`, the decisions' forms in `decisions`.

mod decisions;
mod executions;
mod login;
mod pages;
mod session;
mod throttle;

pub(crate) use session::Sessions;
pub(crate) use throttle::LoginLimits;

use crate::routes::AppState;
use axum::extract::rejection::FormRejection;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use carmy::auth::Caller;
use maud::Markup;
use pages::Who;
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
        .route("/console/login", get(login::login_form).post(login::login))
        .route("/console/logout", post(login::logout))
        .route("/console/executions", get(executions::list))
        .route("/console/executions/{execution_id}", get(executions::show))
        .route(
            "/console/executions/{execution_id}/resolve",
            post(decisions::resolve),
        )
        .route(
            "/console/executions/{execution_id}/release",
            post(decisions::release),
        )
        .route(
            "/console/executions/{execution_id}/reconcile",
            post(decisions::reconcile),
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

#[derive(Deserialize, Default)]
#[serde(default)]
struct CsrfForm {
    csrf: String,
}
