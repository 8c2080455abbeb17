//! OAuth access tokens beside API keys (docs/semantics.md §6.1), against a real gateway
//! served over TCP and a real HTTP issuer (an axum server publishing RFC 8414 metadata and a
//! JWKS, counting the key fetches). Tokens are minted with `jsonwebtoken` and the test keys of
//! `tests/fixtures/oauth`. Every refusal is checked with its status, code and challenge.

use super::mcp_client::Served;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const RESOURCE: &str = "http://carmy.test/";
const METADATA: &str = "http://carmy.test/.well-known/oauth-protected-resource";
const K1: &[u8] = include_bytes!("../../fixtures/oauth/issuer-k1.pem");
const K2: &[u8] = include_bytes!("../../fixtures/oauth/issuer-k2.pem");
const STRANGER: &[u8] = include_bytes!("../../fixtures/oauth/stranger.pem");
/// `--oauth-jwks-min-refresh-ms` of these gateways.
const MIN_REFRESH: Duration = Duration::from_millis(400);

/// What the issuer publishes and how often its keys were fetched.
#[derive(Default)]
struct Published {
    keys: Vec<Jwk>,
    fetches: u64,
}

/// A real issuer: metadata at `/.well-known/oauth-authorization-server`, keys at `/jwks`.
struct Issuer {
    url: String,
    published: Arc<Mutex<Published>>,
}

impl Issuer {
    async fn start() -> Self {
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
                        let mut published = published.lock().unwrap();
                        published.fetches += 1;
                        Json(JwkSet {
                            keys: published.keys.clone(),
                        })
                    },
                ),
            )
            .with_state(Arc::clone(&published));
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        Self { url, published }
    }

    fn publish(&self, pem: &[u8], kid: &str) {
        self.published
            .lock()
            .unwrap()
            .keys
            .push(public_jwk(pem, kid));
    }

    fn fetches(&self) -> u64 {
        self.published.lock().unwrap().fetches
    }
}

fn public_jwk(pem: &[u8], kid: &str) -> Jwk {
    let key = EncodingKey::from_ec_pem(pem).unwrap();
    let mut jwk = Jwk::from_encoding_key(&key, Algorithm::ES256).unwrap();
    jwk.common.key_id = Some(kid.to_owned());
    jwk
}

fn now() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

/// Claims of a good token for `sub` from `issuer`; callers change what they test.
fn claims(issuer: &Issuer, sub: &str) -> Value {
    json!({
        "iss": issuer.url, "sub": sub, "aud": RESOURCE, "scope": "carmy",
        "iat": now(), "exp": now() + 300, "client_id": "agent-app",
    })
}

fn mint(pem: &[u8], kid: &str, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_ec_pem(pem).unwrap()).unwrap()
}

async fn gateway(issuer: &Issuer) -> Served {
    let refresh = MIN_REFRESH.as_millis().to_string();
    Served::start(&[
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
    ])
    .await
}

/// The status, `WWW-Authenticate` and JSON body of `method path` with `token` (if any).
async fn send(
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

async fn call(served: &Served, token: &str, request_id: &str) -> (u16, String, Value) {
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

fn invalid_token() -> String {
    format!("Bearer resource_metadata=\"{METADATA}\", error=\"invalid_token\"")
}

/// Asserts a refusal: status, code, the refusal's detail (a part of it) and the challenge.
fn refused(answer: &(u16, String, Value), status: u16, code: &str, detail: &str, challenge: &str) {
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

#[tokio::test]
async fn the_protected_resource_metadata_and_the_challenge_name_the_issuer() {
    let issuer = Issuer::start().await;
    issuer.publish(K1, "k1");
    let served = gateway(&issuer).await;
    let expected = json!({
        "resource": RESOURCE,
        "authorization_servers": [issuer.url],
        "scopes_supported": ["carmy", "carmy:operator"],
        "bearer_methods_supported": ["header"],
        "resource_name": "Carmy",
    });
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let (status, _, body) = send(&served, reqwest::Method::GET, path, None, None).await;
        assert_eq!((status, &body), (200, &expected), "{path}");
    }
    let challenge = format!("Bearer resource_metadata=\"{METADATA}\"");
    // No credential: 401 with the challenge on both doors, nothing fetched from the issuer.
    let body = json!({"tool": "echo", "arguments": {}, "request_id": "r"});
    let answer = send(
        &served,
        reqwest::Method::POST,
        "/v1/executions",
        None,
        Some(&body),
    )
    .await;
    refused(
        &answer,
        401,
        "UNAUTHORIZED",
        "a valid API key is required",
        &challenge,
    );
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let answer = send(
        &served,
        reqwest::Method::POST,
        "/mcp",
        None,
        Some(&initialize),
    )
    .await;
    refused(
        &answer,
        401,
        "UNAUTHORIZED",
        "a valid API key is required",
        &challenge,
    );
    assert_eq!(issuer.fetches(), 0);
    // The API key still works beside tokens.
    let (status, _, body) = call(&served, "agent-key", "r-key").await;
    assert_eq!(status, 200, "{body}");
    // A token on /mcp: initialize answers.
    let token = mint(K1, "k1", &claims(&issuer, "u1"));
    let (status, _, body) = send(
        &served,
        reqwest::Method::POST,
        "/mcp",
        Some(&token),
        Some(&initialize),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let answer = send(
        &served,
        reqwest::Method::POST,
        "/mcp",
        Some("x.y.z"),
        Some(&initialize),
    )
    .await;
    refused(
        &answer,
        401,
        "INVALID_TOKEN",
        "neither an API key",
        &invalid_token(),
    );
}

#[tokio::test]
async fn tokens_meant_for_someone_else_are_refused_each_with_its_answer() {
    let issuer = Issuer::start().await;
    issuer.publish(K1, "k1");
    let served = gateway(&issuer).await;
    let good = claims(&issuer, "u1");
    let (status, _, body) = call(&served, &mint(K1, "k1", &good), "r-good").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        issuer.fetches(),
        1,
        "the keys are fetched once, then cached"
    );

    let with = |change: Value| {
        let mut claims = good.clone();
        claims
            .as_object_mut()
            .unwrap()
            .extend(change.as_object().unwrap().clone());
        claims
    };
    let cases = [
        (
            with(json!({"aud": "https://sibling.test/"})),
            "issued for another resource",
        ),
        (with(json!({"exp": now() - 120})), "has expired"),
        (with(json!({"nbf": now() + 600})), "not valid yet"),
    ];
    for (claims, detail) in cases {
        let answer = call(&served, &mint(K1, "k1", &claims), "r-x").await;
        refused(&answer, 401, "INVALID_TOKEN", detail, &invalid_token());
    }
    // Another issuer, even with a key the test issuer publishes: refused before any fetch.
    let answer = call(
        &served,
        &mint(K1, "k1", &with(json!({"iss": "https://other.test"}))),
        "r-x",
    )
    .await;
    refused(
        &answer,
        401,
        "INVALID_TOKEN",
        "issuer this server does not trust",
        &invalid_token(),
    );
    // The right kid, the wrong key.
    let answer = call(&served, &mint(STRANGER, "k1", &good), "r-x").await;
    refused(
        &answer,
        401,
        "INVALID_TOKEN",
        "signature does not verify",
        &invalid_token(),
    );
    // alg none, unsigned.
    let b64 = |value: Value| {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string())
    };
    let unsigned = format!(
        "{}.{}.",
        b64(json!({"alg": "none", "kid": "k1"})),
        b64(good.clone())
    );
    let answer = call(&served, &unsigned, "r-x").await;
    refused(
        &answer,
        401,
        "INVALID_TOKEN",
        "algorithm this server does not accept",
        &invalid_token(),
    );
    // HS256 with the issuer's public key as the secret (algorithm confusion).
    let public = serde_json::to_vec(&public_jwk(K1, "k1")).unwrap();
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("k1".into());
    let confused =
        jsonwebtoken::encode(&header, &good, &EncodingKey::from_secret(&public)).unwrap();
    let answer = call(&served, &confused, "r-x").await;
    refused(
        &answer,
        401,
        "INVALID_TOKEN",
        "algorithm this server does not accept",
        &invalid_token(),
    );
    // Without the required scope: 403 insufficient_scope naming it.
    let answer = call(
        &served,
        &mint(K1, "k1", &with(json!({"scope": "openid"}))),
        "r-x",
    )
    .await;
    refused(
        &answer,
        403,
        "INSUFFICIENT_SCOPE",
        "lacks the scope",
        &format!("Bearer resource_metadata=\"{METADATA}\", error=\"insufficient_scope\", scope=\"carmy\""),
    );
    assert_eq!(
        issuer.fetches(),
        1,
        "no refusal so far needed the keys again"
    );

    // An unknown kid: one refresh of the keys, then refused; again at once: no second fetch.
    tokio::time::sleep(MIN_REFRESH).await;
    let answer = call(&served, &mint(STRANGER, "k9", &good), "r-x").await;
    refused(
        &answer,
        401,
        "INVALID_TOKEN",
        "signing key (kid) the issuer does not publish",
        &invalid_token(),
    );
    assert_eq!(issuer.fetches(), 2, "one refresh for the unknown kid");
    let answer = call(&served, &mint(STRANGER, "k8", &good), "r-x").await;
    refused(
        &answer,
        401,
        "INVALID_TOKEN",
        "signing key (kid)",
        &invalid_token(),
    );
    assert_eq!(issuer.fetches(), 2, "refreshes are bounded in rate");
    // Nothing refused ran.
    assert_eq!(served.runs("echo"), 1);
}

#[tokio::test]
async fn key_rotation_mid_run_new_tokens_work_and_old_ones_until_they_expire() {
    let issuer = Issuer::start().await;
    issuer.publish(K1, "k1");
    let served = gateway(&issuer).await;
    let old = mint(K1, "k1", &claims(&issuer, "u1"));
    let (status, _, body) = call(&served, &old, "r-1").await;
    assert_eq!(status, 200, "{body}");
    // The issuer rotates: k2 signs from now on, k1 stays published until its tokens expire.
    issuer.publish(K2, "k2");
    tokio::time::sleep(MIN_REFRESH).await;
    let new = mint(K2, "k2", &claims(&issuer, "u1"));
    let (status, _, body) = call(&served, &new, "r-2").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(issuer.fetches(), 2, "the new kid refreshed the keys once");
    let (status, _, body) = call(&served, &old, "r-3").await;
    assert_eq!(status, 200, "the old token still works: {body}");
    let mut expired = claims(&issuer, "u1");
    expired["exp"] = json!(now() - 120);
    let answer = call(&served, &mint(K1, "k1", &expired), "r-4").await;
    refused(
        &answer,
        401,
        "INVALID_TOKEN",
        "has expired",
        &invalid_token(),
    );
}

#[tokio::test]
async fn two_users_of_one_client_are_two_principals_and_operators_need_the_scope() {
    let issuer = Issuer::start().await;
    issuer.publish(K1, "k1");
    let served = gateway(&issuer).await;
    let u1 = mint(K1, "k1", &claims(&issuer, "user-1"));
    let u2 = mint(K1, "k1", &claims(&issuer, "user-2"));
    let (status, _, first) = call(&served, &u1, "same-id").await;
    assert_eq!(status, 200, "{first}");
    let (status, _, replay) = call(&served, &u1, "same-id").await;
    assert_eq!(
        (status, &replay["execution_id"]),
        (200, &first["execution_id"])
    );
    let (status, _, other) = call(&served, &u2, "same-id").await;
    assert_eq!(status, 200, "{other}");
    assert_ne!(
        other["execution_id"], first["execution_id"],
        "another user's own record"
    );
    assert_eq!(
        served.runs("echo"),
        2,
        "replayed for user-1, run once for user-2"
    );

    let id1 = first["execution_id"].as_str().unwrap();
    let path = format!("/v1/executions/{id1}");
    let (status, _, body) = send(&served, reqwest::Method::GET, &path, Some(&u2), None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("NOT_FOUND")),
        "{body}"
    );
    let listed = |body: &Value| -> Vec<String> {
        let mut ids: Vec<String> = body["executions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|record| record["execution_id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };
    let (_, _, mine) = send(
        &served,
        reqwest::Method::GET,
        "/v1/executions",
        Some(&u2),
        None,
    )
    .await;
    assert_eq!(
        listed(&mine),
        vec![other["execution_id"].as_str().unwrap().to_owned()]
    );
    // Without the operator scope a token decides only its own records: another's is 404.
    let release = format!("/v1/executions/{id1}/release");
    let decision = json!({"note": "test"});
    let (status, _, body) = send(
        &served,
        reqwest::Method::POST,
        &release,
        Some(&u2),
        Some(&decision),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("NOT_FOUND")),
        "{body}"
    );
    // With it, the token's caller is an operator: it lists every principal's records.
    let mut operator = claims(&issuer, "ops-1");
    operator["scope"] = json!("carmy carmy:operator");
    let operator = mint(K1, "k1", &operator);
    let (status, _, all) = send(
        &served,
        reqwest::Method::GET,
        "/v1/executions",
        Some(&operator),
        None,
    )
    .await;
    assert_eq!(status, 200, "{all}");
    let mut expected = vec![
        first["execution_id"].as_str().unwrap().to_owned(),
        other["execution_id"].as_str().unwrap().to_owned(),
    ];
    expected.sort();
    assert_eq!(listed(&all), expected);
    // And it is still its own principal: its calls and its identity lookup are its own.
    let lookup = "/v1/executions?request_id=same-id";
    let (status, _, body) =
        send(&served, reqwest::Method::GET, lookup, Some(&operator), None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("NOT_FOUND")),
        "{body}"
    );
    let (status, _, own) = call(&served, &operator, "same-id").await;
    assert_eq!(status, 200, "{own}");
    assert_ne!(own["execution_id"], first["execution_id"]);
    let (status, _, body) =
        send(&served, reqwest::Method::GET, lookup, Some(&operator), None).await;
    assert_eq!(
        (status, &body["execution_id"]),
        (200, &own["execution_id"]),
        "{body}"
    );
}

/// The first `sh` block of docs/operations.md "OAuth access tokens", as `(variable, value)`.
fn documented_example() -> Vec<(String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/operations.md");
    let text = std::fs::read_to_string(path).unwrap();
    let section = text
        .split("\n## OAuth access tokens\n")
        .nth(1)
        .expect("docs/operations.md has a section \"OAuth access tokens\"");
    section
        .lines()
        .skip_while(|line| *line != "```sh")
        .skip(1)
        .take_while(|line| *line != "```")
        .map(|line| {
            let (name, value) = line.split_once('=').unwrap();
            (name.to_owned(), value.to_owned())
        })
        .collect()
}

#[tokio::test]
async fn the_documented_example_accepts_a_token() {
    let issuer = Issuer::start().await;
    issuer.publish(K1, "k1");
    // Each variable as its flag (CARMY_OAUTH_X_Y → --oauth-x-y), the example's issuer and
    // resource replaced by the test's.
    let mut flags = Vec::new();
    for (name, value) in documented_example() {
        let flag = name
            .strip_prefix("CARMY_")
            .unwrap()
            .to_lowercase()
            .replace('_', "-");
        flags.push(format!("--{flag}"));
        flags.push(
            value
                .replace("https://auth.example.com", &issuer.url)
                .replace("https://carmy.example.com/", RESOURCE),
        );
    }
    assert!(flags.len() >= 4, "{flags:?}");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let served = Served::start(&flags).await;
    let token = mint(K1, "k1", &claims(&issuer, "u1"));
    let (status, _, body) = call(&served, &token, "r-doc").await;
    assert_eq!(status, 200, "{body}");
    let mut operator = claims(&issuer, "ops-1");
    operator["scope"] = json!("carmy carmy:operator");
    let operator = mint(K1, "k1", &operator);
    let (status, _, all) = send(
        &served,
        reqwest::Method::GET,
        "/v1/executions",
        Some(&operator),
        None,
    )
    .await;
    assert_eq!(
        (status, all["executions"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{all}"
    );
}
