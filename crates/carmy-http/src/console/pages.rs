//! The console's HTML, written with `maud` (compiled into the binary; every interpolated value
//! is HTML-escaped by `maud`): the layout, the login form, the listing and one execution's page.

use carmy::decision::{AuditAction, AuditEntry, OperatorView};
use carmy::outcome::ExecutionStatus;
use carmy::store::{ExecutionLookup, RecordState};
use chrono::{DateTime, SecondsFormat, Utc};
use maud::{html, Markup, DOCTYPE};
use serde_json::Value;

/// The stylesheet, served at `/console/style.css` (CSP `style-src 'self'`): readable on a phone
/// (one column, wrapping tables) and on a desk.
pub(crate) const STYLE: &str = r#"
*{box-sizing:border-box}
body{margin:0;font:16px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2433;background:#f4f6fa}
header{display:flex;flex-wrap:wrap;gap:.5rem 1rem;align-items:center;padding:.6rem 1rem;background:#1d2433;color:#fff}
header a{color:#fff;font-weight:600;text-decoration:none}
header .who{margin-left:auto;font-size:.9rem}
header form{margin:0}
main{max-width:72rem;margin:0 auto;padding:1rem}
h1{font-size:1.35rem;margin:.2rem 0 1rem}
h2{font-size:1.1rem;margin:1.4rem 0 .5rem}
section{background:#fff;border:1px solid #d8dde8;border-radius:8px;padding:.8rem 1rem;margin:0 0 1rem}
table{width:100%;border-collapse:collapse;font-size:.92rem}
th,td{text-align:left;padding:.35rem .5rem;border-bottom:1px solid #e3e7ef;vertical-align:top;overflow-wrap:anywhere}
th{font-weight:600;color:#4a5468}
td.age,td.action,td.actor,td.at{white-space:nowrap;overflow-wrap:normal}
table.audit td.note{min-width:10rem}
dl{display:grid;grid-template-columns:minmax(7rem,max-content) 1fr;gap:.25rem 1rem;margin:0}
dt{font-weight:600;color:#4a5468}
dd{margin:0;overflow-wrap:anywhere}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.85rem}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f4f6fa;padding:.5rem;border-radius:6px;margin:.2rem 0}
label{display:block;font-weight:600;margin:.6rem 0 .2rem}
input[type=text],input[type=password],select,textarea{width:100%;padding:.5rem;font:inherit;border:1px solid #b9c1d0;border-radius:6px}
textarea{min-height:5rem;font-family:ui-monospace,monospace}
.check{font-weight:400}
button{margin-top:.8rem;padding:.55rem 1rem;font:inherit;font-weight:600;border:0;border-radius:6px;background:#2457c5;color:#fff;cursor:pointer}
button.quiet{background:#5b667d}
header button{margin:0;padding:.3rem .7rem;font-size:.85rem}
.filters{display:grid;grid-template-columns:repeat(auto-fit,minmax(10rem,1fr));gap:.2rem 1rem;align-items:end}
.tabs{display:flex;flex-wrap:wrap;gap:.4rem;margin:0 0 1rem;padding:0;list-style:none}
.tabs a{display:inline-block;padding:.35rem .8rem;border-radius:999px;background:#e3e7ef;color:#1d2433;text-decoration:none}
.tabs a.on{background:#2457c5;color:#fff}
.state{display:inline-block;padding:.05rem .5rem;border-radius:999px;font-size:.85rem;background:#e3e7ef}
.state-interrupted{background:#fde2b3}.state-running{background:#cfe3ff}.state-completed{background:#d3f2dc}
.state-failed,.state-timed_out,.state-cancelled{background:#f9d0d0}.state-released{background:#e6dcf7}
.notice{padding:.6rem 1rem;border-radius:6px;margin:0 0 1rem;background:#d3f2dc}
.problem{padding:.6rem 1rem;border-radius:6px;margin:0 0 1rem;background:#f9d0d0}
.muted{color:#5b667d}
.decisions{display:grid;grid-template-columns:repeat(auto-fit,minmax(17rem,1fr));gap:1rem}
@media (max-width:40rem){main{padding:.5rem}section{padding:.6rem}dl{grid-template-columns:1fr}dt{margin-top:.4rem}
.wide{display:none}}
"#;

/// Who is logged in, for the header (name and the logout form's CSRF token).
pub(crate) struct Who<'a> {
    pub(crate) operator: &'a str,
    pub(crate) csrf: &'a str,
}

/// The page around `body`.
pub(crate) fn layout(title: &str, who: Option<&Who<'_>>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Carmy console" }
                link rel="stylesheet" href="/console/style.css";
            }
            body {
                header {
                    a href="/console/executions" { "Carmy console" }
                    @if let Some(who) = who {
                        span.who { "operator " strong { (who.operator) } }
                        form method="post" action="/console/logout" {
                            input type="hidden" name="csrf" value=(who.csrf);
                            button.quiet type="submit" { "Log out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The login form; `problem` says why the last attempt was refused.
pub(crate) fn login(csrf: &str, problem: Option<&str>) -> Markup {
    layout(
        "Log in",
        None,
        html! {
            h1 { "Log in" }
            @if let Some(problem) = problem { p.problem role="alert" { (problem) } }
            section {
                form method="post" action="/console/login" {
                    input type="hidden" name="csrf" value=(csrf);
                    label for="key" { "Operator key" }
                    input #key type="password" name="key" autocomplete="current-password" required autofocus;
                    p.muted { "A key of CARMY_OPERATOR_KEYS. Agents' API keys are refused." }
                    button type="submit" { "Log in" }
                }
            }
        },
    )
}

/// A page that says only `message` (a refused form, a bad link).
pub(crate) fn message(title: &str, who: Option<&Who<'_>>, message: &str) -> Markup {
    layout(
        title,
        who,
        html! {
            h1 { (title) }
            p.problem role="alert" { (message) }
            p { a href="/console/executions" { "Back to the executions" } }
        },
    )
}

/// When `lookup` was reserved: as the store listed it, else a finished record's start.
fn reserved(lookup: &ExecutionLookup) -> Option<DateTime<Utc>> {
    lookup.reserved_at.or(match &lookup.record.state {
        RecordState::Finished(result) => Some(result.started_at),
        RecordState::InFlight(_) => None,
    })
}

/// An age for a person: `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h`.
fn age(elapsed: chrono::TimeDelta) -> String {
    let seconds = elapsed.num_seconds().max(0);
    let (minutes, hours, days) = (seconds / 60, seconds / 3600, seconds / 86_400);
    match () {
        () if seconds < 60 => format!("{seconds} s"),
        () if minutes < 60 => format!("{minutes} min"),
        () if hours < 24 => format!("{hours} h {} min", minutes % 60),
        () => format!("{days} d {} h", hours % 24),
    }
}

fn stamp(at: &DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The state word of an execution: `running`, `interrupted`, a finished status, or `released`.
pub(crate) fn state_word(lookup: &ExecutionLookup) -> &'static str {
    match (&lookup.released, &lookup.record.state) {
        (Some(_), _) => "released",
        (None, RecordState::InFlight(state)) => state.as_str(),
        (None, RecordState::Finished(result)) => result.status.as_str(),
    }
}

fn state_badge(word: &str) -> Markup {
    html! { span class={ "state state-" (word) } { (word) } }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// JSON text, indented; text that is not JSON (a row a DBA changed by hand) as it is.
fn pretty_text(text: &str) -> String {
    serde_json::from_str::<Value>(text).map_or_else(|_| text.to_owned(), |value| pretty(&value))
}

/// The listing's filters, as the query string gave them.
#[derive(Default, serde::Deserialize)]
#[serde(default)]
pub(crate) struct ListFilter {
    /// `interrupted` (default), `running`, `failures` or `all`.
    pub(crate) state: Option<String>,
    /// Only this principal's.
    pub(crate) principal: Option<String>,
    /// Only this session's.
    pub(crate) session_id: Option<String>,
    /// Only this request_id's.
    pub(crate) request_id: Option<String>,
    /// Only this tool's.
    pub(crate) tool: Option<String>,
    /// Only those whose kept arguments contain this JSON object (docs/semantics.md §8.5).
    pub(crate) arguments: Option<String>,
}

impl ListFilter {
    fn non_empty(value: &Option<String>) -> &str {
        value.as_deref().unwrap_or_default()
    }

    /// The selected state tab.
    pub(crate) fn state(&self) -> &str {
        match self.state.as_deref() {
            None | Some("") => "interrupted",
            Some(state) => state,
        }
    }

    fn link(&self, state: &str) -> String {
        let mut query = vec![("state", state)];
        for (name, value) in [
            ("principal", &self.principal),
            ("session_id", &self.session_id),
            ("request_id", &self.request_id),
            ("tool", &self.tool),
            ("arguments", &self.arguments),
        ] {
            if !Self::non_empty(value).is_empty() {
                query.push((name, Self::non_empty(value)));
            }
        }
        let encoded: Vec<String> = query
            .iter()
            .map(|(name, value)| format!("{name}={}", percent(value)))
            .collect();
        format!("/console/executions?{}", encoded.join("&"))
    }
}

/// Percent-encodes every byte but `A-Z a-z 0-9 - . _ ~` (a query value or a path segment).
pub(crate) fn percent(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (byte as char).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// The listing: state tabs, filters, and one row per execution.
pub(crate) fn listing(
    who: &Who<'_>,
    filter: &ListFilter,
    rows: &[ExecutionLookup],
    note: &str,
) -> Markup {
    let now = Utc::now();
    let tabs = [
        ("interrupted", "Interrupted"),
        ("running", "Running"),
        ("failures", "Recent failures"),
        ("all", "All"),
    ];
    layout(
        "Executions",
        Some(who),
        html! {
            h1 { "Executions" }
            ul.tabs {
                @for (state, label) in tabs {
                    li { a class=@if filter.state() == state { "on" } href=(filter.link(state)) { (label) } }
                }
            }
            section {
                form.filters method="get" action="/console/executions" {
                    input type="hidden" name="state" value=(filter.state());
                    div { label for="principal" { "Principal" } input #principal type="text" name="principal" value=(ListFilter::non_empty(&filter.principal)); }
                    div { label for="tool" { "Tool" } input #tool type="text" name="tool" value=(ListFilter::non_empty(&filter.tool)); }
                    div { label for="session_id" { "Session" } input #session_id type="text" name="session_id" value=(ListFilter::non_empty(&filter.session_id)); }
                    div { label for="request_id" { "Request id" } input #request_id type="text" name="request_id" value=(ListFilter::non_empty(&filter.request_id)); }
                    div { label for="arguments" { "Arguments contain" } input #arguments type="text" name="arguments" placeholder="{\"customer\": \"…\"}" value=(ListFilter::non_empty(&filter.arguments)); }
                    div { button type="submit" { "Filter" } }
                }
            }
            p.muted #listing-note { (note) }
            section {
                @if rows.is_empty() {
                    p #empty { "No execution matches." }
                } @else {
                    table #executions {
                        thead { tr { th { "Execution" } th { "State" } th.age { "Age" } th { "Principal" } th { "Tool" } th.wide { "Session" } th { "Request id" } } }
                        tbody {
                            @for row in rows {
                                tr {
                                    td { a href={ "/console/executions/" (percent(row.record.execution_id.as_str())) } { code { (row.record.execution_id.as_str()) } } }
                                    td { (state_badge(state_word(row))) }
                                    td.age title=(reserved(row).as_ref().map(stamp).unwrap_or_default()) { (reserved(row).map_or_else(|| "-".to_owned(), |at| age(now - at))) }
                                    td { (row.key.principal) }
                                    td { (row.record.tool) }
                                    td.wide { (row.key.session_id) }
                                    td.request-id { (row.key.request_id) }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// What one execution's page shows besides the record.
pub(crate) struct Detail<'a> {
    /// The record and owner.
    pub(crate) view: &'a OperatorView,
    /// The record's JSON as the API answers it.
    pub(crate) record_json: Value,
    /// Its audit rows, oldest first.
    pub(crate) audit: &'a [AuditEntry],
    /// The last probe's evidence.
    pub(crate) evidence: Option<&'a Value>,
    /// Whether its tool has a reconciliation probe.
    pub(crate) probed: bool,
    /// Whether its tool is run by its client (docs/semantics.md §16).
    pub(crate) held_by_client: bool,
    /// A sentence on what the last decision did, or why it was refused.
    pub(crate) notice: Option<(bool, String)>,
}

fn audit_table(rows: &[&AuditEntry], id: &str) -> Markup {
    html! {
        table.audit id=(id) {
            thead { tr { th { "At" } th { "Action" } th { "Actor" } th { "Note" } th.wide { "Before → after" } } }
            tbody {
                @for row in rows {
                    tr {
                        td.at { (stamp(&row.at)) }
                        td.action { (row.action.as_str()) }
                        td.actor { (row.actor) }
                        td.note { (row.note.as_deref().unwrap_or("")) }
                        td.wide { pre { (row.before.to_string()) "\n→ " (row.after.to_string()) } }
                    }
                }
            }
        }
    }
}

/// One execution's page: record, fingerprint, owner and lease, upstream key, probe evidence,
/// audit trail, late arrivals and the decision forms.
pub(crate) fn execution(who: &Who<'_>, detail: &Detail<'_>) -> Markup {
    let lookup = &detail.view.lookup;
    let record = &lookup.record;
    let id = record.execution_id.as_str();
    let word = state_word(lookup);
    let undecided = lookup.released.is_none() && matches!(record.state, RecordState::InFlight(_));
    let late: Vec<&AuditEntry> = detail
        .audit
        .iter()
        .filter(|row| row.action == AuditAction::LateArrival)
        .collect();
    let all: Vec<&AuditEntry> = detail.audit.iter().collect();
    let action = |verb: &str| format!("/console/executions/{}/{verb}", percent(id));
    layout(
        &format!("Execution {id}"),
        Some(who),
        html! {
            h1 { "Execution " code { (id) } " " (state_badge(word)) }
            @if let Some((ok, text)) = &detail.notice {
                p class=@if *ok { "notice" } @else { "problem" } role="status" #notice { (text) }
            }
            section #record {
                h2 { "Record" }
                dl {
                    dt { "Principal" } dd #principal { (lookup.key.principal) }
                    dt { "Session" } dd { (lookup.key.session_id) }
                    dt { "Request id" } dd #request-id { (lookup.key.request_id) }
                    dt { "Tool" } dd { (record.tool) }
                    dt { "State" } dd #state { (word) }
                    @if let Some(resolution) = lookup.released.as_ref() {
                        dt { "Released" } dd { (resolution.by) " at " (stamp(&resolution.at)) ": " (resolution.note) }
                    }
                }
                h2 { "As the API answers it" }
                pre #record-json { (pretty(&detail.record_json)) }
            }
            section #arguments {
                h2 { "What the call asked" }
                @match lookup.arguments.as_deref() {
                    Some(text) => pre #arguments-json { (pretty_text(text)) },
                    None => p.muted { "No arguments were kept (CARMY_KEEP_ARGUMENTS=none, or reserved before schema V15)." },
                }
                p.muted { "Values the tool's redact_arguments names show as \"[redacted]\": they were never stored." }
            }
            section #fingerprint {
                h2 { "Fingerprint" }
                dl {
                    dt { "Fingerprint" } dd { code { (record.fingerprint.to_string()) } }
                    @if let Some(parts) = &record.parts {
                        dt { "Tool part" } dd { code { (hex::encode(parts.tool)) } }
                        dt { "Arguments part" } dd { code { (hex::encode(parts.arguments)) } }
                        dt { "Metadata part" } dd { code { (hex::encode(parts.metadata)) } }
                    } @else {
                        dt { "Parts" } dd.muted { "not recorded (a record written by an earlier build or by hand)" }
                    }
                }
            }
            section #owner {
                h2 { "Owner and lease" }
                @match &detail.view.owner {
                    None => p.muted { "This store keeps no lease: the owner of every execution is this process (in-memory store)." },
                    Some(owner) => dl {
                        dt { "Instance" } dd { (owner.instance.as_deref().unwrap_or("-")) }
                        dt { "Host" } dd { (owner.hostname.as_deref().unwrap_or("-")) }
                        dt { "Process id" } dd { (owner.pid.map(|pid| pid.to_string()).unwrap_or_else(|| "-".into())) }
                        dt { "Lease until" } dd { (owner.lease_expires_at.as_ref().map(stamp).unwrap_or_else(|| "no lease row: the process is gone".into())) }
                        dt { "Reserved at" } dd { (owner.reserved_at.as_ref().map(stamp).unwrap_or_else(|| "-".into())) }
                    },
                }
            }
            section #upstream {
                h2 { "Upstream key" }
                p { code #upstream-key { (id) } }
                @if detail.held_by_client {
                    p.muted #held-by-client { "Run by its client, not by the gateway (a client tool, docs/semantics.md §16): the owner above is the holder's fencing token (host \"client hold\"). The client's reconcile hook, or you, decide an interrupted execution." }
                } @else {
                    p.muted { "Sent as the idempotency header (Idempotency-Key unless the tool names another) on every delivery of this execution: search the upstream's logs for it." }
                }
            }
            section #evidence {
                h2 { "Reconciliation probe" }
                @match detail.evidence {
                    Some(evidence) => pre { (pretty(evidence)) },
                    None => p.muted { @if detail.probed { "Not probed yet (or decided since)." } @else { "This tool has no [tools.reconcile] probe." } },
                }
            }
            @if undecided {
                section #decide {
                    h2 { "Decide" }
                    p.muted { "Reconcile with the target system first. A decision is taken once; every decision leaves an audit row." }
                    div.decisions {
                        form #resolve method="post" action=(action("resolve")) {
                            h2 { "Resolve" }
                            input type="hidden" name="csrf" value=(who.csrf);
                            label for="status" { "Outcome" }
                            select #status name="status" {
                                @for status in [ExecutionStatus::Completed, ExecutionStatus::Failed, ExecutionStatus::TimedOut, ExecutionStatus::Cancelled] {
                                    option value=(status.as_str()) { (status.as_str()) }
                                }
                            }
                            label for="data" { "Data (JSON, for completed)" }
                            textarea #data name="data" placeholder="the tool's result as JSON, as the target system shows it" {}
                            label for="error_code" { "Error code (otherwise)" }
                            input #error_code type="text" name="error_code";
                            label for="error_message" { "Error message" }
                            input #error_message type="text" name="error_message";
                            label for="resolve_note" { "Note: what reconciliation found" }
                            textarea #resolve_note name="note" required {}
                            label.check { input type="checkbox" name="force" value="true"; " force (the owner is known to be gone)" }
                            button type="submit" { "Resolve" }
                        }
                        form #release method="post" action=(action("release")) {
                            h2 { "Release" }
                            p.muted { "Frees the identity: the next attempt runs the tool again." }
                            input type="hidden" name="csrf" value=(who.csrf);
                            label for="release_note" { "Note: why it may run again" }
                            textarea #release_note name="note" required {}
                            label.check { input type="checkbox" name="force" value="true"; " force (the owner is known to be gone)" }
                            button type="submit" { "Release" }
                        }
                        @if detail.probed {
                            form #reconcile method="post" action=(action("reconcile")) {
                                h2 { "Reconcile now" }
                                p.muted { "Runs the tool's probe now and decides what it finds, as the reconciler would." }
                                input type="hidden" name="csrf" value=(who.csrf);
                                button type="submit" { "Reconcile now" }
                            }
                        }
                    }
                }
            }
            section #audit {
                h2 { "Audit trail" }
                @if all.is_empty() { p.muted { "No audit row yet." } } @else { (audit_table(&all, "audit-rows")) }
            }
            section #late {
                h2 { "Late arrivals" }
                @if late.is_empty() {
                    p.muted { "None: no owner's outcome arrived after a decision." }
                } @else {
                    p.problem { "An owner finished after this execution was decided: its outcome was not recorded, and the effect may have happened twice." }
                    (audit_table(&late, "late-rows"))
                }
            }
        },
    )
}
