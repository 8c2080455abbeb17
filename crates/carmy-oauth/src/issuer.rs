//! One issuer's signing keys (docs/semantics.md §6.1): its `jwks_uri` discovered from
//! its authorization server metadata (RFC 8414 `/.well-known/oauth-authorization-server`, then
//! OpenID Connect discovery `/.well-known/openid-configuration`), whose `issuer` must be the
//! configured one; the key set cached; an unknown `kid` refetches it, at most once per
//! `min_refresh`, so a stream of made-up `kid`s cannot make Carmy hammer the issuer.

use carmy::auth::TokenRefusal;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use serde::Deserialize;
use std::sync::RwLock;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;
use url::Url;

/// The largest metadata or key set document read, in bytes.
const MAX_DOCUMENT_BYTES: usize = 1 << 20;

/// The members of the issuer's metadata that are used.
#[derive(Deserialize)]
struct IssuerMetadata {
    issuer: String,
    jwks_uri: String,
}

/// Where the keys come from and when they were last fetched; held while fetching.
#[derive(Default)]
struct Fetching {
    jwks_uri: Option<String>,
    fetched_at: Option<Instant>,
    /// Whether the last fetch failed: until the next one, a key not in the cache is
    /// "unavailable" (503), not "unknown" (401), so a client keeps its good token.
    failed: bool,
}

/// One trusted issuer and its cached keys. Checks of known keys only read the cache, so they
/// never wait for a fetch in flight; fetches are one at a time.
pub struct IssuerKeys {
    issuer: String,
    client: reqwest::Client,
    min_refresh: Duration,
    keys: RwLock<Option<JwkSet>>,
    fetching: Mutex<Fetching>,
}

impl std::fmt::Debug for IssuerKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuerKeys")
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

impl IssuerKeys {
    /// An issuer whose keys are fetched on first use with `client`.
    pub fn new(issuer: String, client: reqwest::Client, min_refresh: Duration) -> Self {
        Self {
            issuer,
            client,
            min_refresh,
            keys: RwLock::new(None),
            fetching: Mutex::new(Fetching::default()),
        }
    }

    /// The cached key for `kid`, if any.
    fn cached(&self, kid: Option<&str>) -> Option<Jwk> {
        let keys = self
            .keys
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        keys.as_ref().and_then(|keys| pick(keys, kid)).cloned()
    }

    /// The key the token's header names (`kid`; without one, the set's only key): from the
    /// cache, else after one fetch, if the last fetch is older than `min_refresh`.
    ///
    /// # Errors
    /// [`TokenRefusal::UnknownKey`] when no key matches after that;
    /// [`TokenRefusal::KeysUnavailable`] when the keys could not be fetched.
    pub async fn key(&self, kid: Option<&str>) -> Result<Jwk, TokenRefusal> {
        if let Some(jwk) = self.cached(kid) {
            return Ok(jwk);
        }
        let mut fetching = self.fetching.lock().await;
        // Another check may have fetched while this one waited.
        if let Some(jwk) = self.cached(kid) {
            return Ok(jwk);
        }
        let may_fetch = fetching
            .fetched_at
            .is_none_or(|at| at.elapsed() >= self.min_refresh);
        if !may_fetch && fetching.failed {
            return Err(TokenRefusal::KeysUnavailable);
        }
        if !may_fetch {
            tracing::info!(issuer = %self.issuer, ?kid, "unknown signing key; the issuer's keys were fetched too recently to fetch again");
            return Err(TokenRefusal::UnknownKey);
        }
        let fetched = self.fetch(&mut fetching).await;
        fetching.failed = fetched.is_err();
        let keys = fetched.map_err(|why| {
            tracing::warn!(issuer = %self.issuer, %why, "could not fetch the issuer's signing keys");
            TokenRefusal::KeysUnavailable
        })?;
        let found = pick(&keys, kid).cloned();
        *self
            .keys
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(keys);
        found.ok_or(TokenRefusal::UnknownKey)
    }

    /// Fetches the key set (discovering `jwks_uri` first, once), recording when.
    async fn fetch(&self, fetching: &mut Fetching) -> Result<JwkSet, String> {
        fetching.fetched_at = Some(Instant::now());
        let jwks_uri = match &fetching.jwks_uri {
            Some(uri) => uri.clone(),
            None => {
                let uri = self.discover().await?;
                fetching.jwks_uri = Some(uri.clone());
                uri
            }
        };
        let keys: JwkSet = self.get_json(&jwks_uri).await?;
        tracing::info!(issuer = %self.issuer, keys = keys.keys.len(), "fetched the issuer's signing keys");
        Ok(keys)
    }

    /// The `jwks_uri` of the issuer's metadata, RFC 8414 first, then OpenID Connect discovery.
    async fn discover(&self) -> Result<String, String> {
        let mut reasons = Vec::new();
        for url in metadata_urls(&self.issuer)? {
            match self.get_json::<IssuerMetadata>(&url).await {
                Ok(metadata) if metadata.issuer == self.issuer => return Ok(metadata.jwks_uri),
                Ok(metadata) => reasons.push(format!(
                    "{url} names issuer {:?}, not the configured one",
                    metadata.issuer
                )),
                Err(why) => reasons.push(why),
            }
        }
        Err(reasons.join("; "))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, String> {
        let response = self
            .client
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|error| format!("{url}: {error}"))?;
        if !response.status().is_success() {
            return Err(format!("{url}: HTTP {}", response.status()));
        }
        // Read a chunk at a time and stop past the limit: an issuer that streams without end
        // must not fill the gateway's memory.
        let too_large = || format!("{url}: larger than {MAX_DOCUMENT_BYTES} bytes");
        if response
            .content_length()
            .is_some_and(|length| length > MAX_DOCUMENT_BYTES as u64)
        {
            return Err(too_large());
        }
        let mut response = response;
        let mut bytes = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|error| format!("{url}: {error}"))?
        {
            if bytes.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&bytes).map_err(|error| format!("{url}: {error}"))
    }
}

/// The key of `keys` for `kid`: a signing key (`use` absent or `sig`); without a `kid`, the
/// only such key.
fn pick<'a>(keys: &'a JwkSet, kid: Option<&str>) -> Option<&'a Jwk> {
    let mut signing = keys.keys.iter().filter(|jwk| {
        matches!(
            jwk.common.public_key_use,
            None | Some(jsonwebtoken::jwk::PublicKeyUse::Signature)
        )
    });
    match kid {
        Some(kid) => signing.find(|jwk| jwk.common.key_id.as_deref() == Some(kid)),
        None => {
            let only = signing.next();
            signing.next().is_none().then_some(only).flatten()
        }
    }
}

/// Where an issuer's metadata may be: RFC 8414 §3.1 (the well-known segment between host and
/// path), then OpenID Connect Discovery 1.0 §4 (appended to the issuer).
fn metadata_urls(issuer: &str) -> Result<Vec<String>, String> {
    let url = Url::parse(issuer).map_err(|error| format!("{issuer}: {error}"))?;
    let origin = url.origin().ascii_serialization();
    let path = url.path().trim_end_matches('/');
    Ok(vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!(
            "{}/.well-known/openid-configuration",
            issuer.trim_end_matches('/')
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_locations() {
        assert_eq!(
            metadata_urls("https://as.test").unwrap(),
            vec![
                "https://as.test/.well-known/oauth-authorization-server",
                "https://as.test/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            metadata_urls("https://as.test/realms/a/").unwrap(),
            vec![
                "https://as.test/.well-known/oauth-authorization-server/realms/a",
                "https://as.test/realms/a/.well-known/openid-configuration"
            ]
        );
    }
}
