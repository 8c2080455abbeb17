//! What the call tried to do (docs/semantics.md §8.5): an interrupted `create_payment` through
//! an HTTP tool whose upstream took the payment and never answered, its owner killed. Its
//! arguments, with the card number the tools file redacts, are shown by the API, the operator
//! CLI, SQL (the table and `carmy.uncertain_executions`) and the console in headless Chromium;
//! the card number and the tool's header secret are stored nowhere. With
//! `CARMY_KEEP_ARGUMENTS=none` nothing is kept; arguments over `CARMY_MAX_RESULT_BYTES` are
//! refused with 413 `ARGUMENTS_TOO_LARGE` before anything is reserved. A lookup by request id
//! applies an arguments filter given beside it.

use super::reconciling::Reconciling;
use crate::executions_cli::cli;
use crate::front::console::{python, screenshots};
use crate::tools_file::write_tools_file;
use carmy_test_support::{post, request};
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::Row;
use std::path::PathBuf;
use std::process::Command;

const CARD: &str = "4242424242424242";
const PAY_TOKEN: &str = "tok_pay_header_secret";
const OPERATOR_KEY: &str = "arguments-operator-key";

/// `create_payment` pays through `/pay/commit-args` (keeps the payment, never answers) and
/// hides the card number; `create_payment_hidden` hides its whole arguments; `note` hides
/// nothing. The last two are answered at once.
fn tools(base: &str) -> PathBuf {
    write_tools_file(&format!(
        "[[tools]]\nname = \"create_payment\"\nurl = \"{base}/pay/commit-args\"\n\
         redact_arguments = [\"/card/number\"]\n\
         [tools.headers]\nAuthorization = \"Bearer ${{CARMY_TEST_PAY_TOKEN}}\"\n\n\
         [[tools]]\nname = \"create_payment_hidden\"\nurl = \"{base}/pay/ok-hidden-args\"\n\
         redact_arguments = \"all\"\n\n\
         [[tools]]\nname = \"note\"\nurl = \"{base}/pay/ok-note\"\n"
    ))
}

/// The call: a big integer (kept exactly), members out of order (kept in canonical order).
fn payment(request_id: &str) -> Value {
    serde_json::from_str(&format!(
        r#"{{"tool":"create_payment","request_id":"{request_id}","arguments":
            {{"customer":"cus_42","amount":500,"card":{{"number":"{CARD}","exp":"12/30"}},
              "ledger_ref":9007199254740993}}}}"#
    ))
    .unwrap()
}

/// The text the table keeps for [`payment`].
const KEPT: &str = r#"{"amount":500,"card":{"exp":"12/30","number":"[redacted]"},"customer":"cus_42","ledger_ref":9007199254740993}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_interrupted_payment_shows_what_it_asked_everywhere_but_the_secret() {
    let fixture = Reconciling::start(tools, &[("CARMY_TEST_PAY_TOKEN", PAY_TOKEN)]).await;
    let (db, http) = (&fixture.db, fixture.http.clone());
    let operators = format!("{OPERATOR_KEY}=ops");
    let extra = [("CARMY_OPERATOR_KEYS", operators.as_str())];
    let mut owner = fixture.replica("arguments-owner", &extra);
    let reader = fixture.replica("arguments-reader", &extra);
    let id = fixture
        .interrupt_one(
            &mut owner,
            &reader,
            &payment("pay-args-1"),
            "/pay/commit-args",
        )
        .await;
    let expected: Value = serde_json::from_str(KEPT).unwrap();

    // The API, for the execution's owner (principal anonymous: no API keys configured).
    let (status, body) = request(
        &http,
        &reader,
        Method::GET,
        &format!("/v1/executions/{id}"),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "interrupted", "{body}");
    assert_eq!(body["arguments"], expected, "{body}");

    // The operator CLI, as JSON and as the readable block.
    let url = Some(db.url.as_str());
    let shown = cli(url, &["show", &id, "--json"]).await;
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert_eq!(shown.json()["arguments"], expected);
    let block = cli(url, &["show", &id]).await;
    assert_eq!(block.code, 0, "{}", block.stderr);
    assert!(
        block.stdout.contains(&format!("arguments   {KEPT}\n")),
        "{}",
        block.stdout
    );

    // SQL: the exact text, the view's jsonb, and the card number and header secret nowhere.
    let mut connection = db.connect().await;
    let row = sqlx::query(
        "SELECT r.arguments, u.arguments ->> 'customer', u.arguments #>> '{card,number}' \
         FROM carmy.reservations r JOIN carmy.uncertain_executions u USING (execution_id) \
         WHERE r.execution_id = $1",
    )
    .bind(&id)
    .fetch_one(&mut connection)
    .await
    .unwrap();
    assert_eq!(row.get::<String, _>(0), KEPT);
    assert_eq!(row.get::<String, _>(1), "cus_42");
    assert_eq!(row.get::<String, _>(2), "[redacted]");
    for secret in [CARD, PAY_TOKEN] {
        let found: i64 = sqlx::query(
            "SELECT (SELECT count(*) FROM carmy.reservations r WHERE r::text LIKE $1) \
                  + (SELECT count(*) FROM carmy.released_executions h WHERE h::text LIKE $1) \
                  + (SELECT count(*) FROM carmy.audit_log a WHERE a::text LIKE $1)",
        )
        .bind(format!("%{secret}%"))
        .fetch_one(&mut connection)
        .await
        .unwrap()
        .get(0);
        assert_eq!(found, 0, "{secret} is stored");
    }

    // Search by what was asked: the operator's listing and the CLI find it by customer.
    let (status, found) = request(
        &http,
        &reader,
        Method::GET,
        "/v1/executions?arguments=%7B%22customer%22%3A%22cus_42%22%7D",
        Some(OPERATOR_KEY),
        None,
    )
    .await;
    assert_eq!(status, 200, "{found}");
    let ids: Vec<&str> = found["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|execution| execution["execution_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id.as_str()], "{found}");
    let (status, refused) = request(
        &http,
        &reader,
        Method::GET,
        "/v1/executions?arguments=cus_42",
        Some(OPERATOR_KEY),
        None,
    )
    .await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (400, Some("INVALID_REQUEST"))
    );
    // A value jsonb cannot hold (U+0000; a number beyond numeric) matches nothing: never a 503.
    let beyond_numeric = format!("0.1{}1", "0".repeat(16_400));
    for value in [
        r#"{"customer":"\u0000"}"#.to_owned(),
        format!(r#"{{"customer":{beyond_numeric}}}"#),
    ] {
        let path = format!(
            "/v1/executions?arguments={}",
            url::form_urlencoded::byte_serialize(value.as_bytes()).collect::<String>()
        );
        let (status, none) =
            request(&http, &reader, Method::GET, &path, Some(OPERATOR_KEY), None).await;
        assert_eq!(status, 200, "{none}");
        assert_eq!(none["executions"], json!([]), "{none}");
    }
    let listed = cli(
        url,
        &["list", "--arguments", r#"{"customer":"cus_42"}"#, "--json"],
    )
    .await;
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert_eq!(listed.json()["executions"][0]["execution_id"], id.as_str());
    assert_eq!(listed.json()["executions"].as_array().unwrap().len(), 1);
    let none = cli(
        url,
        &["list", "--arguments", r#"{"customer":"cus_9"}"#, "--json"],
    )
    .await;
    assert_eq!(none.json(), json!({"executions": []}));

    // The console, in a real browser.
    let output = Command::new(python())
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/console/arguments.py"))
        .args(["--base", &reader.base, "--operator-key", OPERATOR_KEY])
        .args(["--execution", &id, "--expect", KEPT])
        .args(["--absent", CARD, "--absent", PAY_TOKEN])
        .args(["--search", r#"{"customer": "cus_42"}"#])
        .arg("--shots")
        .arg(screenshots())
        .output()
        .expect("the browser script runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("arguments checks passed"),
        "the browser checks failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    // A tool that hides its whole arguments keeps only the marker.
    let hidden = json!({"tool": "create_payment_hidden", "request_id": "pay-args-2",
                        "arguments": {"customer": "cus_43", "card": {"number": CARD}}});
    let (status, body) = post(&http, &reader, &hidden).await;
    assert_eq!(status, 200, "{body}");
    let hidden_id = body["execution_id"].as_str().unwrap().to_owned();
    let (_, body) = request(
        &http,
        &reader,
        Method::GET,
        &format!("/v1/executions/{hidden_id}"),
        None,
        None,
    )
    .await;
    assert_eq!(body["arguments"], "[redacted]", "{body}");
    let kept: String =
        sqlx::query("SELECT arguments FROM carmy.reservations WHERE execution_id = $1")
            .bind(&hidden_id)
            .fetch_one(&mut connection)
            .await
            .unwrap()
            .get(0);
    assert_eq!(kept, r#""[redacted]""#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn none_keeps_nothing_and_too_large_arguments_are_refused_before_reserving() {
    let fixture = Reconciling::start(tools, &[("CARMY_TEST_PAY_TOKEN", PAY_TOKEN)]).await;
    let (db, http) = (&fixture.db, fixture.http.clone());
    let none = fixture.replica("arguments-none", &[("CARMY_KEEP_ARGUMENTS", "none")]);
    let call = json!({"tool": "note", "request_id": "none-1",
                      "arguments": {"customer": "cus_44"}});
    let (status, body) = post(&http, &none, &call).await;
    assert_eq!(status, 200, "{body}");
    let id = body["execution_id"].as_str().unwrap().to_owned();
    let (_, body) = request(
        &http,
        &none,
        Method::GET,
        &format!("/v1/executions/{id}"),
        None,
        None,
    )
    .await;
    assert!(body.get("arguments").is_none(), "{body}");
    let mut connection = db.connect().await;
    let kept: Option<String> =
        sqlx::query("SELECT arguments FROM carmy.reservations WHERE execution_id = $1")
            .bind(&id)
            .fetch_one(&mut connection)
            .await
            .unwrap()
            .get(0);
    assert_eq!(kept, None);

    // 300 bytes kept at most: a 400-byte customer is refused, nothing reserved; the limit
    // counts what is kept, so the same arguments fit a tool that hides them whole.
    let small = fixture.replica("arguments-small", &[("CARMY_MAX_RESULT_BYTES", "300")]);
    let big = |tool: &str, request_id: &str| {
        json!({"tool": tool, "request_id": request_id,
               "arguments": {"customer": "c".repeat(400)}})
    };
    let (status, body) = post(&http, &small, &big("note", "big-1")).await;
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["code"], "ARGUMENTS_TOO_LARGE", "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("take 415 bytes as kept with the execution, over the 300 a record may keep"),
        "{body}"
    );
    let held: i64 =
        sqlx::query("SELECT count(*) FROM carmy.reservations WHERE request_id = 'big-1'")
            .fetch_one(&mut connection)
            .await
            .unwrap()
            .get(0);
    assert_eq!(held, 0);
    let (status, body) = post(&http, &small, &big("create_payment_hidden", "big-2")).await;
    assert_eq!(status, 200, "{body}");

    // An honest retry gets its record whatever its arguments would take to keep now (§3): a
    // call recorded where nothing is kept, retried where they would be too large.
    let (status, first) = post(&http, &none, &big("note", "big-3")).await;
    assert_eq!(status, 200, "{first}");
    let (status, again) = post(&http, &small, &big("note", "big-3")).await;
    assert_eq!(
        (status, &again["replayed"], &again["execution_id"]),
        (200, &json!(true), &first["execution_id"]),
        "{again}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lookup_by_request_id_applies_the_arguments_filter_too() {
    let fixture = Reconciling::start(tools, &[("CARMY_TEST_PAY_TOKEN", PAY_TOKEN)]).await;
    let http = fixture.http.clone();
    let reader = fixture.replica("arguments-lookup", &[]);
    let call = json!({"tool": "note", "request_id": "look-1",
                      "arguments": {"customer": "cus_45", "amount": 7}});
    let (status, body) = post(&http, &reader, &call).await;
    assert_eq!(status, 200, "{body}");
    let lookup = |arguments: &str| {
        format!(
            "/v1/executions?request_id=look-1&arguments={}",
            url::form_urlencoded::byte_serialize(arguments.as_bytes()).collect::<String>()
        )
    };
    let (status, found) = request(
        &http,
        &reader,
        Method::GET,
        &lookup(r#"{"customer":"cus_45"}"#),
        None,
        None,
    )
    .await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["execution_id"], body["execution_id"]);
    assert_eq!(found["arguments"], call["arguments"]);
    // Its identity, but not these arguments: no such record.
    let (status, other) = request(
        &http,
        &reader,
        Method::GET,
        &lookup(r#"{"customer":"cus_9"}"#),
        None,
        None,
    )
    .await;
    assert_eq!(
        (status, other["code"].as_str()),
        (404, Some("NOT_FOUND")),
        "{other}"
    );
    let (status, bad) = request(&http, &reader, Method::GET, &lookup("cus_45"), None, None).await;
    assert_eq!(
        (status, bad["code"].as_str()),
        (400, Some("INVALID_REQUEST")),
        "{bad}"
    );
}
