//! Why a store could not answer ([`StoreError`]), and how each reason is answered
//! (docs/semantics.md §5, §8). Re-exported by [`crate::store`].

use crate::outcome::ExecutionId;

/// Why a store could not answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A bounded store is full and the identity is new: `IDEMPOTENCY_CAPACITY` (507).
    #[error("the idempotency store is full")]
    Capacity,
    /// The store cannot be reached or failed: `STORE_UNAVAILABLE` (503) before the tool ran,
    /// `EXECUTION_UNCERTAIN` (503) after. The text is for logs only, never for callers.
    #[error("idempotency store unavailable: {0}")]
    Unavailable(String),
    /// The store failed after the request may have reached it: it may or may not have taken
    /// effect (a connection lost mid-statement). Callers treat it as
    /// [`StoreError::Unavailable`], and after a `reserve` the engine also frees the reservation
    /// that may have been made, with
    /// [`IdempotencyStore::release`](super::IdempotencyStore::release), so that the identity is not
    /// held by an execution that never runs. The text is for logs only.
    #[error("idempotency store failed mid-request: {0}")]
    Indeterminate(String),
    /// The store is reachable but not prepared for this build (e.g. its schema is not migrated):
    /// answered like [`StoreError::Unavailable`], and readiness (`/readyz`) shows the text,
    /// which says what to do and holds no database text (docs/semantics.md §7).
    #[error("idempotency store not ready: {0}")]
    NotReady(String),
    /// A row exists but its recorded outcome cannot be read back as a record of the same
    /// execution and status (e.g. a hand-written SQL fix stored something else): the tool did
    /// run, the store is fine, and nothing may be run again for this identity until an operator
    /// repairs the row. `RECORD_DAMAGED` (500, docs/semantics.md §5). `problem` says what is
    /// wrong in words safe to show to the row's principal (never database text).
    #[error("the record of execution {execution_id} is damaged: {problem}")]
    RecordDamaged {
        /// The execution whose record is damaged (from the row's own column).
        execution_id: ExecutionId,
        /// What is wrong, e.g. `outcome is not a record: expected value at line 1 column 1`.
        problem: String,
    },
    /// `complete` named an execution that does not hold the identity (a stale executor), or the
    /// identity is already finished with another outcome. Nothing was written.
    #[error("execution {execution_id} does not hold this reservation")]
    NotOwner {
        /// The execution that tried to complete.
        execution_id: ExecutionId,
    },
}
