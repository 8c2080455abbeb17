//! What `carmy-gateway executions` prints: a table for `list`, a readable block for `show`, one
//! line per decision, and with `--json` machine JSON (shapes in docs/operations.md, "Failure
//! semantics"). Text that came from callers or notes is printed with control characters
//! escaped, so a stored value cannot drive the operator's terminal.

use carmy::decision::{AuditEntry, Resolution};
use carmy::outcome::ExecutionResult;
use carmy::store::{ExecutionLookup, InFlightState, RecordState};
use carmy_postgres::ExecutionDetail;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};

/// A timestamp as records write it: UTC, RFC 3339 with milliseconds.
fn stamp(at: &DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `text` with control characters (newlines, escape sequences, …) written as Rust escapes.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The state word of an execution: `running`, `interrupted`, a finished status, or `released`.
pub fn status(lookup: &ExecutionLookup) -> &'static str {
    match (&lookup.released, &lookup.record.state) {
        (Some(_), _) => "released",
        (None, RecordState::Finished(result)) => result.status.as_str(),
        (None, RecordState::InFlight(state)) => state.as_str(),
    }
}

/// Who decided, when and why, if anyone did.
fn resolution(lookup: &ExecutionLookup) -> Option<&Resolution> {
    match (&lookup.released, &lookup.record.state) {
        (Some(released), _) => Some(released),
        (None, RecordState::Finished(result)) => result.resolution.as_deref(),
        (None, RecordState::InFlight(_)) => None,
    }
}

/// The record as the API replays it (a finished execution's), as JSON.
pub fn record_json(result: &ExecutionResult) -> Value {
    serde_json::from_str(&result.to_record_json()).unwrap_or(Value::Null)
}

/// One execution as `list --json` prints it (and `show --json`, which adds `record` and
/// `audit`).
pub fn summary_json(detail: &ExecutionDetail) -> Value {
    let lookup = &detail.lookup;
    json!({
        "execution_id": lookup.record.execution_id.as_str(),
        "status": status(lookup),
        "principal": lookup.key.principal,
        "session_id": lookup.key.session_id,
        "request_id": lookup.key.request_id,
        "tool": lookup.record.tool,
        "created_at": stamp(&detail.created_at),
        "started_at": detail.started_at.as_ref().map(stamp),
        "finished_at": detail.finished_at.as_ref().map(stamp),
        "owner_instance": detail.owner_instance,
        "owner": detail.owner.as_ref().map(|owner| json!({
            "hostname": owner.hostname,
            "pid": owner.pid,
            "lease_expires_at": stamp(&owner.lease_expires_at),
        })),
        "resolution": resolution(lookup),
        "arguments": arguments_json(lookup),
    })
}

/// The kept arguments as JSON (docs/semantics.md §8.5): `null` when none were kept; a row a DBA
/// changed into text that is not JSON, as a JSON string of that text.
pub fn arguments_json(lookup: &ExecutionLookup) -> Value {
    match lookup.arguments.as_deref() {
        None => Value::Null,
        Some(text) => serde_json::from_str(text).unwrap_or_else(|_| Value::from(text)),
    }
}

/// `show --json`: [`summary_json`] with `record` (the finished record as the API replays it,
/// else `null`) and `audit` (the audit rows, oldest first).
pub fn detail_json(
    detail: &ExecutionDetail,
    audit: &[AuditEntry],
    retention: Option<std::time::Duration>,
) -> Value {
    let mut value = summary_json(detail);
    value["record"] = match &detail.lookup.record.state {
        // As the API answers it: the record with `expires_at` (docs/semantics.md §12.9).
        RecordState::Finished(result) if detail.lookup.released.is_none() => {
            let expires_at = carmy::retention::expires_at(result.finished_at, retention);
            serde_json::from_str(&result.to_body_json(expires_at)).unwrap_or(Value::Null)
        }
        _ => Value::Null,
    };
    value["audit"] = audit
        .iter()
        .map(|entry| {
            json!({
                "at": stamp(&entry.at),
                "actor": entry.actor,
                "action": entry.action.as_str(),
                "before": entry.before,
                "after": entry.after,
                "note": entry.note,
            })
        })
        .collect();
    value
}

/// `show`'s answer: [`detail_json`] with `reconcile_evidence` when `json` gives the replicas'
/// retention, else [`detail_block`] with a `probe` line (docs/semantics.md §12.10,
/// reconciliation).
pub fn shown(
    detail: &ExecutionDetail,
    audit: &[AuditEntry],
    evidence: Option<&Value>,
    json: Option<Option<std::time::Duration>>,
) -> String {
    match json {
        Some(retention) => {
            let mut value = detail_json(detail, audit, retention);
            value["reconcile_evidence"] = evidence.cloned().unwrap_or(Value::Null);
            format!("{value}\n")
        }
        None => {
            let mut text = detail_block(detail, audit);
            if let Some(evidence) = evidence {
                text.push_str(&format!("{:<11} {}\n", "probe", probe_line(evidence)));
            }
            text
        }
    }
}

/// The last probe's evidence in one line: `absent: GET <url> answered 404 at <time> (attempt
/// 3): <detail>`.
fn probe_line(evidence: &Value) -> String {
    let text = |name: &str| evidence[name].as_str().unwrap_or_default().to_owned();
    let mut line = text("answer");
    if !text("request").is_empty() {
        line.push_str(&format!(": {}", text("request")));
    }
    if let Some(status) = evidence["status"].as_u64() {
        line.push_str(&format!(" answered {status}"));
    }
    if !text("at").is_empty() {
        line.push_str(&format!(" at {}", text("at")));
    }
    if let Some(attempts) = evidence["attempts"].as_u64() {
        line.push_str(&format!(" (attempt {attempts})"));
    }
    if !text("detail").is_empty() {
        line.push_str(&format!(": {}", text("detail")));
    }
    printable(&line)
}

/// Columns padded to their widest cell, two spaces apart.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|cell| cell.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
        let padded: Vec<String> = cells
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut text = line(&mut header.iter().copied());
    for row in rows {
        text.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    text
}

/// The owner as one cell: `host:pid`, else the instance id, else `-`.
fn owner_cell(detail: &ExecutionDetail) -> String {
    match (&detail.owner, &detail.owner_instance) {
        (Some(owner), _) if owner.hostname.is_some() => format!(
            "{}:{}",
            printable(owner.hostname.as_deref().unwrap_or_default()),
            owner
                .pid
                .map_or_else(|| "?".to_owned(), |pid| pid.to_string())
        ),
        (_, Some(instance)) => printable(instance),
        _ => "-".to_owned(),
    }
}

/// `list` as a table, or a sentence when nothing matched.
pub fn list_table(details: &[ExecutionDetail]) -> String {
    if details.is_empty() {
        return "No executions match.\n".to_owned();
    }
    let rows: Vec<Vec<String>> = details
        .iter()
        .map(|detail| {
            let lookup = &detail.lookup;
            vec![
                lookup.record.execution_id.to_string(),
                status(lookup).to_owned(),
                printable(&lookup.key.principal),
                printable(&lookup.key.session_id),
                printable(&lookup.key.request_id),
                printable(&lookup.record.tool),
                stamp(&detail.created_at),
                owner_cell(detail),
            ]
        })
        .collect();
    table(
        &[
            "EXECUTION",
            "STATUS",
            "PRINCIPAL",
            "SESSION",
            "REQUEST_ID",
            "TOOL",
            "RESERVED",
            "OWNER",
        ],
        &rows,
    )
}

/// `show` as a readable block: identity, state, owner, outcome, decision, audit trail, and what
/// to do next for an execution without an outcome.
pub fn detail_block(detail: &ExecutionDetail, audit: &[AuditEntry]) -> String {
    let lookup = &detail.lookup;
    let id = lookup.record.execution_id.as_str();
    let mut lines: Vec<(String, String)> = vec![
        ("execution".into(), id.to_owned()),
        ("status".into(), status_sentence(lookup)),
        ("principal".into(), printable(&lookup.key.principal)),
        ("session_id".into(), printable(&lookup.key.session_id)),
        ("request_id".into(), printable(&lookup.key.request_id)),
        ("tool".into(), printable(&lookup.record.tool)),
        (
            "arguments".into(),
            lookup.arguments.as_deref().map_or_else(
                || "not kept (CARMY_KEEP_ARGUMENTS=none, or reserved before schema V15)".into(),
                printable,
            ),
        ),
        ("reserved".into(), stamp(&detail.created_at)),
    ];
    if let Some(at) = &detail.started_at {
        lines.push(("started".into(), stamp(at)));
    }
    if let Some(at) = &detail.finished_at {
        lines.push(("finished".into(), stamp(at)));
    }
    lines.push(("owner".into(), owner_sentence(detail)));
    if let (None, RecordState::Finished(result)) = (&lookup.released, &lookup.record.state) {
        match &result.error {
            None => lines.push(("data".into(), printable(&result.data.to_string()))),
            Some(error) => lines.push((
                "error".into(),
                printable(&serde_json::to_string(error).unwrap_or_default()),
            )),
        }
    }
    if let Some(resolution) = resolution(lookup) {
        lines.push((
            "decided".into(),
            format!(
                "by {} at {}: {}",
                printable(&resolution.by),
                stamp(&resolution.at),
                printable(&resolution.note)
            ),
        ));
    }
    let mut text: String = lines
        .iter()
        .map(|(label, value)| format!("{label:<11} {value}\n"))
        .collect();
    text.push_str(&format!("{:<11} {}\n", "audit", audit_summary(audit)));
    for entry in audit {
        text.push_str(&format!(
            "  {} {} by {}{}\n",
            stamp(&entry.at),
            entry.action.as_str(),
            printable(&entry.actor),
            entry
                .note
                .as_deref()
                .map(|note| format!(": {}", printable(note)))
                .unwrap_or_default()
        ));
    }
    if let (None, RecordState::InFlight(state)) = (&lookup.released, &lookup.record.state) {
        text.push_str(&next_steps(id, *state));
    }
    text
}

fn audit_summary(audit: &[AuditEntry]) -> String {
    match audit.len() {
        0 => "no rows".to_owned(),
        1 => "1 row".to_owned(),
        n => format!("{n} rows"),
    }
}

fn status_sentence(lookup: &ExecutionLookup) -> String {
    let word = status(lookup);
    let meaning = match (&lookup.released, &lookup.record.state) {
        (Some(_), _) => "its identity was freed; the next attempt runs the tool again",
        (None, RecordState::InFlight(InFlightState::Running)) => {
            "no outcome yet; its owner holds its lease"
        }
        (None, RecordState::InFlight(InFlightState::Interrupted)) => {
            "no outcome; its owner's lease lapsed, the effect may or may not have happened"
        }
        (None, RecordState::Finished(_)) => "recorded; every retry replays it",
    };
    format!("{word} ({meaning})")
}

fn owner_sentence(detail: &ExecutionDetail) -> String {
    let instance = detail
        .owner_instance
        .as_deref()
        .map_or_else(|| "-".to_owned(), printable);
    match &detail.owner {
        None => format!("{instance} (no lease row: the process is gone)"),
        Some(owner) => format!(
            "{instance} on host {} pid {}, lease until {} (database clock)",
            printable(owner.hostname.as_deref().unwrap_or("?")),
            owner
                .pid
                .map_or_else(|| "?".to_owned(), |pid| pid.to_string()),
            stamp(&owner.lease_expires_at)
        ),
    }
}

fn next_steps(id: &str, state: InFlightState) -> String {
    let force = match state {
        InFlightState::Running => {
            "\nIts owner still holds its lease: wait for the outcome. If the process above is \
             really gone (check the host), add --force to one of these:\n"
        }
        InFlightState::Interrupted => {
            "\nCheck that the process above is really gone (it may only be cut off from the \
             database), reconcile with the target system, then decide once:\n"
        }
    };
    format!(
        "{force}  carmy-gateway executions resolve {id} --status completed --data '<JSON>' --note '<what you found>'\n  \
         carmy-gateway executions resolve {id} --status failed --error '{{\"code\": \"…\", \"message\": \"…\"}}' --note '<what you found>'\n  \
         carmy-gateway executions release {id} --note '<why it may run again>'\n"
    )
}

/// The line `resolve` prints.
pub fn resolved_line(result: &ExecutionResult) -> String {
    let by = result
        .resolution
        .as_deref()
        .map(|resolution| {
            format!(
                " by {} at {}",
                printable(&resolution.by),
                stamp(&resolution.at)
            )
        })
        .unwrap_or_default();
    format!(
        "Resolved {} as {}{by}; every retry of its request_id now replays this outcome.\n",
        result.execution_id,
        result.status.as_str()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_text_cannot_drive_the_terminal() {
        assert_eq!(printable("ok: ü ✓"), "ok: ü ✓");
        assert_eq!(printable("a\nb\u{1b}[31m\t"), "a\\nb\\u{1b}[31m\\t");
    }

    #[test]
    fn columns_are_padded_to_their_widest_cell() {
        let rows = vec![
            vec![
                "exec_1".to_owned(),
                "interrupted".to_owned(),
                "ü".to_owned(),
            ],
            vec!["exec_22".to_owned(), "completed".to_owned(), "b".to_owned()],
        ];
        assert_eq!(
            table(&["EXECUTION", "STATUS", "X"], &rows),
            "EXECUTION  STATUS       X\n\
             exec_1     interrupted  ü\n\
             exec_22    completed    b\n"
        );
    }
}
