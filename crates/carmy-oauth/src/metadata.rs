//! The protected resource metadata (RFC 9728; docs/semantics.md §6.1): served without
//! credentials at `/.well-known/oauth-protected-resource` and at the path-suffixed form for the
//! resource identifier's path (e.g. `/.well-known/oauth-protected-resource/mcp`), always the
//! same document: `resource`, `authorization_servers`, `scopes_supported`,
//! `bearer_methods_supported`.

use crate::config::OAuthConfig;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::json;
use url::Url;

/// The well-known path of RFC 9728 §3.
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The metadata URL of `resource` (RFC 9728 §3.1): the well-known segment between its origin
/// and its path, e.g. `https://h/mcp` → `https://h/.well-known/oauth-protected-resource/mcp`.
///
/// # Errors
/// Why `resource` is not an absolute URL.
pub fn resource_metadata_url(resource: &str) -> Result<String, String> {
    let url = Url::parse(resource).map_err(|error| format!("{resource} is not a URL: {error}"))?;
    Ok(format!(
        "{}{WELL_KNOWN}{}",
        url.origin().ascii_serialization(),
        url.path().trim_end_matches('/')
    ))
}

/// The metadata document of `config`.
pub fn document(config: &OAuthConfig) -> serde_json::Value {
    let mut scopes: Vec<&str> = config.required_scopes.iter().map(String::as_str).collect();
    if config.operator_claim == "scope" {
        scopes.extend(config.operator_value.as_deref());
    }
    json!({
        "resource": config.resource,
        "authorization_servers": config.issuers,
        "scopes_supported": scopes,
        "bearer_methods_supported": ["header"],
        "resource_name": "Carmy",
    })
}

/// The metadata routes, to merge beside `/v1` and `/mcp` (`carmy_http::App::merge_routes`).
/// The document is public (`Access-Control-Allow-Origin: *`: browser-based clients read it).
pub fn routes(config: &OAuthConfig) -> Router {
    let body = document(config).to_string();
    let serve = move || {
        let body = body.clone();
        async move { metadata_response(body) }
    };
    let mut router = Router::new().route(WELL_KNOWN, get(serve.clone()));
    let suffix = Url::parse(&config.resource)
        .map(|url| url.path().trim_end_matches('/').to_owned())
        .unwrap_or_default();
    if !suffix.is_empty() {
        router = router.route(&format!("{WELL_KNOWN}{suffix}"), get(serve.clone()));
    }
    if suffix != "/mcp" {
        router = router.route(&format!("{WELL_KNOWN}/mcp"), get(serve));
    }
    router
}

fn metadata_response(body: String) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_urls() {
        assert_eq!(
            resource_metadata_url("https://carmy.test/").unwrap(),
            "https://carmy.test/.well-known/oauth-protected-resource"
        );
        assert_eq!(
            resource_metadata_url("http://127.0.0.1:8080/mcp").unwrap(),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp"
        );
    }
}
