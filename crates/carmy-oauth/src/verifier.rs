//! [`JwtVerifier`]: the check of one bearer access token (docs/semantics.md §6.1).
//!
//! In order: the header's `alg` must be an allowed one (never `none`, never HMAC); the
//! unverified `iss` picks one of the configured issuers (any other is refused before any key is
//! fetched); that issuer's key for the header's `kid` ([`crate::issuer`]); then `jsonwebtoken`
//! verifies the signature and checks `iss`, `aud` (this server's resource identifier, required),
//! `exp` (required) and `nbf` with the leeway. Only then are the claims read: the required
//! scopes, the principal, the operator scope or role.

use crate::config::{OAuthConfig, OAuthConfigError, PrincipalPrefix};
use crate::issuer::IssuerKeys;
use crate::metadata::resource_metadata_url;
use base64::Engine as _;
use carmy::auth::{
    check_token_principal, TokenRefusal, TokenVerifier, Verification, VerifiedToken,
};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// The claims of a token, as JSON.
type Claims = Map<String, Value>;

/// Checks JWT access tokens against the configured issuers' keys.
#[derive(Debug)]
pub struct JwtVerifier {
    config: OAuthConfig,
    issuers: HashMap<String, IssuerKeys>,
    metadata_url: String,
    required_scope: Option<String>,
}

impl JwtVerifier {
    /// A verifier for `config` ([`OAuthConfig::check`]ed here); keys are fetched on first use.
    ///
    /// # Errors
    /// [`OAuthConfigError`] for settings it cannot run with.
    pub fn new(config: OAuthConfig) -> Result<Self, OAuthConfigError> {
        config.check()?;
        let client = reqwest::Client::builder()
            .timeout(config.fetch_timeout)
            .user_agent(concat!("carmy/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| OAuthConfigError::Resource(format!("HTTP client: {error}")))?;
        let issuers = config
            .issuers
            .iter()
            .map(|issuer| {
                let keys = IssuerKeys::new(issuer.clone(), client.clone(), config.min_refresh);
                (issuer.clone(), keys)
            })
            .collect();
        let metadata_url =
            resource_metadata_url(&config.resource).map_err(OAuthConfigError::Resource)?;
        let required_scope =
            (!config.required_scopes.is_empty()).then(|| config.required_scopes.join(" "));
        Ok(Self {
            config,
            issuers,
            metadata_url,
            required_scope,
        })
    }

    /// The settings.
    pub fn config(&self) -> &OAuthConfig {
        &self.config
    }

    async fn check(&self, token: &str) -> Result<VerifiedToken, TokenRefusal> {
        let (header, claims) = peek(token)?;
        let Some(Value::String(alg)) = header.get("alg") else {
            return Err(TokenRefusal::Malformed);
        };
        let algorithm = alg
            .parse::<Algorithm>()
            .ok()
            .filter(|algorithm| self.config.algorithms.contains(algorithm))
            .ok_or(TokenRefusal::DisallowedAlgorithm)?;
        let Some(Value::String(issuer)) = claims.get("iss") else {
            return Err(TokenRefusal::WrongIssuer);
        };
        let keys = self.issuers.get(issuer).ok_or(TokenRefusal::WrongIssuer)?;
        let kid = match header.get("kid") {
            Some(Value::String(kid)) => Some(kid.as_str()),
            None => None,
            Some(_) => return Err(TokenRefusal::Malformed),
        };
        let jwk = keys.key(kid).await?;
        if jwk
            .common
            .key_algorithm
            .is_some_and(|declared| declared.to_string() != alg.as_str())
        {
            return Err(TokenRefusal::DisallowedAlgorithm);
        }
        let key = DecodingKey::from_jwk(&jwk).map_err(|_| TokenRefusal::UnknownKey)?;
        let mut validation = Validation::new(algorithm);
        validation.set_issuer(&[issuer]);
        validation.set_audience(&[&self.config.resource]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = self.config.leeway.as_secs();
        let claims = jsonwebtoken::decode::<Claims>(token, &key, &validation)
            .map_err(|error| refusal(error.kind()))?
            .claims;
        self.caller(issuer, &claims)
    }

    /// The scopes, principal and operator rights of verified `claims`.
    fn caller(&self, issuer: &str, claims: &Claims) -> Result<VerifiedToken, TokenRefusal> {
        let scopes = values(claims.get("scope").or_else(|| claims.get("scp")));
        if !self
            .config
            .required_scopes
            .iter()
            .all(|required| scopes.contains(&required.as_str()))
        {
            return Err(TokenRefusal::MissingScope);
        }
        let Some(Value::String(name)) = claims.get(&self.config.principal_claim) else {
            return Err(TokenRefusal::NoPrincipal);
        };
        // `<prefix>|<name>` is one principal per pair only if the prefix holds no `|` and the
        // name is not empty: `acme|auth0` + `123` must never meet `acme` + `auth0|123`.
        let prefixed = |prefix: &str| -> Result<String, TokenRefusal> {
            if prefix.contains('|') || name.is_empty() {
                return Err(TokenRefusal::BadPrincipal);
            }
            Ok(format!("{prefix}|{name}"))
        };
        let principal = match &self.config.principal_prefix {
            PrincipalPrefix::None => name.clone(),
            PrincipalPrefix::Issuer => prefixed(issuer)?,
            PrincipalPrefix::Claim(claim) => match claims.get(claim) {
                Some(Value::String(prefix)) if !prefix.is_empty() => prefixed(prefix)?,
                _ => return Err(TokenRefusal::NoPrincipal),
            },
        };
        check_token_principal(&principal)?;
        // The default claim, `scope`, is read as the scopes are (`scope`, else `scp`).
        let operator_words = if self.config.operator_claim == "scope" {
            scopes
        } else {
            values(claims.get(&self.config.operator_claim))
        };
        let operator = self
            .config
            .operator_value
            .as_deref()
            .is_some_and(|wanted| operator_words.contains(&wanted));
        Ok(VerifiedToken {
            principal,
            operator,
        })
    }
}

impl TokenVerifier for JwtVerifier {
    fn verify<'a>(&'a self, token: &'a str) -> Verification<'a> {
        Box::pin(async move {
            let checked = self.check(token).await;
            if let Err(refusal) = &checked {
                // What failed, never a claim value or the token.
                tracing::info!(?refusal, "access token refused");
            }
            checked
        })
    }

    fn resource_metadata_url(&self) -> &str {
        &self.metadata_url
    }

    fn required_scope(&self) -> Option<&str> {
        self.required_scope.as_deref()
    }
}

/// The unverified header and claims of a compact JWS, to pick the issuer and refuse a bad
/// `alg` by name; nothing in them is trusted until `jsonwebtoken::decode` verified them.
fn peek(token: &str) -> Result<(Claims, Claims), TokenRefusal> {
    let mut parts = token.split('.');
    let (Some(header), Some(claims), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenRefusal::Malformed);
    };
    let segment = |text: &str| -> Result<Claims, TokenRefusal> {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .map_err(|_| TokenRefusal::Malformed)?;
        serde_json::from_slice(&bytes).map_err(|_| TokenRefusal::Malformed)
    };
    Ok((segment(header)?, segment(claims)?))
}

/// The words of a scope-like claim: a space-separated string or an array of strings.
fn values(claim: Option<&Value>) -> Vec<&str> {
    match claim {
        Some(Value::String(text)) => text.split_whitespace().collect(),
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// The refusal of a `jsonwebtoken` error.
fn refusal(kind: &ErrorKind) -> TokenRefusal {
    match kind {
        ErrorKind::InvalidSignature => TokenRefusal::BadSignature,
        ErrorKind::ExpiredSignature => TokenRefusal::Expired,
        ErrorKind::ImmatureSignature => TokenRefusal::NotYetValid,
        ErrorKind::InvalidAudience => TokenRefusal::WrongAudience,
        ErrorKind::MissingRequiredClaim(claim) if claim == "aud" => TokenRefusal::WrongAudience,
        ErrorKind::InvalidIssuer => TokenRefusal::WrongIssuer,
        ErrorKind::MissingRequiredClaim(claim) if claim == "exp" => TokenRefusal::BadTimes,
        ErrorKind::InvalidClaimFormat(claim) if claim == "exp" || claim == "nbf" => {
            TokenRefusal::BadTimes
        }
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
            TokenRefusal::DisallowedAlgorithm
        }
        ErrorKind::InvalidEcdsaKey
        | ErrorKind::InvalidEddsaKey
        | ErrorKind::InvalidRsaKey(_)
        | ErrorKind::InvalidKeyFormat => TokenRefusal::BadSignature,
        _ => TokenRefusal::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn verifier(prefix: PrincipalPrefix) -> JwtVerifier {
        let mut config = OAuthConfig::new(
            vec!["https://as.test".to_owned()],
            "https://carmy.test/".to_owned(),
        );
        config.principal_prefix = prefix;
        config.required_scopes = vec!["carmy".to_owned()];
        config.operator_value = Some("carmy:operator".to_owned());
        JwtVerifier::new(config).unwrap()
    }

    fn claims(value: Value) -> Claims {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn principals_and_operators_from_claims() {
        let plain = verifier(PrincipalPrefix::None);
        let caller = |v: &JwtVerifier, c: Value| v.caller("https://as.test", &claims(c));
        assert_eq!(
            caller(&plain, json!({"sub": "u1", "scope": "openid carmy"})),
            Ok(VerifiedToken {
                principal: "u1".into(),
                operator: false
            })
        );
        assert_eq!(
            caller(
                &plain,
                json!({"sub": "u1", "scp": ["carmy", "carmy:operator"]})
            ),
            Ok(VerifiedToken {
                principal: "u1".into(),
                operator: true
            })
        );
        assert_eq!(
            caller(&plain, json!({"sub": "u1", "scope": "openid"})),
            Err(TokenRefusal::MissingScope)
        );
        assert_eq!(
            caller(&plain, json!({"sub": 7, "scope": "carmy"})),
            Err(TokenRefusal::NoPrincipal)
        );
        assert_eq!(
            caller(&plain, json!({"sub": "a\u{1}", "scope": "carmy"})),
            Err(TokenRefusal::BadPrincipal)
        );
        let by_issuer = verifier(PrincipalPrefix::Issuer);
        assert_eq!(
            caller(&by_issuer, json!({"sub": "u1", "scope": "carmy"})).map(|t| t.principal),
            Ok("https://as.test|u1".to_owned())
        );
        let by_tenant = verifier(PrincipalPrefix::Claim("tid".into()));
        assert_eq!(
            caller(
                &by_tenant,
                json!({"sub": "u1", "tid": "t9", "scope": "carmy"})
            )
            .map(|t| t.principal),
            Ok("t9|u1".to_owned())
        );
        assert_eq!(
            caller(&by_tenant, json!({"sub": "u1", "scope": "carmy"})),
            Err(TokenRefusal::NoPrincipal)
        );
    }

    #[test]
    fn refuses_before_fetching_keys() {
        let v = verifier(PrincipalPrefix::None);
        let run = |token: &str| futures::executor::block_on(v.check(token));
        let b64 = |value: Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string())
        };
        let token = |header: Value, claims: Value| format!("{}.{}.c2ln", b64(header), b64(claims));
        assert_eq!(run("not-a-jwt"), Err(TokenRefusal::Malformed));
        assert_eq!(
            run(&format!(
                "{}.{}.",
                b64(json!({"alg": "none"})),
                b64(json!({"iss": "https://as.test"}))
            )),
            Err(TokenRefusal::DisallowedAlgorithm)
        );
        assert_eq!(
            run(&token(
                json!({"alg": "HS256"}),
                json!({"iss": "https://as.test"})
            )),
            Err(TokenRefusal::DisallowedAlgorithm)
        );
        assert_eq!(
            run(&token(
                json!({"alg": "RS256"}),
                json!({"iss": "https://evil.test"})
            )),
            Err(TokenRefusal::WrongIssuer)
        );
    }
}
