//! The axum extractors of an HTTP request's caller ([`Principal`], [`AuthenticatedCaller`]),
//! from its `Authorization` header, by the one check every front uses ([`Credentials`],
//! docs/semantics.md §6): API keys, operator keys and, when configured, OAuth access tokens. A
//! server without API keys or tokens refuses any `Authorization` header (401,
//! [`ApiError::NoApiKeys`]).

use crate::error::ApiError;
use crate::routes::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderValue};
use carmy::auth::{AuthError, Caller, Credentials};

/// The authenticated principal of a request; a handler that takes it answers 401 without one,
/// and for an operator key.
pub(crate) struct Principal(pub(crate) String);

/// The authenticated caller of a request, with operator rights for an operator key or a token
/// with the operator scope (docs/semantics.md §6, §12.1); a handler that takes it answers 401
/// without one.
pub(crate) struct AuthenticatedCaller(pub(crate) Caller);

/// The values of the request's `Authorization` headers.
fn authorization(parts: &Parts) -> impl Iterator<Item = &[u8]> {
    parts
        .headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .map(HeaderValue::as_bytes)
}

/// A refusal as the HTTP API answers it: with tokens configured, with the challenge that names
/// the protected resource metadata (RFC 9728 §5.1).
fn refusal(credentials: &Credentials, refused: AuthError) -> ApiError {
    if credentials.accepts_tokens() {
        ApiError::Refused {
            challenge: credentials.challenge(&refused),
            refused,
        }
    } else {
        ApiError::from(refused)
    }
}

/// The principal of a request's `Authorization` headers, as [`Principal`] extracts it: for a
/// handler that took an [`AuthenticatedCaller`] with operator rights and must tell an operator
/// key (no principal) from a token with the operator scope (its own principal too,
/// docs/semantics.md §6.1).
pub(crate) async fn acting_principal(
    credentials: &Credentials,
    headers: &axum::http::HeaderMap,
) -> Result<String, ApiError> {
    let values = headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .map(HeaderValue::as_bytes);
    credentials
        .acting_principal(values)
        .await
        .map_err(|refused| refusal(credentials, refused))
}

impl FromRequestParts<AppState> for AuthenticatedCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let credentials: &Credentials = &state.credentials;
        match credentials.caller(authorization(parts)).await {
            Ok(caller) => Ok(Self(caller)),
            Err(refused) => Err(refusal(credentials, refused)),
        }
    }
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    /// An operator key is refused ([`ApiError::OperatorKey`]): operators are told apart from
    /// principals by the kind of their key, never by name (docs/semantics.md §6). A token acts
    /// as its principal, operator scope or not.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let credentials: &Credentials = &state.credentials;
        match credentials.acting_principal(authorization(parts)).await {
            Ok(principal) => Ok(Self(principal)),
            Err(refused) => Err(refusal(credentials, refused)),
        }
    }
}
