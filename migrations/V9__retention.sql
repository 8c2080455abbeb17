-- Retention (docs/semantics.md §12): a finished record holds its identity for the retention
-- (CARMY_RETENTION, default 7 days) counted from when it finished; then the next reservation of
-- the identity replaces it and runs as new, and the pruner deletes it in small batches, one
-- replica at a time. Running and interrupted rows never expire.
--
-- Nothing is added to the rows: a record's expiry is computed when it is read, from its
-- finished_at and the retention in force, so existing rows need no rewrite and a changed
-- retention applies to every record at once. This migration adds the index the pruner reads,
-- the one definition of "expired" (carmy.record_expired) and the pruning step
-- (carmy.prune_expired), which the gateway calls and a DBA may call too.
--
-- The index is built inside the migration's transaction (refinery cannot run CREATE INDEX
-- CONCURRENTLY): it reads the table once and blocks writes to it meanwhile, a few seconds per
-- million rows; no row is rewritten.

CREATE INDEX reservations_finished_idx
    ON carmy.reservations ((coalesce(finished_at, created_at)))
    WHERE state <> 'running';

COMMENT ON INDEX carmy.reservations_finished_idx IS
    'Finds finished reservations by when they finished, oldest first, for the pruner '
    '(carmy.prune_expired) without scanning running ones or the whole table.';

CREATE INDEX audit_log_at_idx ON carmy.audit_log (at);

COMMENT ON INDEX carmy.audit_log_at_idx IS
    'Finds audit rows by age, for the pruner (carmy.prune_expired).';

CREATE INDEX released_executions_released_at_idx ON carmy.released_executions (released_at);

COMMENT ON INDEX carmy.released_executions_released_at_idx IS
    'Finds released executions by age, for the pruner (carmy.prune_expired).';

-- ---------------------------------------------------------------------------------------------
-- The one definition of an expired record.
-- ---------------------------------------------------------------------------------------------

CREATE FUNCTION carmy.record_expired(
    state       text,
    finished_at timestamptz,
    created_at  timestamptz,
    retention   interval
) RETURNS boolean
    LANGUAGE sql
    STABLE
    PARALLEL SAFE
AS $$
    SELECT state <> 'running'
       AND coalesce(finished_at, created_at) <= now() - retention
$$;

COMMENT ON FUNCTION carmy.record_expired(text, timestamptz, timestamptz, interval) IS
    'Whether a carmy.reservations row (its state, finished_at and created_at) no longer holds '
    'its identity under retention (docs/semantics.md §12): it is finished (state <> running) and '
    'finished at least retention ago (database clock; created_at stands in for a missing '
    'finished_at). Never true for a running or interrupted row; NULL (not expired) when '
    'retention is NULL (kept forever). Used by the reservation statement (an expired row is '
    'replaced and the call runs as new) and by carmy.prune_expired.';

-- ---------------------------------------------------------------------------------------------
-- One pruning step.
-- ---------------------------------------------------------------------------------------------

CREATE FUNCTION carmy.prune_expired(
    retention  interval,
    batch_size integer DEFAULT 1000,
    OUT locked    boolean,
    OUT records   bigint,
    OUT released  bigint,
    OUT audit     bigint,
    OUT instances bigint
)
    LANGUAGE plpgsql
AS $$
DECLARE
    -- A value, not an expression, so that the planner sees the cutoff and reads the indexes.
    cutoff timestamptz := now() - retention;
BEGIN
    records := 0;
    released := 0;
    audit := 0;
    instances := 0;
    IF retention IS NULL OR retention < interval '0' OR batch_size IS NULL OR batch_size < 1 THEN
        PERFORM carmy.decision_refused('CR400',
            'retention must be a non-negative interval and batch_size at least 1', NULL);
    END IF;
    -- One replica at a time: the lock ends with the transaction (the statement, in autocommit).
    -- Key 0x6361726d79707275 is the ASCII of 'carmypru'.
    locked := pg_try_advisory_xact_lock(7161130697010213493);
    IF NOT locked THEN
        RETURN;
    END IF;

    -- Expired finished records; a row locked by a concurrent reservation is skipped (that
    -- reservation may be replacing it). The outer condition is checked again on the row as it
    -- is deleted, so a row turned running meanwhile is never deleted.
    DELETE FROM carmy.reservations r
    WHERE r.ctid = ANY (ARRAY(
              SELECT c.ctid FROM carmy.reservations c
              WHERE c.state <> 'running'
                AND coalesce(c.finished_at, c.created_at) <= cutoff
              ORDER BY coalesce(c.finished_at, c.created_at)
              LIMIT batch_size
              FOR UPDATE SKIP LOCKED))
      AND carmy.record_expired(r.state, r.finished_at, r.created_at, prune_expired.retention);
    GET DIAGNOSTICS records = ROW_COUNT;

    DELETE FROM carmy.released_executions h
    WHERE h.ctid = ANY (ARRAY(
              SELECT c.ctid FROM carmy.released_executions c
              WHERE c.released_at <= cutoff
              ORDER BY c.released_at
              LIMIT batch_size
              FOR UPDATE SKIP LOCKED));
    GET DIAGNOSTICS released = ROW_COUNT;

    -- Audit rows (late arrivals included) only once their execution holds no record: the trail
    -- of an execution that is still running, interrupted or finished stays with it.
    DELETE FROM carmy.audit_log a
    WHERE a.id = ANY (ARRAY(
              SELECT c.id FROM carmy.audit_log c
              WHERE c.at <= cutoff
                AND NOT EXISTS (SELECT 1 FROM carmy.reservations r
                                WHERE r.execution_id = c.execution_id)
              ORDER BY c.at
              LIMIT batch_size
              FOR UPDATE SKIP LOCKED));
    GET DIAGNOSTICS audit = ROW_COUNT;

    -- Stopped instances: lease lapsed more than the retention ago (so every record they
    -- finished has expired too), owning no running row.
    DELETE FROM carmy.instances i
    WHERE i.instance_id = ANY (ARRAY(
              SELECT c.instance_id FROM carmy.instances c
              WHERE c.lease_expires_at <= cutoff
                AND NOT EXISTS (SELECT 1 FROM carmy.reservations r
                                WHERE r.state = 'running' AND r.owner_instance = c.instance_id)
              LIMIT batch_size
              FOR UPDATE SKIP LOCKED))
      AND i.lease_expires_at <= cutoff;
    GET DIAGNOSTICS instances = ROW_COUNT;
END
$$;

COMMENT ON FUNCTION carmy.prune_expired(interval, integer) IS
    'One step of retention (docs/semantics.md §12), at most batch_size rows of each kind: '
    'finished records expired under retention (carmy.record_expired), released executions '
    'released at least retention ago, audit rows written at least retention ago whose execution '
    'holds no carmy.reservations row, and instances whose lease lapsed at least retention ago '
    'and that own no running row. Never a running or interrupted row. Only one session prunes at '
    'a time (transaction-level advisory lock 7161130697010213493): locked is false, and nothing '
    'was done, when another one holds it. Call it again while a count equals batch_size. The '
    'gateway calls it with CARMY_RETENTION; by hand: '
    'SELECT * FROM carmy.prune_expired(interval ''7 days'');';

COMMENT ON TABLE carmy.reservations IS
    'One row per call identity (principal, session_id, request_id), kept as three separate '
    'values (docs/semantics.md §2). Inserted as running before the tool runs (INSERT ... ON '
    'CONFLICT DO NOTHING); updated once, by the execution that reserved it, to a finished state '
    'with the recorded outcome (§3, §4). A finished row is replayed to every later attempt with '
    'the same fingerprint until its retention ends (CARMY_RETENTION after finished_at, '
    'carmy.record_expired): then the next attempt replaces it and runs as new, and '
    'carmy.prune_expired deletes it (§12). Running and interrupted rows are never pruned. To '
    'settle an interrupted execution, never edit rows by hand: call carmy.resolve_execution '
    '(record what reconciliation found) or carmy.release_execution (let the next attempt run '
    'again); both keep an audit row in carmy.audit_log (§12).';

COMMENT ON TABLE carmy.instances IS
    'One row per gateway process (PostgresStore). The process renews lease_expires_at every third '
    'of its lease TTL while it runs. A running reservation whose owner has no row here, or whose '
    'lease_expires_at <= now(), is interrupted: its outcome is unknown and it is never re-run '
    'automatically (docs/semantics.md §4). A row is kept after its process stops, for operators, '
    'until its lease lapsed more than the retention ago and it owns no running reservation '
    '(carmy.prune_expired); deleting an old row is safe.';

COMMENT ON TABLE carmy.audit_log IS
    'One row per decision or event that changed (or tried to change) an execution outside the '
    'normal reserve/complete path: resolve, release, cancel, takeover, late_arrival '
    '(docs/semantics.md §12). Written in the same transaction as the change it describes. Rows '
    'are never updated; carmy.prune_expired deletes a row once it is older than the retention '
    'and its execution holds no carmy.reservations row.';

COMMENT ON TABLE carmy.released_executions IS
    'Executions whose identity was freed by carmy.release_execution (docs/semantics.md §12): the '
    'reservation row moved here, so the next attempt with the same identity runs the tool again '
    'while the trace of this one (and its note) stays, until the retention after released_at '
    '(carmy.prune_expired). One identity may appear several times.';
