//! The wire format of Carmy's HTTP API as this client reads it: execution records
//! (docs/semantics.md §4), problem details (docs/semantics.md §5, §12) and the tool list
//! (docs/semantics.md §7).
//!
//! Defined here rather than shared with the server crate so that the client stays light. Members
//! the client does not know yet are ignored, so a newer gateway that adds members to a record or
//! a problem still parses.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a finished execution ended (docs/semantics.md §4). Every status is recorded and replayed
/// alike: a replayed `TimedOut` means the tool is not run again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The tool returned a value (`data`).
    Completed,
    /// The tool returned an error (`error`), or its result was not recordable
    /// (`error.code = "RESULT_TOO_LARGE"`).
    Failed,
    /// The tool's deadline passed.
    TimedOut,
    /// An explicit cancel, or the gateway's shutdown after its drain period.
    Cancelled,
}

/// The `error` member of a recorded outcome that is not `completed`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolError {
    /// Machine-readable code, e.g. `TOOL_ERROR`, `TIMEOUT`, `RESULT_TOO_LARGE`.
    pub code: String,
    /// Human-readable explanation.
    pub message: String,
}

/// A finished execution: the body of a `200` answer to `POST /v1/executions`
/// (docs/semantics.md §4).
///
/// A replay carries the same `execution_id`, `status`, `data` and `error` as the first answer;
/// only [`replayed`](Self::replayed) differs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// The gateway's id of the execution (`exec_…`), stable across replays.
    pub execution_id: String,
    /// How it ended.
    pub status: Status,
    /// The tool's value when `completed`, otherwise `null`. Numbers keep their exact text.
    pub data: Value,
    /// The error for every status except `completed`.
    pub error: Option<ToolError>,
    /// The tool that ran.
    pub tool: String,
    /// The call's request_id (`None` only for calls sent without one, which this client never
    /// does).
    pub request_id: Option<String>,
    /// The session of the call's identity (`default` when the call named none).
    pub session_id: String,
    /// `true` when this answer is the recorded outcome of an earlier attempt: the tool did not
    /// run for this request. `false` in records read with `GET /v1/executions/{id}`.
    #[serde(default)]
    pub replayed: bool,
    /// When the tool started: RFC 3339 text in UTC with milliseconds.
    pub started_at: String,
    /// When the outcome was recorded: RFC 3339 text in UTC with milliseconds.
    pub finished_at: String,
}

/// Whether an execution without an outcome may still finish (docs/semantics.md §3, §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InFlightState {
    /// Its owner is running it; a retry later replays its outcome.
    Running,
    /// Its owner died; the outcome is unknown and it is never re-run automatically.
    Interrupted,
}

/// An execution that has no outcome yet, as `GET /v1/executions/{id}` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InFlight {
    /// The gateway's id of the execution.
    pub execution_id: String,
    /// Running or interrupted.
    pub state: InFlightState,
    /// The tool.
    pub tool: String,
    /// The call's request_id.
    pub request_id: Option<String>,
    /// The call's session.
    pub session_id: String,
}

/// The answer of `GET /v1/executions/{id}`: an outcome, or an execution still without one.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    /// The recorded outcome.
    Finished(Execution),
    /// Running, or interrupted with an unknown outcome.
    InFlight(InFlight),
}

/// Every status a record may show on the wire, finished or not.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum WireStatus {
    Completed,
    Failed,
    TimedOut,
    Cancelled,
    Running,
    Interrupted,
}

/// A record as `GET /v1/executions/{id}` sends it: in-flight records have no timestamps.
#[derive(Deserialize)]
struct WireRecord {
    execution_id: String,
    status: WireStatus,
    #[serde(default)]
    data: Value,
    #[serde(default)]
    error: Option<ToolError>,
    tool: String,
    #[serde(default)]
    request_id: Option<String>,
    session_id: String,
    #[serde(default)]
    replayed: bool,
    started_at: Option<String>,
    finished_at: Option<String>,
}

impl Record {
    /// Parses the body of `GET /v1/executions/{id}`.
    ///
    /// # Errors
    /// The `serde_json` error when the body is not a record, or a finished record lacks its
    /// timestamps.
    pub fn from_json(body: &[u8]) -> Result<Self, serde_json::Error> {
        let wire: WireRecord = serde_json::from_slice(body)?;
        let status = match wire.status {
            WireStatus::Running => {
                return Ok(Self::InFlight(wire.in_flight(InFlightState::Running)))
            }
            WireStatus::Interrupted => {
                return Ok(Self::InFlight(wire.in_flight(InFlightState::Interrupted)))
            }
            WireStatus::Completed => Status::Completed,
            WireStatus::Failed => Status::Failed,
            WireStatus::TimedOut => Status::TimedOut,
            WireStatus::Cancelled => Status::Cancelled,
        };
        let (Some(started_at), Some(finished_at)) = (wire.started_at, wire.finished_at) else {
            return Err(serde::de::Error::custom(
                "a finished record needs started_at and finished_at",
            ));
        };
        Ok(Self::Finished(Execution {
            execution_id: wire.execution_id,
            status,
            data: wire.data,
            error: wire.error,
            tool: wire.tool,
            request_id: wire.request_id,
            session_id: wire.session_id,
            replayed: wire.replayed,
            started_at,
            finished_at,
        }))
    }
}

impl WireRecord {
    fn in_flight(self, state: InFlightState) -> InFlight {
        InFlight {
            execution_id: self.execution_id,
            state,
            tool: self.tool,
            request_id: self.request_id,
            session_id: self.session_id,
        }
    }
}

/// An RFC 9457 problem answer (docs/semantics.md §5) with Carmy's extensions.
///
/// Answers from something in front of the gateway (a load balancer's 502 page) are represented
/// too: their members are then defaults and [`code`](Self::code) is `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// A URI naming the problem type, e.g. `urn:carmy:problem:idempotency-conflict`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// Short summary of the problem type.
    #[serde(default)]
    pub title: String,
    /// The HTTP status code.
    #[serde(default)]
    pub status: u16,
    /// Explanation of this occurrence.
    #[serde(default)]
    pub detail: String,
    /// The machine code, e.g. `IDEMPOTENCY_CONFLICT` (docs/semantics.md §3); `None` when the answer
    /// did not come from Carmy.
    #[serde(default)]
    pub code: Option<String>,
    /// The execution concerned, where one exists.
    #[serde(default)]
    pub execution_id: Option<String>,
    /// For `EXECUTION_UNCERTAIN`: `running` or `interrupted`.
    #[serde(default)]
    pub state: Option<InFlightState>,
    /// For `IDEMPOTENCY_CONFLICT`: which parts of the call differ (`tool`, `arguments`,
    /// `metadata`; docs/semantics.md §12.8). Empty when the gateway does not say.
    #[serde(default)]
    pub differs: Vec<String>,
}

impl Problem {
    /// Reads a problem answer with HTTP `status`. A body that is not problem JSON becomes a
    /// problem with no code whose detail is the start of the body.
    pub fn from_answer(status: u16, body: &[u8]) -> Self {
        match serde_json::from_slice::<Self>(body) {
            Ok(mut problem) => {
                if problem.status == 0 {
                    problem.status = status;
                }
                problem
            }
            Err(_) => {
                let text = String::from_utf8_lossy(body);
                Self {
                    kind: "about:blank".into(),
                    status,
                    detail: text.chars().take(200).collect(),
                    ..Self::default()
                }
            }
        }
    }

    /// Whether the machine code is `code`.
    pub fn has_code(&self, code: &str) -> bool {
        self.code.as_deref() == Some(code)
    }
}

/// One tool of `GET /v1/tools`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// The name to pass as a call's `tool`.
    pub name: String,
    /// What the tool does.
    #[serde(default)]
    pub description: Option<String>,
    /// The JSON Schema its `arguments` must satisfy.
    #[serde(default)]
    pub input_schema: Value,
}

/// The body of `GET /v1/tools`.
#[derive(Deserialize)]
pub(crate) struct ToolList {
    pub(crate) tools: Vec<Tool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_parses_with_exact_numbers() {
        let body = br#"{"execution_id":"exec_1","status":"completed","data":{"n":12345678901234567890123},
            "error":null,"tool":"echo","request_id":"r","session_id":"default","replayed":true,
            "started_at":"2025-01-01T00:00:00.000Z","finished_at":"2025-01-01T00:00:00.001Z","attempt":1}"#;
        let Record::Finished(execution) = Record::from_json(body).unwrap() else {
            panic!("finished expected");
        };
        assert_eq!(execution.status, Status::Completed);
        assert!(execution.replayed);
        assert_eq!(
            serde_json::to_string(&execution.data).unwrap(),
            r#"{"n":12345678901234567890123}"#
        );
    }

    #[test]
    fn an_in_flight_record_parses() {
        let body = br#"{"execution_id":"exec_2","status":"interrupted","data":null,"error":null,
            "tool":"sleep","request_id":"r","session_id":"s"}"#;
        assert_eq!(
            Record::from_json(body).unwrap(),
            Record::InFlight(InFlight {
                execution_id: "exec_2".into(),
                state: InFlightState::Interrupted,
                tool: "sleep".into(),
                request_id: Some("r".into()),
                session_id: "s".into(),
            })
        );
    }

    #[test]
    fn a_finished_record_without_timestamps_is_refused() {
        let body = br#"{"execution_id":"e","status":"failed","tool":"t","session_id":"s"}"#;
        assert!(Record::from_json(body).is_err());
    }

    #[test]
    fn problems_parse_and_non_problems_are_kept_readable() {
        let problem = Problem::from_answer(
            409,
            br#"{"type":"urn:carmy:problem:idempotency-conflict","title":"Idempotency conflict",
                "status":409,"detail":"d","code":"IDEMPOTENCY_CONFLICT","execution_id":"exec_3",
                "differs":["arguments"]}"#,
        );
        assert!(problem.has_code("IDEMPOTENCY_CONFLICT"));
        assert_eq!(problem.differs, ["arguments"]);
        assert_eq!(problem.execution_id.as_deref(), Some("exec_3"));

        let page = Problem::from_answer(502, b"<html>bad gateway</html>");
        assert_eq!(page.status, 502);
        assert_eq!(page.code, None);
        assert_eq!(page.detail, "<html>bad gateway</html>");
    }
}
