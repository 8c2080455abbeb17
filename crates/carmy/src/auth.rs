//! API keys and principals (contract §6).
//!
//! Keys are kept only as SHA-256 digests, and a presented key is hashed before the lookup, so
//! the time a lookup takes does not depend on how much of a key an attacker guessed, and no key
//! text is ever kept or logged.

use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// The principal of every caller when no keys are configured.
pub const ANONYMOUS_PRINCIPAL: &str = "anonymous";

/// A malformed key list.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApiKeysError {
    /// An entry is not `key=principal` with both sides non-empty (entries are numbered from 1).
    #[error("API key entry {0} is not of the form key=principal")]
    Malformed(usize),
    /// The same key appears twice.
    #[error("API key entry {0} repeats an earlier key")]
    Duplicate(usize),
}

/// The configured API keys, mapping each key to its principal.
#[derive(Clone, Debug, Default)]
pub struct ApiKeys {
    by_digest: HashMap<[u8; 32], String>,
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
            if keys
                .by_digest
                .insert(digest(key), principal.to_owned())
                .is_some()
            {
                return Err(ApiKeysError::Duplicate(number));
            }
        }
        Ok(keys)
    }

    /// True when no keys are configured (anonymous mode).
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    /// How many keys are configured.
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// The principal of an `Authorization` header value, per contract §6:
    /// anonymous mode → [`ANONYMOUS_PRINCIPAL`] whatever was sent; otherwise the header must be
    /// `Bearer <known key>`. `None` means 401.
    pub fn authenticate(&self, authorization: Option<&[u8]>) -> Option<String> {
        if self.is_empty() {
            return Some(ANONYMOUS_PRINCIPAL.to_owned());
        }
        let value = std::str::from_utf8(authorization?).ok()?;
        let (scheme, key) = value.trim().split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        self.by_digest.get(&digest(key.trim())).cloned()
    }
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
