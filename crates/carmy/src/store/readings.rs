//! What a store reads of itself for the operator's alerts (`GET /metrics`, docs/semantics.md
//! §13): the interrupted executions per tool and this process's failed lease renewals.

use std::time::Duration;

/// A store's readings at one instant ([`super::IdempotencyStore::readings`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreReadings {
    /// The interrupted executions (no outcome, the owner's lease lapsed) of every tool that
    /// has any, across all replicas; empty for a process-local store.
    pub interrupted: Vec<InterruptedTool>,
    /// The lease renewals of this process that failed since it started (a store without leases:
    /// 0).
    pub lease_renewal_failures: u64,
}

/// The interrupted executions of one tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterruptedTool {
    /// The tool's name as recorded.
    pub tool: String,
    /// How many are interrupted.
    pub count: u64,
    /// How many of them the reconciler will not probe again: its attempts are used up
    /// (`CARMY_RECONCILE_MAX_ATTEMPTS`, docs/semantics.md §12.10), a person decides.
    pub probes_used_up: u64,
    /// The age of the oldest one: since its reservation, by the store's clock.
    pub oldest_age: Duration,
}
