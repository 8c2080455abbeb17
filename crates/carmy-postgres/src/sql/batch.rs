//! The group-commit statements (docs/semantics.md §8.3, see `batch`): many `reserve` calls, many
//! `complete` calls, or both kinds, in one statement and one commit, each row under the same
//! rule as its single-row statement ([`super::RESERVE_SQL`], [`super::COMPLETE_SQL`]).

/// The two CTEs of a batch of reservations, `input` and `ins`, written after `WITH`: `input`
/// holds the arrays `$1`..`$7`, `$9` and `$arguments` (the bind of the kept arguments, `text[]`
/// with `NULL`s) side by side with their 1-based `slot`; `ins` inserts them (owner `$8`) under
/// the per-row rule of `reserve_insert!` and returns the identities it inserted.
macro_rules! reserve_batch_ctes {
    ($arguments:literal) => {
        concat!(
            "input AS ( \
                 SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], \
                                      $5::text[], $6::text[], $7::text[], $9::text[], ",
            $arguments,
            "::text[]) \
                     WITH ORDINALITY \
                     AS i(principal, session_id, request_id, tool, fingerprint, \
                          fingerprint_version, execution_id, fingerprint_parts, arguments, \
                          slot) \
             ), ins AS ( ",
            reserve_insert!(),
            "SELECT principal, session_id, request_id, tool, fingerprint, fingerprint_version, \
                    'running', execution_id, $8, now(), fingerprint_parts, arguments \
             FROM input",
            reserve_on_conflict!(),
            "RETURNING principal, session_id, request_id \
             )"
        )
    };
}

/// The rows of a batch of reservations, from the CTEs of `reserve_batch_ctes!`: per input
/// `slot` one row with `inserted = true` (and the identity's last released execution in
/// `replaced_execution_id`, `replaced_by`, `replaced_note`, as `super::RESERVE_SQL`), or one with `inserted = false` and the existing
/// record's columns (`record_columns!`), or none (the conflicting row was committed after the
/// statement's snapshot).
macro_rules! reserve_batch_rows {
    () => {
        concat!(
            "SELECT i.slot, true AS inserted, NULL::text AS execution_id, NULL::text AS tool, \
                    NULL::text AS fingerprint, NULL::text AS fingerprint_version, \
                    NULL::text AS state, NULL::text AS outcome, \
                    NULL::text AS in_flight_state, NULL::text AS fingerprint_parts, \
                    replaced.replaced_execution_id, replaced.replaced_by, \
                    replaced.replaced_note \
             FROM input i JOIN ins USING (principal, session_id, request_id)",
            replaced_join!("i.principal", "i.session_id", "i.request_id"),
            "UNION ALL \
             SELECT i.slot, false AS inserted, ",
            record_columns!(),
            ", NULL, NULL, NULL \
             FROM input i JOIN carmy.reservations r \
                 ON r.principal = i.principal AND r.session_id = i.session_id \
                AND r.request_id = i.request_id \
             WHERE NOT EXISTS (SELECT 1 FROM ins \
                               WHERE ins.principal = i.principal \
                                 AND ins.session_id = i.session_id \
                                 AND ins.request_id = i.request_id)"
        )
    };
}

/// A batch of outcomes: the `UPDATE` of [`super::COMPLETE_SQL`]'s rule for every row of `v`
/// (`$values`: a `FROM` item with the columns principal, session_id, request_id, execution_id,
/// fingerprint, fingerprint_version, state, outcome, error_code, attempt and slot), returning
/// the `slot` of each row it updated and whether a replica waits for its outcome (`awaited`).
macro_rules! complete_batch_update {
    ($values:literal) => {
        concat!(
            "UPDATE carmy.reservations r \
             SET state = v.state, outcome = v.outcome, error_code = v.error_code, \
                 finished_at = now() \
             FROM ",
            $values,
            " WHERE r.principal = v.principal AND r.session_id = v.session_id \
               AND r.request_id = v.request_id \
               AND r.execution_id = v.execution_id AND r.fingerprint = v.fingerprint \
               AND r.fingerprint_version = v.fingerprint_version \
               AND r.state = 'running' AND r.attempt = v.attempt \
             RETURNING v.slot, ",
            awaited!("r"),
            " AS awaited"
        )
    };
}

/// [`super::RESERVE_SQL`] for many identities in one statement and one commit. The identities
/// must be distinct (`ON CONFLICT` may not meet one row twice in a statement).
///
/// Binds: `$1`..`$7` arrays of equal length (`text[]`): principals, session ids, request ids,
/// tools, fingerprint digests, fingerprint versions, execution ids; `$8` the owner instance;
/// `$9` the part digests (`text[]` of the same length, with `NULL`s); `$10` the kept arguments
/// (`text[]` of the same length, with `NULL`s; docs/semantics.md §8.5).
/// Returns per input position `slot` (1-based, `bigint`) one row with `inserted = true`, or one
/// row with `inserted = false` and the existing record's columns, or no row when the conflicting
/// row was committed after the statement's snapshot (as [`super::RESERVE_SQL`]).
pub const RESERVE_BATCH_SQL: &str = concat!(
    "WITH ",
    reserve_batch_ctes!("$10"),
    " ",
    reserve_batch_rows!()
);

/// [`super::COMPLETE_SQL`] for many outcomes in one statement and one commit, with the same
/// per-row rule. No two inputs may name the same identity and execution (`UPDATE … FROM`
/// would apply only one of them).
///
/// Binds: `$1`..`$9` arrays of equal length (`text[]`, `$9` with `NULL`s) and `$10` (`int4[]`,
/// the attempts), as [`super::COMPLETE_SQL`]'s binds. Returns the `slot` (1-based input
/// position, `bigint`) of every row it updated, with `awaited` as [`super::COMPLETE_SQL`].
pub const COMPLETE_BATCH_SQL: &str = complete_batch_update!(
    "unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], \
            $7::text[], $8::text[], $9::text[], $10::int4[]) WITH ORDINALITY \
         AS v(principal, session_id, request_id, execution_id, fingerprint, \
              fingerprint_version, state, outcome, error_code, attempt, slot)"
);

/// Reservations and outcomes together: [`RESERVE_BATCH_SQL`] and [`COMPLETE_BATCH_SQL`] in one
/// statement, so one commit (one WAL flush) makes both durable. Each part keeps its own rule
/// and its own conditions (distinct identities among the reservations, distinct identity and
/// execution among the outcomes). Both parts read the statement's one snapshot: a reservation
/// of an identity whose outcome this statement records finds it running, as if it came just
/// before the outcome.
///
/// Binds: `$1`..`$9` as [`RESERVE_BATCH_SQL`]'s, `$10`..`$19` as [`COMPLETE_BATCH_SQL`]'s
/// `$1`..`$10`, `$20` as [`RESERVE_BATCH_SQL`]'s `$10` (the kept arguments). Returns rows with `kind` first: `reserve`, then the columns of
/// [`RESERVE_BATCH_SQL`]'s rows; or `complete`, then the `slot` of an outcome recorded and,
/// last, `awaited` (as [`COMPLETE_BATCH_SQL`]; the other columns `NULL`).
pub const HOT_BATCH_SQL: &str = concat!(
    "WITH ",
    reserve_batch_ctes!("$20"),
    ", done AS ( ",
    complete_batch_update!(
        "unnest($10::text[], $11::text[], $12::text[], $13::text[], $14::text[], \
                $15::text[], $16::text[], $17::text[], $18::text[], $19::int4[]) \
             WITH ORDINALITY \
             AS v(principal, session_id, request_id, execution_id, fingerprint, \
                  fingerprint_version, state, outcome, error_code, attempt, slot)"
    ),
    " ), reserved AS ( ",
    reserve_batch_rows!(),
    " ) \
     SELECT 'reserve' AS kind, reserved.*, NULL::boolean AS awaited FROM reserved \
     UNION ALL \
     SELECT 'complete', d.slot, NULL::boolean, NULL::text, NULL::text, NULL::text, NULL::text, \
            NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, \
            d.awaited \
     FROM done d"
);
