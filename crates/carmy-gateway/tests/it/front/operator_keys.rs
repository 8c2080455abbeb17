//! Operators are not principals (docs/semantics.md §6): an operator key lists and decides, but
//! is refused wherever a principal acts (a call, cancelling or looking up an execution by its
//! request_id; it reads one by id) over HTTP and `/mcp`, even when its name is a principal's name.

use super::mcp_client::Served;
use serde_json::{json, Value};

const OPERATOR_KEY: &str = "this is an operator key: it lists and reads executions (GET /v1/executions, GET /v1/executions/{id}) and decides them (POST /v1/executions/{id}/resolve or /release), but it is not a principal and cannot call tools, cancel an execution or look one up by its request_id as one; send an API key (CARMY_API_KEYS) for that";

/// Sends `method` to `path` with `Authorization: Bearer <key>`; the status and JSON body.
async fn send(
    served: &Served,
    method: reqwest::Method,
    path: &str,
    key: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut request = carmy_test_support::client()
        .request(method, format!("{}{path}", served.base))
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream");
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn an_operator_key_named_like_a_principal_is_no_caller_on_either_front() {
    // The operator and the agent share the name `ops`: names do not tell keys apart.
    let gateway = Served::start(&["--api-keys", "ka=ops", "--operator-keys", "ko=ops"]).await;
    let call = json!({"tool": "echo", "arguments": {"v": 1}, "request_id": "r-1"});
    let (status, first) = send(
        &gateway,
        reqwest::Method::POST,
        "/v1/executions",
        "ka",
        Some(&call),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let execution_id = first["execution_id"].as_str().unwrap().to_owned();

    let refused = |body: &Value| {
        assert_eq!(
            (&body["code"], &body["detail"]),
            (&json!("UNAUTHORIZED"), &json!(OPERATOR_KEY)),
            "{body}"
        );
    };
    let (status, body) = send(
        &gateway,
        reqwest::Method::POST,
        "/v1/executions",
        "ko",
        Some(&call),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    refused(&body);
    let fresh = json!({"tool": "echo", "arguments": {"v": 2}, "request_id": "r-2"});
    let (status, body) = send(
        &gateway,
        reqwest::Method::POST,
        "/v1/executions",
        "ko",
        Some(&fresh),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    refused(&body);
    // Reading one execution by id is an operator's too (any principal's).
    let own = format!("/v1/executions/{execution_id}");
    let (status, body) = send(&gateway, reqwest::Method::GET, &own, "ko", None).await;
    assert_eq!(
        (status, &body["execution_id"]),
        (200, &json!(execution_id)),
        "{body}"
    );
    let lookup = "/v1/executions?request_id=r-1";
    let (status, body) = send(&gateway, reqwest::Method::GET, lookup, "ko", None).await;
    assert_eq!(status, 401, "{body}");
    refused(&body);
    let cancel = format!("/v1/executions/{execution_id}/cancel");
    let (status, body) = send(&gateway, reqwest::Method::POST, &cancel, "ko", None).await;
    assert_eq!(status, 401, "{body}");
    refused(&body);

    // What an operator does: list every principal's executions.
    let (status, listed) = send(&gateway, reqwest::Method::GET, "/v1/executions", "ko", None).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["executions"][0]["execution_id"], json!(execution_id));

    let mcp_call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": "echo", "arguments": {"v": 3},
                                     "_meta": {"io.carmy/request_id": "r-3"}}});
    let (status, body) = send(
        &gateway,
        reqwest::Method::POST,
        "/mcp",
        "ko",
        Some(&mcp_call),
    )
    .await;
    assert_eq!(
        (status, &body["code"]),
        (401, &json!("UNAUTHORIZED")),
        "{body}"
    );
    // The same check as HTTP's: the key is told it is an operator's, not an unknown one.
    assert_eq!(
        body["detail"],
        "this is an operator key: it lists and decides executions over the HTTP API \
         (/v1/executions), but it is not a principal and cannot call tools over /mcp; send an \
         API key (CARMY_API_KEYS) for that",
        "{body}"
    );
    let (status, body) = send(
        &gateway,
        reqwest::Method::POST,
        "/mcp",
        "ka",
        Some(&mcp_call),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["isError"], json!(false), "{body}");
    // The agent's call over HTTP and over MCP ran; nothing ran for the operator key.
    assert_eq!(gateway.runs("echo"), 2);
}
