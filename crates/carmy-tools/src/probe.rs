//! The HTTP reconciliation probe of a tool (`[tools.reconcile]`, docs/semantics.md §12.10,
//! reconciliation): one request to the configured URL, `{execution_id}`, `{request_id}` and
//! the call's arguments filled in; a found status means the effect happened (the body is the
//! outcome's data), an absent status that it did not, anything else proves nothing. The
//! evidence never holds a header value.

use crate::response::{body_value, describe, read_bounded, ReadFailure};
use crate::spec::ProbeSpec;
use carmy::reconcile::{Probe, ProbeAnswer, ProbeFuture, ProbeTarget, ProbeVerdict};
use serde_json::{json, Map, Value};
use std::time::Duration;

/// The largest probe body kept, in bytes.
const MAX_PROBE_BODY: usize = 1024 * 1024;

/// The probe of one HTTP tool.
pub struct HttpProbe {
    spec: ProbeSpec,
    client: reqwest::Client,
}

impl HttpProbe {
    /// The probe of `spec`, sending through the shared `client`.
    pub fn new(spec: ProbeSpec, client: reqwest::Client) -> Self {
        Self { spec, client }
    }

    /// What the URL's placeholders are filled from: the call's arguments (when a retry carries
    /// them), then `execution_id` and `request_id`, which win.
    fn values(target: &ProbeTarget) -> Value {
        let mut values = match &target.arguments {
            Some(Value::Object(members)) => members.clone(),
            _ => Map::new(),
        };
        values.insert("execution_id".into(), json!(target.execution_id.as_str()));
        values.insert("request_id".into(), json!(target.key.request_id));
        Value::Object(values)
    }

    async fn ask(&self, target: &ProbeTarget) -> ProbeAnswer {
        let url = match self.spec.url.render(&Self::values(target)) {
            Ok(url) => url,
            Err(message) => {
                return inconclusive(json!({"answer": "error", "detail": format!(
                    "the probe's URL cannot be filled: {message} (an argument is known only when the call is retried)")}))
            }
        };
        let request_line = format!("{} {url}", self.spec.method);
        let mut request = self
            .client
            .request(self.spec.method.clone(), url)
            .timeout(self.spec.timeout);
        for header in &self.spec.headers {
            request = request.header(header.name.clone(), header.value.clone());
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => {
                return inconclusive(json!({"answer": "error", "request": request_line,
                    "detail": format!("the probe failed: {}", describe(&error))}))
            }
        };
        let status = response.status().as_u16();
        let body = match read_bounded(response, MAX_PROBE_BODY).await {
            Ok(body) => body_value(&body),
            Err(ReadFailure::TooLarge) => {
                return inconclusive(
                    json!({"answer": "error", "request": request_line, "status": status,
                    "detail": format!("the probe's body is over {MAX_PROBE_BODY} bytes")}),
                )
            }
            Err(ReadFailure::Disconnected(reason)) => {
                return inconclusive(
                    json!({"answer": "error", "request": request_line, "status": status,
                    "detail": format!("the probe's body could not be read: {reason}")}),
                )
            }
        };
        if self.spec.found_status.contains(&status) {
            let evidence =
                json!({"answer": "found", "request": request_line, "status": status, "body": body});
            ProbeAnswer {
                verdict: ProbeVerdict::Found(body),
                evidence,
            }
        } else if self.spec.absent_status.contains(&status) {
            ProbeAnswer {
                verdict: ProbeVerdict::Absent,
                evidence: json!({"answer": "absent", "request": request_line, "status": status, "body": body}),
            }
        } else {
            inconclusive(
                json!({"answer": "error", "request": request_line, "status": status, "body": body,
                "detail": format!("{status} is neither in found_status nor in absent_status")}),
            )
        }
    }
}

fn inconclusive(evidence: Value) -> ProbeAnswer {
    ProbeAnswer {
        verdict: ProbeVerdict::Inconclusive,
        evidence,
    }
}

impl Probe for HttpProbe {
    fn absent_means_not_executed(&self) -> bool {
        self.spec.absent_not_executed
    }

    fn timeout(&self) -> Duration {
        self.spec.timeout
    }

    fn probe<'a>(&'a self, target: &'a ProbeTarget) -> ProbeFuture<'a> {
        Box::pin(self.ask(target))
    }
}
