//! W3C `traceparent` from the request reaches the tool, and every execution runs in a span that
//! carries its execution id (docs/semantics.md §13).

use axum::body::Body;
use axum::http::{Request, StatusCode};
use carmy::tool::FnTool;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tower::ServiceExt;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// A span seen: its id, name, and the fields recorded on it (at creation or later).
type SeenSpan = (u64, String, Vec<(String, String)>);

/// The spans seen, in order of creation.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<SeenSpan>>>);

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().into(), value.into()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().into(), format!("{value:?}")));
    }
}

impl<S: tracing::Subscriber> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        let mut fields = Vec::new();
        attrs.record(&mut Fields(&mut fields));
        let name = attrs.metadata().name().to_owned();
        self.0.lock().unwrap().push((id.into_u64(), name, fields));
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        if let Some((_, _, fields)) = spans.iter_mut().find(|(at, _, _)| *at == id.into_u64()) {
            values.record(&mut Fields(fields));
        }
    }
}

impl Spans {
    fn field(&self, span: &str, field: &str) -> Vec<String> {
        let spans = self.0.lock().unwrap();
        spans
            .iter()
            .filter(|(_, name, _)| name == span)
            .flat_map(|(_, _, fields)| fields.iter().filter(|(name, _)| name == field))
            .map(|(_, value)| value.clone())
            .collect()
    }
}

async fn post(app: &carmy_http::App, request_id: &str, traceparent: Option<&str>) -> Value {
    let body = json!({"tool": "context", "arguments": {}, "request_id": request_id});
    let mut request = Request::post("/v1/executions").header("content-type", "application/json");
    if let Some(traceparent) = traceparent {
        request = request.header("traceparent", traceparent);
    }
    let response = app
        .router()
        .oneshot(request.body(Body::from(body.to_string())).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&body).unwrap()
}

#[tokio::test]
async fn the_tool_gets_the_traceparent_and_the_spans_carry_the_execution_id() {
    let spans = Spans::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    // The tool answers with the traceparent it was given.
    let tool = FnTool::new(
        "context",
        json!({"type": "object"}),
        |context, _| async move { Ok(json!({ "traceparent": context.traceparent })) },
    );
    let app = carmy_http::app().tool(tool).build().unwrap();

    let first = post(&app, "t1", Some(TRACEPARENT)).await;
    assert_eq!(first["data"]["traceparent"], TRACEPARENT);
    let malformed = post(&app, "t2", Some("00-not-a-trace-01")).await;
    assert_eq!(malformed["data"]["traceparent"], Value::Null);
    let absent = post(&app, "t3", None).await;
    assert_eq!(absent["data"]["traceparent"], Value::Null);
    // Another trace on a retry: same identity, so the recorded outcome replays.
    let other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let retry = post(&app, "t1", Some(other)).await;
    assert_eq!(
        (retry["replayed"].clone(), retry["data"].clone()),
        (json!(true), first["data"].clone())
    );

    let executions = spans.field("carmy.execution", "execution_id");
    let expected: Vec<String> = [&first, &malformed, &absent]
        .iter()
        .map(|answer| answer["execution_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        executions, expected,
        "one carmy.execution span per tool run"
    );
    assert_eq!(spans.field("carmy.execution", "traceparent"), [TRACEPARENT]);
    let calls = spans.field("carmy.call", "execution_id");
    assert_eq!(
        calls.len(),
        4,
        "every call's span names its execution: {calls:?}"
    );
    assert_eq!(calls[3], expected[0]);
    assert_eq!(
        spans.field("carmy.call", "traceparent"),
        [TRACEPARENT, other]
    );
}
