//! Every SQL statement the store sends, as text, with its binds.
//!
//! Public so that the benchmark (`carmy-bench`) can check that its pgbench scripts
//! (`bench/pgbench/*.sql`) run exactly these statements. The in-flight rule (`running` while the
//! owner's lease in `carmy.instances` is live, `interrupted` otherwise) is not written here: the
//! statements call the SQL function `carmy.in_flight_state(owner_instance)` (migration `V4`),
//! which the operator view `carmy.uncertain_executions` uses too.

/// The columns every record-reading statement returns, from `carmy.reservations r`.
///
/// `in_flight_state` is `NULL` for a finished row, else `carmy.in_flight_state(r.owner_instance)`
/// (`running` or `interrupted`, computed with the database clock). The guard keeps replays of
/// finished rows from calling the function at all.
macro_rules! record_columns {
    () => {
        "r.execution_id, r.tool, r.fingerprint, r.fingerprint_version, r.state, r.outcome, \
         CASE WHEN r.state <> 'running' THEN NULL \
              ELSE carmy.in_flight_state(r.owner_instance) \
         END AS in_flight_state"
    };
}

/// The happy path of `reserve`, one statement: insert a running row; or replace a finished row
/// whose retention ended (docs/semantics.md §12: the call runs as new); or read the existing row.
///
/// Binds: `$1` principal, `$2` session_id, `$3` request_id, `$4` tool, `$5` fingerprint digest,
/// `$6` fingerprint version, `$7` execution_id, `$8` owner instance, `$9` retention in
/// milliseconds (`NULL`: records never expire). Returns one row with `inserted = true` (the other
/// columns `NULL`) when the identity is now held by `$7` (inserted, or an expired row replaced in
/// place by the `UPDATE`, which matches only a row that `carmy.record_expired` calls expired,
/// checked again on the row's newest version); one row with `inserted = false` describing the
/// existing reservation, with `expired = true` when that row (as this statement's snapshot saw
/// it) had expired but was not replaced here, because a concurrent statement replaced or pruned
/// it first (run the statement again); or no row when the conflicting row was committed by a
/// concurrent transaction after this statement's snapshot was taken (READ COMMITTED).
pub const RESERVE_SQL: &str = concat!(
    "WITH ins AS ( \
         INSERT INTO carmy.reservations \
             (principal, session_id, request_id, tool, fingerprint, fingerprint_version, \
              state, execution_id, owner_instance, started_at) \
         VALUES ($1, $2, $3, $4, $5, $6, 'running', $7, $8, now()) \
         ON CONFLICT (principal, session_id, request_id) DO NOTHING \
         RETURNING execution_id \
     ), renewed AS ( \
         UPDATE carmy.reservations r \
         SET tool = $4, fingerprint = $5, fingerprint_version = $6, state = 'running', \
             execution_id = $7, outcome = NULL, error_code = NULL, owner_instance = $8, \
             created_at = now(), started_at = now(), finished_at = NULL \
         WHERE r.principal = $1 AND r.session_id = $2 AND r.request_id = $3 \
           AND NOT EXISTS (SELECT 1 FROM ins) \
           AND carmy.record_expired(r.state, r.finished_at, r.created_at, \
                                    $9::bigint * interval '1 millisecond') \
         RETURNING r.execution_id \
     ) \
     SELECT true AS inserted, NULL::text AS execution_id, NULL::text AS tool, \
            NULL::text AS fingerprint, NULL::text AS fingerprint_version, NULL::text AS state, \
            NULL::text AS outcome, NULL::text AS in_flight_state, NULL::boolean AS expired \
     FROM ins \
     UNION ALL \
     SELECT true, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM renewed \
     UNION ALL \
     SELECT false AS inserted, ",
    record_columns!(),
    ", coalesce(carmy.record_expired(r.state, r.finished_at, r.created_at, \
                                     $9::bigint * interval '1 millisecond'), false) AS expired \
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
    "SELECT r.principal, r.session_id, r.request_id, ",
    record_columns!(),
    " FROM carmy.reservations r \
     WHERE r.execution_id = $1 AND r.principal = $2"
);

/// Records an outcome, only for the execution holding a running reservation.
///
/// Binds: `$1` principal, `$2` session_id, `$3` request_id, `$4` execution_id, `$5` fingerprint
/// digest, `$6` fingerprint version, `$7` state, `$8` outcome text, `$9` error code.
pub const COMPLETE_SQL: &str = "UPDATE carmy.reservations \
     SET state = $7, outcome = $8, error_code = $9, finished_at = now() \
     WHERE principal = $1 AND session_id = $2 AND request_id = $3 \
       AND execution_id = $4 AND fingerprint = $5 AND fingerprint_version = $6 \
       AND state = 'running'";

/// What `complete` reads back when its update matched nothing. Binds as [`LOOKUP_SQL`].
pub const COMPLETE_RECHECK_SQL: &str =
    "SELECT execution_id, state, outcome FROM carmy.reservations \
     WHERE principal = $1 AND session_id = $2 AND request_id = $3";

/// Deletes a running reservation held by one execution (`IdempotencyStore::release`).
/// Binds: `$1` principal, `$2` session id, `$3` request id, `$4` execution id.
pub const RELEASE_RESERVATION_SQL: &str = "DELETE FROM carmy.reservations \
     WHERE principal = $1 AND session_id = $2 AND request_id = $3 \
       AND execution_id = $4 AND state = 'running'";

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

/// Lists records. Binds: `$1` principal, `$2` session_id, `$3` request_id, `$4` in-flight
/// state (`running` / `interrupted`), each `NULL` for any; `$5` limit.
pub const LIST_EXECUTIONS_SQL: &str = concat!(
    "SELECT r.principal, r.session_id, r.request_id, ",
    record_columns!(),
    " FROM carmy.reservations r \
     WHERE ($1::text IS NULL OR r.principal = $1) \
       AND ($2::text IS NULL OR r.session_id = $2) \
       AND ($3::text IS NULL OR r.request_id = $3) \
       AND ($4::text IS NULL \
            OR (r.state = 'running' AND carmy.in_flight_state(r.owner_instance) = $4)) \
     ORDER BY r.created_at, r.execution_id \
     LIMIT $5"
);

/// Reads a released execution of one principal. Binds: `$1` execution_id, `$2` principal.
pub const FIND_RELEASED_SQL: &str = "SELECT h.principal, h.session_id, h.request_id, \
            h.execution_id, h.tool, h.fingerprint, h.fingerprint_version, \
            h.in_flight_state, h.released_by, \
            date_trunc('milliseconds', h.released_at) AS released_at, h.note \
     FROM carmy.released_executions h \
     WHERE h.execution_id = $1 AND h.principal = $2";

/// Reads one execution's audit rows, oldest first. Binds: `$1` execution_id.
pub const AUDIT_TRAIL_SQL: &str = "SELECT actor, at, execution_id, action, \
            before::text AS before, after::text AS after, note \
     FROM carmy.audit_log WHERE execution_id = $1 ORDER BY id";

/// Keeps a late outcome as an audit row (`late_arrival`) and reads who holds the identity now.
/// Binds: `$1` principal, `$2` session_id, `$3` request_id, `$4` owner instance (the actor),
/// `$5` execution_id, `$6` status, `$7` outcome text, `$8` note. Returns `current` (the holder's
/// execution id, or `NULL`). An outcome holding `\u0000` (which `jsonb` refuses) is kept as a
/// JSON string of its text.
pub const LATE_ARRIVAL_SQL: &str = "WITH holder AS ( \
         SELECT execution_id FROM carmy.reservations \
         WHERE principal = $1 AND session_id = $2 AND request_id = $3 \
     ), logged AS ( \
         INSERT INTO carmy.audit_log (actor, execution_id, action, before, after, note) \
         SELECT $4, $5, 'late_arrival', \
                jsonb_build_object('principal', $1::text, 'session_id', $2::text, \
                                   'request_id', $3::text, \
                                   'current_execution_id', (SELECT execution_id FROM holder)), \
                jsonb_build_object('state', $6::text, 'outcome', \
                    CASE WHEN strpos($7::text, '\\u0000') = 0 THEN $7::text::jsonb \
                         ELSE to_jsonb($7::text) END), \
                $8 \
         RETURNING 1 \
     ) \
     SELECT (SELECT execution_id FROM holder) AS current, (SELECT count(*) FROM logged) AS logged";

/// The key of the transaction-level advisory lock one pruning step holds
/// (`carmy.prune_expired`, migration `V9`): `0x6361726d79707275`, the ASCII bytes of `carmypru`
/// read as a big-endian `bigint`. Only one session prunes at a time.
pub const PRUNE_LOCK_KEY: i64 = 0x6361_726d_7970_7275;

/// One pruning step through the SQL function of migration `V9` (docs/semantics.md §12). Binds:
/// `$1` retention in milliseconds, `$2` batch size. Returns one row: `locked` (false: another
/// session prunes, nothing was done), and the rows deleted of each kind, `records`, `released`,
/// `audit`, `instances` (`bigint`).
pub const PRUNE_SQL: &str = "SELECT locked, records, released, audit, instances \
     FROM carmy.prune_expired($1::bigint * interval '1 millisecond', $2::integer)";

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

/// Sends a cancel request to every replica. Binds: `$1` the channel
/// ([`crate::CANCEL_CHANNEL`]), `$2` the execution id.
pub const NOTIFY_CANCEL_SQL: &str = "SELECT pg_notify($1, $2)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prune_lock_key_is_the_one_of_the_migration() {
        let migration = include_str!("../../../migrations/V9__retention.sql");
        assert!(migration.contains(&format!("pg_try_advisory_xact_lock({PRUNE_LOCK_KEY})")));
        assert_eq!(&PRUNE_LOCK_KEY.to_be_bytes(), b"carmypru");
    }

    #[test]
    fn ready_query_reads_the_migration_table() {
        assert!(READY_SQL.ends_with(&format!("FROM {}", crate::MIGRATION_TABLE)));
    }

    #[test]
    fn every_record_read_uses_the_in_flight_function() {
        for sql in [
            RESERVE_SQL,
            LOOKUP_SQL,
            FIND_EXECUTION_SQL,
            LIST_EXECUTIONS_SQL,
        ] {
            assert!(
                sql.contains("carmy.in_flight_state(r.owner_instance)"),
                "{sql}"
            );
            assert!(!sql.contains("lease_expires_at"), "{sql}");
        }
    }
}
