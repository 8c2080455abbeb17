//! The principal of an HTTP request, from its `Authorization` header (docs/semantics.md §6). A
//! server without API keys refuses any `Authorization` header (401, [`ApiError::NoApiKeys`]).

use super::error::ApiError;
use super::AppState;
use crate::auth::Caller;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderValue};

/// The authenticated principal of a request; a handler that takes it answers 401 without one,
/// and for an operator key.
pub(crate) struct Principal(pub(crate) String);

/// The authenticated caller of a request, with operator rights for an operator key
/// (docs/semantics.md §12.1); a handler that takes it answers 401 without one.
pub(crate) struct AuthenticatedCaller(pub(crate) Caller);

impl FromRequestParts<AppState> for AuthenticatedCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let mut values = parts.headers.get_all(header::AUTHORIZATION).iter();
        let authorization = values.next().map(HeaderValue::as_bytes);
        if values.next().is_some() {
            // Two credentials are ambiguous: refuse rather than pick one.
            return Err(ApiError::Unauthorized);
        }
        if let Some(name) = state.operators.find(authorization) {
            return Ok(Self(Caller::operator(name)));
        }
        if authorization.is_some() && state.keys.is_empty() {
            // A caller that sends a credential expects to be someone; a server without keys
            // cannot check it, so it says so instead of running the call as `anonymous`.
            return Err(ApiError::NoApiKeys);
        }
        state
            .keys
            .authenticate(authorization)
            .map(|principal| Self(Caller::principal(principal)))
            .ok_or(ApiError::Unauthorized)
    }
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    /// An operator key is refused ([`ApiError::OperatorKey`]): operators are told apart from
    /// principals by the kind of their key, never by name (docs/semantics.md §6).
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let AuthenticatedCaller(caller) =
            AuthenticatedCaller::from_request_parts(parts, state).await?;
        if caller.operator.is_some() {
            return Err(ApiError::OperatorKey);
        }
        Ok(Self(caller.principal))
    }
}
