//! What a language model reads when a call does not simply succeed (docs/semantics.md §11): one
//! table, reviewed as product copy. Each entry says what happened, whether the call's effect may
//! have happened, and the next step. No entry ever tells the model to retry under another
//! request id: where the effect may have happened that would run it twice, and elsewhere the
//! same call is the safe retry. Two exceptions: a failure the tool reported itself (no
//! effect): the same call replays that failure, so a corrected call, a different action, needs
//! its own id (never said of a failure a decision recorded); and a model's id whose record is
//! older than its replay window ([`Situation::KeyReused`]): the text sends the model to check
//! first, and only a new action to a new id.
//!
//! Placeholders, filled by [`Entry::render`]: `{execution_id}`, `{read_tools}` (the tools whose
//! annotations say read-only, as ` (for example `a`, `b`)`, or nothing), `{code}` and `{message}`
//! (the tool's or the record's), `{retry}` (` after N s` when a pause is known, or nothing),
//! `{key}` (the tool's request id argument, `request_id` when it has none) and `{same_key}`
//! ([`KeyText::same_key`]), `{call_again}` (for an answer that is not an outcome yet: call again
//! now with the same arguments and request id; "retry the same call unchanged" when the model
//! holds no id), `{held_open}` (that Carmy holds such a repeat open, or nothing): every text that can be followed by a
//! retry tells the model how to repeat this same action under its request id. A model that sent the id itself is told to keep
//! it; one whose id came from its client's `_meta` (a tool-use id, new for every tool call the
//! model makes) is told the id to add, since repeating the call "unchanged" would be a new id.

/// Whether the call's effect may have happened, as the text tells the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing ran for this call.
    DidNotHappen,
    /// The effect may have happened (or be happening).
    MayHaveHappened,
    /// The tool ran and reported a failure; the record says what it knows.
    ToolReported,
}

/// The situations a `tools/call` result explains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Situation {
    /// `IDEMPOTENCY_CONFLICT`: the request id belongs to a different call.
    Conflict,
    /// `EXECUTION_UNCERTAIN`, `running`: the same call is still running.
    Running,
    /// `EXECUTION_UNCERTAIN`, `interrupted`: the process running it stopped.
    Interrupted,
    /// `EXECUTION_UNCERTAIN`, `interrupted`, being reconciled: the tool's probe is asking the
    /// upstream whether the effect happened (docs/semantics.md §12.10).
    Reconciling,
    /// `EXECUTION_UNCERTAIN`, `running`: the tool ran, its outcome is not recorded yet.
    RecordingPending,
    /// `IDEMPOTENCY_CAPACITY`: the store is full.
    Capacity,
    /// `STORE_UNAVAILABLE`: the store failed before anything ran.
    StoreUnavailable,
    /// The tool's own code (e.g. `UPSTREAM_UNAVAILABLE`): provably no effect, nothing recorded.
    NotExecuted,
    /// The tool's own code for an attempt that took an interrupted execution over: this attempt
    /// had no effect, the earlier one's is unknown; the execution is interrupted again.
    HandedBack,
    /// `REQUEST_ID_REQUIRED`: the operator requires a request id and the call had none.
    RequestIdRequired,
    /// `EXECUTION_UNCERTAIN`, `running`: this call did not finish within
    /// `CARMY_MCP_ANSWER_WITHIN_MS`; it keeps running.
    StillRunning,
    /// `REQUEST_ID_INVALID`: the model's request id is not a string or not random enough.
    KeyInvalid,
    /// `REQUEST_ID_ARGUMENT_REQUIRED`: the tool requires the request id argument.
    KeyMissing,
    /// `REQUEST_ID_REUSED`: the model's id (no session or conversation scoping it) names an
    /// action recorded longer ago than its replay window; nothing ran (docs/semantics.md §11).
    KeyReused,
    /// A recorded `failed` outcome whose effect the tool did not mark unknown.
    Failed,
    /// A recorded `failed` (effect unknown), `timed_out` or `cancelled` outcome.
    EffectUnknown,
    /// `RECORD_DAMAGED`: the identity's record exists but cannot be read back.
    RecordDamaged,
    /// `EXECUTION_SUPERSEDED`: the tool finished after its execution had been decided.
    Superseded,
    /// `INVALID_REQUEST`: arguments failing the tool's schema, or a malformed request id or
    /// session (docs/semantics.md §11: input errors are tool errors); nothing ran.
    InvalidRequest,
    /// `ARGUMENTS_TOO_LARGE`: the arguments, as they would be kept with the execution, are over
    /// the limit of a record (docs/semantics.md §8.5); nothing ran, nothing was reserved.
    ArgumentsTooLarge,
    /// `UNKNOWN_TOOL`: no tool of that name is served (any more); nothing ran.
    UnknownTool,
}

/// One entry of the table.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// The situation.
    pub situation: Situation,
    /// The machine code shown in `structuredContent.code`; empty where the tool's or the
    /// record's own code is shown.
    pub code: &'static str,
    /// What the text says about the effect.
    pub effect: Effect,
    /// What happened.
    pub what: &'static str,
    /// Whether the effect may have happened, in words.
    pub effect_text: &'static str,
    /// The next step.
    pub next: &'static str,
}

/// Every entry, one per [`Situation`].
pub const TABLE: &[Entry] = &[
    Entry {
        situation: Situation::Conflict,
        code: "IDEMPOTENCY_CONFLICT",
        effect: Effect::DidNotHappen,
        what: "Carmy refused this call: its request id already belongs to a different action ({differs}), execution {execution_id}.",
        effect_text: "This call did not run, but the earlier call under that id may have taken effect.",
        next: "Do not repeat this call as it is. To get the earlier call's outcome, repeat that call with exactly its arguments; before any different action, check with a read-only tool{read_tools} whether the earlier call already did what you want, or ask the user.",
    },
    Entry {
        situation: Situation::Running,
        code: "EXECUTION_UNCERTAIN",
        effect: Effect::MayHaveHappened,
        what: "This exact call is still running as execution {execution_id}, started by an earlier attempt.",
        effect_text: "Its effect may already have happened or be happening now.",
        next: "{call_again} to get its outcome{held_open}; this answer is not an error. Do not do the same thing another way meanwhile.",
    },
    Entry {
        situation: Situation::Interrupted,
        code: "EXECUTION_UNCERTAIN",
        effect: Effect::MayHaveHappened,
        what: "This exact call was started earlier as execution {execution_id}, but the gateway running it stopped answering (it died, or lost its hold on the execution) before its outcome was recorded.",
        effect_text: "Its effect may or may not have happened, and Carmy will not run it again.",
        next: "Check with a read-only tool{read_tools} whether the effect happened; if you cannot tell, ask the user or the operator before acting again.",
    },
    Entry {
        situation: Situation::Reconciling,
        code: "EXECUTION_UNCERTAIN",
        effect: Effect::MayHaveHappened,
        what: "This exact call was started earlier as execution {execution_id}, but the gateway running it stopped answering (it died, or lost its hold on the execution) before its outcome was recorded; Carmy is asking the upstream whether it took effect.",
        effect_text: "Its effect may or may not have happened; Carmy runs it again only if the upstream proves that nothing happened.",
        next: "{call_again} to get the outcome the upstream reports{held_open}; this answer is not an error. Do not do the same thing another way meanwhile.",
    },
    Entry {
        situation: Situation::RecordingPending,
        code: "EXECUTION_UNCERTAIN",
        effect: Effect::MayHaveHappened,
        what: "The tool ran as execution {execution_id}, but its outcome could not be recorded yet; Carmy keeps trying.",
        effect_text: "Its effect has probably happened.",
        next: "{call_again} to get the recorded outcome{held_open}; this answer is not an error.",
    },
    Entry {
        situation: Situation::Capacity,
        code: "IDEMPOTENCY_CAPACITY",
        effect: Effect::DidNotHappen,
        what: "Carmy's record store is full, so it could not take this call.",
        effect_text: "Nothing ran; the effect did not happen.",
        next: "Retry the same call{same_key} later; if this keeps happening, ask the operator to raise the store's capacity.",
    },
    Entry {
        situation: Situation::StoreUnavailable,
        code: "STORE_UNAVAILABLE",
        effect: Effect::DidNotHappen,
        what: "Carmy's record store is unavailable, so this call was not started.",
        effect_text: "This call did not run; an earlier attempt with the same request id, if there was one, may still have taken effect.",
        next: "Wait a few seconds and retry the same call unchanged{same_key}; if it keeps failing, tell the user the gateway is unavailable.",
    },
    Entry {
        situation: Situation::NotExecuted,
        code: "",
        effect: Effect::DidNotHappen,
        what: "The tool could not act ({code}: {message}).",
        effect_text: "Its effect did not happen and nothing was recorded.",
        next: "Retry the same call unchanged{same_key}{retry}; if it keeps failing, tell the user.",
    },
    Entry {
        situation: Situation::HandedBack,
        code: "",
        effect: Effect::MayHaveHappened,
        what: "The tool could not act this time ({code}: {message}). This was a rerun of execution {execution_id}, whose earlier attempt was interrupted before its outcome was recorded.",
        effect_text: "This attempt had no effect, but the earlier attempt's effect may have happened; nothing is recorded.",
        next: "Retry the same call unchanged{same_key}{retry}: Carmy runs it again as the same execution, so the upstream can tell it is a repeat; if it keeps failing, check with a read-only tool{read_tools} whether the effect happened and tell the user.",
    },
    Entry {
        situation: Situation::RequestIdRequired,
        code: "REQUEST_ID_REQUIRED",
        effect: Effect::DidNotHappen,
        what: "This gateway only runs calls that carry a request id, and this call had none.",
        effect_text: "Nothing ran; the effect did not happen.",
        next: "Tell the user that the MCP client must send a request id with each call (params.idempotencyKey or _meta \"io.carmy/request_id\"), and ask the operator how to set it up.",
    },
    Entry {
        situation: Situation::StillRunning,
        code: "EXECUTION_UNCERTAIN",
        effect: Effect::MayHaveHappened,
        what: "This call is still running as execution {execution_id}; Carmy answers now so that the client does not give up on it, and the tool keeps running.",
        effect_text: "Its effect may be happening now.",
        next: "{call_again} to get its outcome{held_open}; this answer is not an error. Do not do the same thing another way meanwhile.",
    },
    Entry {
        situation: Situation::KeyInvalid,
        code: "REQUEST_ID_INVALID",
        effect: Effect::DidNotHappen,
        what: "Carmy refused this call: its `{key}` {message}.",
        effect_text: "Nothing ran; the effect did not happen.",
        next: "Retry this call with `{key}` set to a new random UUID that you generate now (not one from an example, not built from words, dates or counts), and keep that id for every repeat of this same action.",
    },
    Entry {
        situation: Situation::KeyReused,
        code: "REQUEST_ID_REUSED",
        effect: Effect::DidNotHappen,
        what: "Carmy did not run this call: its `{key}` already names an action whose outcome was recorded {age} ago (execution {execution_id}), longer ago than Carmy replays an id a model chose ({window}), because another conversation may have written the same id.",
        effect_text: "This call did not run, and Carmy does not show that earlier outcome: it may belong to another conversation.",
        next: "If you sent that same call earlier in this conversation and never saw its outcome, check with a read-only tool{read_tools} whether it took effect; if it did, nothing more is needed, and if you cannot tell, ask the user. Only if this is a new action, call again with a new random UUID that you generate now as `{key}`.",
    },
    Entry {
        situation: Situation::KeyMissing,
        code: "REQUEST_ID_ARGUMENT_REQUIRED",
        effect: Effect::DidNotHappen,
        what: "This tool requires the `{key}` argument, and this call had none.",
        effect_text: "Nothing ran; the effect did not happen.",
        next: "Retry this call with `{key}` set to a new random UUID that you generate now, and keep that id for every repeat of this same action.",
    },
    Entry {
        situation: Situation::Failed,
        code: "",
        effect: Effect::ToolReported,
        what: "The tool failed ({code}: {message}), execution {execution_id}.",
        effect_text: "{reported}",
        next: "Retrying the same call returns this same failure; read the message, fix its cause, and ask the user if the fix is unclear.{corrected}",
    },
    Entry {
        situation: Situation::EffectUnknown,
        code: "",
        effect: Effect::MayHaveHappened,
        what: "The tool did not finish cleanly ({code}: {message}), execution {execution_id}.",
        effect_text: "Its effect may have happened.",
        next: "Check with a read-only tool{read_tools} whether it took effect before acting again; retrying the same call{same_key} only returns this record.",
    },
    Entry {
        situation: Situation::RecordDamaged,
        code: "RECORD_DAMAGED",
        effect: Effect::MayHaveHappened,
        what: "Carmy has a record of this call, execution {execution_id}, but the record is damaged and cannot be read.",
        effect_text: "The call ran earlier, so its effect may have happened.",
        next: "Check with a read-only tool{read_tools} whether it took effect, and ask the operator to repair execution {execution_id}; do not do the same thing another way meanwhile.",
    },
    Entry {
        situation: Situation::Superseded,
        code: "EXECUTION_SUPERSEDED",
        effect: Effect::MayHaveHappened,
        what: "The tool finished as execution {execution_id}, but only after that execution had been decided without it (resolved or released by an operator, the reconciler or SQL, or taken over by another attempt); its outcome was kept in the audit log, not recorded.",
        effect_text: "Its effect may have happened, possibly twice if the call ran again after that decision.",
        next: "Check with a read-only tool{read_tools} what actually happened, and tell the user or the operator before acting again; do not retry this call to undo or repeat it.",
    },
    Entry {
        situation: Situation::InvalidRequest,
        code: "INVALID_REQUEST",
        effect: Effect::DidNotHappen,
        what: "Carmy refused this call before running it: {message}.",
        effect_text: "Nothing ran; the effect did not happen.",
        next: "Correct what the message names and call the tool again (its input schema is in the tool list); if the message names something you did not write (params.idempotencyKey, _meta), tell the user that the MCP client sent it malformed.",
    },
    Entry {
        situation: Situation::ArgumentsTooLarge,
        code: "ARGUMENTS_TOO_LARGE",
        effect: Effect::DidNotHappen,
        what: "Carmy refused this call before running it: {message}.",
        effect_text: "Nothing ran; the effect did not happen.",
        next: "Call the tool again with smaller arguments if you can (a reference to a document rather than the document itself); otherwise tell the user or the operator that these arguments are too large for Carmy to keep.",
    },
    Entry {
        situation: Situation::UnknownTool,
        code: "UNKNOWN_TOOL",
        effect: Effect::DidNotHappen,
        what: "Carmy refused this call: {message}.",
        effect_text: "Nothing ran; the effect did not happen.",
        next: "Call one of the tools this server lists now (list them again if your list may be out of date); if this call repeated an earlier action, check with a read-only tool{read_tools} whether that action took effect before doing it another way.",
    },
];

/// What a success tells the model for a tool with a request id argument (a second text after
/// the data): nothing more is needed. Placeholders `{execution_id}` and `{again}` (`; calling
/// again` and [`KeyText::same_key`] ` returns this same result without doing it again`, with
/// ` until <expiry>` when the record expires, or nothing when the model cannot repeat it under
/// the same id).
pub const DONE: &str = "Done (execution {execution_id}). Nothing more is needed for this \
action{again}.";

/// What a replayed success tells the model: the earlier attempt's outcome, not done again, and
/// how long ago it was recorded (`{age}`, [`age`]).
pub const DONE_EARLIER: &str = "This is the recorded outcome of an earlier attempt with this \
`{key}` (execution {execution_id}, recorded {age} ago); it was not done again. Nothing more is \
needed for this action.";

/// `elapsed` as the texts say it: `12 s`, `4 min`, `3 h`, `2 days` (rounded down).
pub fn age(elapsed: std::time::Duration) -> String {
    let seconds = elapsed.as_secs();
    match seconds {
        0..=119 => format!("{seconds} s"),
        120..=7_199 => format!("{} min", seconds / 60),
        7_200..=172_799 => format!("{} h", seconds / 3_600),
        _ => format!("{} days", seconds / 86_400),
    }
}

/// What `{held_open}` says where the model repeats a call under its own id: Carmy holds that
/// repeat open (up to nine tenths of `CARMY_MCP_ANSWER_WITHIN_MS`, docs/semantics.md §11).
const HELD_OPEN: &str =
    " (Carmy holds that call open and answers as soon as the outcome is recorded)";

/// The facts a text is filled with.
#[derive(Clone, Copy, Debug, Default)]
pub struct Facts<'a> {
    /// The execution, where one exists.
    pub execution_id: Option<&'a str>,
    /// Names of the tools whose annotations say read-only.
    pub read_tools: &'a [String],
    /// The tool's or the record's code.
    pub code: &'a str,
    /// The tool's or the record's message.
    pub message: &'a str,
    /// The pause the tool asked for before a retry, in whole seconds.
    pub retry_after_seconds: Option<u64>,
    /// For a conflict: the parts of the call that differ from the recorded call's, when known.
    pub differs: Option<&'a [&'static str]>,
    /// The tool's request id argument (docs/semantics.md §11), when it has one.
    pub key_argument: Option<KeyText<'a>>,
    /// Who recorded the outcome by a decision (`resolution.by`, docs/semantics.md §12.1), when
    /// the tool did not report it itself.
    pub decided_by: Option<&'a str>,
    /// How long ago the record was made, and the replay window it is past ([`age`]), for
    /// [`Situation::KeyReused`].
    pub reused: Option<(&'a str, &'a str)>,
}

/// What a recorded outcome that a decision made says after its data (a second text block): it
/// is not the tool's report. Placeholders `{by}`, `{at}`, `{note}`.
pub const DECIDED: &str = "This outcome was not reported by the tool: {by} recorded it by a \
decision at {at} (\"{note}\").";

/// What the answer of a write (a tool not annotated read-only) called without any request id
/// adds (docs/semantics.md §11): Carmy could not protect it, and how to make a retry safe.
/// Placeholder `{key}`.
pub const UNPROTECTED: &str = "This call carried no `{key}`, so Carmy could not protect it: \
calling it again would do it again. For every new action, set `{key}` to a random id you \
generate (a UUID), and repeat that same id whenever you are not sure whether an earlier attempt \
took effect.";

/// The member of `structuredContent` that carries the texts a model must read
/// (docs/semantics.md §11): every text block of the result beyond the tool's data, joined by a
/// blank line, for frameworks that show the model `structuredContent` instead of the text.
pub const GUIDANCE_MEMBER: &str = "io.carmy/guidance";

/// The tool's request id argument as the texts name it (docs/semantics.md §11).
#[derive(Clone, Copy, Debug)]
pub struct KeyText<'a> {
    /// The argument's name.
    pub name: &'a str,
    /// How the model repeats this action under its request id.
    pub hold: KeyHold<'a>,
}

/// How the model can repeat an action under the same request id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyHold<'a> {
    /// The model sent the id in the argument: the same value again is the same action.
    Held,
    /// The id came from the client's `_meta` (a tool-use id, new for every tool call the model
    /// makes): the model must add the argument with this value to repeat the action.
    Given(&'a str),
    /// The id came from a Carmy-aware client (`params.idempotencyKey`, `_meta
    /// "io.carmy/request_id"`), which chooses it for a repeat, or from the client's `_meta`
    /// with a value the argument would refuse: the texts name no id.
    Unseen,
}

impl<'a> KeyText<'a> {
    /// An argument the model fills itself.
    pub fn held(name: &'a str) -> Self {
        Self {
            name,
            hold: KeyHold::Held,
        }
    }

    /// ` with the same `name``, ` with `name` set to "value"`, or nothing: how a retry repeats
    /// this action.
    pub fn same_key(&self) -> String {
        match self.hold {
            KeyHold::Held => format!(" with the same `{}`", self.name),
            KeyHold::Given(value) => format!(" with `{}` set to {}", self.name, quoted(value)),
            KeyHold::Unseen => String::new(),
        }
    }
}

/// `value` as a JSON string, ready to be copied into the argument.
fn quoted(value: &str) -> String {
    serde_json::Value::String(value.to_owned()).to_string()
}

/// The entry for `situation`.
pub fn entry(situation: Situation) -> &'static Entry {
    TABLE
        .iter()
        .find(|entry| entry.situation == situation)
        .expect("the table has an entry for every situation")
}

impl Entry {
    /// The text for the model: what happened, the effect, the next step.
    pub fn render(&self, facts: &Facts<'_>) -> String {
        let read_tools = if facts.read_tools.is_empty() {
            String::new()
        } else {
            let names: Vec<String> = facts
                .read_tools
                .iter()
                .map(|name| format!("`{name}`"))
                .collect();
            format!(" (for example {})", names.join(", "))
        };
        let retry = facts
            .retry_after_seconds
            .map_or_else(String::new, |seconds| format!(" after {seconds} s"));
        let differs = match facts.differs {
            Some(parts) if !parts.is_empty() => format!("its {} differ", parts.join(" and ")),
            _ => "another tool or other arguments".to_owned(),
        };
        let same_key = facts
            .key_argument
            .map_or_else(String::new, |key| key.same_key());
        // How the model repeats a call whose outcome is not recorded yet, and whether Carmy
        // holds that repeat open (only for an id the model sends in the argument).
        let (call_again, held_open) = match facts.key_argument {
            Some(KeyText {
                name,
                hold: KeyHold::Held,
            }) => (
                format!("Call the tool again now with the same arguments and the same `{name}`"),
                HELD_OPEN,
            ),
            Some(KeyText {
                name,
                hold: KeyHold::Given(value),
            }) => (
                format!(
                    "Call the tool again now with the same arguments and `{name}` set to {}",
                    quoted(value)
                ),
                HELD_OPEN,
            ),
            _ => ("Retry the same call unchanged".to_owned(), ""),
        };
        let corrected = match (facts.decided_by, facts.key_argument) {
            (None, Some(key)) => format!(
                " The corrected call is a different action: give it a new random `{}`, or it is refused as a conflict with this one.",
                key.name
            ),
            _ => String::new(),
        };
        let reported = facts.decided_by.map_or_else(
            || "The tool reported the failure itself; it is recorded.".to_owned(),
            |by| {
                format!(
                    "This failure was recorded by a decision of {by}, not reported by the tool."
                )
            },
        );
        fill(
            &[self.what, self.effect_text, self.next].join(" "),
            &[
                ("call_again", &call_again),
                ("held_open", held_open),
                ("same_key", &same_key),
                (
                    "key",
                    facts.key_argument.map_or("request_id", |key| key.name),
                ),
                ("execution_id", facts.execution_id.unwrap_or("unknown")),
                ("read_tools", &read_tools),
                ("retry", &retry),
                ("corrected", &corrected),
                ("reported", &reported),
                ("differs", &differs),
                ("age", facts.reused.map_or("some time", |(age, _)| age)),
                (
                    "window",
                    facts.reused.map_or("its window", |(_, window)| window),
                ),
                ("code", facts.code),
                ("message", facts.message),
            ],
        )
    }
}

mod fill;
pub use fill::fill;

#[cfg(test)]
mod tests;
