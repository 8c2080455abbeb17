//! The HTTP reconciliation probe of a tool (`[tools.reconcile]`, docs/semantics.md §12.10,
//! reconciliation): one request to the configured URL, `{execution_id}`, `{request_id}` and
//! the call's arguments filled in; a found status means the effect happened (the body is the
//! outcome's data), an absent status that it did not, anything else proves nothing. The
//! evidence never holds a header value, and the values of the probe's and the tool's `${NAME}`
//! references are masked in it (and so in the data of an outcome it finds). [`build`] makes
//! either this probe or a [`crate::tool_probe::ToolProbe`] from a [`ProbeSpec`].

use crate::response::{body_value, describe, read_bounded, ReadFailure};
use crate::secret::{mask, Secret};
use crate::spec::{Header, ProbeAsk, ProbeSpec};
use crate::template::UrlTemplate;
use crate::tool_probe::ToolProbe;
use carmy::reconcile::{Probe, ProbeAnswer, ProbeFuture, ProbeTarget, ProbeTools, ProbeVerdict};
use reqwest::Method;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;
use std::time::Duration;

/// The probe of `spec`: an HTTP probe sending through `client`, or a tool probe. `secrets`
/// (the tool's own) are masked in an HTTP probe's evidence besides its headers' values.
pub fn build(spec: ProbeSpec, client: reqwest::Client, secrets: Vec<Secret>) -> Box<dyn Probe> {
    let mut masked = spec.secrets();
    masked.extend(secrets);
    match spec.ask {
        ProbeAsk::Http {
            method,
            url,
            found_status,
            headers,
        } => Box::new(HttpProbe {
            method,
            url,
            found_status,
            headers,
            absent_status: spec.absent_status,
            absent_not_executed: spec.absent_not_executed,
            timeout: spec.timeout,
            secrets: masked,
            client,
        }),
        ProbeAsk::Tool {
            tool,
            arguments,
            found_pointer,
        } => Box::new(ToolProbe::new(
            tool,
            arguments,
            found_pointer,
            spec.absent_status,
            spec.absent_not_executed,
            spec.timeout,
        )),
    }
}

/// The largest probe body kept, in bytes.
const MAX_PROBE_BODY: usize = 1024 * 1024;

/// An HTTP probe (`method` and `url`).
pub struct HttpProbe {
    method: Method,
    url: UrlTemplate,
    found_status: BTreeSet<u16>,
    headers: Vec<Header>,
    absent_status: BTreeSet<u16>,
    absent_not_executed: bool,
    timeout: Duration,
    secrets: Vec<Secret>,
    client: reqwest::Client,
}

/// What a probe's placeholders are filled from: the call's arguments (when a retry carries
/// them), then `execution_id` and `request_id`, which win.
pub(crate) fn placeholder_values(target: &ProbeTarget) -> Value {
    let mut values = match &target.arguments {
        Some(Value::Object(members)) => members.clone(),
        _ => Map::new(),
    };
    values.insert("execution_id".into(), json!(target.execution_id.as_str()));
    values.insert("request_id".into(), json!(target.key.request_id));
    Value::Object(values)
}

impl HttpProbe {
    async fn ask(&self, target: &ProbeTarget) -> ProbeAnswer {
        let answer = self.send(target).await;
        ProbeAnswer {
            verdict: match answer.verdict {
                ProbeVerdict::Found(body) => ProbeVerdict::Found(mask(body, &self.secrets)),
                other => other,
            },
            evidence: mask(answer.evidence, &self.secrets),
        }
    }

    async fn send(&self, target: &ProbeTarget) -> ProbeAnswer {
        let url = match self.url.render(&placeholder_values(target)) {
            Ok(url) => url,
            Err(message) => {
                return inconclusive(json!({"answer": "error", "detail": format!(
                    "the probe's URL cannot be filled: {message} (an argument is known only when the call is retried)")}))
            }
        };
        let request_line = format!("{} {url}", self.method);
        let mut request = self
            .client
            .request(self.method.clone(), url)
            .timeout(self.timeout);
        for header in &self.headers {
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
        if self.found_status.contains(&status) {
            let evidence =
                json!({"answer": "found", "request": request_line, "status": status, "body": body});
            ProbeAnswer {
                verdict: ProbeVerdict::Found(body),
                evidence,
            }
        } else if self.absent_status.contains(&status) {
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

pub(crate) fn inconclusive(evidence: Value) -> ProbeAnswer {
    ProbeAnswer {
        verdict: ProbeVerdict::Inconclusive,
        evidence,
    }
}

impl Probe for HttpProbe {
    fn absent_means_not_executed(&self) -> bool {
        self.absent_not_executed
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn probe<'a>(&'a self, target: &'a ProbeTarget, _tools: &'a dyn ProbeTools) -> ProbeFuture<'a> {
        Box::pin(self.ask(target))
    }
}
