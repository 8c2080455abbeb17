//! The HTTP side in front of the SDK (docs/semantics.md §6, §11): every request to `/mcp` is
//! authenticated by the application's one check of credentials ([`Credentials`]; an operator key
//! is no principal and is refused), its body is read once within the HTTP API's limits and
//! checked as strict JSON (docs/semantics.md §2: no duplicate members), and a `tools/call`'s
//! `params.idempotencyKey`, which the SDK's types drop, is kept for the handler. The SDK's
//! refusal of a `Host` or `Origin` it does not allow becomes a problem body naming the setting
//! that allows it.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use carmy::auth::{AuthError, Credentials, TokenRefusal};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// What the handler learns from the HTTP request: the principal and, for `tools/call`, the
/// `params.idempotencyKey` member as sent (any JSON; the handler checks that it is a string).
/// Not a [`carmy::auth::Caller`]: the MCP front only acts as a principal
/// ([`Credentials::acting_principal`] refuses operator keys), so no operator rights travel.
#[derive(Clone, Debug)]
pub(crate) struct RequestFacts {
    pub(crate) principal: String,
    pub(crate) idempotency_key: Option<Value>,
}

/// The credentials and the body's limits, shared by every request.
#[derive(Clone)]
pub(crate) struct Gate {
    credentials: Arc<Credentials>,
    max_body_bytes: usize,
    body_timeout: Duration,
}

impl Gate {
    pub(crate) fn new(
        credentials: Credentials,
        max_body_bytes: usize,
        body_timeout: Duration,
    ) -> Self {
        Self {
            credentials: Arc::new(credentials),
            max_body_bytes,
            body_timeout,
        }
    }
}

/// Authenticates, reads and checks the body, records the [`RequestFacts`] in the request's
/// extensions (the SDK hands them to the handler), and passes the request on with the same body.
pub(crate) async fn admit(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let authorization = parts
        .headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .map(HeaderValue::as_bytes);
    let principal = match gate.credentials.acting_principal(authorization).await {
        Ok(principal) => principal,
        Err(refused) => return unauthorized(&gate.credentials, refused),
    };
    let mut idempotency_key = None;
    let body = if parts.method == Method::POST {
        let read = axum::body::to_bytes(body, gate.max_body_bytes);
        let bytes = match tokio::time::timeout(gate.body_timeout, read).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(error)) => return body_error(&error, gate.max_body_bytes),
            Err(_) => {
                return problem(
                    StatusCode::REQUEST_TIMEOUT,
                    "REQUEST_TIMEOUT",
                    "Request timeout",
                    "the request body did not arrive in time",
                )
            }
        };
        match idempotency_key_of(&bytes) {
            Ok(key) => idempotency_key = key,
            Err(message) => return parse_error(&message),
        }
        Body::from(bytes)
    } else {
        body
    };
    parts.extensions.insert(RequestFacts {
        principal,
        idempotency_key,
    });
    let response = next.run(Request::from_parts(parts, body)).await;
    if response.status() == StatusCode::FORBIDDEN {
        return forbidden(response).await;
    }
    response
}

/// The SDK's 403 (a `Host` or `Origin` it does not allow, docs/semantics.md §11) as a problem
/// body whose detail names the setting to change.
async fn forbidden(response: Response) -> Response {
    let text = axum::body::to_bytes(response.into_body(), 4096)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let (code, detail) = if text.contains("Origin") {
        (
            "ORIGIN_NOT_ALLOWED",
            "the request's Origin header is not allowed on /mcp (a page of another site must not drive this server's tools); to allow a browser origin, list it in CARMY_MCP_ALLOWED_ORIGINS (comma-separated, e.g. https://app.example.com or http://localhost:*; * allows any). Clients that send no Origin are unaffected.",
        )
    } else {
        (
            "HOST_NOT_ALLOWED",
            "the request's Host header is not allowed on /mcp (a guard against DNS rebinding); list the name clients use to reach this server in CARMY_MCP_ALLOWED_HOSTS (comma-separated host or host:port; * allows any).",
        )
    };
    problem(StatusCode::FORBIDDEN, code, "Forbidden", detail)
}

/// An RFC 9457 problem body with the HTTP API's `code` and `title` (docs/semantics.md §5):
/// `type`, `title`, `status`, `code`, `detail`.
fn problem(status: StatusCode, code: &str, title: &str, detail: &str) -> Response {
    let body = json!({
        "type": format!("urn:carmy:problem:{}", code.to_ascii_lowercase().replace('_', "-")),
        "title": title,
        "status": status.as_u16(),
        "code": code,
        "detail": detail,
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/problem+json")],
        format!("{body}\n"),
    )
        .into_response()
}

/// A refused credential (docs/semantics.md §6): 401 `UNAUTHORIZED` with `WWW-Authenticate:
/// Bearer`. An operator key is told it is no principal on `/mcp`. With OAuth access tokens
/// configured, the challenge names the protected resource metadata (RFC 9728 §5.1) and a refused
/// token answers as on `/v1`: 401 `INVALID_TOKEN`, 403 `INSUFFICIENT_SCOPE`, 503
/// `TOKEN_KEYS_UNAVAILABLE`.
fn unauthorized(credentials: &Credentials, refused: AuthError) -> Response {
    let detail = match refused {
        AuthError::OperatorKey => "this is an operator key: it lists and decides executions over the HTTP API (/v1/executions), but it is not a principal and cannot call tools over /mcp; send an API key (CARMY_API_KEYS) for that".to_owned(),
        AuthError::Unauthorized if credentials.accepts_tokens() => {
            carmy::auth::KEY_OR_TOKEN_REQUIRED.to_owned()
        }
        other => other.to_string(),
    };
    let (status, code, title) = match refused {
        AuthError::Token(TokenRefusal::MissingScope) => (
            StatusCode::FORBIDDEN,
            "INSUFFICIENT_SCOPE",
            "Insufficient scope",
        ),
        AuthError::Token(TokenRefusal::KeysUnavailable) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "TOKEN_KEYS_UNAVAILABLE",
            "Token keys unavailable",
        ),
        AuthError::Token(_) => (StatusCode::UNAUTHORIZED, "INVALID_TOKEN", "Invalid token"),
        _ => (StatusCode::UNAUTHORIZED, "UNAUTHORIZED", "Unauthorized"),
    };
    let mut response = problem(status, code, title, &detail);
    let challenge = HeaderValue::from_str(&credentials.challenge(&refused))
        .unwrap_or_else(|_| HeaderValue::from_static("Bearer"));
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, challenge);
    response
}

/// A body that could not be read: 413 past the limit, 400 otherwise.
fn body_error(error: &axum::Error, limit: usize) -> Response {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if cause.is::<http_body_util::LengthLimitError>() {
            return problem(
                StatusCode::PAYLOAD_TOO_LARGE,
                "PAYLOAD_TOO_LARGE",
                "Payload too large",
                &format!("the request body exceeds the limit of {limit} bytes"),
            );
        }
        source = cause.source();
    }
    problem(
        StatusCode::BAD_REQUEST,
        "INVALID_REQUEST",
        "Invalid request",
        &format!("the request body could not be read: {error}"),
    )
}

/// A JSON-RPC parse error (-32700), as the MCP specification answers a body that is not JSON.
fn parse_error(message: &str) -> Response {
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32700, "message": format!("the body is not strict JSON: {message}")},
    });
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Checks `bytes` as strict JSON and returns `params.idempotencyKey` of a `tools/call`.
///
/// # Errors
/// The parser's message when the body is not strict JSON (empty bodies pass: the SDK answers
/// them).
fn idempotency_key_of(bytes: &Bytes) -> Result<Option<Value>, String> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let text = std::str::from_utf8(bytes).map_err(|error| error.to_string())?;
    let message = carmy::strict_json::parse(text).map_err(|error| error.to_string())?;
    if message.get("method").and_then(Value::as_str) != Some("tools/call") {
        return Ok(None);
    }
    Ok(message
        .get("params")
        .and_then(|params| params.get("idempotencyKey"))
        .cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_comes_from_a_tools_call_only() {
        let key = |text: &'static str| idempotency_key_of(&Bytes::from(text));
        assert_eq!(
            key(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","idempotencyKey":"k1"}}"#
            ),
            Ok(Some(json!("k1")))
        );
        assert_eq!(
            key(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"idempotencyKey":"k1"}}"#
            ),
            Ok(None)
        );
        assert_eq!(key(""), Ok(None));
        assert!(key(r#"{"method":"tools/call","method":"x"}"#).is_err());
    }
}
