//! Tokens meant for someone else are refused, each with its answer; the issuer's keys: one
//! fetch then the cache, one bounded refresh for an unknown kid, rotation mid-run, and a slow
//! fetch that does not hold up tokens with known keys.

use super::harness::*;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

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
        (
            with(json!({"exp": "tomorrow"})),
            "no exp claim, or its exp or nbf",
        ),
        (
            with(json!({"nbf": "now"})),
            "no exp claim, or its exp or nbf",
        ),
    ];
    let mut lifeless = good.clone();
    lifeless.as_object_mut().unwrap().remove("exp");
    for (claims, detail) in cases
        .into_iter()
        .chain([(lifeless, "no exp claim, or its exp or nbf")])
    {
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
async fn a_slow_key_fetch_does_not_hold_up_tokens_with_known_keys() {
    let issuer = Issuer::start().await;
    issuer.publish(K1, "k1");
    let served = Arc::new(gateway(&issuer).await);
    let good = claims(&issuer, "u1");
    let (status, _, body) = call(&served, &mint(K1, "k1", &good), "r-1").await;
    assert_eq!(status, 200, "{body}");
    // From now on the issuer holds its keys' answer until released: an unknown kid starts a
    // fetch that stays in flight.
    let hold = Arc::new(tokio::sync::Notify::new());
    issuer.published.lock().unwrap().hold = Some(Arc::clone(&hold));
    tokio::time::sleep(MIN_REFRESH).await;
    let unknown = tokio::spawn({
        let served = Arc::clone(&served);
        let token = mint(STRANGER, "k9", &good);
        async move { call(&served, &token, "r-2").await }
    });
    carmy_test_support::eventually(
        Duration::from_secs(10),
        "the slow fetch started",
        || async {
            if issuer.fetches() == 2 {
                Ok(())
            } else {
                Err(issuer.fetches())
            }
        },
    )
    .await;
    // A token with a known key is answered while that fetch is still in flight (the deadline
    // only keeps a regression from hanging the test).
    let token = mint(K1, "k1", &good);
    let known = call(&served, &token, "r-3");
    let (status, _, body) = tokio::time::timeout(Duration::from_secs(30), known)
        .await
        .expect("a known key's token waited for the fetch of another kid");
    assert_eq!(status, 200, "{body}");
    assert!(!unknown.is_finished(), "the fetch is still held");
    hold.notify_one();
    let answer = unknown.await.unwrap();
    refused(
        &answer,
        401,
        "INVALID_TOKEN",
        "signing key (kid)",
        &invalid_token(),
    );
}
