//! The protected resource metadata and the challenge, two users of one client as two
//! principals, operators by scope, and the documented example of docs/operations.md.

use super::harness::*;
use crate::mcp_client::Served;
use serde_json::{json, Value};

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
        "a valid API key or OAuth access token is required",
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
        "a valid API key or OAuth access token is required",
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

#[tokio::test]
async fn settings_it_cannot_run_with_stop_the_gateway_naming_them() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--oauth-issuers", "http://127.0.0.1:9"],
            "CARMY_OAUTH_RESOURCE: unset",
        ),
        (
            &[
                "--oauth-issuers",
                "http://auth.example.com",
                "--oauth-resource",
                "https://c.test/",
            ],
            "CARMY_OAUTH_ISSUERS: http://auth.example.com must be https",
        ),
        (
            &[
                "--oauth-issuers",
                "https://auth.example.com",
                "--oauth-resource",
                "https://c.test/",
                "--oauth-algorithms",
                "RS256,HS256",
            ],
            "CARMY_OAUTH_ALGORITHMS: HS256 is HMAC",
        ),
        (
            &[
                "--oauth-issuers",
                "https://auth.example.com",
                "--oauth-resource",
                "https://c.test/",
                "--oauth-principal-prefix",
                "tenant",
            ],
            "CARMY_OAUTH_PRINCIPAL_PREFIX: tenant is not none, iss or claim:<name>",
        ),
    ];
    for (flags, message) in cases {
        let config = carmy_test_support::in_process::gateway_config(flags);
        let error = match carmy_gateway::build(&config).await {
            Ok(_) => panic!("{flags:?} should not start"),
            Err(error) => error.to_string(),
        };
        assert!(error.starts_with(message), "{flags:?}: {error}");
    }
}

/// A prefixed principal is one per (prefix, name) pair: a `|` in the prefix or an empty name is
/// refused, so `acme|auth0` + `123` never meets `acme` + `auth0|123`; and no token's user reads
/// as an operator (`operator:…`) in the audit trail (docs/semantics.md §6.1).
#[tokio::test]
async fn prefixed_principals_never_join_and_never_read_as_operators() {
    let issuer = Issuer::start().await;
    issuer.publish(K1, "k1");
    let served = gateway_with(&issuer, &["--oauth-principal-prefix", "claim:tenant"]).await;
    let with = |tenant: &str, sub: &str| {
        let mut claims = claims(&issuer, sub);
        claims["tenant"] = json!(tenant);
        mint(K1, "k1", &claims)
    };
    let (status, _, first) = call(&served, &with("acme", "auth0|123"), "tenant-collide").await;
    assert_eq!(status, 200, "{first}");
    let detail = "cannot use it as a principal";
    for token in [with("acme|auth0", "123"), with("t", "")] {
        let answer = call(&served, &token, "tenant-collide").await;
        refused(&answer, 401, "INVALID_TOKEN", detail, &invalid_token());
    }
    assert_eq!(served.runs("echo"), 1, "only the first user's call ran");

    let plain = gateway(&issuer).await;
    let answer = call(
        &plain,
        &mint(K1, "k1", &claims(&issuer, "operator:ops")),
        "r-op",
    )
    .await;
    refused(&answer, 401, "INVALID_TOKEN", detail, &invalid_token());
    assert_eq!(plain.runs("echo"), 0);
}
