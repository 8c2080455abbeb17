//! The document describes every route the router serves, and only those.

use super::*;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use std::path::Path;
use tower::ServiceExt;

/// Routes served outside this OpenAPI document, with the reason. A route registered with plain
/// axum (`.route(…)`, `.route_service(…)`, `.nest(…)`, `.nest_service(…)`) must either be
/// described (`#[utoipa::path]` on its handler, registered with `routes!` in
/// `http::api_routes`) or be listed here.
const NOT_IN_OPENAPI: &[(&str, &str)] = &[
    ("/console", CONSOLE),
    ("/console/", CONSOLE),
    ("/console/style.css", CONSOLE),
    ("/console/login", CONSOLE),
    ("/console/logout", CONSOLE),
    ("/console/executions", CONSOLE),
    ("/console/executions/{execution_id}", CONSOLE),
    ("/console/executions/{execution_id}/resolve", CONSOLE),
    ("/console/executions/{execution_id}/release", CONSOLE),
    ("/console/executions/{execution_id}/reconcile", CONSOLE),
];

const CONSOLE: &str =
    "the operator console: HTML pages and forms for a browser, not API (docs/operations.md)";

fn document() -> Value {
    document_for(&[])
}

/// `(METHOD, path)` of every operation in the document.
fn operations(document: &Value) -> Vec<(String, String)> {
    let mut operations = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            operations.push((method.to_ascii_uppercase(), path.clone()));
        }
    }
    operations
}

/// The path literal of every plain-axum route registration in the sources of the crates that
/// build the served router: this one and the gateway.
fn plain_axum_routes() -> Vec<(String, String)> {
    let mut found = Vec::new();
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pending = vec![here.join("src"), here.join("../carmy-gateway/src")];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !name.ends_with(".rs") || name.ends_with("_tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for call in [".route(", ".route_service(", ".nest(", ".nest_service("] {
                for (at, _) in text.match_indices(call) {
                    let rest = &text[at + call.len()..];
                    let literal = rest
                        .trim_start()
                        .strip_prefix('"')
                        .and_then(|rest| rest.split('"').next())
                        .unwrap_or("<not a literal>");
                    found.push((name.clone(), literal.to_owned()));
                }
            }
        }
    }
    found
}

#[test]
fn the_document_is_openapi_3_1_with_every_route() {
    let document = document();
    assert_eq!(document["openapi"], "3.1.0");
    let mut listed = operations(&document);
    listed.sort();
    let expected = [
        ("GET", "/healthz"),
        ("GET", "/metrics"),
        ("GET", "/openapi.json"),
        ("GET", "/readyz"),
        ("GET", "/v1/executions/{execution_id}"),
        ("GET", "/v1/tools"),
        ("POST", "/v1/executions"),
        ("POST", "/v1/executions/{execution_id}/cancel"),
    ];
    for (method, path) in expected {
        assert!(
            listed.contains(&(method.to_owned(), path.to_owned())),
            "{method} {path} is not in the document: {listed:?}"
        );
    }
}

#[test]
fn no_route_is_registered_without_a_description() {
    let document = document();
    let paths = document["paths"].as_object().unwrap();
    for (file, path) in plain_axum_routes() {
        let exempt = NOT_IN_OPENAPI.iter().any(|(exempt, _)| *exempt == path);
        assert!(
            exempt || paths.contains_key(&path),
            "{file} registers the route {path:?} with plain axum and it is not in GET /openapi.json: \
             put #[utoipa::path] on its handler and register it with routes!(…) in http::api_routes \
             (or list it in NOT_IN_OPENAPI with the reason)"
        );
    }
}

/// Every documented operation reaches a handler: neither the fallback's 404 nor a 405.
#[tokio::test]
async fn every_documented_operation_is_routed() {
    let app = crate::app().build().unwrap();
    for (method, path) in operations(&document()) {
        let uri = path.replace("{execution_id}", "exec_0");
        let request = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(&uri)
            .body(Body::empty())
            .unwrap();
        let response = app.router().oneshot(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&body);
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
        assert!(
            !(status == StatusCode::NOT_FOUND && text.contains("no such route")),
            "{method} {uri} is documented but not routed"
        );
    }
}

#[test]
fn every_problem_code_is_in_the_enum() {
    let document = document();
    let problem = &document["components"]["schemas"]["Problem"];
    let codes = problem["properties"]["code"]["enum"].as_array().unwrap();
    for error in every_error() {
        assert!(
            codes.contains(&Value::from(error.code())),
            "{} missing from {codes:?}",
            error.code()
        );
    }
    for code in [
        "IDEMPOTENCY_CONFLICT",
        "EXECUTION_UNCERTAIN",
        "UNAUTHORIZED",
        "INTERNAL",
    ] {
        assert!(codes.contains(&Value::from(code)), "{code}");
    }
}

#[tokio::test]
async fn the_document_is_served_without_an_api_key() {
    let keys = carmy::auth::ApiKeys::parse("k1=alice").unwrap();
    let echo = carmy::tool::FnTool::new(
        "echo",
        serde_json::json!({"type": "object"}),
        |_, a| async { Ok(a) },
    );
    let app = crate::app().api_keys(keys).tool(echo).build().unwrap();
    let request = Request::get("/openapi.json").body(Body::empty()).unwrap();
    let response = app.router().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let served: Value = serde_json::from_slice(&body).unwrap();
    let schema = serde_json::json!({"type": "object"});
    assert_eq!(served, document_for(&[("echo", &schema)]));
    let request = &served["components"]["schemas"]["ExecutionRequest"];
    assert_eq!(request["oneOf"][0]["properties"]["tool"]["const"], "echo");
    let bearer = &served["components"]["securitySchemes"]["bearer"];
    assert_eq!(bearer["scheme"], "bearer");
}

#[test]
fn links_name_their_operations_as_openapi_spells_it() {
    let document = document();
    let links = &document["paths"]["/v1/executions"]["post"]["responses"]["200"]["links"];
    let ids: Vec<&str> = operations(&document)
        .iter()
        .map(|(method, path)| {
            document["paths"][path][method.to_ascii_lowercase()]["operationId"]
                .as_str()
                .unwrap()
        })
        .collect();
    for name in ["GetExecution", "CancelExecution"] {
        let target = links[name]["operationId"].as_str().unwrap();
        assert!(
            ids.contains(&target),
            "{name} -> {target}, not among {ids:?}"
        );
        assert_eq!(
            links[name]["parameters"]["execution_id"],
            "$response.body#/execution_id"
        );
        assert!(links[name].get("operation_id").is_none());
    }
}

#[test]
fn the_call_body_is_described_per_tool() {
    let order = serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"sku": {"type": "string"}},
        "required": ["sku"]
    });
    let any = serde_json::json!(true);
    let referring = serde_json::json!({"$defs": {"a": {"type": "string"}}, "properties": {"x": {"$ref": "#/$defs/a"}}});
    let document = document_for(&[("order", &order), ("any", &any), ("referring", &referring)]);
    let request = &document["components"]["schemas"]["ExecutionRequest"];
    let variants = request["oneOf"].as_array().unwrap();
    assert_eq!(variants.len(), 3);
    let arguments = |at: usize| variants[at]["properties"]["arguments"].clone();
    let mut expected = order.clone();
    expected.as_object_mut().unwrap().remove("$schema");
    assert_eq!(arguments(0), expected);
    assert_eq!(
        arguments(1),
        serde_json::json!({"type": "object", "allOf": [{}]})
    );
    // A schema with references is not embedded: "an object", as without tools.
    let generic = &document_for(&[])["components"]["schemas"]["ExecutionRequest"];
    assert_eq!(arguments(2), generic["properties"]["arguments"]);
    for (at, name) in ["order", "any", "referring"].iter().enumerate() {
        assert_eq!(variants[at]["properties"]["tool"]["const"], *name);
        assert_eq!(variants[at]["required"], generic["required"]);
        assert_eq!(variants[at]["additionalProperties"], false);
        assert_eq!(
            variants[at]["properties"]["request_id"],
            generic["properties"]["request_id"]
        );
    }
    assert_eq!(request["example"], generic["example"]);
}
