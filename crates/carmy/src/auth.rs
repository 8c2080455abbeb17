//! API keys and principals (docs/semantics.md §6).
//!
//! Keys are kept only as SHA-256 digests. A presented key is hashed, then compared with every
//! configured digest in constant time (`subtle`), without stopping at a match, so the time a check
//! takes does not depend on how much of a key an attacker guessed. No key text is kept or logged.

mod tokens;

pub use tokens::{
    check_token_principal, TokenRefusal, TokenVerifier, Verification, VerifiedToken,
    KEY_OR_TOKEN_REQUIRED, MAX_TOKEN_PRINCIPAL_BYTES,
};

use sha2::{Digest, Sha256};
use std::sync::Arc;
use subtle::{ConditionallySelectable, ConstantTimeEq};

/// The principal of every caller when no keys are configured.
pub const ANONYMOUS_PRINCIPAL: &str = "anonymous";

/// A malformed key list.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApiKeysError {
    /// An entry is not `key=principal` with both sides non-empty (entries are numbered from 1).
    #[error("API key entry {0} is not of the form key=principal")]
    Malformed(usize),
    /// The same key appears twice.
    #[error("API key entry {0} repeats an earlier key")]
    Duplicate(usize),
}

/// The configured API keys, mapping each key to its principal.
#[derive(Clone, Default)]
pub struct ApiKeys {
    /// (SHA-256 of the key, principal), in configuration order.
    entries: Vec<([u8; 32], String)>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKeys")
            .field("keys", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl ApiKeys {
    /// No keys: every caller is [`ANONYMOUS_PRINCIPAL`].
    pub fn none() -> Self {
        Self::default()
    }

    /// Parses `key=principal` entries separated by commas or newlines (`CARMY_API_KEYS`, or a
    /// keys file). Blank entries and lines starting with `#` are ignored; whitespace around
    /// keys and principals is trimmed.
    ///
    /// # Errors
    /// [`ApiKeysError`] naming the entry; the key text is never included.
    pub fn parse(text: &str) -> Result<Self, ApiKeysError> {
        let mut keys = Self::default();
        let entries = text
            .split([',', '\n'])
            .map(str::trim)
            .filter(|entry| !entry.is_empty() && !entry.starts_with('#'));
        for (index, entry) in entries.enumerate() {
            let number = index + 1;
            let (key, principal) = entry
                .split_once('=')
                .map(|(key, principal)| (key.trim(), principal.trim()))
                .filter(|(key, principal)| !key.is_empty() && !principal.is_empty())
                .ok_or(ApiKeysError::Malformed(number))?;
            let key_digest = digest(key);
            if keys.entries.iter().any(|(known, _)| *known == key_digest) {
                return Err(ApiKeysError::Duplicate(number));
            }
            keys.entries.push((key_digest, principal.to_owned()));
        }
        Ok(keys)
    }

    /// True when no keys are configured (anonymous mode).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many keys are configured.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The principal of an `Authorization` header value, per docs/semantics.md §6:
    /// anonymous mode → [`ANONYMOUS_PRINCIPAL`] whatever was sent; otherwise the header must be
    /// `Bearer <known key>`. `None` means 401.
    pub fn authenticate(&self, authorization: Option<&[u8]>) -> Option<String> {
        if self.is_empty() {
            return Some(ANONYMOUS_PRINCIPAL.to_owned());
        }
        self.find(authorization)
    }

    /// The name of a configured key that the `Authorization` header value presents
    /// (`Bearer <key>`), with no anonymous fallback: `None` when no key matches or none is
    /// configured. Used for operator keys (`CARMY_OPERATOR_KEYS`, docs/semantics.md §12.1).
    pub fn find(&self, authorization: Option<&[u8]>) -> Option<String> {
        let value = std::str::from_utf8(authorization?).ok()?;
        let (scheme, key) = value.trim().split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let presented = digest(key.trim());
        // Index of the matching entry plus one, or 0; every entry is compared.
        let mut found = 0u32;
        for (index, (known, _)) in self.entries.iter().enumerate() {
            let candidate = u32::try_from(index + 1).unwrap_or(u32::MAX);
            found.conditional_assign(&candidate, known.ct_eq(&presented));
        }
        let index = usize::try_from(found).ok()?.checked_sub(1)?;
        self.entries
            .get(index)
            .map(|(_, principal)| principal.clone())
    }
}

impl ApiKeys {
    /// Whether a key of `self` is also a key of `other` (an API key that is also an operator
    /// key would be ambiguous).
    pub fn shares_a_key_with(&self, other: &Self) -> bool {
        self.entries
            .iter()
            .any(|(mine, _)| other.entries.iter().any(|(theirs, _)| mine == theirs))
    }
}

/// An authenticated caller (docs/semantics.md §6, §12.1): its principal and, for an operator key,
/// the operator's name. An operator may decide on and list any principal's executions, and
/// is no principal: every route that acts as a principal (calls, reading or cancelling an
/// execution, an identity lookup) refuses it, whatever its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The principal whose records the caller reads and writes; for an operator, its name,
    /// never used as a principal (check [`Caller::operator`] first).
    pub principal: String,
    /// `Some(name)` for an operator key of `CARMY_OPERATOR_KEYS`.
    pub operator: Option<String>,
}

impl Caller {
    /// A caller with an API key (or anonymous): no operator rights.
    pub fn principal(principal: impl Into<String>) -> Self {
        Self {
            principal: principal.into(),
            operator: None,
        }
    }

    /// An operator named `name`.
    pub fn operator(name: impl Into<String>) -> Self {
        let name = name.into();
        Self {
            principal: name.clone(),
            operator: Some(name),
        }
    }

    /// Who acts, as decisions and audit rows record it: `operator:<name>` for an operator, the
    /// principal otherwise.
    pub fn actor(&self) -> String {
        match &self.operator {
            Some(name) => format!("operator:{name}"),
            None => self.principal.clone(),
        }
    }

    /// The principal a decision or listing is limited to: `None` for an operator (every
    /// principal), else the caller's own.
    pub fn scope(&self) -> Option<String> {
        match self.operator {
            Some(_) => None,
            None => Some(self.principal.clone()),
        }
    }
}

/// Why a request's credential is refused (docs/semantics.md §6). Every front answers it as 401
/// `UNAUTHORIZED` with this text as the detail (HTTP words [`AuthError::OperatorKey`] with its
/// routes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// A bearer token that is no API key and no valid access token (docs/semantics.md
    /// §6.1): 401 `invalid_token`, or 403 `insufficient_scope`, or 503 when the issuer's
    /// keys could not be fetched.
    #[error("{}", .0.detail())]
    Token(TokenRefusal),
    /// No credential where one is required, an unknown key, or two `Authorization` headers
    /// (ambiguous).
    #[error("a valid API key is required: send Authorization: Bearer <key>")]
    Unauthorized,
    /// A credential sent to a server without API keys: it cannot be checked, so the request is
    /// not run as [`ANONYMOUS_PRINCIPAL`].
    #[error("this server has no API keys configured, so it cannot check the Authorization header: send the request without it (every caller is the principal anonymous), or configure API keys on the server (gateway: CARMY_API_KEYS or CARMY_API_KEYS_FILE)")]
    NoApiKeys,
    /// An operator key where a principal acts (a call, reading or cancelling an execution):
    /// operators list and decide executions, and are no principal.
    #[error("this is an operator key: it lists executions and decides them (resolve, release) over the HTTP API, but it is not a principal and cannot call tools or act as one; send an API key (CARMY_API_KEYS) for that")]
    OperatorKey,
}

/// The keys a server accepts (docs/semantics.md §6, §12): API keys, each naming a principal, and
/// operator keys, each naming an operator. The one check of a request's credential, for every
/// front (HTTP and `/mcp`).
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    api_keys: ApiKeys,
    operator_keys: ApiKeys,
    tokens: Option<Arc<dyn TokenVerifier>>,
}

impl Credentials {
    /// The API keys (none: anonymous mode) and the operator keys (none: no operators).
    pub fn new(api_keys: ApiKeys, operator_keys: ApiKeys) -> Self {
        Self {
            api_keys,
            operator_keys,
            tokens: None,
        }
    }

    /// Accepts OAuth access tokens beside the keys (docs/semantics.md §6.1): a server
    /// with tokens is never anonymous.
    #[must_use]
    pub fn with_tokens(mut self, verifier: Arc<dyn TokenVerifier>) -> Self {
        self.tokens = Some(verifier);
        self
    }

    /// True when OAuth access tokens are accepted ([`Credentials::with_tokens`]).
    pub fn accepts_tokens(&self) -> bool {
        self.tokens.is_some()
    }

    /// True when neither API keys nor tokens are configured: every caller is
    /// [`ANONYMOUS_PRINCIPAL`].
    pub fn is_anonymous(&self) -> bool {
        self.api_keys.is_empty() && self.tokens.is_none()
    }

    /// The `WWW-Authenticate` value of a refusal (RFC 6750 §3, RFC 9728 §5.1): `Bearer` alone
    /// without tokens; with tokens, `resource_metadata="…"` and, for a refused token,
    /// `error="invalid_token"` or `error="insufficient_scope"` (with the required `scope`).
    pub fn challenge(&self, refused: &AuthError) -> String {
        let Some(tokens) = &self.tokens else {
            return "Bearer".to_owned();
        };
        let mut value = format!(
            "Bearer resource_metadata=\"{}\"",
            tokens.resource_metadata_url()
        );
        match refused {
            AuthError::Token(TokenRefusal::MissingScope) => {
                value.push_str(", error=\"insufficient_scope\"");
                if let Some(scope) = tokens.required_scope() {
                    value.push_str(&format!(", scope=\"{scope}\""));
                }
            }
            AuthError::Token(TokenRefusal::KeysUnavailable) => {}
            AuthError::Token(_) => value.push_str(", error=\"invalid_token\""),
            _ => {}
        }
        value
    }

    /// [`Credentials::authenticate`], and, when tokens are configured, a bearer value that is
    /// no key is checked as an access token (docs/semantics.md §6.1): a token with the
    /// operator scope is an operator named by its principal, others are their principal.
    ///
    /// # Errors
    /// As [`Credentials::authenticate`], and [`AuthError::Token`] for a refused token.
    pub async fn caller<'a>(
        &self,
        mut authorization: impl Iterator<Item = &'a [u8]>,
    ) -> Result<Caller, AuthError> {
        let value = authorization.next();
        if authorization.next().is_some() {
            return Err(AuthError::Unauthorized);
        }
        Ok(match self.token_or_key(value).await? {
            Checked::Key(caller) => caller,
            Checked::Token(token) if token.operator => Caller::operator(token.principal),
            Checked::Token(token) => Caller::principal(token.principal),
        })
    }

    /// The principal of a request that acts as one, by [`Credentials::caller`]: an operator
    /// key is refused ([`AuthError::OperatorKey`]); a token acts as its principal, with or
    /// without the operator scope.
    ///
    /// # Errors
    /// As [`Credentials::caller`].
    pub async fn acting_principal<'a>(
        &self,
        mut authorization: impl Iterator<Item = &'a [u8]>,
    ) -> Result<String, AuthError> {
        let value = authorization.next();
        if authorization.next().is_some() {
            return Err(AuthError::Unauthorized);
        }
        match self.token_or_key(value).await? {
            Checked::Key(caller) if caller.operator.is_some() => Err(AuthError::OperatorKey),
            Checked::Key(caller) => Ok(caller.principal),
            Checked::Token(token) => Ok(token.principal),
        }
    }

    async fn token_or_key(&self, value: Option<&[u8]>) -> Result<Checked, AuthError> {
        let by_key = self.authenticate(value.into_iter());
        let Some(tokens) = &self.tokens else {
            return by_key.map(Checked::Key);
        };
        match by_key {
            Err(AuthError::Unauthorized) => {}
            other => return other.map(Checked::Key),
        }
        let Some(token) = value.and_then(bearer) else {
            return Err(AuthError::Unauthorized);
        };
        tokens
            .verify(token)
            .await
            .map(Checked::Token)
            .map_err(AuthError::Token)
    }

    /// The caller of a request whose `Authorization` header values are `authorization`: an
    /// operator for an operator key, else the principal of an API key (anonymous mode: the
    /// anonymous principal, for a request without a credential).
    ///
    /// # Errors
    /// [`AuthError::Unauthorized`] for two values or an unknown key;
    /// [`AuthError::NoApiKeys`] for a credential sent to a server without API keys.
    pub fn authenticate<'a>(
        &self,
        mut authorization: impl Iterator<Item = &'a [u8]>,
    ) -> Result<Caller, AuthError> {
        let value = authorization.next();
        if authorization.next().is_some() {
            // Two credentials are ambiguous: refuse rather than pick one.
            return Err(AuthError::Unauthorized);
        }
        if let Some(name) = self.operator_keys.find(value) {
            return Ok(Caller::operator(name));
        }
        if value.is_some() && self.is_anonymous() {
            // A caller that sends a credential expects to be someone; a server without keys
            // cannot check it, so it says so instead of running the call as `anonymous`.
            return Err(AuthError::NoApiKeys);
        }
        if self.is_anonymous() {
            return Ok(Caller::principal(ANONYMOUS_PRINCIPAL));
        }
        self.api_keys
            .find(value)
            .map(Caller::principal)
            .ok_or(AuthError::Unauthorized)
    }

    /// The principal of a request that acts as one (a call, reading or cancelling an
    /// execution): [`Credentials::authenticate`], refusing operators, who are told apart by the
    /// kind of their key, never by name.
    ///
    /// # Errors
    /// As [`Credentials::authenticate`], and [`AuthError::OperatorKey`] for an operator key.
    pub fn principal<'a>(
        &self,
        authorization: impl Iterator<Item = &'a [u8]>,
    ) -> Result<String, AuthError> {
        let caller = self.authenticate(authorization)?;
        if caller.operator.is_some() {
            return Err(AuthError::OperatorKey);
        }
        Ok(caller.principal)
    }
}

/// What [`Credentials::token_or_key`] found: a key's caller or a token's claims.
enum Checked {
    Key(Caller),
    Token(VerifiedToken),
}

/// The credential of a `Bearer` value, if it is one.
fn bearer(value: &[u8]) -> Option<&str> {
    let (scheme, credential) = std::str::from_utf8(value).ok()?.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credential.trim())
        .filter(|credential| !credential.is_empty())
}

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_authenticates() {
        let keys = ApiKeys::parse("k1=alice, k2=bob\n# comment\nk3 = carol").unwrap();
        assert_eq!(keys.len(), 3);
        assert_eq!(keys.authenticate(Some(b"Bearer k1")), Some("alice".into()));
        assert_eq!(keys.authenticate(Some(b"bearer k3")), Some("carol".into()));
        assert_eq!(keys.authenticate(Some(b"Bearer k4")), None);
        assert_eq!(keys.authenticate(Some(b"Basic k1")), None);
        assert_eq!(keys.authenticate(Some(b"k1")), None);
        assert_eq!(keys.authenticate(None), None);
        assert_eq!(keys.authenticate(Some(&[0xff, 0xfe])), None);
    }

    #[test]
    fn one_check_for_api_and_operator_keys() {
        let keys = ApiKeys::parse("k1=alice").unwrap();
        let operators = ApiKeys::parse("op=ops").unwrap();
        let credentials = Credentials::new(keys, operators.clone());
        let check = |values: &[&[u8]]| credentials.authenticate(values.iter().copied());
        assert_eq!(check(&[b"Bearer k1"]), Ok(Caller::principal("alice")));
        assert_eq!(check(&[b"Bearer op"]), Ok(Caller::operator("ops")));
        assert_eq!(check(&[]), Err(AuthError::Unauthorized));
        assert_eq!(check(&[b"Bearer k2"]), Err(AuthError::Unauthorized));
        assert_eq!(
            check(&[b"Bearer k1", b"Bearer k1"]),
            Err(AuthError::Unauthorized)
        );
        let principal = |values: &[&[u8]]| credentials.principal(values.iter().copied());
        assert_eq!(principal(&[b"Bearer k1"]), Ok("alice".to_owned()));
        assert_eq!(principal(&[b"Bearer op"]), Err(AuthError::OperatorKey));

        let anonymous = Credentials::new(ApiKeys::none(), operators);
        let check = |values: &[&[u8]]| anonymous.authenticate(values.iter().copied());
        assert_eq!(check(&[]), Ok(Caller::principal(ANONYMOUS_PRINCIPAL)));
        assert_eq!(check(&[b"Bearer k1"]), Err(AuthError::NoApiKeys));
        assert_eq!(check(&[b"Bearer op"]), Ok(Caller::operator("ops")));
    }

    #[test]
    fn rejects_bad_lists() {
        assert_eq!(
            ApiKeys::parse("k1").unwrap_err(),
            ApiKeysError::Malformed(1)
        );
        assert_eq!(
            ApiKeys::parse("k1=a,=b").unwrap_err(),
            ApiKeysError::Malformed(2)
        );
        assert_eq!(
            ApiKeys::parse("k1=a,k1=b").unwrap_err(),
            ApiKeysError::Duplicate(2)
        );
    }

    #[test]
    fn anonymous_without_keys() {
        assert_eq!(
            ApiKeys::none().authenticate(Some(b"Bearer x")),
            Some(ANONYMOUS_PRINCIPAL.into())
        );
    }
}
