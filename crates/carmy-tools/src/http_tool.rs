//! HTTP tools (docs/semantics.md §10): one call is one request to the configured URL, with the
//! execution id as idempotency key, the call's `traceparent`, and the configured headers; the
//! answer becomes the outcome by [`crate::response`]'s rules.
//!
//! Transport failures: a connection that could not be established means nothing was sent, so
//! the reservation is released (`UPSTREAM_UNAVAILABLE`, 503); any failure after that may have
//! reached the upstream and is recorded as `UPSTREAM_DISCONNECTED` with `effect: "unknown"`.
//! A status that does not prove the effect absent (every 5xx and 408 unless listed in
//! `not_executed_statuses`, and any in `effect_unknown_statuses`) is recorded with
//! `effect: "unknown"`.
//! The values of the headers' `${NAME}` references are masked in everything recorded, however
//! the upstream echoes them.
//! The deadline is the engine's ([`Tool::timeout`]): reaching it records `timed_out`.

use crate::response::{body_value, describe, read_bounded, retry_after, status_error, ReadFailure};
use crate::secret::{mask_outcome, Secret};
use crate::spec::HttpToolSpec;
use carmy::tool::{Tool, ToolContext, ToolFuture};
use carmy::{OnInterrupted, ToolAnnotations, ToolError};
use reqwest::header::{HeaderValue, CONTENT_TYPE};
use reqwest::Method;
use serde_json::{Map, Value};
use std::time::Duration;
use tracing::Instrument;

/// A tool that forwards each call to an HTTP upstream.
pub struct HttpTool {
    spec: HttpToolSpec,
    secrets: Vec<Secret>,
    client: reqwest::Client,
    max_response_bytes: usize,
    probe: Option<Box<dyn carmy::reconcile::Probe>>,
}

impl HttpTool {
    /// The tool of `spec`, sending through the shared `client`; bodies over
    /// `spec.max_response_bytes` (else `default_max_response_bytes`) are `RESULT_TOO_LARGE`.
    pub fn new(
        spec: HttpToolSpec,
        client: reqwest::Client,
        default_max_response_bytes: usize,
    ) -> Self {
        let max_response_bytes = spec
            .max_response_bytes
            .unwrap_or(default_max_response_bytes);
        let probe = spec
            .reconcile
            .clone()
            .map(|probe| crate::probe::build(probe, client.clone(), spec.secrets()));
        Self {
            secrets: spec.secrets(),
            spec,
            client,
            max_response_bytes,
            probe,
        }
    }

    /// The arguments that are not path placeholders, sent as the query or the body.
    fn remaining_arguments(&self, arguments: Value) -> Map<String, Value> {
        let mut remaining = match arguments {
            Value::Object(members) => members,
            _ => Map::new(),
        };
        for name in self.spec.url.placeholders() {
            remaining.remove(name);
        }
        remaining
    }

    /// The request for `arguments`, with `traceparent` (the upstream span's, or the caller's
    /// when traces are not exported).
    fn request(
        &self,
        context: &ToolContext,
        traceparent: Option<&str>,
        arguments: Value,
    ) -> Result<reqwest::RequestBuilder, ToolError> {
        let mut url = self.spec.url.render(&arguments).map_err(|message| {
            ToolError::not_executed("INVALID_REQUEST", format!("arguments: {message}"))
        })?;
        if let Some(host) = url.host_str() {
            tracing::Span::current().record("server.address", host);
        }
        let remaining = self.remaining_arguments(arguments);
        let mut request = if self.spec.method == Method::GET {
            if !remaining.is_empty() {
                let mut pairs = url.query_pairs_mut();
                for (name, value) in &remaining {
                    match value {
                        Value::String(text) => pairs.append_pair(name, text),
                        other => pairs.append_pair(name, &other.to_string()),
                    };
                }
            }
            self.client.get(url)
        } else {
            let body = serde_json::to_vec(&Value::Object(remaining))
                .map_err(|error| ToolError::not_executed("INVALID_REQUEST", error.to_string()))?;
            self.client
                .request(self.spec.method.clone(), url)
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(body)
        };
        for header in &self.spec.headers {
            request = request.header(header.name.clone(), header.value.clone());
        }
        if let Some(name) = &self.spec.idempotency_header {
            let key = HeaderValue::from_str(context.execution_id.as_str())
                .expect("execution ids are ASCII letters, digits and _");
            request = request.header(name.clone(), key);
        }
        if let Some(traceparent) = traceparent.and_then(|t| HeaderValue::from_str(t).ok()) {
            request = request.header("traceparent", traceparent);
        }
        Ok(request)
    }

    /// [`Self::send`] with every configured secret masked in what it answers.
    /// Runs in a `carmy.upstream` span (docs/operations.md "Traces"): `http.request.method`,
    /// `server.address`, and `http.response.status_code` once answered; the request's
    /// `traceparent` names this span when traces are exported.
    async fn run(&self, context: ToolContext, arguments: Value) -> Result<Value, ToolError> {
        let span = carmy::trace::exported_span(|| {
            tracing::info_span!(
                "carmy.upstream",
                http.request.method = self.spec.method.as_str(),
                server.address = tracing::field::Empty,
                http.response.status_code = tracing::field::Empty,
            )
        });
        let outcome = self.send(context, arguments).instrument(span).await;
        mask_outcome(outcome, &self.secrets)
    }

    async fn send(&self, context: ToolContext, arguments: Value) -> Result<Value, ToolError> {
        let traceparent = carmy::trace::outgoing_traceparent(
            &tracing::Span::current(),
            context.traceparent.as_deref(),
        );
        let request = self.request(&context, traceparent.as_deref(), arguments)?;
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) if error.is_connect() => {
                tracing::warn!(tool = %self.spec.name, execution_id = %context.execution_id,
                    error = %describe(&error), "upstream unreachable; nothing was sent");
                return Err(ToolError::not_executed(
                    "UPSTREAM_UNAVAILABLE",
                    "the upstream could not be reached and nothing was sent; retry the same call later",
                ));
            }
            Err(error) => return Err(self.disconnected(&context, &describe(&error))),
        };
        let status = response.status();
        tracing::Span::current().record("http.response.status_code", i64::from(status.as_u16()));
        tracing::debug!(tool = %self.spec.name, execution_id = %context.execution_id,
            status = status.as_u16(), "upstream answered");
        if self.spec.not_executed_statuses.contains(&status.as_u16()) {
            let pause = retry_after(&response);
            let error = ToolError::not_executed(
                "UPSTREAM_UNAVAILABLE",
                format!("the upstream answered {status}, which it documents as \"nothing happened\"; retry the same call later"),
            );
            return Err(match pause {
                Some(pause) => error.with_retry_after(pause),
                None => error,
            });
        }
        let effect_unknown =
            status.is_success() || self.spec.effect_unknown_status(status.as_u16());
        let body = match read_bounded(response, self.max_response_bytes).await {
            Ok(body) => body,
            Err(ReadFailure::TooLarge) => return Err(self.too_large(status, effect_unknown)),
            Err(ReadFailure::Disconnected(reason)) => {
                return Err(self.disconnected(&context, &reason))
            }
        };
        if status.is_success() {
            Ok(body_value(&body))
        } else {
            Err(status_error(status, &body, effect_unknown))
        }
    }

    fn disconnected(&self, context: &ToolContext, reason: &str) -> ToolError {
        tracing::warn!(tool = %self.spec.name, execution_id = %context.execution_id,
            error = %reason, "upstream connection failed after the request may have been sent");
        ToolError::effect_unknown(
            "UPSTREAM_DISCONNECTED",
            "the connection to the upstream failed after the request may have been sent; the effect is unknown: check the upstream before acting again",
        )
    }

    /// A body over the bound; `effect_unknown` for a success or an effect-unknown status,
    /// whose effect the lost body does not undo.
    fn too_large(&self, status: reqwest::StatusCode, effect_unknown: bool) -> ToolError {
        let message = format!(
            "the upstream answered {status} with a body over {} bytes, which was not kept",
            self.max_response_bytes
        );
        let error = if effect_unknown {
            ToolError::effect_unknown("RESULT_TOO_LARGE", message)
        } else {
            ToolError::new("RESULT_TOO_LARGE", message)
        };
        error.with_details(serde_json::json!({"status": status.as_u16()}))
    }
}

impl Tool for HttpTool {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn description(&self) -> &str {
        &self.spec.description
    }

    fn input_schema(&self) -> &Value {
        &self.spec.input_schema
    }

    fn check_arguments(&self, arguments: &Value) -> Result<(), String> {
        self.spec.url.check(arguments)
    }

    fn timeout(&self) -> Option<Duration> {
        self.spec.timeout
    }

    fn annotations(&self) -> Option<&ToolAnnotations> {
        self.spec.annotations.as_ref()
    }

    fn on_interrupted(&self) -> OnInterrupted {
        self.spec.on_interrupted
    }

    fn mcp_task_always(&self) -> bool {
        self.spec.task_always
    }

    fn redaction(&self) -> Option<&carmy::arguments::Redaction> {
        self.spec.redaction.as_ref()
    }

    fn key_setting(&self) -> carmy::key_argument::KeySetting {
        self.spec.key.clone()
    }

    fn sends_idempotency_key(&self) -> bool {
        self.spec.idempotency_header.is_some()
    }

    fn probe(&self) -> Option<&dyn carmy::reconcile::Probe> {
        self.probe.as_deref()
    }

    fn call(&self, context: ToolContext, arguments: Value) -> ToolFuture<'_> {
        Box::pin(self.run(context, arguments))
    }
}
