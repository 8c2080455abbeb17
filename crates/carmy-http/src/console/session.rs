//! Console sessions (docs/operations.md, "The operator console"): a random session id in an
//! `HttpOnly`, `SameSite=Strict` cookie, the operator and a CSRF token kept on the server.
//!
//! The cookie never holds the operator key: logging in checks the key once against
//! `CARMY_OPERATOR_KEYS` and opens a session; the server keeps only the SHA-256 of the session
//! id, so neither a memory dump nor a log line gives a usable cookie. Sessions live in this
//! process: a replica that restarts forgets them (the operator logs in again), and behind a load
//! balancer the console needs sticky sessions or one replica's address.
//!
//! The login form keeps nothing on the server: its CSRF token is an HMAC-SHA-256, under a key
//! drawn at random when the process starts, over a random nonce and the form's expiry; the
//! nonce also goes into a cookie of its own (`carmy_console_login`, double submit), and a login
//! post must carry both. So any number of login forms fetched by anyone allocates nothing and
//! pushes out no operator's session or pending login. A form shown by another process (another
//! replica, or this one before a restart) does not verify: the operator reloads it.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use subtle::ConstantTimeEq;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "carmy_console";

/// The login form's cookie: the nonce its token is bound to.
pub(crate) const LOGIN_COOKIE: &str = "carmy_console_login";

/// How long an operator's session lasts after logging in (8 h, a shift).
const OPERATOR_LIFETIME: Duration = Duration::from_secs(8 * 3600);

/// How long a login form stays valid.
pub(crate) const LOGIN_LIFETIME: Duration = Duration::from_secs(30 * 60);

/// Sessions kept at most; the oldest goes first past it. Only a login with an operator key
/// opens one.
const MAX_SESSIONS: usize = 10_000;

/// What a login form's MAC covers before its nonce and expiry (a domain separator).
const LOGIN_MAC_CONTEXT: &[u8] = b"carmy console login form v1\n";

/// One operator's session: who logged in, and the token every form must send back.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    /// The operator's name (`CARMY_OPERATOR_KEYS`).
    pub(crate) operator: String,
    /// The CSRF token of this session's forms.
    pub(crate) csrf: String,
    expires: Instant,
}

/// Why a login form's token is refused (every case is a 403; the page says what to do).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LoginRefusal {
    /// No token, one of another shape, or a token without its cookie (or with another
    /// browser's): a forged post, or a browser that keeps no cookies.
    Forged,
    /// The token was not made by this process: another replica served the form, or this one
    /// restarted since.
    OtherProcess,
    /// The form is older than [`LOGIN_LIFETIME`].
    Expired,
}

/// The sessions of this process, the key of its login forms, and how their cookies are written.
pub(crate) struct Sessions {
    /// By SHA-256 of the session id.
    inner: Mutex<HashMap<[u8; 32], Session>>,
    /// Add `Secure` to the cookies (the console is reached over TLS).
    secure_cookie: bool,
    /// The key of the login forms' MACs: random, drawn at start, never leaves the process.
    login_key: [u8; 32],
}

impl std::fmt::Debug for Sessions {
    /// Everything but the login key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("secure_cookie", &self.secure_cookie)
            .finish_non_exhaustive()
    }
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

/// Whether `text` is 64 lowercase hex digits (a [`random_token`]).
fn is_token(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Seconds since the Unix epoch now.
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

impl Sessions {
    /// No sessions, a fresh login key; `secure_cookie` adds `Secure` to the cookies.
    pub(crate) fn new(secure_cookie: bool) -> Self {
        let mut login_key = [0_u8; 32];
        login_key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        login_key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        Self {
            inner: Mutex::new(HashMap::new()),
            secure_cookie,
            login_key,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Session>> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Opens `operator`'s session; returns its id (the cookie's value) and the session.
    pub(crate) fn start(&self, operator: String) -> (String, Session) {
        let id = random_token();
        let session = Session {
            operator,
            csrf: random_token(),
            expires: Instant::now() + OPERATOR_LIFETIME,
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

    /// Ends the session of `id` (logging out, or logging in again).
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

    /// The MAC of a login form with `nonce` valid until `expires` (Unix seconds).
    fn login_mac(&self, nonce: &str, expires: u64) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.login_key)
            .expect("HMAC takes a key of any length");
        mac.update(LOGIN_MAC_CONTEXT);
        mac.update(nonce.as_bytes());
        mac.update(b"\n");
        mac.update(expires.to_string().as_bytes());
        mac
    }

    /// The token of a login form with `nonce`, valid until `expires` (Unix seconds):
    /// `nonce.expires.mac`.
    fn login_token_until(&self, nonce: &str, expires: u64) -> String {
        let mac = self.login_mac(nonce, expires).finalize().into_bytes();
        format!("{nonce}.{expires}.{}", hex::encode(mac))
    }

    /// A new login form: the nonce for its cookie (the browser's own when it sent one, so that
    /// two open login forms both work) and the token for its hidden field. Keeps nothing.
    pub(crate) fn login_form(&self, cookie_nonce: Option<&str>) -> (String, String) {
        let nonce = cookie_nonce
            .filter(|nonce| is_token(nonce))
            .map_or_else(random_token, str::to_owned);
        let token = self.login_token_until(&nonce, unix_now() + LOGIN_LIFETIME.as_secs());
        (nonce, token)
    }

    /// Checks a login post's `token` against the browser's login cookie (`cookie_nonce`).
    pub(crate) fn check_login(
        &self,
        cookie_nonce: Option<&str>,
        token: &str,
    ) -> Result<(), LoginRefusal> {
        let mut parts = token.split('.');
        let (Some(nonce), Some(expires), Some(mac), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(LoginRefusal::Forged);
        };
        let expires: u64 = expires.parse().map_err(|_| LoginRefusal::Forged)?;
        let mac = hex::decode(mac).map_err(|_| LoginRefusal::Forged)?;
        let cookie = cookie_nonce.unwrap_or_default();
        if !is_token(nonce) || !bool::from(cookie.as_bytes().ct_eq(nonce.as_bytes())) {
            return Err(LoginRefusal::Forged);
        }
        self.login_mac(nonce, expires)
            .verify_slice(&mac)
            .map_err(|_| LoginRefusal::OtherProcess)?;
        if unix_now() > expires {
            return Err(LoginRefusal::Expired);
        }
        Ok(())
    }

    /// The `Set-Cookie` value of the login form's cookie holding `nonce` (sent to the login
    /// route only); `None` clears it.
    pub(crate) fn login_cookie(&self, nonce: Option<&str>) -> String {
        let secure = if self.secure_cookie { "; Secure" } else { "" };
        let (value, age) = match nonce {
            Some(nonce) => (nonce, LOGIN_LIFETIME.as_secs()),
            None => ("", 0),
        };
        format!(
            "{LOGIN_COOKIE}={value}; Path=/console/login; HttpOnly; SameSite=Strict; Max-Age={age}{secure}"
        )
    }

    /// How many operator sessions are held (expired ones included until the next login).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// The value of cookie `name` in a request's `Cookie` headers, if any.
fn cookie_value(headers: &axum::http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(found, _)| *found == name)
        .map(|(_, value)| value.trim().to_owned())
        .filter(|value| !value.is_empty())
}

/// The session id of a request's `Cookie` headers, if any.
pub(crate) fn cookie_id(headers: &axum::http::HeaderMap) -> Option<String> {
    cookie_value(headers, COOKIE)
}

/// The login form's nonce in a request's `Cookie` headers, if any.
pub(crate) fn login_nonce(headers: &axum::http::HeaderMap) -> Option<String> {
    cookie_value(headers, LOGIN_COOKIE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_and_tokens() {
        let sessions = Sessions::new(true);
        let (id, session) = sessions.start("ops".into());
        assert_eq!(id.len(), 64);
        let found = sessions.get(&id).unwrap();
        assert_eq!(found.operator, "ops");
        assert_eq!(found.csrf, session.csrf);
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
            "a=b; carmy_console=abc; carmy_console_login=def"
                .parse()
                .unwrap(),
        );
        assert_eq!(cookie_id(&headers).as_deref(), Some("abc"));
        assert_eq!(login_nonce(&headers).as_deref(), Some("def"));
    }

    #[test]
    fn login_forms_keep_nothing_and_verify_only_with_their_cookie_here() {
        let sessions = Sessions::new(false);
        let (nonce, token) = sessions.login_form(None);
        for _ in 0..100 {
            sessions.login_form(None);
        }
        assert_eq!(sessions.len(), 0, "a login form keeps nothing");
        assert_eq!(sessions.check_login(Some(&nonce), &token), Ok(()));
        // Again: a form stays valid until it expires.
        assert_eq!(sessions.check_login(Some(&nonce), &token), Ok(()));
        // The browser's own cookie is kept for its next form: both forms verify.
        let (again, second) = sessions.login_form(Some(&nonce));
        assert_eq!(again, nonce);
        assert_eq!(sessions.check_login(Some(&nonce), &second), Ok(()));
        assert_eq!(sessions.login_form(Some("short")).0.len(), 64);

        let forged = |cookie: Option<&str>, token: &str| {
            assert_eq!(
                sessions.check_login(cookie, token),
                Err(LoginRefusal::Forged),
                "{cookie:?} {token}"
            );
        };
        forged(None, &token);
        forged(Some(&random_token()), &token);
        forged(Some(&nonce), "");
        forged(Some(&nonce), &nonce);
        forged(Some(&nonce), &format!("{token}.x"));
        forged(Some(&nonce), &token.replace('.', ","));
        // A changed MAC or expiry, or another process's form: not this process's token.
        let (head, mac) = token.rsplit_once('.').unwrap();
        let flipped = if mac.starts_with('0') { "1" } else { "0" };
        let other_mac = format!("{head}.{flipped}{}", &mac[1..]);
        assert_eq!(
            sessions.check_login(Some(&nonce), &other_mac),
            Err(LoginRefusal::OtherProcess)
        );
        let expires: u64 = token.split('.').nth(1).unwrap().parse().unwrap();
        let later = format!("{nonce}.{}.{mac}", expires + 3600);
        assert_eq!(
            sessions.check_login(Some(&nonce), &later),
            Err(LoginRefusal::OtherProcess)
        );
        let (other_nonce, other_token) = Sessions::new(false).login_form(None);
        assert_eq!(
            sessions.check_login(Some(&other_nonce), &other_token),
            Err(LoginRefusal::OtherProcess)
        );
        // Past its expiry.
        let old = sessions.login_token_until(&nonce, unix_now() - 1);
        assert_eq!(
            sessions.check_login(Some(&nonce), &old),
            Err(LoginRefusal::Expired)
        );

        let cookie = sessions.login_cookie(Some(&nonce));
        assert!(cookie.starts_with(&format!(
            "carmy_console_login={nonce}; Path=/console/login;"
        )));
        assert!(cookie.contains("HttpOnly; SameSite=Strict; Max-Age=1800"));
        assert!(sessions.login_cookie(None).contains("Max-Age=0"));
    }
}
