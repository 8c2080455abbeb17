//! The test issuer (an axum server publishing RFC 8414 metadata and a JWKS, counting the key
//! fetches and able to hold the keys' answer), token minting with `jsonwebtoken` and the test
//! keys of `tests/fixtures/oauth`, and the gateway and request helpers of the OAuth tests.

use crate::mcp_client::Served;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(super) const RESOURCE: &str = "http://carmy.test/";
pub(super) const METADATA: &str = "http://carmy.test/.well-known/oauth-protected-resource";
pub(super) const K1: &[u8] = include_bytes!("../../../fixtures/oauth/issuer-k1.pem");
pub(super) const K2: &[u8] = include_bytes!("../../../fixtures/oauth/issuer-k2.pem");
pub(super) const STRANGER: &[u8] = include_bytes!("../../../fixtures/oauth/stranger.pem");
/// `--oauth-jwks-min-refresh-ms` of these gateways.
pub(super) const MIN_REFRESH: Duration = Duration::from_millis(400);

/// What the issuer publishes and how often its keys were fetched.
#[derive(Default)]
pub(super) struct Published {
    pub(super) keys: Vec<Jwk>,
    pub(super) fetches: u64,
    /// When set, `/jwks` answers only once this is notified.
    pub(super) hold: Option<Arc<tokio::sync::Notify>>,
}

/// A real issuer: metadata at `/.well-known/oauth-authorization-server`, keys at `/jwks`.
pub(super) struct Issuer {
    pub(super) url: String,
    pub(super) published: Arc<Mutex<Published>>,
}

impl Issuer {
    pub(super) async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let published = Arc::new(Mutex::new(Published::default()));
        let metadata = json!({"issuer": url, "jwks_uri": format!("{url}/jwks")});
        let router = Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                get(move || async move { Json(metadata) }),
            )
            .route(
                "/jwks",
                get(
                    |State(published): State<Arc<Mutex<Published>>>| async move {
                        let (keys, hold) = {
                            let mut published = published.lock().unwrap();
                            published.fetches += 1;
                            (published.keys.clone(), published.hold.clone())
                        };
                        if let Some(hold) = hold {
                            hold.notified().await;
                        }
                        Json(JwkSet { keys })
                    },
                ),
            )
            .with_state(Arc::clone(&published));
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        Self { url, published }
    }

    pub(super) fn publish(&self, pem: &[u8], kid: &str) {
        self.published
            .lock()
            .unwrap()
            .keys
            .push(public_jwk(pem, kid));
    }

    pub(super) fn fetches(&self) -> u64 {
        self.published.lock().unwrap().fetches
    }
}

pub(super) fn public_jwk(pem: &[u8], kid: &str) -> Jwk {
    let key = EncodingKey::from_ec_pem(pem).unwrap();
    let mut jwk = Jwk::from_encoding_key(&key, Algorithm::ES256).unwrap();
    jwk.common.key_id = Some(kid.to_owned());
    jwk
}

pub(super) fn now() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

/// Claims of a good token for `sub` from `issuer`; callers change what they test.
pub(super) fn claims(issuer: &Issuer, sub: &str) -> Value {
    json!({
        "iss": issuer.url, "sub": sub, "aud": RESOURCE, "scope": "carmy",
        "iat": now(), "exp": now() + 300, "client_id": "agent-app",
    })
}

pub(super) fn mint(pem: &[u8], kid: &str, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_ec_pem(pem).unwrap()).unwrap()
}

pub(super) async fn gateway(issuer: &Issuer) -> Served {
    gateway_with(issuer, &[]).await
}

/// [`gateway`] with `extra` arguments after the common ones.
pub(super) async fn gateway_with(issuer: &Issuer, extra: &[&str]) -> Served {
    let refresh = MIN_REFRESH.as_millis().to_string();
    let mut args = vec![
        "--api-keys",
        "agent-key=agent",
        "--oauth-issuers",
        &issuer.url,
        "--oauth-resource",
        RESOURCE,
        "--oauth-required-scope",
        "carmy",
        "--oauth-operator-scope",
        "carmy:operator",
        "--oauth-jwks-min-refresh-ms",
        &refresh,
    ];
    args.extend_from_slice(extra);
    Served::start(&args).await
}

/// The status, `WWW-Authenticate` and JSON body of `method path` with `token` (if any).
pub(super) async fn send(
    served: &Served,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (u16, String, Value) {
    let mut request = carmy_test_support::client()
        .request(method, format!("{}{path}", served.base))
        .header("accept", "application/json, text/event-stream");
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|value| value.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, challenge, body)
}

pub(super) async fn call(served: &Served, token: &str, request_id: &str) -> (u16, String, Value) {
    let body = json!({"tool": "echo", "arguments": {"v": 1}, "request_id": request_id});
    send(
        served,
        reqwest::Method::POST,
        "/v1/executions",
        Some(token),
        Some(&body),
    )
    .await
}

pub(super) fn invalid_token() -> String {
    format!("Bearer resource_metadata=\"{METADATA}\", error=\"invalid_token\"")
}

/// Asserts a refusal: status, code, the refusal's detail (a part of it) and the challenge.
pub(super) fn refused(
    answer: &(u16, String, Value),
    status: u16,
    code: &str,
    detail: &str,
    challenge: &str,
) {
    let (got, got_challenge, body) = answer;
    assert_eq!(
        (*got, body["code"].as_str()),
        (status, Some(code)),
        "{body}"
    );
    assert!(
        body["detail"].as_str().unwrap().contains(detail),
        "detail {:?} should contain {detail:?}",
        body["detail"]
    );
    assert_eq!(got_challenge, challenge, "{body}");
}
