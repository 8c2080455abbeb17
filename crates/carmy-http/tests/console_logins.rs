//! The console's login limits (docs/operations.md, "The operator console"): per client
//! address and per key prefix, through the real router with each request's peer address
//! (`ConnectInfo`, as `App::serve` gives it). A thousand wrong keys from one address: refused
//! after the limit, while the right key from another address still logs in; behind a trusted
//! proxy the client is the one `X-Forwarded-For` names.

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use carmy::auth::ApiKeys;
use http_body_util::BodyExt;
use std::net::{IpAddr, SocketAddr};
use tower::ServiceExt;

/// What a login post got back.
struct Answer {
    status: StatusCode,
    retry_after: Option<String>,
    location: Option<String>,
    body: String,
}

/// The console's router with the operator key `ko-right-key` (named `ops`), trusting
/// `proxies`.
fn router(proxies: Vec<IpAddr>) -> Router {
    carmy_http::app()
        .api_keys(ApiKeys::parse("ka=alice").unwrap())
        .operator_keys(ApiKeys::parse("ko-right-key=ops").unwrap())
        .trusted_proxies(proxies)
        .build()
        .unwrap()
        .router()
}

fn peer(address: &str) -> ConnectInfo<SocketAddr> {
    ConnectInfo(SocketAddr::new(address.parse().unwrap(), 40_000))
}

/// A browser at one address: the login form's cookie and the latest form's token.
struct Browser {
    address: String,
    forwarded_for: Option<String>,
    cookie: String,
    token: String,
}

/// The CSRF token of the login form in `html`.
fn csrf(html: &str) -> String {
    let start = html.find("name=\"csrf\" value=\"").unwrap() + 19;
    let length = html[start..].find('"').unwrap();
    html[start..start + length].to_owned()
}

impl Browser {
    /// Opens the login form from `address` (through a proxy when `forwarded_for` is set).
    async fn open(router: &Router, address: &str, forwarded_for: Option<&str>) -> Self {
        let mut request = Request::get("/console/login").body(Body::empty()).unwrap();
        request.extensions_mut().insert(peer(address));
        let response = router.clone().oneshot(request).await.unwrap();
        let cookie = response.headers()[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_owned();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Self {
            address: address.to_owned(),
            forwarded_for: forwarded_for.map(str::to_owned),
            cookie,
            token: csrf(std::str::from_utf8(&body).unwrap()),
        }
    }

    /// Posts the login form with `key`; keeps the token of the form that comes back.
    async fn login(&mut self, router: &Router, key: &str) -> Answer {
        let mut request = Request::post("/console/login")
            .header(header::COOKIE, &self.cookie)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        if let Some(client) = &self.forwarded_for {
            request = request.header("x-forwarded-for", client);
        }
        let mut request = request
            .body(Body::from(format!("key={key}&csrf={}", self.token)))
            .unwrap();
        request.extensions_mut().insert(peer(&self.address));
        let response = router.clone().oneshot(request).await.unwrap();
        let text = |name: header::HeaderName| {
            response
                .headers()
                .get(name)
                .map(|value| value.to_str().unwrap().to_owned())
        };
        let (retry_after, location) = (text(header::RETRY_AFTER), text(header::LOCATION));
        let status = response.status();
        let body = String::from_utf8(
            response
                .into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .to_vec(),
        )
        .unwrap();
        if body.contains("name=\"csrf\"") {
            self.token = csrf(&body);
        }
        Answer {
            status,
            retry_after,
            location,
            body,
        }
    }
}

#[tokio::test]
async fn a_thousand_wrong_keys_from_one_address_are_refused_after_the_limit() {
    let router = router(Vec::new());
    let mut attacker = Browser::open(&router, "192.0.2.66", None).await;
    let mut statuses = Vec::new();
    for n in 0..1000 {
        // Each guess begins differently: only the address limit applies.
        let answer = attacker.login(&router, &format!("{n:04}-guess")).await;
        if answer.status == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(answer.retry_after.as_deref(), Some("60"));
            assert!(
                answer.body.contains("Too many login attempts"),
                "{}",
                answer.body
            );
        }
        statuses.push(answer.status);
    }
    // The first ten are checked (unknown key), every later one refused unchecked.
    assert_eq!(statuses[..10], [StatusCode::UNAUTHORIZED; 10]);
    assert!(statuses[10..]
        .iter()
        .all(|status| *status == StatusCode::TOO_MANY_REQUESTS));
    // Even the right key is refused from that address now: a refused guess tells nothing.
    let right = attacker.login(&router, "ko-right-key").await;
    assert_eq!(right.status, StatusCode::TOO_MANY_REQUESTS);

    // The operator, at another address, logs in.
    let mut operator = Browser::open(&router, "198.51.100.7", None).await;
    let answer = operator.login(&router, "ko-right-key").await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    assert_eq!(answer.location.as_deref(), Some("/console/executions"));
}

#[tokio::test]
async fn keys_that_begin_alike_are_limited_across_addresses() {
    let router = router(Vec::new());
    // Thirty addresses, one guess each, all beginning "ko-right": the 31st is refused
    // wherever it comes from, even with the right key; a key that begins otherwise is checked.
    for n in 0..30 {
        let mut browser = Browser::open(&router, &format!("203.0.113.{n}"), None).await;
        let answer = browser.login(&router, &format!("ko-right-{n}")).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{n}");
    }
    let mut late = Browser::open(&router, "203.0.113.200", None).await;
    assert_eq!(
        late.login(&router, "ko-right-key").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    let mut other = Browser::open(&router, "203.0.113.201", None).await;
    assert_eq!(
        other.login(&router, "ka").await.status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_client_is_counted_by_its_forwarded_address() {
    let router = router(vec!["10.0.0.5".parse().unwrap()]);
    // Through the proxy, one client exhausts its limit.
    let mut attacker = Browser::open(&router, "10.0.0.5", Some("192.0.2.66")).await;
    for n in 0..10 {
        let answer = attacker.login(&router, &format!("{n:04}-guess")).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{n}");
    }
    assert_eq!(
        attacker.login(&router, "0010-guess").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another client through the same proxy is counted apart and logs in.
    let mut operator = Browser::open(&router, "10.0.0.5", Some("198.51.100.7")).await;
    assert_eq!(
        operator.login(&router, "ko-right-key").await.status,
        StatusCode::SEE_OTHER
    );
    // A client that is not a trusted proxy cannot pick its address with the header.
    let mut forging = Browser::open(&router, "192.0.2.66", Some("198.51.100.99")).await;
    assert_eq!(
        forging.login(&router, "ko-right-key").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}
