//! Real HTTP upstreams for the configured-tool tests, on 127.0.0.1 ports of their own: an axum
//! server that records every request it receives (method, raw path and query, the idempotency
//! key, `traceparent`, `authorization`, body) and answers by path, and a raw TCP server that
//! reads a request and resets the connection.

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// One request as the upstream received it.
#[derive(Clone, Debug)]
pub struct Arrival {
    pub method: String,
    /// The request target exactly as sent: raw path and query.
    pub target: String,
    pub idempotency_key: Option<String>,
    pub traceparent: Option<String>,
    pub authorization: Option<String>,
    pub body: String,
}

/// A running upstream; it stops when dropped.
pub struct Upstream {
    pub address: SocketAddr,
    arrivals: Arc<Mutex<Vec<Arrival>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Bodies the upstream answers with, by path.
pub const JSON_BODY: &str =
    r#"{"big":123456789012345678901234567890,"id":7,"nested":{"b":[1,2.50,"x"]}}"#;
pub const TEXT_BODY: &str = "plain text, not JSON\n";
pub const NOT_FOUND_BODY: &str = r#"{"error":"no such customer"}"#;
pub const SERVER_ERROR_BODY: &str = "upstream exploded";

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
}

/// Answers a request, the `nth` (1-based) the upstream received for its path.
async fn answer(method: Method, uri: Uri, headers: HeaderMap, body: Bytes, nth: usize) -> Response {
    let target = uri
        .path_and_query()
        .map_or_else(|| uri.path().to_owned(), |pq| pq.as_str().to_owned());
    let path = uri.path().to_owned();
    let reply =
        |status: u16, body: String| (StatusCode::from_u16(status).unwrap(), body).into_response();
    match path.as_str() {
        "/json" => reply(201, JSON_BODY.to_owned()),
        "/text" => reply(200, TEXT_BODY.to_owned()),
        "/empty" => StatusCode::NO_CONTENT.into_response(),
        "/missing" => reply(404, NOT_FOUND_BODY.to_owned()),
        "/boom" => reply(500, SERVER_ERROR_BODY.to_owned()),
        "/busy" => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "7")],
            "slow down",
        )
            .into_response(),
        "/big" => reply(200, format!("\"{}\"", "x".repeat(5000))),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            reply(200, "\"late\"".to_owned())
        }
        // A payment is made, then the answer is the status the path names (`/paid-then/502`).
        path if path.starts_with("/paid-then/") => {
            let status = path["/paid-then/".len()..].parse().unwrap();
            reply(
                status,
                format!(r#"{{"payment_id":"pay_{nth}","charged":true}}"#),
            )
        }
        // An error body that echoes the request's credentials, as careless upstreams do.
        "/reflect" => {
            let echo = serde_json::json!({
                "error": "unauthorized",
                "received": {"authorization": header(&headers, "authorization")},
            });
            reply(401, echo.to_string())
        }
        "/redirect" => (StatusCode::FOUND, [("location", "/json")], "").into_response(),
        // The first request never gets an answer (its caller is killed meanwhile); later ones
        // fall through to the echo.
        path if path.starts_with("/stuck-once") && nth == 1 => {
            tokio::time::sleep(Duration::from_secs(600)).await;
            reply(504, "\"too late\"".to_owned())
        }
        // The second request of a taken-over call meets a busy upstream (429, "nothing
        // happened" for tools that list it); later ones fall through to the echo.
        path if path.starts_with("/stuck-once-busy") && nth == 2 => {
            reply(429, "\"busy\"".to_owned())
        }
        _ => {
            let echo = serde_json::json!({
                "method": method.as_str(),
                "target": target,
                "body": String::from_utf8_lossy(&body),
                "key": header(&headers, "idempotency-key"),
            });
            reply(200, echo.to_string())
        }
    }
}

impl Upstream {
    /// Starts an upstream on an ephemeral port.
    pub async fn start() -> Self {
        Self::start_on(TcpListener::bind("127.0.0.1:0").await.unwrap())
    }

    /// Starts an upstream on `listener`.
    pub fn start_on(listener: TcpListener) -> Self {
        let address = listener.local_addr().unwrap();
        let arrivals: Arc<Mutex<Vec<Arrival>>> = Arc::default();
        let recorded = Arc::clone(&arrivals);
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let recorded = Arc::clone(&recorded);
                async move {
                    let nth = {
                        let mut arrivals = recorded.lock().unwrap();
                        arrivals.push(Arrival {
                            method: method.to_string(),
                            target: uri
                                .path_and_query()
                                .map_or_else(|| uri.path().to_owned(), |pq| pq.as_str().to_owned()),
                            idempotency_key: header(&headers, "idempotency-key"),
                            traceparent: header(&headers, "traceparent"),
                            authorization: header(&headers, "authorization"),
                            body: String::from_utf8_lossy(&body).into_owned(),
                        });
                        arrivals
                            .iter()
                            .filter(|a| a.target.split('?').next() == Some(uri.path()))
                            .count()
                    };
                    answer(method, uri, headers, body, nth).await
                }
            },
        );
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            address,
            arrivals,
            server,
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Every request received so far.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.arrivals.lock().unwrap().clone()
    }

    /// The requests received for `path` (raw path, without query).
    pub fn arrivals_at(&self, path: &str) -> Vec<Arrival> {
        self.arrivals()
            .into_iter()
            .filter(|arrival| arrival.target.split('?').next() == Some(path))
            .collect()
    }
}

/// A server that reads each request's head and then resets the connection (RST), counting the
/// requests it read.
pub struct Resetter {
    pub address: SocketAddr,
    pub requests: Arc<Mutex<u32>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Resetter {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Resetter {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let requests: Arc<Mutex<u32>> = Arc::default();
        let counted = Arc::clone(&requests);
        let server = tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut head = Vec::new();
                let mut buffer = [0_u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buffer[..n]),
                    }
                }
                if head.windows(4).any(|w| w == b"\r\n\r\n") {
                    *counted.lock().unwrap() += 1;
                }
                // Linger 0: closing sends RST instead of FIN.
                let _ = stream.set_zero_linger();
                drop(stream);
            }
        });
        Self {
            address,
            requests,
            server,
        }
    }

    pub fn requests(&self) -> u32 {
        *self.requests.lock().unwrap()
    }
}

/// A loopback port with nothing listening on it (bound, then released).
pub async fn refused_address() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}
