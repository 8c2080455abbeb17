//! Recorded outcomes of executions (docs/semantics.md §4).

use crate::fingerprint::FingerprintParts;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;

/// An execution's identifier: `exec_` followed by 32 lowercase hex digits (a random UUID).
///
/// One is minted for every call, with or without `request_id` (docs/semantics.md §3), and it is the
/// `execution_id` that a replay repeats. Shared text: a clone costs no allocation (a store keeps
/// the id of a held execution in several places). Serialised as a JSON string.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(value_type = String, example = "exec_0f3c9a6b1d2e4f5a8b7c6d5e4f3a2b1c")
)]
pub struct ExecutionId(Arc<str>);

impl ExecutionId {
    /// Mints a fresh random execution id.
    pub fn generate() -> Self {
        let mut text = [0u8; 37];
        text[..5].copy_from_slice(b"exec_");
        let id: &str = uuid::Uuid::new_v4().simple().encode_lower(&mut text[5..]);
        debug_assert_eq!(id.len(), 32);
        let text = std::str::from_utf8(&text).expect("`exec_` and hex digits are ASCII");
        Self(text.into())
    }

    /// Wraps an id read back from a store. No validation: stores only hand back ids they were
    /// given.
    pub fn from_stored(id: impl Into<String>) -> Self {
        Self(id.into().into())
    }

    /// An id given by a caller (a URL path, a flag), if it could name an execution: 1 to 64
    /// ASCII letters, digits, `_` and `-` (every minted id is `exec_` and 32 hex digits).
    /// `None` for anything else, which no store holds (docs/semantics.md §7).
    pub fn parse(text: &str) -> Option<Self> {
        let plausible = !text.is_empty()
            && text.len() <= 64
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        plausible.then(|| Self(text.into()))
    }

    /// The id as text, e.g. `exec_0f3c…`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Serialize for ExecutionId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ExecutionId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::from_stored)
    }
}

impl fmt::Display for ExecutionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a finished execution ended (docs/semantics.md §4). All four are recorded and replayed alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ExecutionStatus {
    /// The tool returned a value.
    Completed,
    /// The tool returned an error, or its result could not be recorded as it was
    /// (`RESULT_TOO_LARGE`, `TOOL_PANICKED`).
    Failed,
    /// The tool's deadline passed before it returned.
    TimedOut,
    /// An explicit cancel, or shutdown after the drain period.
    Cancelled,
}

impl ExecutionStatus {
    /// The status as stored and shown: `completed`, `failed`, `timed_out` or `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::Cancelled => "cancelled",
        }
    }

    /// Parses the stored text form; `None` for anything else (including `running`).
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "timed_out" => Self::TimedOut,
            "cancelled" => Self::Cancelled,
            _ => return None,
        })
    }
}

/// The error member of a recorded outcome: a machine `code`, a human `message`, and `effect:
/// "unknown"` when the tool's effect may have happened (docs/semantics.md §4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExecutionError {
    /// Machine-readable code, e.g. `TOOL_ERROR`, `TIMEOUT`, `RESULT_TOO_LARGE`.
    pub code: String,
    /// Human-readable explanation.
    pub message: String,
    /// Present when the effect may have happened, so a reader never takes the failure for
    /// "nothing happened". Absent in records written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<Effect>,
    /// What the tool adds to explain the failure, recorded and replayed as given, e.g. an HTTP
    /// tool's `{"status": 404, "body": "…"}` (docs/semantics.md §10). Absent when the tool gave
    /// none. Boxed: most errors have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Box<Value>>,
}

/// What a failed outcome says about the tool's effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// The effect may or may not have happened; check before acting again.
    Unknown,
}

impl ExecutionError {
    /// `TIMEOUT`: the tool's deadline passed before it returned (status `timed_out`).
    pub fn timeout(deadline: std::time::Duration) -> Self {
        Self::new(
            "TIMEOUT",
            format!(
                "the tool's deadline of {} ms passed; its effects are unknown",
                deadline.as_millis()
            ),
        )
        .effect_unknown()
    }

    /// `CANCELLED` by a cancel request (status `cancelled`).
    pub fn cancelled_on_request() -> Self {
        Self::new(
            "CANCELLED",
            "the execution was cancelled on request; its effects are unknown",
        )
        .effect_unknown()
    }

    /// `CANCELLED` because this process's lease lapsed while the tool ran (status
    /// `cancelled`; docs/semantics.md §12.2): the other replicas already reported it
    /// interrupted.
    pub fn cancelled_on_lease_loss() -> Self {
        Self::new(
            "CANCELLED",
            "the execution was stopped because its replica lost its lease (cut off from the database); its effects are unknown",
        )
        .effect_unknown()
    }

    /// `CANCELLED` at shutdown, after the drain period (status `cancelled`).
    pub fn cancelled_at_shutdown() -> Self {
        Self::new(
            "CANCELLED",
            "the execution was cancelled at shutdown, after the drain period; its effects are unknown",
        )
        .effect_unknown()
    }

    /// `TOOL_PANICKED` (status `failed`).
    pub fn panicked() -> Self {
        Self::new(
            "TOOL_PANICKED",
            "the tool panicked; its effects are unknown",
        )
        .effect_unknown()
    }

    /// `RESULT_TOO_LARGE`: the result is `bytes` of JSON, over `limit` (status `failed`).
    pub fn result_too_large(bytes: usize, limit: usize) -> Self {
        Self::new(
            "RESULT_TOO_LARGE",
            format!("the result is {bytes} bytes of JSON; the limit is {limit} bytes"),
        )
    }

    /// `RESULT_NOT_RECORDABLE`: the result could not be recorded and replayed exactly, for the
    /// reason given (status `failed`).
    pub fn not_recordable(reason: impl Into<String>) -> Self {
        Self::new("RESULT_NOT_RECORDABLE", reason)
    }

    fn new(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.to_owned(),
            message: message.into(),
            effect: None,
            details: None,
        }
    }

    /// The same error, marked `effect: "unknown"`.
    fn effect_unknown(self) -> Self {
        Self {
            effect: Some(Effect::Unknown),
            ..self
        }
    }
}

impl From<crate::tool::ToolError> for ExecutionError {
    /// A recorded tool failure; [`ToolErrorKind::EffectUnknown`](crate::tool::ToolErrorKind) marks the
    /// effect unknown. (A `NotExecuted` error is never recorded; the engine releases instead.)
    fn from(error: crate::tool::ToolError) -> Self {
        let recorded = Self {
            code: error.code,
            message: error.message,
            effect: None,
            details: error.details.map(Box::new),
        };
        match error.kind {
            crate::tool::ToolErrorKind::Failed => recorded,
            _ => recorded.effect_unknown(),
        }
    }
}

/// A finished execution as it is recorded and replayed (docs/semantics.md §4).
///
/// Serialized (without `replayed`, which belongs to a response, see
/// [`ExecutionResult::to_response_json`]) this is the exact text a store keeps; stores must keep it
/// losslessly, so `data` may hold any JSON, including big integers and strings with `\u0000`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(
        as = ExecutionRecord,
        description = "A finished execution's record, as recorded and replayed (docs/semantics.md §4)."
    )
)]
pub struct ExecutionResult {
    /// The execution this outcome belongs to.
    pub execution_id: ExecutionId,
    /// How it ended.
    pub status: ExecutionStatus,
    /// The tool's value for `completed`, otherwise `null`.
    pub data: Value,
    /// The error for every status except `completed`, otherwise `null` (`None`).
    pub error: Option<ExecutionError>,
    /// The tool that ran.
    pub tool: String,
    /// The caller's `request_id`; `null` (`None`) for a call without replay protection.
    pub request_id: Option<String>,
    /// The session (`default` when the call named none).
    pub session_id: String,
    /// When the tool started, UTC, RFC 3339 with milliseconds.
    #[serde(serialize_with = "rfc3339_millis")]
    pub started_at: DateTime<Utc>,
    /// When the outcome was fixed, UTC, RFC 3339 with milliseconds.
    #[serde(serialize_with = "rfc3339_millis")]
    pub finished_at: DateTime<Utc>,
    /// Present when the outcome was recorded by a decision (`POST
    /// /v1/executions/{id}/resolve`, or `carmy.resolve_execution` in SQL) rather than by the
    /// tool: who, when, why (docs/semantics.md §12.1). Absent from tools' records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Box<crate::decision::Resolution>>,
}

fn rfc3339_millis<T, S>(at: &T, serializer: S) -> Result<S::Ok, S::Error>
where
    T: std::borrow::Borrow<DateTime<Utc>>,
    S: Serializer,
{
    serializer.serialize_str(&at.borrow().to_rfc3339_opts(SecondsFormat::Millis, true))
}

impl ExecutionResult {
    /// The stored form: compact JSON text of the record (no `replayed`).
    pub fn to_record_json(&self) -> String {
        serde_json::to_string(self).expect("an execution result always serializes")
    }

    /// The body of a finished record read back (docs/semantics.md §7, §12): the stored form
    /// followed by `expires_at` (see [`with_expires_at`]).
    pub fn to_body_json(&self, expires_at: Option<DateTime<Utc>>) -> String {
        with_expires_at(self.to_record_json(), expires_at)
    }

    /// Reads back a record written by [`ExecutionResult::to_record_json`].
    ///
    /// # Errors
    /// The `serde_json` error if the text is not such a record (a damaged row).
    pub fn from_record_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// An outcome together with its stored text, serialised once when the outcome is fixed and
/// passed along: the store writes that text, the replay cache measures it, and the response is
/// made from it. Immutable, so the text always matches the outcome; both are shared, so a clone
/// (a store keeping the outcome) costs no allocation.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedResult {
    result: Arc<ExecutionResult>,
    json: Arc<str>,
    /// Where `replayed` goes in `json`: the offset of its member `started_at` (found once, so
    /// that every replay of a cached record answers without searching its text again).
    started_at: usize,
    attempt: u32,
    parts: Option<FingerprintParts>,
}

impl RecordedResult {
    /// Serialises `result` (the record of [`ExecutionResult::to_record_json`]), as the outcome
    /// of the execution's first attempt.
    pub fn new(result: ExecutionResult) -> Self {
        let json = result.to_record_json();
        // `started_at` and `finished_at` follow `data` and hold timestamps; only `resolution`
        // (whose members are all strings, where a quote is always escaped) may follow them, so
        // the last `,"started_at":` is the member itself, never text inside `data`.
        let started_at = json
            .rfind(STARTED_AT_MEMBER)
            .expect("a record always has started_at");
        Self {
            result: Arc::new(result),
            json: json.into(),
            started_at,
            attempt: 1,
            parts: None,
        }
    }

    /// The same outcome, as made by attempt `attempt` of its execution (2 and later after a
    /// takeover, docs/semantics.md §12.7): a store records it only while that attempt holds the
    /// execution.
    #[must_use]
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// The same outcome and stored text (shared, not copied) as a replay hands them on: as
    /// [`RecordedResult::new`] makes them from the outcome (attempt 1, no part digests).
    #[must_use]
    pub fn as_replay(&self) -> Self {
        Self {
            result: Arc::clone(&self.result),
            json: Arc::clone(&self.json),
            started_at: self.started_at,
            attempt: 1,
            parts: None,
        }
    }

    /// Which attempt of the execution made this outcome; 1 unless it was taken over.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The same outcome with its call's part digests (docs/semantics.md §12.8, a cached conflict).
    #[must_use]
    pub fn with_parts(mut self, parts: FingerprintParts) -> Self {
        self.parts = Some(parts);
        self
    }

    /// The digests of its call's parts, when given ([`RecordedResult::with_parts`]).
    pub fn parts(&self) -> Option<FingerprintParts> {
        self.parts
    }

    /// The outcome.
    pub fn result(&self) -> &ExecutionResult {
        &self.result
    }

    /// The outcome, taken out.
    pub fn into_result(self) -> ExecutionResult {
        Arc::unwrap_or_clone(self.result)
    }

    /// The stored form: compact JSON text of the record (no `replayed`).
    pub fn record_json(&self) -> &str {
        &self.json
    }

    /// The response body of docs/semantics.md §4: the record with `replayed` before `started_at`
    /// and `expires_at` last (docs/semantics.md §12.9, [`with_expires_at`]), made from the stored
    /// text without serialising the outcome again.
    pub fn to_response_json(&self, replayed: bool, expires_at: Option<DateTime<Utc>>) -> String {
        let at = self.started_at;
        // `replayed` (17 bytes at most) and `expires_at` (41 at most, before year 10000).
        let mut body = String::with_capacity(self.json.len() + 17 + 41);
        body.push_str(&self.json[..at]);
        body.push_str(if replayed {
            ",\"replayed\":true"
        } else {
            ",\"replayed\":false"
        });
        body.push_str(&self.json[at..]);
        with_expires_at(body, expires_at)
    }
}

impl From<ExecutionResult> for RecordedResult {
    fn from(result: ExecutionResult) -> Self {
        Self::new(result)
    }
}

/// Appends the member `expires_at` to a record's JSON object text: when the record stops holding
/// its identity (docs/semantics.md §12.9), UTC, RFC 3339 with milliseconds, or `null` when it is
/// kept forever. It is not part of the stored record: it follows from `finished_at` and the
/// retention in force, so every answer of one record states the same instant.
pub fn with_expires_at(mut record: String, expires_at: Option<DateTime<Utc>>) -> String {
    debug_assert!(record.ends_with('}'), "a record is a JSON object");
    record.pop();
    match expires_at {
        Some(at) => {
            record.push_str(",\"expires_at\":\"");
            record.push_str(&at.to_rfc3339_opts(SecondsFormat::Millis, true));
            record.push_str("\"}");
        }
        None => record.push_str(",\"expires_at\":null}"),
    }
    record
}

/// Where `replayed` goes in a response: before this member of the record.
const STARTED_AT_MEMBER: &str = ",\"started_at\":";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The response body's members in contract order, serialised directly.
    #[derive(Serialize)]
    struct ResponseBody<'a> {
        execution_id: &'a ExecutionId,
        status: ExecutionStatus,
        data: &'a Value,
        error: &'a Option<ExecutionError>,
        tool: &'a str,
        request_id: &'a Option<String>,
        session_id: &'a str,
        replayed: bool,
        #[serde(serialize_with = "rfc3339_millis")]
        started_at: &'a DateTime<Utc>,
        #[serde(serialize_with = "rfc3339_millis")]
        finished_at: &'a DateTime<Utc>,
        expires_at: Option<String>,
    }

    fn expected_at(at: Option<DateTime<Utc>>) -> Option<String> {
        at.map(|at| at.to_rfc3339_opts(SecondsFormat::Millis, true))
    }

    #[test]
    fn the_response_is_the_record_with_replayed() {
        let result = ExecutionResult {
            execution_id: ExecutionId::generate(),
            status: ExecutionStatus::Completed,
            data: json!({"started_at": ",\"started_at\":", "n": [1, 2]}),
            error: None,
            tool: "echo".into(),
            request_id: Some("r".into()),
            session_id: "default".into(),
            started_at: Utc::now(),
            finished_at: Utc::now(),
            resolution: None,
        };
        let recorded = RecordedResult::new(result.clone());
        assert_eq!(recorded.record_json(), result.to_record_json());
        let expires = Utc::now();
        for (replayed, expires_at) in [(false, None), (true, Some(expires))] {
            let expected = serde_json::to_string(&ResponseBody {
                execution_id: &result.execution_id,
                status: result.status,
                data: &result.data,
                error: &result.error,
                tool: &result.tool,
                request_id: &result.request_id,
                session_id: &result.session_id,
                replayed,
                started_at: &result.started_at,
                finished_at: &result.finished_at,
                expires_at: expires_at.map(|at| at.to_rfc3339_opts(SecondsFormat::Millis, true)),
            })
            .unwrap();
            assert_eq!(recorded.to_response_json(replayed, expires_at), expected);
            let body: Value = serde_json::from_str(&result.to_body_json(expires_at)).unwrap();
            assert_eq!(
                body["expires_at"],
                serde_json::to_value(expected_at(expires_at)).unwrap()
            );
        }
    }
}
