//! The resource server's settings (docs/operations.md "OAuth access tokens"): the trusted
//! issuers, this server's resource identifier (the audience tokens must name), the allowed
//! algorithms, the principal and operator claims, and the JWKS refresh bounds.

use jsonwebtoken::{Algorithm, AlgorithmFamily};
use std::time::Duration;
use url::Url;

/// The algorithms accepted when none are configured: RSA (PKCS#1 v1.5 and PSS), ECDSA, EdDSA.
pub const DEFAULT_ALGORITHMS: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// What a token's principal is prefixed with (docs/semantics.md §6.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrincipalPrefix {
    /// The principal claim alone.
    None,
    /// `<iss>|<claim>`: users of two issuers never share a principal.
    Issuer,
    /// `<value of this claim>|<claim>`, e.g. a tenant id; a token without it is refused.
    Claim(String),
}

/// The resource server's settings.
#[derive(Clone, Debug)]
pub struct OAuthConfig {
    /// The issuers whose tokens are accepted, exactly as their `iss` (https, or http on a
    /// loopback address).
    pub issuers: Vec<String>,
    /// This server's resource identifier (RFC 8707, RFC 9728 `resource`): the `aud` every token
    /// must name, e.g. `https://carmy.example.com/`.
    pub resource: String,
    /// The accepted signature algorithms (never `none`, never HMAC).
    pub algorithms: Vec<Algorithm>,
    /// The claim that names the principal (default `sub`).
    pub principal_claim: String,
    /// What the principal is prefixed with.
    pub principal_prefix: PrincipalPrefix,
    /// Scopes every token must carry (space-separated in `scope`, or the `scp` array); empty:
    /// none required.
    pub required_scopes: Vec<String>,
    /// The scope or role value that makes a token's caller an operator; `None`: no token is.
    pub operator_value: Option<String>,
    /// The claim holding [`OAuthConfig::operator_value`] (default `scope`; a space-separated
    /// string or an array of strings).
    pub operator_claim: String,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// The shortest time between two fetches of an issuer's keys (an unknown `kid` triggers a
    /// fetch only after it).
    pub min_refresh: Duration,
    /// How long one fetch of metadata or keys may take.
    pub fetch_timeout: Duration,
}

impl OAuthConfig {
    /// Settings with the defaults: `sub` without prefix, no required scope, no operators, the
    /// [`DEFAULT_ALGORITHMS`], 30 s leeway, 30 s between fetches, 10 s per fetch.
    pub fn new(issuers: Vec<String>, resource: String) -> Self {
        Self {
            issuers,
            resource,
            algorithms: DEFAULT_ALGORITHMS.to_vec(),
            principal_claim: "sub".to_owned(),
            principal_prefix: PrincipalPrefix::None,
            required_scopes: Vec::new(),
            operator_value: None,
            operator_claim: "scope".to_owned(),
            leeway: Duration::from_secs(30),
            min_refresh: Duration::from_secs(30),
            fetch_timeout: Duration::from_secs(10),
        }
    }

    /// Checks the settings: at least one issuer, each https (http only on loopback), a resource
    /// identifier that is an absolute http(s) URL without fragment, and at least one algorithm.
    ///
    /// # Errors
    /// [`OAuthConfigError`] naming the setting.
    pub fn check(&self) -> Result<(), OAuthConfigError> {
        if self.issuers.is_empty() {
            return Err(OAuthConfigError::NoIssuer);
        }
        for issuer in &self.issuers {
            check_fetchable(issuer).map_err(|why| OAuthConfigError::Issuer {
                issuer: issuer.clone(),
                why,
            })?;
        }
        let resource = Url::parse(&self.resource).map_err(|error| {
            OAuthConfigError::Resource(format!("{} is not a URL: {error}", self.resource))
        })?;
        if !matches!(resource.scheme(), "https" | "http") || resource.fragment().is_some() {
            return Err(OAuthConfigError::Resource(format!(
                "{} must be an http(s) URL without a fragment (RFC 8707)",
                self.resource
            )));
        }
        if self.algorithms.is_empty() {
            return Err(OAuthConfigError::Algorithm("the list is empty".to_owned()));
        }
        if self.principal_claim.trim().is_empty() {
            return Err(OAuthConfigError::PrincipalClaim);
        }
        Ok(())
    }
}

/// Why an issuer URL may not be fetched: https, or http on a loopback address only.
fn check_fetchable(text: &str) -> Result<(), String> {
    let url = Url::parse(text).map_err(|error| format!("not a URL: {error}"))?;
    let loopback = match url.host() {
        Some(url::Host::Domain(name)) => name == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match url.scheme() {
        "https" => Ok(()),
        "http" if loopback => Ok(()),
        _ => Err("must be https (http only on a loopback address, for tests)".to_owned()),
    }
}

/// Parses a comma- or space-separated list of algorithm names (`CARMY_OAUTH_ALGORITHMS`).
///
/// # Errors
/// [`OAuthConfigError::Algorithm`] for an unknown name, `none`, or an HMAC algorithm (a
/// resource server holds no shared secret; accepting HMAC with a public key as its secret is
/// the classic confusion attack).
pub fn parse_algorithms(text: &str) -> Result<Vec<Algorithm>, OAuthConfigError> {
    let mut algorithms = Vec::new();
    for name in text
        .split([',', ' '])
        .map(str::trim)
        .filter(|name| !name.is_empty())
    {
        let algorithm: Algorithm = name.parse().map_err(|_| {
            OAuthConfigError::Algorithm(format!(
                "{name} is not an algorithm this server knows (RS256, PS256, ES256, EdDSA, …)"
            ))
        })?;
        if algorithm.family() == AlgorithmFamily::Hmac {
            return Err(OAuthConfigError::Algorithm(format!(
                "{name} is HMAC, which needs a secret shared with the issuer; only public-key algorithms are accepted"
            )));
        }
        algorithms.push(algorithm);
    }
    Ok(algorithms)
}

/// A setting the resource server cannot run with.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum OAuthConfigError {
    /// No issuer configured.
    #[error(
        "CARMY_OAUTH_ISSUERS is empty: name the authorization server(s) whose tokens to accept"
    )]
    NoIssuer,
    /// An issuer URL that may not be fetched.
    #[error("CARMY_OAUTH_ISSUERS: {issuer} {why}")]
    Issuer {
        /// The issuer as configured.
        issuer: String,
        /// What is wrong with it.
        why: String,
    },
    /// A missing or bad resource identifier.
    #[error("CARMY_OAUTH_RESOURCE: {0}")]
    Resource(String),
    /// A bad algorithm list.
    #[error("CARMY_OAUTH_ALGORITHMS: {0}")]
    Algorithm(String),
    /// A principal prefix that is not `none`, `iss` or `claim:<name>`.
    #[error("CARMY_OAUTH_PRINCIPAL_PREFIX: {0} is not none, iss or claim:<name>")]
    PrincipalPrefix(String),
    /// An empty principal claim name.
    #[error("CARMY_OAUTH_PRINCIPAL_CLAIM must name a claim (default sub)")]
    PrincipalClaim,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithms_never_hmac_or_none() {
        assert_eq!(
            parse_algorithms("RS256, ES256").unwrap(),
            vec![Algorithm::RS256, Algorithm::ES256]
        );
        assert!(parse_algorithms("HS256").is_err());
        assert!(parse_algorithms("none").is_err());
        assert!(parse_algorithms("RS999").is_err());
    }

    #[test]
    fn issuers_must_be_https_or_loopback() {
        let config = |issuer: &str| {
            OAuthConfig::new(vec![issuer.to_owned()], "https://carmy.test/".to_owned()).check()
        };
        assert_eq!(config("https://as.example.com"), Ok(()));
        assert_eq!(config("http://127.0.0.1:9000"), Ok(()));
        assert_eq!(config("http://localhost:9000/realm"), Ok(()));
        assert!(config("http://as.example.com").is_err());
        assert!(matches!(
            OAuthConfig::new(vec![], "https://carmy.test/".into()).check(),
            Err(OAuthConfigError::NoIssuer)
        ));
        assert!(matches!(
            OAuthConfig::new(vec!["https://a".into()], "carmy".into()).check(),
            Err(OAuthConfigError::Resource(_))
        ));
    }
}
