//! Access tokens beside API keys (docs/semantics.md §6.1): the seam through which a
//! front checks an OAuth 2.1 bearer token. The core only names what a check says
//! ([`VerifiedToken`], [`TokenRefusal`]); fetching keys and checking signatures live outside the
//! core (the gateway's `carmy-oauth` crate implements [`TokenVerifier`]).

use std::future::Future;
use std::pin::Pin;

/// The detail of a missing or unknown credential on a server that also accepts access tokens
/// (instead of [`super::AuthError::Unauthorized`]'s, which names API keys only).
pub const KEY_OR_TOKEN_REQUIRED: &str = "a valid API key or OAuth access token is required: send Authorization: Bearer <key or token>; an OAuth client finds the authorization server in the resource metadata that WWW-Authenticate names (/.well-known/oauth-protected-resource)";

/// The longest principal a token may name, in bytes (docs/semantics.md §6).
pub const MAX_TOKEN_PRINCIPAL_BYTES: usize = 255;

/// What a valid access token says about its caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedToken {
    /// The principal (the configured claim, optionally prefixed), already checked against
    /// [`check_token_principal`].
    pub principal: String,
    /// True when the token carries the configured operator scope or role.
    pub operator: bool,
}

/// Why a bearer token is refused. Every variant but [`TokenRefusal::MissingScope`] and
/// [`TokenRefusal::KeysUnavailable`] is `error="invalid_token"` (RFC 6750 §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenRefusal {
    /// Not a compact JWS with a header, claims and a signature.
    Malformed,
    /// An algorithm outside the allowed list (`none` and HMAC are never allowed).
    DisallowedAlgorithm,
    /// No key of the issuer's JWKS has the token's `kid`, even after one refresh.
    UnknownKey,
    /// The signature does not verify with the issuer's key.
    BadSignature,
    /// `iss` is not a configured issuer.
    WrongIssuer,
    /// `aud` does not name this server's resource identifier.
    WrongAudience,
    /// `exp` has passed (beyond the leeway).
    Expired,
    /// `nbf` is still ahead (beyond the leeway).
    NotYetValid,
    /// `exp` is missing, or `exp` or `nbf` is not a number of seconds since the epoch: the
    /// token's lifetime cannot be checked, so it is refused.
    BadTimes,
    /// The principal claim is missing or not a string.
    NoPrincipal,
    /// The principal is empty, longer than [`MAX_TOKEN_PRINCIPAL_BYTES`], holds a control
    /// character or begins with `operator:` (how the audit trail names operators); or its
    /// prefix holds a `|` or its name is empty, so that two users never join to one principal.
    BadPrincipal,
    /// The token lacks the scope every request needs (`error="insufficient_scope"`, 403).
    MissingScope,
    /// The issuer's keys could not be fetched: nothing is wrong with the token as far as is
    /// known; 503, retry later.
    KeysUnavailable,
}

impl TokenRefusal {
    /// What to tell the caller (no claim values, no key material).
    pub fn detail(self) -> &'static str {
        match self {
            Self::Malformed => "the bearer token is neither an API key of this server nor a signed JWT access token (header.claims.signature); obtain a token from the authorization server named in /.well-known/oauth-protected-resource",
            Self::DisallowedAlgorithm => "the access token is signed with an algorithm this server does not accept (never none or HMAC; see CARMY_OAUTH_ALGORITHMS); obtain a new token",
            Self::UnknownKey => "the access token names a signing key (kid) the issuer does not publish, even after refreshing its keys; obtain a new token",
            Self::BadSignature => "the access token's signature does not verify with the issuer's key; obtain a new token",
            Self::WrongIssuer => "the access token comes from an issuer this server does not trust (CARMY_OAUTH_ISSUERS); obtain a token from the authorization server named in /.well-known/oauth-protected-resource",
            Self::WrongAudience => "the access token was issued for another resource: its aud does not name this server (CARMY_OAUTH_RESOURCE); request a token with this server's resource identifier (RFC 8707 resource parameter)",
            Self::Expired => "the access token has expired; refresh it or obtain a new one",
            Self::NotYetValid => "the access token is not valid yet (nbf is in the future); check the clocks, or wait",
            Self::BadTimes => "the access token has no exp claim, or its exp or nbf is not a number of seconds since 1970 (RFC 7519 NumericDate); this server only accepts tokens whose lifetime it can check: the authorization server must issue them with a numeric exp",
            Self::NoPrincipal => "the access token has no principal claim (CARMY_OAUTH_PRINCIPAL_CLAIM, default sub) as a string; the authorization server must include it",
            Self::BadPrincipal => "the access token's principal claim is empty, longer than 255 bytes, holds a control character or begins with operator: (or, with CARMY_OAUTH_PRINCIPAL_PREFIX, its prefix holds a |); this server cannot use it as a principal",
            Self::MissingScope => "the access token lacks the scope this server requires (CARMY_OAUTH_REQUIRED_SCOPE); request a token with that scope",
            Self::KeysUnavailable => "the issuer's signing keys could not be fetched to check the access token; nothing ran; retry later",
        }
    }
}

/// Checks a token's principal (docs/semantics.md §6.1): 1 to [`MAX_TOKEN_PRINCIPAL_BYTES`]
/// bytes, no control characters, not beginning with `operator:`.
///
/// # Errors
/// [`TokenRefusal::BadPrincipal`].
pub fn check_token_principal(principal: &str) -> Result<(), TokenRefusal> {
    if principal.is_empty()
        || principal.len() > MAX_TOKEN_PRINCIPAL_BYTES
        || principal.chars().any(char::is_control)
        // The audit trail names operators `operator:<name>` (§12.1): a token's user must not
        // read as one there.
        || principal.starts_with("operator:")
    {
        return Err(TokenRefusal::BadPrincipal);
    }
    Ok(())
}

/// The future of one token check.
pub type Verification<'a> =
    Pin<Box<dyn Future<Output = Result<VerifiedToken, TokenRefusal>> + Send + 'a>>;

/// Checks bearer access tokens for [`super::Credentials`] (docs/semantics.md §6).
pub trait TokenVerifier: Send + Sync + std::fmt::Debug {
    /// Checks `token` (the text after `Bearer `).
    fn verify<'a>(&'a self, token: &'a str) -> Verification<'a>;

    /// The URL of this server's protected resource metadata (RFC 9728), named in every 401's
    /// `WWW-Authenticate` challenge.
    fn resource_metadata_url(&self) -> &str;

    /// The scope a token must carry, named in an `insufficient_scope` challenge.
    fn required_scope(&self) -> Option<&str>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principal_rules() {
        assert_eq!(check_token_principal("alice"), Ok(()));
        assert_eq!(check_token_principal(&"a".repeat(255)), Ok(()));
        let refused = Err(TokenRefusal::BadPrincipal);
        assert_eq!(check_token_principal(""), refused);
        assert_eq!(check_token_principal(&"a".repeat(256)), refused);
        assert_eq!(check_token_principal("a\u{0}b"), refused);
        assert_eq!(check_token_principal("a\nb"), refused);
    }
}

#[cfg(test)]
mod credential_tests {
    use super::*;
    use crate::auth::{ApiKeys, AuthError, Caller, Credentials};
    use std::sync::Arc;

    /// Accepts `good-<name>` (and `op-<name>` as an operator), refuses the rest as expired.
    #[derive(Debug)]
    struct Fake;

    impl TokenVerifier for Fake {
        fn verify<'a>(&'a self, token: &'a str) -> Verification<'a> {
            Box::pin(async move {
                if let Some(name) = token.strip_prefix("good-") {
                    return Ok(VerifiedToken {
                        principal: name.to_owned(),
                        operator: false,
                    });
                }
                if let Some(name) = token.strip_prefix("op-") {
                    return Ok(VerifiedToken {
                        principal: name.to_owned(),
                        operator: true,
                    });
                }
                Err(TokenRefusal::Expired)
            })
        }
        fn resource_metadata_url(&self) -> &str {
            "https://carmy.test/.well-known/oauth-protected-resource"
        }
        fn required_scope(&self) -> Option<&str> {
            Some("carmy")
        }
    }

    fn run<T>(future: impl std::future::Future<Output = T>) -> T {
        futures::executor::block_on(future)
    }

    #[test]
    fn tokens_beside_keys() {
        let credentials = Credentials::new(
            ApiKeys::parse("k1=alice").unwrap(),
            ApiKeys::parse("op=ops").unwrap(),
        )
        .with_tokens(Arc::new(Fake));
        assert!(!credentials.is_anonymous());
        let caller = |values: &[&[u8]]| run(credentials.caller(values.iter().copied()));
        assert_eq!(caller(&[b"Bearer k1"]), Ok(Caller::principal("alice")));
        assert_eq!(caller(&[b"Bearer op"]), Ok(Caller::operator("ops")));
        assert_eq!(caller(&[b"Bearer good-u1"]), Ok(Caller::principal("u1")));
        assert_eq!(caller(&[b"Bearer op-u2"]), Ok(Caller::operator("u2")));
        assert_eq!(
            caller(&[b"Bearer stale"]),
            Err(AuthError::Token(TokenRefusal::Expired))
        );
        assert_eq!(caller(&[]), Err(AuthError::Unauthorized));
        assert_eq!(caller(&[b"Basic good-u1"]), Err(AuthError::Unauthorized));
        let acting = |values: &[&[u8]]| run(credentials.acting_principal(values.iter().copied()));
        assert_eq!(acting(&[b"Bearer op-u2"]), Ok("u2".to_owned()));
        assert_eq!(acting(&[b"Bearer op"]), Err(AuthError::OperatorKey));
        assert_eq!(
            credentials.challenge(&AuthError::Token(TokenRefusal::Expired)),
            "Bearer resource_metadata=\"https://carmy.test/.well-known/oauth-protected-resource\", error=\"invalid_token\""
        );
        assert_eq!(
            credentials.challenge(&AuthError::Token(TokenRefusal::MissingScope)),
            "Bearer resource_metadata=\"https://carmy.test/.well-known/oauth-protected-resource\", error=\"insufficient_scope\", scope=\"carmy\""
        );
        assert_eq!(
            credentials.challenge(&AuthError::Unauthorized),
            "Bearer resource_metadata=\"https://carmy.test/.well-known/oauth-protected-resource\""
        );
    }

    #[test]
    fn tokens_without_api_keys_are_not_anonymous() {
        let credentials =
            Credentials::new(ApiKeys::none(), ApiKeys::none()).with_tokens(Arc::new(Fake));
        let caller = |values: &[&[u8]]| run(credentials.caller(values.iter().copied()));
        assert_eq!(caller(&[]), Err(AuthError::Unauthorized));
        assert_eq!(caller(&[b"Bearer good-u1"]), Ok(Caller::principal("u1")));
        assert_eq!(
            caller(&[b"Bearer nope"]),
            Err(AuthError::Token(TokenRefusal::Expired))
        );
    }
}
