//! The OAuth 2.1 resource server's settings (docs/operations.md "OAuth access tokens",
//! docs/semantics.md §6.1): flags and environment variables, turned into
//! [`carmy_oauth::OAuthConfig`]. Unset `CARMY_OAUTH_ISSUERS` means no tokens are accepted.

use carmy_oauth::config::parse_algorithms;
use carmy_oauth::{OAuthConfig, OAuthConfigError, PrincipalPrefix};
use clap::Args;
use std::time::Duration;

/// The `CARMY_OAUTH_*` settings.
#[derive(Clone, Debug, Args)]
pub struct OAuthArgs {
    /// Issuers (authorization servers) whose JWT access tokens `/v1` and `/mcp` accept beside
    /// API keys, comma separated, exactly as their tokens' `iss` (https; http on loopback only).
    /// Their keys come from their metadata's `jwks_uri`. Unset: no tokens.
    #[arg(long, env = "CARMY_OAUTH_ISSUERS", value_delimiter = ',')]
    pub oauth_issuers: Vec<String>,

    /// This server's resource identifier (RFC 8707): the audience (`aud`) every token must
    /// name, and `resource` of /.well-known/oauth-protected-resource, e.g.
    /// `https://carmy.example.com/`. Required with CARMY_OAUTH_ISSUERS.
    #[arg(long, env = "CARMY_OAUTH_RESOURCE")]
    pub oauth_resource: Option<String>,

    /// Accepted signature algorithms, comma separated (never none or HMAC). Default: RS256,
    /// RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA.
    #[arg(long, env = "CARMY_OAUTH_ALGORITHMS")]
    pub oauth_algorithms: Option<String>,

    /// The claim that names the principal.
    #[arg(long, env = "CARMY_OAUTH_PRINCIPAL_CLAIM", default_value = "sub")]
    pub oauth_principal_claim: String,

    /// Prefix of the principal: `none`, `iss` (`<iss>|<sub>`) or `claim:<name>`
    /// (`<that claim>|<sub>`, e.g. a tenant id).
    #[arg(long, env = "CARMY_OAUTH_PRINCIPAL_PREFIX", default_value = "none")]
    pub oauth_principal_prefix: String,

    /// Scopes every token must carry, space or comma separated (403 insufficient_scope
    /// otherwise). Default: none.
    #[arg(long, env = "CARMY_OAUTH_REQUIRED_SCOPE")]
    pub oauth_required_scope: Option<String>,

    /// The scope (or role value, see --oauth-operator-claim) that makes a token's caller an
    /// operator on /v1 (lists and decides any principal's executions). Default: no token is.
    #[arg(long, env = "CARMY_OAUTH_OPERATOR_SCOPE")]
    pub oauth_operator_scope: Option<String>,

    /// The claim holding the operator value: `scope` (also `scp`), or e.g. `roles`.
    #[arg(long, env = "CARMY_OAUTH_OPERATOR_CLAIM", default_value = "scope")]
    pub oauth_operator_claim: String,

    /// Clock skew allowed on exp and nbf, in seconds.
    #[arg(long, env = "CARMY_OAUTH_LEEWAY_SECONDS", default_value_t = 30)]
    pub oauth_leeway_seconds: u64,

    /// The shortest time between two fetches of an issuer's keys, in milliseconds: an unknown
    /// kid refetches them only after it.
    #[arg(
        long,
        env = "CARMY_OAUTH_JWKS_MIN_REFRESH_MS",
        default_value_t = 30_000
    )]
    pub oauth_jwks_min_refresh_ms: u64,
}

impl OAuthArgs {
    /// The resource server's settings, or `None` without issuers.
    ///
    /// # Errors
    /// [`OAuthConfigError`] naming the setting.
    pub fn config(&self) -> Result<Option<OAuthConfig>, OAuthConfigError> {
        let issuers: Vec<String> = self
            .oauth_issuers
            .iter()
            .map(|issuer| issuer.trim().to_owned())
            .filter(|issuer| !issuer.is_empty())
            .collect();
        if issuers.is_empty() {
            return Ok(None);
        }
        let resource = self.oauth_resource.clone().ok_or_else(|| {
            OAuthConfigError::Resource(
                "unset: name this server's resource identifier, the audience its tokens carry (e.g. https://carmy.example.com/)".to_owned(),
            )
        })?;
        let mut config = OAuthConfig::new(issuers, resource.trim().to_owned());
        if let Some(text) = &self.oauth_algorithms {
            config.algorithms = parse_algorithms(text)?;
        }
        config.principal_claim = self.oauth_principal_claim.trim().to_owned();
        config.principal_prefix = match self.oauth_principal_prefix.trim() {
            "none" | "" => PrincipalPrefix::None,
            "iss" => PrincipalPrefix::Issuer,
            other => match other.strip_prefix("claim:").map(str::trim) {
                Some(claim) if !claim.is_empty() => PrincipalPrefix::Claim(claim.to_owned()),
                _ => return Err(OAuthConfigError::PrincipalPrefix(other.to_owned())),
            },
        };
        config.required_scopes = self
            .oauth_required_scope
            .as_deref()
            .unwrap_or_default()
            .split([' ', ','])
            .filter(|scope| !scope.is_empty())
            .map(str::to_owned)
            .collect();
        config.operator_value = self
            .oauth_operator_scope
            .as_deref()
            .map(str::trim)
            .filter(|value| !value.is_empty())
            .map(str::to_owned);
        config.operator_claim = self.oauth_operator_claim.trim().to_owned();
        config.leeway = Duration::from_secs(self.oauth_leeway_seconds);
        config.min_refresh = Duration::from_millis(self.oauth_jwks_min_refresh_ms);
        config.check()?;
        Ok(Some(config))
    }
}
