//! The rules that several statements share, as SQL text macros: the in-flight rule (a
//! semi-join with `carmy.instances`, docs/semantics.md §4) and whether someone waits for an
//! outcome (`carmy.outcome_waiters`, docs/semantics.md §12.6). Declared before the modules that
//! write statements ([`crate::sql`], `reconcile`), so that each rule is written once.

/// Whether the owner of the row aliased `$table` holds a live lease (the in-flight rule,
/// docs/semantics.md §4): a semi-join with `carmy.instances` by `owner_instance`, compared with
/// the database clock. A row without an owner (`NULL`, handed back) or whose owner has no row
/// reads as not live.
macro_rules! owner_live {
    ($table:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM carmy.instances lease \
                     WHERE lease.instance_id = ",
            $table,
            ".owner_instance AND lease.lease_expires_at > now())"
        )
    };
}

/// The in-flight state of the running row aliased `$table`: `running` while its owner's lease is
/// live ([`owner_live!`]), else `interrupted`.
macro_rules! in_flight_state {
    ($table:literal) => {
        concat!(
            "CASE WHEN ",
            owner_live!($table),
            " THEN 'running' ELSE 'interrupted' END"
        )
    };
}

/// Whether the owner of the row aliased `$table` has lost its lease: the in-flight state is
/// `interrupted`. For `UPDATE` and `DELETE` conditions (takeover, reconciliation claims). The
/// semi-join stays inside a `CASE`, where the planner keeps it a subplan evaluated per row:
/// a bare `NOT EXISTS` in the `WHERE` list becomes an anti-join, and when the row was changed by
/// a concurrent transaction, PostgreSQL's recheck of the new row version reuses the join's
/// earlier answer instead of asking again, so two concurrent takeovers would both win.
macro_rules! owner_lapsed {
    ($table:literal) => {
        concat!("(", in_flight_state!($table), ") = 'interrupted'")
    };
}

/// Whether a replica waits for the outcome of the row aliased `$table` (`carmy.outcome_waiters`,
/// docs/semantics.md §12.6): returned by the statements that record outcomes, so that the
/// gateway notifies [`crate::RECORDED_CHANNEL`] only when someone listens.
macro_rules! awaited {
    ($table:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM carmy.outcome_waiters w WHERE w.execution_id = ",
            $table,
            ".execution_id)"
        )
    };
}
