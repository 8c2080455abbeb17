//! Console sessions (docs/operations.md, "The operator console"): a random session id in an
//! `HttpOnly`, `SameSite=Strict` cookie, the operator and a CSRF token kept on the server.
//!
//! The cookie never holds the operator key: logging in checks the key once against
//! `CARMY_OPERATOR_KEYS` and opens a session; the server keeps only the SHA-256 of the session
//! id, so neither a memory dump nor a log line gives a usable cookie. Sessions live in this
//! process: a replica that restarts forgets them (the operator logs in again), and behind a load
//! balancer the console needs sticky sessions or one replica's address.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// The cookie's name.
pub(crate) const COOKIE: &str = "carmy_console";

/// How long an operator's session lasts after logging in (8 h, a shift).
const OPERATOR_LIFETIME: Duration = Duration::from_secs(8 * 3600);

/// How long a login form stays valid (its session holds only the CSRF token).
const LOGIN_LIFETIME: Duration = Duration::from_secs(30 * 60);

/// Sessions kept at most; the oldest goes first past it (a flood of login forms cannot grow
/// memory without bound).
const MAX_SESSIONS: usize = 10_000;

/// One session: the operator once logged in, and the token every form must send back.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    /// The operator's name (`CARMY_OPERATOR_KEYS`); `None` before logging in.
    pub(crate) operator: Option<String>,
    /// The CSRF token of this session's forms.
    pub(crate) csrf: String,
    expires: Instant,
}

impl Session {
    /// Whether `presented` is this session's CSRF token (constant time).
    pub(crate) fn csrf_matches(&self, presented: &str) -> bool {
        let (mine, theirs) = (self.csrf.as_bytes(), presented.as_bytes());
        mine.len() == theirs.len() && bool::from(mine.ct_eq(theirs))
    }
}

/// The sessions of this process, and how their cookie is written.
#[derive(Debug)]
pub(crate) struct Sessions {
    /// By SHA-256 of the session id.
    inner: Mutex<HashMap<[u8; 32], Session>>,
    /// Add `Secure` to the cookie (the console is reached over TLS).
    secure_cookie: bool,
}

/// 256 random bits as 64 hex digits (two version-4 UUIDs: 244 bits from the OS's generator).
fn random_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

fn digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl Sessions {
    /// No sessions; `secure_cookie` adds `Secure` to the cookie.
    pub(crate) fn new(secure_cookie: bool) -> Self {
        Self {
            inner: Mutex::new(HashMap::new()),
            secure_cookie,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Session>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Opens a session (for `operator`, or a login form's when `None`); returns its id (the
    /// cookie's value) and the session.
    pub(crate) fn start(&self, operator: Option<String>) -> (String, Session) {
        let lifetime = if operator.is_some() {
            OPERATOR_LIFETIME
        } else {
            LOGIN_LIFETIME
        };
        let id = random_token();
        let session = Session {
            operator,
            csrf: random_token(),
            expires: Instant::now() + lifetime,
        };
        let mut sessions = self.lock();
        let now = Instant::now();
        sessions.retain(|_, session| session.expires > now);
        if sessions.len() >= MAX_SESSIONS {
            if let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, session)| session.expires)
                .map(|(key, _)| *key)
            {
                sessions.remove(&oldest);
            }
        }
        sessions.insert(digest(&id), session.clone());
        (id, session)
    }

    /// The live session of `id`; `None` when unknown or expired.
    pub(crate) fn get(&self, id: &str) -> Option<Session> {
        let mut sessions = self.lock();
        let key = digest(id);
        match sessions.get(&key) {
            Some(session) if session.expires > Instant::now() => Some(session.clone()),
            Some(_) => {
                sessions.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Ends the session of `id` (logging out, or replacing a login form's session).
    pub(crate) fn end(&self, id: &str) {
        self.lock().remove(&digest(id));
    }

    /// The `Set-Cookie` value for session `id`; `None` clears the cookie.
    pub(crate) fn cookie(&self, id: Option<&str>) -> String {
        let secure = if self.secure_cookie { "; Secure" } else { "" };
        match id {
            Some(id) => format!(
                "{COOKIE}={id}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
                OPERATOR_LIFETIME.as_secs()
            ),
            None => {
                format!("{COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0{secure}")
            }
        }
    }
}

/// The session id of a request's `Cookie` headers, if any.
pub(crate) fn cookie_id(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim().to_owned())
        .filter(|value| !value.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_and_tokens() {
        let sessions = Sessions::new(true);
        let (id, session) = sessions.start(Some("ops".into()));
        assert_eq!(id.len(), 64);
        let found = sessions.get(&id).unwrap();
        assert_eq!(found.operator.as_deref(), Some("ops"));
        assert!(found.csrf_matches(&session.csrf));
        assert!(!found.csrf_matches(""));
        assert!(!found.csrf_matches(&format!("{}x", session.csrf)));
        assert!(sessions.get("nope").is_none());
        assert!(sessions
            .cookie(Some(&id))
            .contains("HttpOnly; SameSite=Strict"));
        assert!(sessions.cookie(Some(&id)).ends_with("; Secure"));
        sessions.end(&id);
        assert!(sessions.get(&id).is_none());
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(
            axum::http::header::COOKIE,
            "a=b; carmy_console=abc".parse().unwrap(),
        );
        assert_eq!(cookie_id(&headers).as_deref(), Some("abc"));
    }
}
