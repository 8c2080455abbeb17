//! The operator console (`/console`) on the in-memory store, through the real router
//! (`Router::oneshot`): an operator lists every principal's executions, reads one, and decides
//! it with the session's CSRF token; the page says the store keeps no lease. The browser test on
//! PostgreSQL is crates/carmy-gateway/tests/it/front/console.rs.

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use carmy::auth::ApiKeys;
use carmy::tool::FnTool;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tower::ServiceExt;

struct Page {
    status: StatusCode,
    location: Option<String>,
    cookie: Option<String>,
    body: String,
}

async fn send(router: &Router, request: Request<Body>) -> Page {
    let response = router.clone().oneshot(request).await.unwrap();
    let header_text = |name| {
        response
            .headers()
            .get(name)
            .map(|value: &header::HeaderValue| value.to_str().unwrap().to_owned())
    };
    let location = header_text(header::LOCATION);
    // The first cookie set with a value (a login sets the session's and clears the login form's).
    let cookie = response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|value| {
            value
                .to_str()
                .unwrap()
                .split(';')
                .next()
                .unwrap()
                .to_owned()
        })
        .find(|pair| !pair.ends_with('='));
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Page {
        status,
        location,
        cookie,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

fn get(path: &str, cookie: &str) -> Request<Body> {
    Request::get(path)
        .header(header::COOKIE, cookie)
        .body(Body::empty())
        .unwrap()
}

fn form(path: &str, cookie: &str, body: &str) -> Request<Body> {
    Request::post(path)
        .header(header::COOKIE, cookie)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

/// The CSRF token of the first form of `html`.
fn csrf(html: &str) -> String {
    let start = html.find("name=\"csrf\" value=\"").unwrap() + 19;
    let length = html[start..].find('"').unwrap();
    html[start..start + length].to_owned()
}

async fn call(router: &Router, key: &str, request_id: &str) -> Value {
    let body = json!({"tool": "echo", "arguments": {"n": 1}, "request_id": request_id});
    let request = Request::post("/v1/executions")
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    serde_json::from_str(&send(router, request).await.body).unwrap()
}

#[tokio::test]
async fn an_operator_lists_and_decides_on_the_in_memory_store() {
    let app = carmy_http::app()
        .tool(FnTool::new(
            "echo",
            json!({"type": "object"}),
            |_c, a| async move { Ok(a) },
        ))
        .tool(FnTool::new(
            "hold",
            json!({"type": "object"}),
            |_c, _a| async move { std::future::pending().await },
        ))
        .api_keys(ApiKeys::parse("ka=alice,kb=bob").unwrap())
        .operator_keys(ApiKeys::parse("ko=ops").unwrap())
        .build()
        .unwrap();
    let router = app.router();
    let alice = call(&router, "ka", "a-1").await;
    call(&router, "kb", "b-1").await;

    // Log in: the form's session, then the operator's.
    let login = send(&router, get("/console/login", "")).await;
    let pending = login.cookie.unwrap();
    let refused = send(&router, form("/console/login", &pending, "key=ko")).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "no CSRF token");
    let login = send(&router, get("/console/login", "")).await;
    let (pending, token) = (login.cookie.unwrap(), csrf(&login.body));
    let agent = send(
        &router,
        form("/console/login", &pending, &format!("key=ka&csrf={token}")),
    )
    .await;
    assert_eq!(agent.status, StatusCode::UNAUTHORIZED);
    let (pending, token) = (agent.cookie.unwrap(), csrf(&agent.body));
    let ok = send(
        &router,
        form("/console/login", &pending, &format!("key=ko&csrf={token}")),
    )
    .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER);
    assert_eq!(ok.location.as_deref(), Some("/console/executions"));
    let session = ok.cookie.unwrap();

    // Every principal's executions are listed.
    let all = send(&router, get("/console/executions?state=all", &session)).await;
    assert_eq!(all.status, StatusCode::OK);
    assert!(
        all.body.contains("<td>alice</td>") && all.body.contains("<td>bob</td>"),
        "{}",
        all.body
    );
    // An age column: each row says how long ago it was reserved (seconds here), the instant
    // in its title.
    assert!(
        all.body.contains("<th class=\"age\">Age</th>"),
        "{}",
        all.body
    );
    let ages = all.body.matches("<td class=\"age\" title=\"").count();
    assert_eq!(ages, 2, "{}", all.body);
    assert!(all.body.contains(" s</td>"), "{}", all.body);
    let interrupted = send(&router, get("/console/executions", &session)).await;
    assert!(interrupted.body.contains("No execution matches."));

    // One execution's page, and a refused decision (finished) shown on it.
    let id = alice["execution_id"].as_str().unwrap();
    let path = format!("/console/executions/{id}");
    let shown = send(&router, get(&path, &session)).await;
    assert_eq!(shown.status, StatusCode::OK);
    assert!(shown.body.contains("This store keeps no lease"));
    // The audit table keeps its Action and Actor columns on one line.
    let style = send(&router, get("/console/style.css", "")).await;
    assert!(style
        .body
        .contains("td.age,td.action,td.actor,td.at{white-space:nowrap"));
    let token = csrf(&shown.body);
    let release = send(
        &router,
        form(
            &format!("{path}/release"),
            &session,
            &format!("csrf={token}&note=again&force=true"),
        ),
    )
    .await;
    assert_eq!(release.status, StatusCode::CONFLICT);
    assert!(
        release.body.contains("EXECUTION_FINISHED"),
        "{}",
        release.body
    );
    // A running execution's page offers the decisions; the resolve form's data placeholder
    // names no tool's fields.
    // The engine runs the call in a task of its own: it stays running when this caller leaves.
    let running = tokio::select! {
        _ = call_tool(&router, "ka", "hold", "h-1") => unreachable!("hold never answers"),
        id = eventually_running(&router, &session) => id,
    };
    let page = send(
        &router,
        get(&format!("/console/executions/{running}"), &session),
    )
    .await;
    assert!(
        page.body
            .contains("placeholder=\"the tool's result as JSON, as the target system shows it\""),
        "{}",
        page.body
    );
    assert!(!page.body.contains("order_id"), "{}", page.body);
    let forged = send(
        &router,
        form(
            &format!("{path}/release"),
            &session,
            "note=again&force=true",
        ),
    )
    .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
}

async fn call_tool(router: &Router, key: &str, tool: &str, request_id: &str) -> Value {
    let body = json!({"tool": tool, "arguments": {}, "request_id": request_id});
    let request = Request::post("/v1/executions")
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    serde_json::from_str(&send(router, request).await.body).unwrap()
}

/// Logs `key` in through the login form; the session's cookie.
async fn log_in(router: &Router, key: &str) -> String {
    let login = send(router, get("/console/login", "")).await;
    let (pending, token) = (login.cookie.unwrap(), csrf(&login.body));
    let ok = send(
        router,
        form(
            "/console/login",
            &pending,
            &format!("key={key}&csrf={token}"),
        ),
    )
    .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    ok.cookie.unwrap()
}

/// The execution ids a listing shows, in its order.
fn listed(html: &str) -> Vec<String> {
    html.split("<a href=\"/console/executions/")
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].to_owned())
        .collect()
}

/// Past 1000 records the filters still find what matches: the store filters by principal,
/// tool and failure, newest first, and the page says when more match than it shows.
#[tokio::test]
async fn the_listing_filters_in_the_store_past_a_thousand_records() {
    let app = carmy_http::app()
        .tool(FnTool::new(
            "echo",
            json!({"type": "object"}),
            |_c, a| async move { Ok(a) },
        ))
        .tool(FnTool::new(
            "boom",
            json!({"type": "object"}),
            |_c, _a| async move { Err(carmy::tool::ToolError::new("BOOM", "it broke")) },
        ))
        .api_keys(ApiKeys::parse("ka=alice,kb=bob").unwrap())
        .operator_keys(ApiKeys::parse("ko=ops").unwrap())
        .build()
        .unwrap();
    let router = app.router();
    // Request ids in numeric order, so that records reserved in the same millisecond list in
    // the order they were called (the in-memory store breaks ties by identity).
    let mut alices = Vec::new();
    for n in 0..1001 {
        let answer = call_tool(&router, "ka", "echo", &format!("a-{n:04}")).await;
        alices.push(answer["execution_id"].as_str().unwrap().to_owned());
    }
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let failed = call_tool(&router, "kb", "boom", "b-1").await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let failed = failed["execution_id"].as_str().unwrap().to_owned();
    let session = log_in(&router, "ko").await;

    for (query, what) in [
        ("state=all&principal=bob", "bob's execution"),
        ("state=all&tool=boom", "the execution of tool boom"),
        ("state=failures", "the failure"),
        (
            "state=failures&principal=bob&tool=boom",
            "bob's failure of boom",
        ),
    ] {
        let page = send(
            &router,
            get(&format!("/console/executions?{query}"), &session),
        )
        .await;
        assert_eq!(page.status, StatusCode::OK);
        assert_eq!(listed(&page.body), vec![failed.clone()], "{what}: {query}");
        assert!(!page.body.contains("More executions match"), "{query}");
    }
    let failures = send(&router, get("/console/executions?state=failures", &session)).await;
    assert!(
        failures.body.contains("newest first") && !failures.body.contains("1000"),
        "{}",
        failures.body
    );
    let none = send(
        &router,
        get(
            "/console/executions?state=failures&principal=alice",
            &session,
        ),
    )
    .await;
    assert!(none.body.contains("No execution matches."));

    // Every record, newest first: the 200 newest are shown, and the page says more match.
    let all = send(&router, get("/console/executions?state=all", &session)).await;
    let mut newest: Vec<String> = alices[alices.len() - 199..].to_vec();
    newest.push(failed.clone());
    newest.reverse();
    assert_eq!(listed(&all.body), newest);
    assert!(all
        .body
        .contains("More executions match than the 200 shown"));
    let alice = send(
        &router,
        get(
            "/console/executions?state=all&principal=alice&request_id=a-0003",
            &session,
        ),
    )
    .await;
    assert_eq!(listed(&alice.body), vec![alices[3].clone()]);
}

/// Login forms keep nothing on the server: a flood of them pushes out no operator's pending
/// login, and a login post still needs its form's token and cookie.
#[tokio::test]
async fn a_flood_of_login_forms_leaves_an_operators_form_valid() {
    let app = carmy_http::app()
        .api_keys(ApiKeys::parse("ka=alice").unwrap())
        .operator_keys(ApiKeys::parse("ko=ops").unwrap())
        .build()
        .unwrap();
    let router = app.router();
    let mine = send(&router, get("/console/login", "")).await;
    let (cookie, token) = (mine.cookie.unwrap(), csrf(&mine.body));
    for _ in 0..20_000 {
        let flood = send(&router, get("/console/login", "")).await;
        assert_eq!(flood.status, StatusCode::OK);
    }

    // The form fetched before the flood logs the operator in.
    let ok = send(
        &router,
        form("/console/login", &cookie, &format!("key=ko&csrf={token}")),
    )
    .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER, "{}", ok.body);
    assert_eq!(ok.location.as_deref(), Some("/console/executions"));
    let session = ok.cookie.unwrap();
    assert!(session.starts_with("carmy_console="), "{session}");
    let listing = send(&router, get("/console/executions", &session)).await;
    assert_eq!(listing.status, StatusCode::OK);
    assert!(cookie.starts_with("carmy_console_login="), "{cookie}");

    // Refused: no token, a changed token, the token without its cookie, another form's cookie.
    let other = send(&router, get("/console/login", ""))
        .await
        .cookie
        .unwrap();
    let mut changed = token.clone();
    let last = changed.pop().unwrap();
    changed.push(if last == '0' { '1' } else { '0' });
    for (cookie, body) in [
        (cookie.as_str(), "key=ko".to_owned()),
        (cookie.as_str(), format!("key=ko&csrf={changed}")),
        (cookie.as_str(), "key=ko&csrf=".to_owned()),
        ("", format!("key=ko&csrf={token}")),
        (other.as_str(), format!("key=ko&csrf={token}")),
    ] {
        let refused = send(&router, form("/console/login", cookie, &body)).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{cookie} {body}");
        assert!(refused
            .cookie
            .is_some_and(|c| c.starts_with("carmy_console_login=")));
        assert!(!refused.body.contains("operator <strong>"));
    }
    let forged = send(
        &router,
        form("/console/login", &cookie, &format!("key=ko&csrf={changed}")),
    )
    .await;
    assert!(
        forged.body.contains("another gateway process"),
        "a token this process did not make: {}",
        forged.body
    );
}

/// A form over the body limit is 413 with a page that says so and gives the limit; nothing
/// changes, no audit row is written. The same form within the limit goes through.
#[tokio::test]
async fn an_oversized_form_is_413_and_changes_nothing() {
    let app = carmy_http::app()
        .tool(FnTool::new("hold", json!({"type": "object"}), |_c, _a| {
            std::future::pending()
        }))
        .api_keys(ApiKeys::parse("ka=alice").unwrap())
        .operator_keys(ApiKeys::parse("ko=ops").unwrap())
        .max_body_bytes(8192)
        .build()
        .unwrap();
    let router = app.router();
    // The call runs until the test ends (its answer is never read).
    let call = Request::post("/v1/executions")
        .header(header::AUTHORIZATION, "Bearer ka")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(
            json!({"tool": "hold", "arguments": {}, "request_id": "h-1"}).to_string(),
        ))
        .unwrap();
    tokio::spawn(router.clone().oneshot(call));
    let session = log_in(&router, "ko").await;
    let id = loop {
        let running = send(&router, get("/console/executions?state=running", &session)).await;
        if let Some(id) = listed(&running.body).pop() {
            break id;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    let path = format!("/console/executions/{id}");
    let shown = send(&router, get(&path, &session)).await;
    let token = csrf(&shown.body);
    let long_note = "x".repeat(9000);

    for (action, body) in [
        (
            "release",
            format!("csrf={token}&force=true&note={long_note}"),
        ),
        (
            "resolve",
            format!("csrf={token}&status=completed&data=%7B%7D&force=true&note={long_note}"),
        ),
        ("reconcile", format!("csrf={token}&pad={long_note}")),
    ] {
        let refused = send(&router, form(&format!("{path}/{action}"), &session, &body)).await;
        assert_eq!(
            refused.status,
            StatusCode::PAYLOAD_TOO_LARGE,
            "{action}: {}",
            refused.body
        );
        assert!(
            refused.body.contains("Form too large") && refused.body.contains("8192 bytes"),
            "{}",
            refused.body
        );
    }
    let logout = send(
        &router,
        form(
            "/console/logout",
            &session,
            &format!("csrf={token}&pad={long_note}"),
        ),
    )
    .await;
    assert_eq!(logout.status, StatusCode::PAYLOAD_TOO_LARGE);
    let login = send(&router, get("/console/login", "")).await;
    let login = send(
        &router,
        form(
            "/console/login",
            &login.cookie.unwrap(),
            &format!("key=ko&csrf={}&pad={long_note}", csrf(&login.body)),
        ),
    )
    .await;
    assert_eq!(login.status, StatusCode::PAYLOAD_TOO_LARGE);

    // Nothing changed: still running, no audit row, the session still open.
    let after = send(&router, get(&path, &session)).await;
    assert_eq!(after.status, StatusCode::OK);
    assert!(
        after.body.contains("<dd id=\"state\">running</dd>"),
        "{}",
        after.body
    );
    assert!(after.body.contains("No audit row yet."), "{}", after.body);

    // Within the limit, the same session and token release it.
    let released = send(
        &router,
        form(
            &format!("{path}/release"),
            &session,
            &format!("csrf={token}&force=true&note=short"),
        ),
    )
    .await;
    assert_eq!(released.status, StatusCode::SEE_OTHER, "{}", released.body);
    let after = send(&router, get(&path, &session)).await;
    assert!(!after.body.contains("No audit row yet."));
}

/// The id of the first execution the console lists as running, once there is one.
async fn eventually_running(router: &Router, session: &str) -> String {
    for _ in 0..200 {
        let page = send(router, get("/console/executions?state=running", session)).await;
        if let Some(id) = listed(&page.body).into_iter().next() {
            return id;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("no running execution within 4 s");
}
