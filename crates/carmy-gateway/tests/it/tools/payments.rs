//! A real HTTP payments upstream for the reconciliation tests (docs/semantics.md §12.10,
//! reconciliation): `POST /pay/<mode>` takes a payment under its `Idempotency-Key`, and
//! `GET /lookup?idempotency_key=K` finds it (200 with the payment) or not (404). Modes:
//! `commit-*` keeps the payment and never answers (the caller is killed meanwhile: the effect
//! happened, the answer was lost); `lost-*` never answers its first request and keeps nothing
//! (the effect did not happen), later requests keep the payment and answer 201; any other
//! mode keeps the payment and answers 201; `hidden-*` keeps the payment where no lookup finds
//! it (a lookup that lags behind the writes, or a payment still being processed) and answers
//! 201 only once the test opens the gate ([`Payments::open_gate`]), keeping it then even if its
//! caller went away meanwhile (a request that lands after its client died). `GET /lookup-down`
//! answers 503, `GET /lookup-slow` answers after a minute, `GET /lookup-echo` answers like
//! `/lookup` with the request's `Authorization` header in the payment (an upstream that echoes
//! a secret).

use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

#[derive(Default)]
struct Ledger {
    /// Payments by idempotency key.
    payments: HashMap<String, Value>,
    /// Every `POST /pay/...`: path and idempotency key.
    posts: Vec<(String, Option<String>)>,
    /// Every lookup: path and the key asked about.
    lookups: Vec<(String, String)>,
    /// The `Idempotency-Key` header and the query of every lookup, in order.
    lookup_requests: Vec<(Option<String>, String)>,
}

/// A running payments upstream; it stops when dropped.
pub struct Payments {
    address: SocketAddr,
    ledger: Arc<Mutex<Ledger>>,
    gate: Arc<tokio::sync::Semaphore>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Payments {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The key a lookup asks about, from `idempotency_key=` in the query.
fn asked_key(uri: &Uri) -> String {
    uri.query()
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("idempotency_key="))
        .unwrap_or_default()
        .to_owned()
}

async fn answer(
    ledger: Arc<Mutex<Ledger>>,
    gate: Arc<tokio::sync::Semaphore>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: String,
) -> Response {
    let path = uri.path().to_owned();
    if method == Method::GET {
        let key = asked_key(&uri);
        let found = {
            let mut ledger = ledger.lock().unwrap();
            ledger.lookups.push((path.clone(), key.clone()));
            let header = headers
                .get("idempotency-key")
                .map(|value| value.to_str().unwrap().to_owned());
            let query = uri.query().unwrap_or_default().to_owned();
            ledger.lookup_requests.push((header, query));
            ledger.payments.get(&key).cloned()
        };
        return match path.as_str() {
            "/lookup-down" => (StatusCode::SERVICE_UNAVAILABLE, "maintenance").into_response(),
            "/lookup-slow" => {
                tokio::time::sleep(Duration::from_secs(60)).await;
                StatusCode::NOT_FOUND.into_response()
            }
            "/lookup-echo" => match found {
                Some(mut payment) => {
                    payment["seen_authorization"] = json!(headers
                        .get("authorization")
                        .map(|value| value.to_str().unwrap().to_owned()));
                    (StatusCode::OK, payment.to_string()).into_response()
                }
                None => (StatusCode::NOT_FOUND, r#"{"error":"no such payment"}"#).into_response(),
            },
            _ => match found {
                Some(payment) => (StatusCode::OK, payment.to_string()).into_response(),
                None => (StatusCode::NOT_FOUND, r#"{"error":"no such payment"}"#).into_response(),
            },
        };
    }
    let key = headers
        .get("idempotency-key")
        .map(|value| value.to_str().unwrap().to_owned());
    let amount = serde_json::from_str::<Value>(&body).unwrap_or_default()["amount"].clone();
    let (first_on_path, payment) = {
        let mut ledger = ledger.lock().unwrap();
        let first = !ledger.posts.iter().any(|(seen, _)| *seen == path);
        ledger.posts.push((path.clone(), key.clone()));
        let number = ledger.payments.len() + 1;
        let payment = json!({"payment_id": format!("pay_{number}"), "amount": amount, "key": key});
        (first, payment)
    };
    let keep = |payment: &Value| {
        let mut ledger = ledger.lock().unwrap();
        ledger
            .payments
            .insert(key.clone().unwrap_or_default(), payment.clone());
    };
    if path.starts_with("/pay/commit") {
        keep(&payment);
        std::future::pending::<()>().await;
    }
    if path.starts_with("/pay/hidden") {
        // Committed, but no lookup sees it until the gate opens; carried out even when the
        // caller goes away meanwhile (the server drops this handler then, not the work).
        let work = tokio::spawn({
            let ledger = Arc::clone(&ledger);
            let payment = payment.clone();
            let key = key.clone();
            async move {
                gate.acquire().await.unwrap().forget();
                let mut ledger = ledger.lock().unwrap();
                ledger.payments.insert(key.unwrap_or_default(), payment);
            }
        });
        work.await.unwrap();
        return (StatusCode::CREATED, payment.to_string()).into_response();
    }
    if first_on_path && path.starts_with("/pay/lost") {
        std::future::pending::<()>().await;
    }
    keep(&payment);
    (StatusCode::CREATED, payment.to_string()).into_response()
}

impl Payments {
    /// Starts the upstream on an ephemeral port.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let ledger: Arc<Mutex<Ledger>> = Arc::default();
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let shared = Arc::clone(&ledger);
        let opens = Arc::clone(&gate);
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: String| {
                answer(
                    Arc::clone(&shared),
                    Arc::clone(&opens),
                    method,
                    uri,
                    headers,
                    body,
                )
            },
        );
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            address,
            ledger,
            gate,
            server,
        }
    }

    /// Lets every `hidden-*` payment held so far (and later) answer 201.
    pub fn open_gate(&self) {
        self.gate.add_permits(1000);
    }

    /// The `Idempotency-Key` header and the query of every lookup, in order.
    pub fn lookup_requests(&self) -> Vec<(Option<String>, String)> {
        self.ledger.lock().unwrap().lookup_requests.clone()
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The payment kept under `key`.
    pub fn payment(&self, key: &str) -> Option<Value> {
        self.ledger.lock().unwrap().payments.get(key).cloned()
    }

    /// The idempotency keys of the `POST`s to `path`, in order.
    pub fn posts_at(&self, path: &str) -> Vec<Option<String>> {
        let ledger = self.ledger.lock().unwrap();
        ledger
            .posts
            .iter()
            .filter(|(seen, _)| seen == path)
            .map(|(_, key)| key.clone())
            .collect()
    }

    /// How many lookups asked about `key` (on any lookup path).
    pub fn lookups_of(&self, key: &str) -> usize {
        let ledger = self.ledger.lock().unwrap();
        ledger
            .lookups
            .iter()
            .filter(|(_, asked)| asked == key)
            .count()
    }
}
