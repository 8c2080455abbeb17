//! The OpenAPI 3.1 description of the HTTP API, served at `GET /openapi.json` without an API key
//! (docs/semantics.md §7, §13).
//!
//! Nothing here is hand-kept JSON: the paths come from the handlers' `#[utoipa::path]`
//! annotations (registered with `utoipa_axum::routes!`, so a route and its description are one
//! registration), the bodies from `ToSchema` derives on the types the handlers serialise, and the
//! problem `code` enum from [`ApiError::code`] over every variant ([`every_error`]). The tests
//! below fail when a route is registered without a description.

use crate::error::{ApiError, ProblemBody};
use crate::routes::AppState;
use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use carmy::auth::{AuthError, TokenRefusal};
use carmy::outcome::{ExecutionId, ExecutionResult};
use carmy::store::InFlightState;
use serde::Serialize;
use std::sync::LazyLock;
use utoipa::openapi::schema::{Object, ObjectBuilder, SchemaType, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi, ToResponse, ToSchema};

/// The document's root: metadata, the security scheme and the shared components. The paths are
/// added by [`crate::routes::api_routes`].
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Carmy",
        description = "Retry-safe execution of AI agents' tool calls. A call with a `request_id` is reserved before its tool runs; its outcome is recorded and replayed to every retry (docs/semantics.md §3, §4). Every error is RFC 9457 problem JSON with a machine `code`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    modifiers(&BearerAuth),
    components(
        schemas(Problem, ExecutionResult, ExecutionAnswer),
        responses(Unauthorized, Unavailable),
    ),
    tags(
        (name = "executions", description = "Calls, their records, cancellation"),
        (name = "tools", description = "The tools this gateway serves"),
        (name = "held", description = "Executions held by a client: reserve, renew, record (docs/semantics.md §16)"),
        (name = "operations", description = "Probes, metrics and this document; no API key"),
    )
)]
pub(crate) struct ApiDoc;

/// Adds the `bearer` scheme every `/v1` route names (docs/semantics.md §6).
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut scheme = Http::new(HttpAuthScheme::Bearer);
        scheme.description = Some(
            "An API key configured with CARMY_API_KEYS / CARMY_API_KEYS_FILE, or, with CARMY_OAUTH_ISSUERS set, an OAuth 2.1 access token (JWT) for this server's resource identifier (GET /.well-known/oauth-protected-resource). Without either configured every caller is `anonymous` and the header is not checked.".into(),
        );
        components.add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// The problem body's schema (RFC 9457): [`ProblemBody`] as it is serialised.
pub(crate) type Problem = ProblemBody<'static>;

/// The answer to `POST /v1/executions`: the record with `replayed` (docs/semantics.md §4).
/// The body itself is made by [`carmy::outcome::RecordedResult::to_response_json`]; this type
/// only describes it.
#[derive(Serialize, ToSchema)]
#[schema(
    description = "The answer to a call: the execution's record, `replayed` and `expires_at`."
)]
pub(crate) struct ExecutionAnswer {
    #[serde(flatten)]
    record: ExecutionResult,
    /// True when the tool did not run for this call: the answer is the recorded one.
    replayed: bool,
    /// When the record stops holding its identity: its `finished_at` plus the retention
    /// (`CARMY_RETENTION`); a call with the same request_id after it runs as new
    /// (docs/semantics.md §12.9). `null` when records are kept forever, and for a call without
    /// a request_id (nothing is recorded). UTC, RFC 3339 with milliseconds.
    #[schema(value_type = Option<String>, format = DateTime)]
    expires_at: Option<String>,
    /// Present only when this execution replaced another (docs/semantics.md §12.1, "A rerun
    /// says so"): `{"execution_id", "ended": "released", "by", "note"}` for a new execution
    /// after a release, `{"execution_id", "ended": "taken_over", "attempt"}` for an attempt
    /// that took an interrupted execution over (same id).
    #[schema(value_type = Option<Object>)]
    rerun_of: Option<serde_json::Value>,
}

/// Declares a `application/problem+json` response of the API description with one header:
/// `name`, its description, then `"Header-Name": Type = "what the header says"`.
macro_rules! problem_response {
    ($(#[doc = $doc:tt])* $name:ident, $description:tt, $header:tt: $ty:ty = $header_doc:tt) => {
        $(#[doc = $doc])*
        #[derive(ToResponse)]
        #[allow(dead_code)] // describes the response only
        #[response(
            description = $description,
            content_type = "application/problem+json",
            headers(($header = $ty, description = $header_doc))
        )]
        pub(crate) struct $name(Problem);
    };
}

problem_response!(
    /// 401 `UNAUTHORIZED`: missing, unknown or repeated `Authorization` (docs/semantics.md §6).
    Unauthorized,
    "`UNAUTHORIZED`: a missing, unknown or repeated `Authorization` header",
    "WWW-Authenticate": String = "`Bearer`; with OAuth configured, `Bearer resource_metadata=\"…\"` and `error=\"invalid_token\"` for a refused access token (code `INVALID_TOKEN`)"
);

problem_response!(
    /// 503: the store (or an upstream the tool needed) is unavailable; nothing was recorded.
    Unavailable,
    "`STORE_UNAVAILABLE` (nothing ran), `EXECUTION_UNCERTAIN` with `state: running` (the tool ran and its outcome is not recorded yet; retry the same call later), or a tool's own code such as `UPSTREAM_UNAVAILABLE` (the tool had no effect; nothing was recorded; retry the same call; with `state: interrupted`, a rerun of an interrupted execution: only this attempt had no effect, the earlier attempt's is unknown)",
    "Retry-After": u64 = "Seconds to wait before retrying, when the tool asked for a pause"
);

/// One of each [`ApiError`] variant: the source of the `code` enum. A variant added to
/// [`ApiError`] breaks the build of [`listed`] until it is added here too.
pub(crate) fn every_error() -> Vec<ApiError> {
    let id = ExecutionId::from_stored("exec_0");
    vec![
        ApiError::InvalidRequest(String::new()),
        ApiError::UnknownTool {
            tool: String::new(),
            closest: None,
        },
        ApiError::Unauthorized,
        ApiError::NotFound(String::new()),
        ApiError::MethodNotAllowed,
        ApiError::PayloadTooLarge { limit: 0 },
        ApiError::RequestTimeout,
        ApiError::UnsupportedMediaType,
        ApiError::IdempotencyConflict {
            execution_id: id.clone(),
            differs: None,
        },
        ApiError::ExecutionUncertain {
            execution_id: id.clone(),
            state: InFlightState::Running,
            reconciling: false,
            retry_after: None,
        },
        ApiError::RecordingPending {
            execution_id: id.clone(),
        },
        ApiError::ExecutionFinished { execution_id: id },
        ApiError::Capacity,
        ApiError::StoreUnavailable,
        // A tool's own code; the gateway's upstream tools use this one (docs/semantics.md §10).
        ApiError::NotExecuted {
            code: "UPSTREAM_UNAVAILABLE".into(),
            message: String::new(),
            retry_after: None,
            handed_back: None,
        },
        ApiError::NotReady(String::new()),
        ApiError::NoApiKeys,
        ApiError::ExecutionRunning {
            execution_id: ExecutionId::from_stored("exec_0"),
        },
        ApiError::ExecutionSuperseded {
            execution_id: ExecutionId::from_stored("exec_0"),
            current: None,
        },
        ApiError::RecordDamaged {
            execution_id: ExecutionId::from_stored("exec_0"),
            problem: String::new(),
        },
        ApiError::ArgumentsTooLarge(String::new()),
        ApiError::Internal,
        ApiError::Refused {
            refused: AuthError::Token(TokenRefusal::Expired),
            challenge: String::new(),
        },
        ApiError::Refused {
            refused: AuthError::Token(TokenRefusal::MissingScope),
            challenge: String::new(),
        },
        ApiError::Refused {
            refused: AuthError::Token(TokenRefusal::KeysUnavailable),
            challenge: String::new(),
        },
    ]
}

/// Compiles only while every [`ApiError`] variant is named: a new variant must be added here and
/// to [`every_error`], so its code reaches the document.
#[allow(dead_code)]
fn listed(error: &ApiError) {
    match error {
        ApiError::InvalidRequest(_)
        | ApiError::UnknownTool { .. }
        | ApiError::Unauthorized
        | ApiError::NotFound(_)
        | ApiError::MethodNotAllowed
        | ApiError::PayloadTooLarge { .. }
        | ApiError::ArgumentsTooLarge(_)
        | ApiError::RequestTimeout
        | ApiError::UnsupportedMediaType
        | ApiError::IdempotencyConflict { .. }
        | ApiError::ExecutionUncertain { .. }
        | ApiError::RecordingPending { .. }
        | ApiError::ExecutionFinished { .. }
        | ApiError::Capacity
        | ApiError::StoreUnavailable
        | ApiError::NotExecuted { .. }
        | ApiError::NotReady(_)
        | ApiError::NoApiKeys
        | ApiError::OperatorKey
        | ApiError::ExecutionRunning { .. }
        | ApiError::ExecutionSuperseded { .. }
        | ApiError::RecordDamaged { .. }
        | ApiError::Refused { .. }
        | ApiError::Internal => {}
    }
}

/// The schema of a problem's `code`: every code [`ApiError::code`] gives, as an enum.
pub(crate) fn problem_code_schema() -> Object {
    let mut codes: Vec<String> = every_error()
        .iter()
        .map(|error| error.code().to_owned())
        .collect();
    codes.sort();
    codes.dedup();
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .enum_values(Some(codes))
        .description(Some(
            "The machine code clients branch on (docs/semantics.md §5). A 503 from a tool that reported its effect did not happen carries that tool's code (the gateway's upstream tools use `UPSTREAM_UNAVAILABLE`).",
        ))
        .build()
}

/// The schema of `state` in problems and in-flight records: `running` or `interrupted`.
pub(crate) fn in_flight_state_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::String))
        .enum_values(Some([
            InFlightState::Running.as_str(),
            InFlightState::Interrupted.as_str(),
            "released",
        ]))
        .build()
}

/// `differs` of `IDEMPOTENCY_CONFLICT`: distinct part names.
pub(crate) fn differs_schema() -> utoipa::openapi::schema::Array {
    utoipa::openapi::schema::ArrayBuilder::new()
        .items(
            ObjectBuilder::new()
                .schema_type(SchemaType::Type(Type::String))
                .enum_values(Some(["tool", "arguments", "metadata"])),
        )
        .unique_items(true)
        .build()
}

/// The schema of a member that is always `null`.
pub(crate) fn null_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::Type(Type::Null))
        .build()
}

/// The document as generated from the annotations, made once.
static DOCUMENT: LazyLock<serde_json::Value> = LazyLock::new(|| {
    let mut document = serde_json::to_value(crate::routes::api_routes().into_openapi())
        .expect("the OpenAPI document serialises");
    camel_case_links(&mut document);
    document
});

/// utoipa 5.5 writes a Link object's members as `operation_id`, `operation_ref` and
/// `request_body`; OpenAPI names them `operationId`, `operationRef` and `requestBody`. Renames them
/// in every response's `links` (a no-op once utoipa writes them right).
fn camel_case_links(document: &mut serde_json::Value) {
    let Some(paths) = document["paths"].as_object_mut() else {
        return;
    };
    let operations = paths
        .values_mut()
        .filter_map(serde_json::Value::as_object_mut)
        .flat_map(|item| item.values_mut());
    let responses = operations
        .filter_map(|operation| operation["responses"].as_object_mut())
        .flat_map(|responses| responses.values_mut());
    let links = responses
        .filter_map(|response| response.get_mut("links").and_then(|l| l.as_object_mut()))
        .flat_map(|links| links.values_mut())
        .filter_map(serde_json::Value::as_object_mut);
    for link in links {
        for (from, to) in [
            ("operation_id", "operationId"),
            ("operation_ref", "operationRef"),
            ("request_body", "requestBody"),
        ] {
            if let Some(value) = link.remove(from) {
                link.insert(to.to_owned(), value);
            }
        }
    }
}

/// The document for a gateway serving `tools` (name and argument schema): the generated one,
/// with the call body described per tool (docs/semantics.md §13): a `oneOf` with one variant
/// per tool whose `tool` is that name and whose `arguments` is that tool's `input_schema`, so
/// that a client generator or a fuzzer knows which tools exist and what they take. A schema that
/// refers to itself (`$ref`, `$id`, …) is not embedded (its references would resolve against this
/// document); that tool's `arguments` stays "an object". A call naming another tool is still
/// answered (404 `UNKNOWN_TOOL`, or its record for an honest retry; docs/semantics.md §3).
pub(crate) fn document_for(tools: &[(&str, &serde_json::Value)]) -> serde_json::Value {
    let mut document = DOCUMENT.clone();
    if tools.is_empty() {
        return document;
    }
    let Some(request) = document.pointer_mut("/components/schemas/ExecutionRequest") else {
        return document;
    };
    let mut generic = request.take();
    let mut described = serde_json::Map::new();
    for member in ["description", "example"] {
        if let Some(value) = generic.as_object_mut().and_then(|o| o.remove(member)) {
            described.insert(member.to_owned(), value);
        }
    }
    let variants = tools
        .iter()
        .map(|(name, schema)| tool_variant(&generic, name, schema))
        .collect();
    described.insert("oneOf".to_owned(), serde_json::Value::Array(variants));
    *request = serde_json::Value::Object(described);
    document
}

/// The call body for one tool: the generic body with `tool` fixed to `name` and `arguments`
/// described by `schema` where it can be embedded.
fn tool_variant(
    generic: &serde_json::Value,
    name: &str,
    schema: &serde_json::Value,
) -> serde_json::Value {
    let mut variant = generic.clone();
    variant["title"] = serde_json::json!(name);
    let properties = &mut variant["properties"];
    properties["tool"] = serde_json::json!({"type": "string", "const": name});
    if let Some(arguments) = embeddable(schema) {
        properties["arguments"] = arguments;
    }
    variant
}

/// `schema` ready to embed as a call's `arguments`, or `None` when it has keywords that resolve
/// against its own document (`$ref`, `$dynamicRef`, `$id`, `$anchor`, …). `$schema` is dropped; a
/// schema that does not say `"type": "object"` is narrowed to objects, as the engine requires.
fn embeddable(schema: &serde_json::Value) -> Option<serde_json::Value> {
    fn self_referring(value: &serde_json::Value) -> bool {
        match value {
            serde_json::Value::Object(members) => members.iter().any(|(key, member)| {
                (key.starts_with('$') && key != "$defs" && key != "$comment" && key != "$schema")
                    || self_referring(member)
            }),
            serde_json::Value::Array(items) => items.iter().any(self_referring),
            _ => false,
        }
    }
    let mut schema = match schema {
        serde_json::Value::Object(_) => schema.clone(),
        serde_json::Value::Bool(true) => serde_json::json!({}),
        _ => return None,
    };
    if self_referring(&schema) {
        return None;
    }
    let members = schema.as_object_mut()?;
    members.remove("$schema");
    if members.get("type") != Some(&serde_json::json!("object")) {
        return Some(serde_json::json!({"type": "object", "allOf": [schema]}));
    }
    Some(schema)
}

/// The OpenAPI description of this API.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    responses((status = 200, description = "This document (OpenAPI 3.1)", content_type = "application/json", body = Object))
)]
pub(crate) async fn openapi_json(State(state): State<AppState>) -> Response {
    let tools = state.engine.tools();
    let described: Vec<(&str, &serde_json::Value)> = tools
        .iter()
        .map(|tool| (tool.name(), tool.input_schema()))
        .collect();
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        document_for(&described).to_string(),
    )
        .into_response()
}

#[cfg(test)]
#[path = "openapi_tests.rs"]
mod tests;
