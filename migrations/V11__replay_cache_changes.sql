-- Replay caches follow operators' changes (docs/semantics.md §8.4, §12), and a hand-back is
-- audited.
--
-- 1. A replica's replay cache keeps finished records in memory. A finished row that is
--    updated or deleted (by a DBA's SQL, or replaced by a new reservation once expired) is
--    announced on channel carmy_changed, so that every replica drops its copy at once instead
--    of replaying it until the cache's time to live; a TRUNCATE drops every copy. Rows without an outcome (running ones:
--    complete, takeover, decisions, releases) are never cached and never announced, so the
--    hot path pays one NULL test per updated row and no NOTIFY. The retention pruner
--    (carmy.prune_expired, replaced below with one change: it sets carmy.pruning while it
--    deletes records) is not announced either: it deletes many rows, and no replica replays a
--    copy past its own retention.
-- 2. A taken-over attempt that hands its execution back (its tool did nothing this time, so
--    the execution reads interrupted again) writes an audit row with the new action hand_back.
--    The check is widened; no existing row is rewritten.

-- ---------------------------------------------------------------------------------------------
-- Changed finished records.
-- ---------------------------------------------------------------------------------------------

CREATE FUNCTION carmy.notify_record_changed() RETURNS trigger
    LANGUAGE plpgsql
AS $$
DECLARE
    -- Empty: every record may have changed (a TRUNCATE), drop every copy.
    payload text := '';
BEGIN
    IF TG_OP <> 'TRUNCATE' THEN
        -- A JSON array of strings: unambiguous whatever the identity holds.
        payload := json_build_array(OLD.principal, OLD.session_id, OLD.request_id)::text;
    END IF;
    -- NOTIFY refuses a payload of 8000 bytes or more (only a hand-written identity can be that
    -- long): the empty payload then tells every replica to drop all its copies.
    IF octet_length(payload) >= 8000 THEN
        payload := '';
    END IF;
    PERFORM pg_notify('carmy_changed', payload);
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION carmy.notify_record_changed() IS
    'Trigger of carmy.reservations (reservations_finished_changed, reservations_truncated): a '
    'finished row was updated or deleted, or the table truncated, so replicas drop their cached '
    'copies (docs/semantics.md §8.4, §12). Notifies channel carmy_changed with the row''s '
    'identity before the change as a JSON array ["<principal>", "<session_id>", "<request_id>"], '
    'or an empty payload (drop every copy) after a TRUNCATE or when the identity would not fit '
    'in a notification. Delivered when the transaction commits, once per payload.';

CREATE TRIGGER reservations_finished_changed
    AFTER UPDATE OR DELETE ON carmy.reservations
    FOR EACH ROW
    WHEN (OLD.outcome IS NOT NULL
          AND current_setting('carmy.pruning', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION carmy.notify_record_changed();

COMMENT ON TRIGGER reservations_finished_changed ON carmy.reservations IS
    'Announces an update or deletion of a finished row (one with an outcome) on channel '
    'carmy_changed (carmy.notify_record_changed), so replicas'' replay caches drop their copy. '
    'Rows without an outcome (running) are never cached: not announced. Skipped while the '
    'transaction-local setting carmy.pruning is on (carmy.prune_expired deleting expired rows).';

CREATE TRIGGER reservations_truncated
    AFTER TRUNCATE ON carmy.reservations
    FOR EACH STATEMENT
    EXECUTE FUNCTION carmy.notify_record_changed();

COMMENT ON TRIGGER reservations_truncated ON carmy.reservations IS
    'Announces a TRUNCATE on channel carmy_changed with an empty payload '
    '(carmy.notify_record_changed): replicas drop every cached copy.';

-- ---------------------------------------------------------------------------------------------
-- The pruner, as in V9 except that its deletion of records is not announced.
-- ---------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION carmy.prune_expired(
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
    -- The caller's value, put back at the end: a DBA's own DELETE later in the same
    -- transaction is announced again.
    was_pruning text := current_setting('carmy.pruning', true);
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

    -- Pruned records are not announced on carmy_changed (carmy.notify_record_changed): no
    -- replica replays a copy past its retention.
    PERFORM set_config('carmy.pruning', 'on', true);

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
    PERFORM set_config('carmy.pruning', coalesce(was_pruning, ''), true);

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
    'records it deletes are not announced on carmy_changed (it sets the transaction-local '
    'carmy.pruning while it deletes them): a replica never replays a copy past its own '
    'CARMY_RETENTION, but one pruned with a shorter retention than the gateways'' may be '
    'replayed from a replica''s cache for up to CARMY_REPLAY_CACHE_TTL_MS. The gateway calls it '
    'with CARMY_RETENTION; by hand: SELECT * FROM carmy.prune_expired(interval ''7 days'');';

-- ---------------------------------------------------------------------------------------------
-- Audit of a hand-back.
-- ---------------------------------------------------------------------------------------------

ALTER TABLE carmy.audit_log DROP CONSTRAINT audit_log_action_check;

ALTER TABLE carmy.audit_log ADD CONSTRAINT audit_log_action_check
    CHECK (action IN ('resolve', 'release', 'cancel', 'takeover', 'late_arrival', 'hand_back'));

COMMENT ON COLUMN carmy.audit_log.action IS
    'resolve (an outcome recorded by a decision), release (the identity freed), cancel, '
    'takeover, late_arrival (an owner''s outcome that arrived after a decision; the effect may '
    'have happened twice), hand_back (a taken-over attempt whose tool did nothing gave the '
    'execution back: it reads interrupted again, an earlier attempt''s effect still unknown).';

COMMENT ON TABLE carmy.audit_log IS
    'One row per decision or event that changed (or tried to change) an execution outside the '
    'normal reserve/complete path: resolve, release, cancel, takeover, late_arrival, hand_back '
    '(docs/semantics.md §12). Written in the same transaction as the change it describes. Rows '
    'are never updated; carmy.prune_expired deletes a row once it is older than the retention '
    'and its execution holds no carmy.reservations row.';
