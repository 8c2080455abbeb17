//! Every SQL statement the store sends, as text, with its binds.
//!
//! Public so that the benchmark (`carmy-bench`) can check that its pgbench scripts
//! (`bench/pgbench/*.sql`) run exactly these statements, and so that the catalog test
//! (`tests/it/catalog.rs`) can read them all ([`STATEMENTS`]). The in-flight rule (`running`
//! while the owner's lease in `carmy.instances` is live, `interrupted` otherwise) is one
//! semi-join with `carmy.instances`, written once ([`owner_live!`]) and used by every statement
//! (migration `V14`: Citus cannot call a function that reads another table from a shard's
//! query). No statement calls a stable function over a column in an `UPDATE` or `DELETE`
//! (Citus refuses it; docs/semantics.md §15).

/// The columns every record-reading statement returns, from `carmy.reservations r`.
///
/// `in_flight_state` is `NULL` for a finished row, else [`in_flight_state!`] (`running` or
/// `interrupted`, computed with the database clock). The guard keeps replays of finished rows
/// from reading `carmy.instances` at all.
macro_rules! record_columns {
    () => {
        concat!(
            "r.execution_id, r.tool, r.fingerprint, r.fingerprint_version, r.state, r.outcome, \
             CASE WHEN r.state <> 'running' THEN NULL ELSE ",
            in_flight_state!("r"),
            " END AS in_flight_state, r.fingerprint_parts"
        )
    };
}

/// The per-row rule of a reservation, shared by [`RESERVE_SQL`] and the batch statements: the
/// insert's column list (its values follow in this order, with `state = 'running'` and
/// `started_at = now()`) and what happens when the identity is already held. A change to the
/// rule (e.g. a finished row past its expiry replaced as new) is made here, once, for both.
/// `ON CONFLICT` may not touch one row twice in a statement: the batch dedupes identities first.
macro_rules! reserve_insert {
    () => {
        "INSERT INTO carmy.reservations \
             (principal, session_id, request_id, tool, fingerprint, fingerprint_version, \
              state, execution_id, owner_instance, started_at, fingerprint_parts, arguments) "
    };
}

/// See [`reserve_insert`].
macro_rules! reserve_on_conflict {
    () => {
        " ON CONFLICT (principal, session_id, request_id) DO NOTHING "
    };
}

/// The identity's last released execution, for the row of a reservation that inserted it
/// (docs/semantics.md §12.1, "A rerun says so"): `replaced_execution_id`, `replaced_by` and
/// `replaced_note` of the `LATERAL` subquery `$alias`, over `carmy.released_executions` by the
/// identity in `$principal`, `$session`, `$request` (its index `released_executions_identity_idx`).
macro_rules! replaced_join {
    ($principal:literal, $session:literal, $request:literal) => {
        concat!(
            " LEFT JOIN LATERAL (SELECT h.execution_id AS replaced_execution_id, \
                    h.released_by AS replaced_by, h.note AS replaced_note \
                FROM carmy.released_executions h \
                WHERE h.principal = ",
            $principal,
            " AND h.session_id = ",
            $session,
            " AND h.request_id = ",
            $request,
            " ORDER BY h.released_at DESC LIMIT 1) replaced ON true "
        )
    };
}

mod batch;
pub use batch::{COMPLETE_BATCH_SQL, HOT_BATCH_SQL, RESERVE_BATCH_SQL};

mod operator;
pub use operator::{
    OPERATOR_LIST_FINISHED_SQL, OPERATOR_LIST_IN_FLIGHT_SQL, OPERATOR_LIST_RELEASED_SQL,
    OPERATOR_LIST_SQL, OPERATOR_SHOW_RELEASED_SQL, OPERATOR_SHOW_SQL,
};

/// The happy path of `reserve`, one statement: insert a running row; or replace a finished row
/// whose retention ended (docs/semantics.md §12.9: the call runs as new); or read the existing row.
///
/// Binds: `$1` principal, `$2` session_id, `$3` request_id, `$4` tool, `$5` fingerprint digest,
/// `$6` fingerprint version, `$7` execution_id, `$8` owner instance, `$9` the part digests
/// (`FingerprintParts::encode`, or `NULL`), `$10` retention in milliseconds (`NULL`: records
/// never expire), `$11` the kept arguments (text, or `NULL`: docs/semantics.md §8.5). Returns one row with `inserted = true` (the other columns `NULL`) when the
/// identity is now held by `$7` (inserted, with `replaced_execution_id`, `replaced_by` and
/// `replaced_note` naming the identity's last released execution, if any; or an expired row
/// replaced in place by the `UPDATE`,
/// which matches only a row that is expired by `carmy.record_expired`'s rule, written out here
/// and checked again on the row's newest version; the replacement is the execution's first
/// attempt, and `renewed = true` says the caller must announce the change,
/// docs/semantics.md §8.4); one row with
/// `inserted = false` describing the existing reservation, with `expired = true` when that row
/// (as this statement's snapshot saw it) had expired but was not replaced here, because a
/// concurrent statement replaced or pruned it first (run the statement again); or no row when
/// the conflicting row was committed by a concurrent transaction after this statement's
/// snapshot was taken (READ COMMITTED).
pub const RESERVE_SQL: &str = concat!(
    "WITH ins AS ( ",
    reserve_insert!(),
    "VALUES ($1, $2, $3, $4, $5, $6, 'running', $7, $8, now(), $9, $11)",
    reserve_on_conflict!(),
    "RETURNING execution_id \
     ), renewed AS ( \
         UPDATE carmy.reservations r \
         SET tool = $4, fingerprint = $5, fingerprint_version = $6, state = 'running', \
             execution_id = $7, outcome = NULL, error_code = NULL, owner_instance = $8, \
             created_at = now(), started_at = now(), finished_at = NULL, \
             fingerprint_parts = $9, attempt = 1, arguments = $11 \
         WHERE r.principal = $1 AND r.session_id = $2 AND r.request_id = $3 \
           AND NOT EXISTS (SELECT 1 FROM ins) \
           AND r.state <> 'running' \
           AND coalesce(r.finished_at, r.created_at) \
               <= now() - $10::bigint * interval '1 millisecond' \
         RETURNING r.execution_id \
     ) \
     SELECT true AS inserted, false AS renewed, NULL::text AS execution_id, NULL::text AS tool, \
            NULL::text AS fingerprint, NULL::text AS fingerprint_version, NULL::text AS state, \
            NULL::text AS outcome, NULL::text AS in_flight_state, \
            NULL::text AS fingerprint_parts, NULL::boolean AS expired, \
            replaced.replaced_execution_id, replaced.replaced_by, replaced.replaced_note \
     FROM ins",
    replaced_join!("$1", "$2", "$3"),
    "UNION ALL \
     SELECT true, true, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL \
     FROM renewed \
     UNION ALL \
     SELECT false AS inserted, false AS renewed, ",
    record_columns!(),
    ", coalesce(carmy.record_expired(r.state, r.finished_at, r.created_at, \
                                     $10::bigint * interval '1 millisecond'), false) AS expired, \
     NULL, NULL, NULL \
     FROM carmy.reservations r \
     WHERE r.principal = $1 AND r.session_id = $2 AND r.request_id = $3 \
       AND NOT EXISTS (SELECT 1 FROM ins) AND NOT EXISTS (SELECT 1 FROM renewed)"
);

/// Reads one identity's record. Binds: `$1` principal, `$2` session_id, `$3` request_id.
pub const LOOKUP_SQL: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM carmy.reservations r \
     WHERE r.principal = $1 AND r.session_id = $2 AND r.request_id = $3"
);

/// Reads one execution of one principal, with its identity. Binds: `$1` execution_id,
/// `$2` principal.
pub const FIND_EXECUTION_SQL: &str = concat!(
    "SELECT r.principal, r.session_id, r.request_id, r.arguments, ",
    record_columns!(),
    " FROM carmy.reservations r \
     WHERE r.execution_id = $1 AND r.principal = $2"
);

/// Records an outcome, only for the execution holding a running reservation, made by the
/// attempt that holds it now (an earlier attempt of an execution taken over matches nothing,
/// docs/semantics.md §12.7).
///
/// Binds: `$1` principal, `$2` session_id, `$3` request_id, `$4` execution_id, `$5` fingerprint
/// digest, `$6` fingerprint version, `$7` state, `$8` outcome text, `$9` error code, `$10` the
/// attempt (integer). Returns one row when it recorded the outcome, with `awaited`: whether a
/// replica waits for it in `carmy.outcome_waiters` (the caller then notifies
/// [`crate::RECORDED_CHANNEL`], docs/semantics.md §12.6); no row otherwise.
pub const COMPLETE_SQL: &str = concat!(
    "UPDATE carmy.reservations r \
     SET state = $7, outcome = $8, error_code = $9, finished_at = now() \
     WHERE r.principal = $1 AND r.session_id = $2 AND r.request_id = $3 \
       AND r.execution_id = $4 AND r.fingerprint = $5 AND r.fingerprint_version = $6 \
       AND r.state = 'running' AND r.attempt = $10 \
     RETURNING ",
    awaited!("r"),
    " AS awaited"
);

/// Takes an interrupted execution over for this process (`IdempotencyStore::take_over`,
/// docs/semantics.md §12.7): one statement that moves the row to this owner with the next
/// attempt, only while it is running under a lapsed lease, and writes the `takeover` audit row.
/// Of concurrent takeovers one updates the row; the others then find its new owner's live
/// lease and match nothing.
///
/// Binds: `$1` principal, `$2` session_id, `$3` request_id, `$4` execution_id, `$5` fingerprint
/// digest, `$6` fingerprint version, `$7` this instance. Returns `attempt` (the new one) in one
/// row, or no row when nothing was taken over.
pub const TAKE_OVER_SQL: &str = concat!(
    "WITH before AS ( \
         SELECT owner_instance, attempt FROM carmy.reservations \
         WHERE principal = $1 AND session_id = $2 AND request_id = $3 AND execution_id = $4 \
     ), taken AS ( \
         UPDATE carmy.reservations r SET owner_instance = $7, attempt = r.attempt + 1 \
         WHERE r.principal = $1 AND r.session_id = $2 AND r.request_id = $3 \
           AND r.execution_id = $4 AND r.fingerprint = $5 AND r.fingerprint_version = $6 \
           AND r.state = 'running' AND ",
    owner_lapsed!("r"),
    " RETURNING r.execution_id, r.attempt \
     ), logged AS ( \
         INSERT INTO carmy.audit_log (actor, principal, execution_id, action, before, after, note) \
         SELECT $7, $1, t.execution_id, 'takeover', \
                jsonb_build_object('state', 'interrupted', \
                                   'owner_instance', (SELECT owner_instance FROM before), \
                                   'attempt', (SELECT attempt FROM before)), \
                jsonb_build_object('state', 'running', 'owner_instance', $7::text, \
                                   'attempt', t.attempt), \
                'on_interrupted = rerun: the owner''s lease lapsed; this attempt runs the tool again' \
         FROM taken t \
         RETURNING 1 \
     ) \
     SELECT t.attempt FROM taken t"
);

/// What `complete` reads back when its update matched nothing. Binds as [`LOOKUP_SQL`].
pub const COMPLETE_RECHECK_SQL: &str =
    "SELECT execution_id, state, outcome FROM carmy.reservations \
     WHERE principal = $1 AND session_id = $2 AND request_id = $3";

/// Frees a running reservation held by one execution and owned by this process
/// (`IdempotencyStore::release`: its tool reported that nothing happened). A first attempt's
/// row is deleted; a taken-over attempt's (`attempt > 1`, docs/semantics.md §12.7) is handed back
/// instead (`owner_instance = NULL`, so it reads interrupted again): the earlier attempt's
/// effect is still unknown, and the next attempt takes it over under the same execution id;
/// an audit row (action `hand_back`, actor this instance) says so. Once another replica took the execution over, its attempt is not this process's to free.
/// Binds: `$1` principal, `$2` session id, `$3` request id, `$4` execution id, `$5` this
/// instance. Returns one row: `deleted` and `handed_back` (`bigint` counts, 0 or 1).
pub const RELEASE_RESERVATION_SQL: &str = "WITH handed_back AS ( \
         UPDATE carmy.reservations SET owner_instance = NULL \
         WHERE principal = $1 AND session_id = $2 AND request_id = $3 \
           AND execution_id = $4 AND state = 'running' AND owner_instance = $5 \
           AND attempt > 1 \
         RETURNING execution_id, attempt \
     ), logged AS ( \
         INSERT INTO carmy.audit_log (actor, principal, execution_id, action, before, after, note) \
         SELECT $5, $1, h.execution_id, 'hand_back', \
                jsonb_build_object('state', 'running', 'owner_instance', $5::text, \
                                   'attempt', h.attempt), \
                jsonb_build_object('state', 'interrupted', 'owner_instance', NULL, \
                                   'attempt', h.attempt), \
                'this attempt''s tool did nothing; an earlier attempt''s effect is unknown, so the \
execution reads interrupted again and the next attempt takes it over' \
         FROM handed_back h \
         RETURNING 1 \
     ), deleted AS ( \
         DELETE FROM carmy.reservations \
         WHERE principal = $1 AND session_id = $2 AND request_id = $3 \
           AND execution_id = $4 AND state = 'running' AND owner_instance = $5 \
           AND attempt = 1 \
         RETURNING 1 \
     ) \
     SELECT (SELECT count(*) FROM deleted) AS deleted, \
            (SELECT count(*) FROM handed_back) AS handed_back";

/// Resolves an execution through the SQL function of migration `V6` (the one implementation,
/// shared with DBAs). Binds: `$1` execution_id, `$2` status, `$3` data (JSON text), `$4` error
/// (JSON text or `NULL`), `$5` note, `$6` actor, `$7` force, `$8` principal (`NULL` for any).
/// Returns the recorded outcome text; a refusal raises SQLSTATE `CR404`, `CR409` or `CR412`.
pub const RESOLVE_EXECUTION_SQL: &str =
    "SELECT carmy.resolve_execution($1, $2, $3::jsonb, $4::jsonb, $5, $6, $7, $8) AS outcome";

/// Releases an execution through the SQL function of migration `V6`. Binds: `$1`
/// execution_id, `$2` note, `$3` actor, `$4` force, `$5` principal (`NULL` for any). Returns a
/// JSON summary (`execution_id`, `principal`, `session_id`, `request_id`, `tool`,
/// `in_flight_state`, `by`, `at`, `note`); refusals as [`RESOLVE_EXECUTION_SQL`].
pub const RELEASE_EXECUTION_SQL: &str =
    "SELECT carmy.release_execution($1, $2, $3, $4, $5) AS released";

/// The listing of [`LIST_EXECUTIONS_SQL`] and [`LIST_EXECUTIONS_NEWEST_SQL`], in `$order` (the
/// `ORDER BY` list: a direction cannot be a bind parameter).
macro_rules! list_executions {
    ($order:literal) => {
        concat!(
            "SELECT r.principal, r.session_id, r.request_id, r.created_at AS reserved_at, r.arguments, ",
            record_columns!(),
            " FROM carmy.reservations r \
             WHERE ($1::text IS NULL OR r.principal = $1) \
               AND ($2::text IS NULL OR r.session_id = $2) \
               AND ($3::text IS NULL OR r.request_id = $3) \
               AND ($4::text IS NULL \
                    OR (r.state = 'running' AND ",
            in_flight_state!("r"),
            " = $4)) \
               AND ($5::text IS NULL OR r.tool = $5) \
               AND (NOT $6::boolean OR r.state IN ('failed', 'timed_out', 'cancelled')) \
               AND ($8::text IS NULL \
                    OR carmy.arguments_jsonb(r.arguments) @> carmy.arguments_jsonb($8::text)) \
             ORDER BY ",
            $order,
            " LIMIT $7"
        )
    };
}

/// Lists records, oldest reservation first. Binds: `$1` principal, `$2` session_id, `$3`
/// request_id, `$4` in-flight state (`running` / `interrupted`), `$5` tool, each `NULL` for
/// any; `$6` only finished records whose status is not `completed`; `$7` limit; `$8` a JSON
/// value (text) the kept arguments must contain (`NULL`: any; docs/semantics.md §8.5, served by
/// the index `reservations_arguments_idx`).
pub const LIST_EXECUTIONS_SQL: &str = list_executions!("r.created_at, r.execution_id");

/// [`LIST_EXECUTIONS_SQL`], newest reservation first (exactly its order reversed).
pub const LIST_EXECUTIONS_NEWEST_SQL: &str =
    list_executions!("r.created_at DESC, r.execution_id DESC");

/// Reads a released execution of one principal. Binds: `$1` execution_id, `$2` principal.
pub const FIND_RELEASED_SQL: &str = "SELECT h.principal, h.session_id, h.request_id, \
            h.execution_id, h.tool, h.fingerprint, h.fingerprint_version, \
            h.in_flight_state, h.released_by, \
            date_trunc('milliseconds', h.released_at) AS released_at, h.note, h.arguments \
     FROM carmy.released_executions h \
     WHERE h.execution_id = $1 AND h.principal = $2";

/// Reads one execution's audit rows, oldest first. Binds: `$1` execution_id.
pub const AUDIT_TRAIL_SQL: &str = "SELECT actor, at, execution_id, action, \
            before::text AS before, after::text AS after, note \
     FROM carmy.audit_log WHERE execution_id = $1 ORDER BY id";

/// Keeps a late outcome as an audit row (`late_arrival`) and reads who holds the identity now.
/// Binds: `$1` principal, `$2` session_id, `$3` request_id, `$4` owner instance (the actor),
/// `$5` execution_id, `$6` status, `$7` outcome text, `$8` note. Returns `current` (the holder's
/// execution id, or `NULL`). An outcome `jsonb` refuses (`\u0000`, a number beyond `numeric`'s
/// range or precision) is kept as a JSON string of its text (`carmy.jsonb_or_text`, migration
/// `V12`), so the write never fails because of the value (docs/semantics.md §12.1). The row's
/// `contradicts_decision` says whether the outcome contradicts the reconciler's last decision
/// on the execution (a release and a completed outcome, or a completed resolution and a failed
/// outcome: the probe was wrong); `NULL` when the reconciler never decided it.
pub const LATE_ARRIVAL_SQL: &str = "WITH holder AS ( \
         SELECT execution_id FROM carmy.reservations \
         WHERE principal = $1 AND session_id = $2 AND request_id = $3 \
     ), decided AS ( \
         SELECT a.action, a.after ->> 'state' AS state FROM carmy.audit_log a \
         WHERE a.principal = $1 AND a.execution_id = $5 AND a.actor = 'reconciler' \
           AND a.action IN ('resolve', 'release') \
         ORDER BY a.id DESC LIMIT 1 \
     ), logged AS ( \
         INSERT INTO carmy.audit_log \
             (actor, principal, execution_id, action, before, after, note, contradicts_decision) \
         SELECT $4, $1, $5, 'late_arrival', \
                jsonb_build_object('principal', $1::text, 'session_id', $2::text, \
                                   'request_id', $3::text, \
                                   'current_execution_id', (SELECT execution_id FROM holder)), \
                jsonb_build_object('state', $6::text, \
                                   'outcome', carmy.jsonb_or_text($7::text)), \
                $8, \
                (SELECT (d.action = 'release' AND $6::text = 'completed') \
                        OR (d.action = 'resolve' AND d.state = 'completed' \
                            AND $6::text = 'failed') \
                 FROM decided d) \
         RETURNING 1 \
     ) \
     SELECT (SELECT execution_id FROM holder) AS current, (SELECT count(*) FROM logged) AS logged";

/// The key of the transaction-level advisory lock one pruning step holds
/// (`carmy.prune_expired`, migration `V9`): `0x6361726d79707275`, the ASCII bytes of `carmypru`
/// read as a big-endian `bigint`. Only one session prunes at a time.
pub const PRUNE_LOCK_KEY: i64 = 0x6361_726d_7970_7275;

/// One pruning step through the SQL function of migrations `V9` and `V12` (docs/semantics.md
/// §12.9), with `short_retention_ok` set: the gateway's `CARMY_RETENTION` was chosen on purpose.
/// Binds: `$1` retention in milliseconds, `$2` batch size. Returns one row: `locked` (false: another
/// session prunes, nothing was done), and the rows deleted of each kind, `records`, `released`,
/// `audit`, `instances` (`bigint`).
pub const PRUNE_SQL: &str = "SELECT locked, records, released, audit, instances \
     FROM carmy.prune_expired($1::bigint * interval '1 millisecond', $2::integer, true)";

/// The highest applied migration; `NULL` when none. Reads [`crate::MIGRATION_TABLE`].
pub const READY_SQL: &str = "SELECT max(version) FROM carmy.refinery_schema_history";

/// Registers or renews this process's lease. Binds: `$1` instance id, `$2` hostname, `$3` pid,
/// `$4` lease TTL in milliseconds.
pub const LEASE_SQL: &str =
    "INSERT INTO carmy.instances (instance_id, hostname, pid, lease_expires_at) \
     VALUES ($1, $2, $3, now() + $4::bigint * interval '1 millisecond') \
     ON CONFLICT (instance_id) DO UPDATE \
     SET lease_expires_at = EXCLUDED.lease_expires_at, \
         hostname = EXCLUDED.hostname, pid = EXCLUDED.pid";

/// Ends this process's lease now. Binds: `$1` instance id.
pub const END_LEASE_SQL: &str =
    "UPDATE carmy.instances SET lease_expires_at = now() WHERE instance_id = $1";

/// Registers a client's hold (docs/semantics.md §16) as a lease row of its own, before its
/// reservation. Binds: `$1` the fencing token, `$2` the lease in milliseconds.
pub const HOLD_LEASE_SQL: &str =
    "INSERT INTO carmy.instances (instance_id, hostname, pid, lease_expires_at) \
     VALUES ($1, 'client hold', NULL, now() + $2::bigint * interval '1 millisecond')";

/// Renews a client's hold, only while its execution is running under it (not finished,
/// decided or released). Binds: `$1` execution_id, `$2` the fencing token, `$3` the lease in
/// milliseconds. One row when renewed, none when the holder lost it.
pub const RENEW_HOLD_SQL: &str = "UPDATE carmy.instances i \
     SET lease_expires_at = now() + $3::bigint * interval '1 millisecond' \
     WHERE i.instance_id = $2 \
       AND EXISTS (SELECT 1 FROM carmy.reservations r \
                   WHERE r.execution_id = $1 AND r.owner_instance = $2 AND r.state = 'running') \
     RETURNING i.instance_id";

/// Who holds or held an execution: its row, else its released copy. Binds: `$1` execution_id.
/// Returns `owner_instance`, `attempt` and `started` (when it was reserved).
pub const HELD_OWNER_SQL: &str =
    "SELECT r.owner_instance, r.attempt, coalesce(r.started_at, r.created_at) AS started \
     FROM carmy.reservations r WHERE r.execution_id = $1 \
     UNION ALL \
     SELECT h.owner_instance, 1, coalesce(h.started_at, h.created_at) \
     FROM carmy.released_executions h WHERE h.execution_id = $1 \
     LIMIT 1";

/// Sends a notification to every replica, from the database the gateway is connected to (on
/// Citus, the coordinator: a notification sent on a worker reaches no gateway). Binds: `$1` the
/// channel ([`crate::CANCEL_CHANNEL`], [`crate::RECORDED_CHANNEL`], [`crate::CHANGED_CHANNEL`]),
/// `$2` the payload.
pub const NOTIFY_SQL: &str = "SELECT pg_notify($1, $2)";

/// Every statement the store sends on its own (the ones it builds from SQL functions call them),
/// by name: the catalog test (`tests/it/catalog.rs`) checks each against the database, e.g. that
/// no `UPDATE` or `DELETE` calls a stable function over a column (docs/semantics.md §15).
pub const STATEMENTS: &[(&str, &str)] = &[
    ("RESERVE_SQL", RESERVE_SQL),
    ("LOOKUP_SQL", LOOKUP_SQL),
    ("FIND_EXECUTION_SQL", FIND_EXECUTION_SQL),
    ("COMPLETE_SQL", COMPLETE_SQL),
    ("TAKE_OVER_SQL", TAKE_OVER_SQL),
    ("COMPLETE_RECHECK_SQL", COMPLETE_RECHECK_SQL),
    ("RELEASE_RESERVATION_SQL", RELEASE_RESERVATION_SQL),
    ("RESOLVE_EXECUTION_SQL", RESOLVE_EXECUTION_SQL),
    ("RELEASE_EXECUTION_SQL", RELEASE_EXECUTION_SQL),
    ("LIST_EXECUTIONS_SQL", LIST_EXECUTIONS_SQL),
    ("LIST_EXECUTIONS_NEWEST_SQL", LIST_EXECUTIONS_NEWEST_SQL),
    ("FIND_RELEASED_SQL", FIND_RELEASED_SQL),
    ("AUDIT_TRAIL_SQL", AUDIT_TRAIL_SQL),
    ("LATE_ARRIVAL_SQL", LATE_ARRIVAL_SQL),
    ("PRUNE_SQL", PRUNE_SQL),
    ("READY_SQL", READY_SQL),
    ("LEASE_SQL", LEASE_SQL),
    ("END_LEASE_SQL", END_LEASE_SQL),
    ("NOTIFY_SQL", NOTIFY_SQL),
    ("HOLD_LEASE_SQL", HOLD_LEASE_SQL),
    ("RENEW_HOLD_SQL", RENEW_HOLD_SQL),
    ("HELD_OWNER_SQL", HELD_OWNER_SQL),
    ("OPERATOR_LIST_SQL", OPERATOR_LIST_SQL),
    ("OPERATOR_LIST_IN_FLIGHT_SQL", OPERATOR_LIST_IN_FLIGHT_SQL),
    ("OPERATOR_LIST_FINISHED_SQL", OPERATOR_LIST_FINISHED_SQL),
    ("OPERATOR_LIST_RELEASED_SQL", OPERATOR_LIST_RELEASED_SQL),
    ("OPERATOR_SHOW_SQL", OPERATOR_SHOW_SQL),
    ("OPERATOR_SHOW_RELEASED_SQL", OPERATOR_SHOW_RELEASED_SQL),
    ("RESERVE_BATCH_SQL", RESERVE_BATCH_SQL),
    ("COMPLETE_BATCH_SQL", COMPLETE_BATCH_SQL),
    ("HOT_BATCH_SQL", HOT_BATCH_SQL),
    ("CLAIM_SQL", crate::reconcile::CLAIM_SQL),
    ("RECORD_PROBE_SQL", crate::reconcile::RECORD_PROBE_SQL),
    (
        "RECORD_LAST_PROBE_SQL",
        crate::reconcile::RECORD_LAST_PROBE_SQL,
    ),
    ("ATTEMPT_AGE_SQL", crate::reconcile::ATTEMPT_AGE_SQL),
    ("EVIDENCE_SQL", crate::reconcile::EVIDENCE_SQL),
    ("RECONCILE_SOON_SQL", crate::reconcile::RECONCILE_SOON_SQL),
    ("REGISTER_WAITER_SQL", crate::waiters::REGISTER_WAITER_SQL),
    (
        "UNREGISTER_WAITER_SQL",
        crate::waiters::UNREGISTER_WAITER_SQL,
    ),
    (
        "ANNOUNCE_RECORDED_SQL",
        crate::waiters::ANNOUNCE_RECORDED_SQL,
    ),
];

#[cfg(test)]
#[path = "sql_tests.rs"]
mod tests;
