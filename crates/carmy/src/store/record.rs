//! What a store keeps and answers (docs/semantics.md §2, §3, §4): a call's identity
//! ([`IdempotencyKey`]), what the engine asks to reserve ([`ExecutionIntent`]), a stored record
//! and its state, the answer to a reservation ([`Reservation`], [`Existing`]) and an execution
//! read back by id ([`ExecutionLookup`]). Re-exported by [`crate::store`].

use crate::decision::Resolution;
use crate::fingerprint::{Fingerprint, FingerprintParts};
use crate::outcome::{ExecutionId, ExecutionResult, RecordedResult};

/// The session used when a call names none (docs/semantics.md §2).
pub const DEFAULT_SESSION: &str = "default";

/// A call's identity: (principal, session, request_id), kept as three separate values so that no
/// separator can make two identities collide (docs/semantics.md §2).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey {
    /// Who is calling, from authentication (docs/semantics.md §6), never from the body.
    pub principal: String,
    /// The body's `session_id`, or [`DEFAULT_SESSION`].
    pub session_id: String,
    /// The body's `request_id`: 1 to 255 bytes of UTF-8 without control characters.
    pub request_id: String,
}

impl IdempotencyKey {
    /// Builds a key from already validated parts (see [`crate::identity`]).
    pub fn new(
        principal: impl Into<String>,
        session_id: impl Into<String>,
        request_id: impl Into<String>,
    ) -> Self {
        Self {
            principal: principal.into(),
            session_id: session_id.into(),
            request_id: request_id.into(),
        }
    }
}

/// What the engine asks a store to reserve for a new identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutionIntent {
    /// The execution id minted for this attempt; it becomes the record's id if the reservation
    /// wins.
    pub execution_id: ExecutionId,
    /// The tool that will run (kept for operators; the fingerprint already binds it).
    pub tool: String,
    /// The digests of the call's parts, kept beside the fingerprint so that a later conflict
    /// can name which parts differ (docs/semantics.md §12.8); `None` stores none.
    pub parts: Option<FingerprintParts>,
    /// How long a finished record holds its identity (docs/semantics.md §12.9, `CARMY_RETENTION`;
    /// `None`: forever). A finished record whose
    /// [`expires_at`](crate::retention::expires_at) has passed no longer holds it: `reserve`
    /// replaces it, in one step, by this intent's running reservation ([`Reservation::Reserved`])
    /// and the call runs as new. Running and interrupted records never expire.
    pub retention: Option<std::time::Duration>,
    /// The call's arguments as kept with the record (docs/semantics.md §8.5: canonical JSON,
    /// redacted before storage); `None` keeps none. Written by the same statement as the
    /// reservation.
    pub arguments: Option<String>,
}

/// An identity as one call claims it: the key and that call's fingerprint. Every store path
/// compares the fingerprint with the holding record's before anything else: a record of another
/// fingerprint answers [`Existing::Conflict`] whatever its state (docs/semantics.md §3).
#[derive(Clone, Copy, Debug)]
pub struct Claim<'a> {
    /// The identity: principal, session and request id.
    pub key: &'a IdempotencyKey,
    /// The fingerprint of the claiming call's tool, arguments and options.
    pub fingerprint: &'a Fingerprint,
}

/// What [`IdempotencyStore::wait_for_outcome`](super::IdempotencyStore::wait_for_outcome) is
/// asked: wait at most `timeout` until `execution_id`, which holds `key` without an outcome,
/// gets one or is released (docs/semantics.md §12.6, `Prefer: wait=N`).
#[derive(Clone, Copy, Debug)]
pub struct WaitRequest<'a> {
    /// The identity the execution holds.
    pub key: &'a IdempotencyKey,
    /// The execution waited for.
    pub execution_id: &'a ExecutionId,
    /// How long to wait at most.
    pub timeout: std::time::Duration,
}

/// Whether a reserved but unfinished execution still has a live owner (docs/semantics.md §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InFlightState {
    /// Its owner process holds a live lease: the tool may still be running.
    Running,
    /// Its owner's lease lapsed (the process died): the outcome is unknown and stays unknown
    /// until an operator or the agent resolves it. It is never re-run automatically.
    Interrupted,
}

impl InFlightState {
    /// `running` or `interrupted`, as shown in `EXECUTION_UNCERTAIN` bodies.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Interrupted => "interrupted",
        }
    }
}

/// Whether this process's lease surely holds (docs/semantics.md §12.2), as a store with leases
/// reports it through [`super::IdempotencyStore::lease_state`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Renewed in time: the other replicas read this process's executions as running.
    Held,
    /// Renewals failed past the moment the lease surely held (e.g. the process is cut off from
    /// the database): the other replicas read its executions as interrupted.
    Lapsed,
}

/// A change to finished records made behind this process's back (an operator's SQL, docs/semantics.md
/// §8.4 and §12.3), as a store shared between processes reports it through
/// [`super::IdempotencyStore::record_changes`]; a replay cache drops its copies
/// ([`super::IdempotencyStore::drop_cached`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordChange {
    /// The finished record of this identity was updated or deleted.
    Changed(IdempotencyKey),
    /// Any record may have changed (announcements may have been missed, e.g. while the store's
    /// listener reconnected): drop every copy.
    Unknown,
}

/// The state of a stored reservation.
#[allow(clippy::large_enum_variant)] // records are built once per call; boxing buys nothing
#[derive(Clone, Debug, PartialEq)]
pub enum RecordState {
    /// Reserved, no outcome recorded yet.
    InFlight(InFlightState),
    /// Finished; the outcome to replay.
    Finished(ExecutionResult),
}

/// One stored reservation, as a store reads it back.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredRecord {
    /// The execution that holds the identity.
    pub execution_id: ExecutionId,
    /// The fingerprint it was reserved with.
    pub fingerprint: Fingerprint,
    /// The tool it named.
    pub tool: String,
    /// Running, interrupted or finished.
    pub state: RecordState,
    /// The digests of its call's parts; `None` for a record written without them (by an
    /// earlier build, or by hand), whose conflicts name no part.
    pub parts: Option<FingerprintParts>,
}

/// The execution a new one replaces, and how it ended (docs/semantics.md §12.1, "A rerun says
/// so"): named in the new execution's answer so that nobody takes it for a first attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replaced {
    /// The earlier execution (for a takeover: the same id, an earlier attempt).
    pub execution_id: ExecutionId,
    /// How it ended.
    pub ended: ReplacedEnd,
}

/// How a replaced execution ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplacedEnd {
    /// Released (docs/semantics.md §12.1): by whom and why. Its effect was judged absent, or
    /// someone chose to run the call again.
    Released {
        /// Who released it (`operator:<name>`, `reconciler`, a DBA's actor).
        by: String,
        /// The release's note.
        note: String,
    },
    /// Its earlier attempt was interrupted and this attempt took it over (docs/semantics.md
    /// §12.7): `attempt` is this one (2 or more).
    TakenOver {
        /// This attempt's number.
        attempt: u32,
    },
}

impl ReplacedEnd {
    /// `released` or `taken_over`, as the fronts write it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Released { .. } => "released",
            Self::TakenOver { .. } => "taken_over",
        }
    }
}

/// The answer of [`IdempotencyStore::reserve`](super::IdempotencyStore::reserve)
/// (docs/semantics.md §3).
#[allow(clippy::large_enum_variant)] // built once per call; boxing buys nothing
#[derive(Clone, Debug, PartialEq)]
pub enum Reservation {
    /// The identity was vacant and is now held by the intent's execution: run the tool, then
    /// call [`IdempotencyStore::complete`](super::IdempotencyStore::complete).
    Reserved,
    /// As [`Reservation::Reserved`], for an identity whose last execution was released: the
    /// store names it, read by the reservation's own statement (docs/semantics.md §12.1).
    Replaced(Replaced),
    /// The identity is already held: answer from its record; do not run the tool.
    Existing(Existing),
}

/// How an identity's existing record answers a new attempt (docs/semantics.md §3). Every variant is
/// a complete answer: nothing here runs a tool.
#[allow(clippy::large_enum_variant)] // built once per call; boxing buys nothing
#[derive(Clone, Debug, PartialEq)]
pub enum Existing {
    /// Same identity, same fingerprint, finished: replay this outcome, with its stored text
    /// (a replay cache hands on the text it holds instead of serialising the outcome again).
    Replay(RecordedResult),
    /// Same identity, different fingerprint, whatever the state: `IDEMPOTENCY_CONFLICT`.
    Conflict {
        /// The execution that holds the identity (shown to its own principal only).
        execution_id: ExecutionId,
        /// The digests of the recorded call's parts, when the record has them: compared with
        /// the new attempt's to name what differs (docs/semantics.md §12.8).
        parts: Option<FingerprintParts>,
    },
    /// Same identity, same fingerprint, not finished: `EXECUTION_UNCERTAIN`.
    Uncertain {
        /// The execution that holds the identity.
        execution_id: ExecutionId,
        /// Whether its owner is still alive.
        state: InFlightState,
    },
}

impl Existing {
    /// Classifies an existing record against the fingerprint of a new attempt.
    ///
    /// The fingerprint is compared first, whatever the state, so a changed call never sees
    /// another call's outcome (docs/semantics.md §3, case K06).
    pub fn for_record(record: StoredRecord, fingerprint: &Fingerprint) -> Self {
        if &record.fingerprint != fingerprint {
            return Self::Conflict {
                execution_id: record.execution_id,
                parts: record.parts,
            };
        }
        match record.state {
            RecordState::Finished(result) => Self::Replay(RecordedResult::new(result)),
            RecordState::InFlight(state) => Self::Uncertain {
                execution_id: record.execution_id,
                state,
            },
        }
    }
}

impl From<Existing> for Reservation {
    fn from(existing: Existing) -> Self {
        Self::Existing(existing)
    }
}

/// An execution read back by id for `GET /v1/executions/{execution_id}` (docs/semantics.md §7).
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutionLookup {
    /// The identity it holds (or held, when released).
    pub key: IdempotencyKey,
    /// The record; for a released execution, its state when it was released.
    pub record: StoredRecord,
    /// `Some` when the execution was released (docs/semantics.md §12.1): it no longer holds its
    /// identity and is kept as history.
    pub released: Option<Resolution>,
    /// When it was reserved, by the store's clock, where the listing read it (the operator
    /// console's age column); `None` elsewhere.
    pub reserved_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The call's arguments as kept (docs/semantics.md §8.5): JSON text, canonical, redacted
    /// before storage; `None` when none were kept.
    pub arguments: Option<String>,
}
