-- One set of limits for every door (docs/semantics.md §12, rules 5 and 6): the decision
-- functions refuse what the API refuses (a note over 4096 bytes; data or an error over
-- 1048576 bytes of JSON, nested deeper than a record can be read back, or using a member name
-- the gateway's JSON library reserves), so no decision writes a record that cannot be replayed.
-- A record that is damaged anyway (a hand edit) can be decided again with force => true.
-- Values written into jsonb columns go through carmy.jsonb_or_text, which keeps any text jsonb
-- refuses (U+0000, a number beyond numeric) as a JSON string instead of failing the write.
-- carmy.prune_expired refuses a retention under one hour unless short_retention_ok => true.

-- ---------------------------------------------------------------------------------------------
-- Lossless jsonb.
-- ---------------------------------------------------------------------------------------------

CREATE FUNCTION carmy.jsonb_or_text(value text) RETURNS jsonb
    LANGUAGE plpgsql
    IMMUTABLE
    PARALLEL SAFE
AS $$
BEGIN
    RETURN value::jsonb;
EXCEPTION
    -- Class 22 (data exception): U+0000 (22P05), a number beyond numeric (22003), text that
    -- is not JSON (22P02). The text itself is kept.
    WHEN data_exception THEN
        RETURN to_jsonb(value);
END
$$;

COMMENT ON FUNCTION carmy.jsonb_or_text(text) IS
    'JSON text as jsonb when jsonb can hold it, else the text itself as a JSON string (U+0000, a '
    'number beyond numeric''s range or precision, text that is not JSON): a write into a jsonb '
    'column never fails because of the value (docs/semantics.md §12).';

-- ---------------------------------------------------------------------------------------------
-- What the gateway can read back.
-- ---------------------------------------------------------------------------------------------

CREATE FUNCTION carmy.json_problem(value jsonb, levels integer) RETURNS text
    LANGUAGE plpgsql
    IMMUTABLE
    PARALLEL SAFE
AS $$
DECLARE
    member record;
    problem text;
BEGIN
    IF jsonb_typeof(value) NOT IN ('object', 'array') THEN
        RETURN NULL;
    END IF;
    IF levels < 1 THEN
        RETURN 'nested too deep';
    END IF;
    IF jsonb_typeof(value) = 'object' THEN
        FOR member IN SELECT e.key, e.value FROM jsonb_each(value) AS e LOOP
            IF member.key IN ('$serde_json::private::Number', '$serde_json::private::RawValue') THEN
                RETURN format('uses the reserved member name %s', member.key);
            END IF;
            problem := carmy.json_problem(member.value, levels - 1);
            IF problem IS NOT NULL THEN
                RETURN problem;
            END IF;
        END LOOP;
    ELSE
        FOR member IN SELECT e.value FROM jsonb_array_elements(value) AS e LOOP
            problem := carmy.json_problem(member.value, levels - 1);
            IF problem IS NOT NULL THEN
                RETURN problem;
            END IF;
        END LOOP;
    END IF;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION carmy.json_problem(jsonb, integer) IS
    'Why the gateway could not read value back inside a record, or NULL: more than levels '
    'nested objects and arrays (''nested too deep''), or a member name its JSON library '
    'reserves ($serde_json::private::Number, $serde_json::private::RawValue).';

CREATE FUNCTION carmy.decision_value_refused(field text, value jsonb) RETURNS void
    LANGUAGE plpgsql
AS $$
DECLARE
    problem text;
BEGIN
    IF value IS NULL THEN
        RETURN;
    END IF;
    IF octet_length(value::text) > 1048576 THEN
        PERFORM carmy.decision_refused('CR400',
            format('%s is larger than 1048576 bytes of JSON', field), NULL);
    END IF;
    -- A record is one object; data and error sit one level inside it, and the gateway's JSON
    -- library reads at most 127 nested levels.
    problem := carmy.json_problem(value, 126);
    IF problem = 'nested too deep' THEN
        PERFORM carmy.decision_refused('CR400',
            format('%s is nested deeper than 126 levels', field), NULL);
    ELSIF problem IS NOT NULL THEN
        PERFORM carmy.decision_refused('CR400', format('%s %s', field, problem), NULL);
    END IF;
END
$$;

COMMENT ON FUNCTION carmy.decision_value_refused(text, jsonb) IS
    'Raises CR400 naming field when a decision''s data or error could not be replayed: over '
    '1048576 bytes of JSON (as PostgreSQL writes it), nested deeper than 126 levels, or using a '
    'reserved member name (carmy.json_problem). The API refuses the same with the same words.';

CREATE FUNCTION carmy.record_damaged(outcome text, execution_id text, state text)
    RETURNS boolean
    LANGUAGE plpgsql
    IMMUTABLE
    PARALLEL SAFE
AS $$
BEGIN
    IF state = 'running' THEN
        RETURN false;
    END IF;
    IF outcome IS NULL OR NOT carmy.outcome_is_record(outcome, execution_id, state) THEN
        RETURN true;
    END IF;
    RETURN carmy.json_problem(replace(outcome, '\u0000', '\ufffd')::jsonb, 127) IS NOT NULL;
EXCEPTION
    WHEN data_exception THEN
        -- Not JSON, or a number jsonb cannot hold: the gateway may still read the latter, but
        -- a DBA who forces a decision on it has looked.
        RETURN true;
END
$$;

COMMENT ON FUNCTION carmy.record_damaged(text, text, text) IS
    'Whether a finished row''s outcome cannot be replayed by the gateway (RECORD_DAMAGED, '
    'docs/semantics.md §5): not a record of its execution and state, or nested too deep, or '
    'using a reserved member name. Such a row can be decided again with force => true.';

-- ---------------------------------------------------------------------------------------------
-- Why a decision matched no row, now naming damaged records.
-- ---------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION carmy.explain_undecided(execution_id text, principal text) RETURNS void
    LANGUAGE plpgsql
AS $$
#variable_conflict use_column
BEGIN
    IF EXISTS (SELECT 1 FROM carmy.reservations r
               WHERE r.execution_id = explain_undecided.execution_id
                 AND (explain_undecided.principal IS NULL
                      OR r.principal = explain_undecided.principal)
                 AND carmy.record_damaged(r.outcome, r.execution_id, r.state)) THEN
        PERFORM carmy.decision_refused('CR409',
            format('execution %s has a damaged outcome', execution_id),
            'Pass force => true to record a decision in its place; the damaged outcome is kept in the audit row.');
    ELSIF EXISTS (SELECT 1 FROM carmy.reservations r
                  WHERE r.execution_id = explain_undecided.execution_id
                    AND (explain_undecided.principal IS NULL
                         OR r.principal = explain_undecided.principal)
                    AND r.state <> 'running')
       OR EXISTS (SELECT 1 FROM carmy.released_executions h
                  WHERE h.execution_id = explain_undecided.execution_id
                    AND (explain_undecided.principal IS NULL
                         OR h.principal = explain_undecided.principal)) THEN
        PERFORM carmy.decision_refused('CR409',
            format('execution %s already has an outcome or was released', execution_id),
            'Nothing was changed. Read it with SELECT * FROM carmy.reservations WHERE execution_id = ...');
    ELSIF EXISTS (SELECT 1 FROM carmy.reservations r
                  WHERE r.execution_id = explain_undecided.execution_id
                    AND (explain_undecided.principal IS NULL
                         OR r.principal = explain_undecided.principal)) THEN
        PERFORM carmy.decision_refused('CR412',
            format('execution %s is still running: its owner holds a live lease', execution_id),
            'Wait for its outcome, or check that the owner is gone and pass force => true.');
    ELSE
        PERFORM carmy.decision_refused('CR404',
            format('no execution %s', execution_id), NULL);
    END IF;
END
$$;

-- ---------------------------------------------------------------------------------------------
-- Resolve, with the API's limits and damaged records.
-- ---------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION carmy.resolve_execution(
    execution_id text,
    status       text,
    data         jsonb,
    error        jsonb,
    note         text,
    actor        text,
    force        boolean DEFAULT false,
    principal    text    DEFAULT NULL
) RETURNS text
    LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    decided     record;
    prior       record;
    record_data jsonb := CASE WHEN status = 'completed' THEN coalesce(data, 'null') ELSE 'null' END;
    record_err  jsonb := CASE WHEN status = 'completed' THEN NULL ELSE error END;
BEGIN
    IF note IS NULL OR btrim(note) = '' THEN
        PERFORM carmy.decision_refused('CR400', 'note is required',
            'Say what reconciliation found, e.g. ''order 17 exists; created by this call''.');
    END IF;
    IF octet_length(note) > 4096 THEN
        PERFORM carmy.decision_refused('CR400', 'note is longer than 4096 bytes', NULL);
    END IF;
    IF actor IS NULL OR btrim(actor) = '' THEN
        PERFORM carmy.decision_refused('CR400', 'actor is required', 'Name who decides.');
    END IF;
    IF status IS NULL OR status NOT IN ('completed', 'failed', 'timed_out', 'cancelled') THEN
        PERFORM carmy.decision_refused('CR400',
            'status must be one of completed, failed, timed_out, cancelled', NULL);
    END IF;
    IF status = 'completed' AND error IS NOT NULL AND error <> 'null' THEN
        PERFORM carmy.decision_refused('CR400', 'status completed takes data and no error', NULL);
    END IF;
    IF status <> 'completed' AND (jsonb_typeof(error) IS DISTINCT FROM 'object'
            OR jsonb_typeof(error -> 'code') IS DISTINCT FROM 'string'
            OR btrim(error ->> 'code') = ''
            OR jsonb_typeof(error -> 'message') IS DISTINCT FROM 'string') THEN
        PERFORM carmy.decision_refused('CR400',
            format('status %s needs error {"code": "...", "message": "..."}', status), NULL);
    END IF;
    PERFORM carmy.decision_value_refused('data', record_data);
    PERFORM carmy.decision_value_refused('error', record_err);

    -- The row as it was, locked: a concurrent decision waits here, then finds it decided.
    SELECT r.state, r.outcome INTO prior FROM carmy.reservations r
    WHERE r.execution_id = resolve_execution.execution_id
      AND (resolve_execution.principal IS NULL OR r.principal = resolve_execution.principal)
    FOR UPDATE;

    -- The compare-and-set: only a running row (or, forced, a damaged one), only while its
    -- owner's lease has lapsed (unless forced).
    UPDATE carmy.reservations r
    SET state = resolve_execution.status,
        outcome = json_build_object(
            'execution_id', r.execution_id,
            'status', resolve_execution.status,
            'data', record_data,
            'error', record_err,
            'tool', r.tool,
            'request_id', r.request_id,
            'session_id', r.session_id,
            'started_at', carmy.record_timestamp(coalesce(r.started_at, r.created_at)),
            'finished_at', carmy.record_timestamp(now()),
            'resolution', json_build_object(
                'by', resolve_execution.actor,
                'at', carmy.record_timestamp(now()),
                'note', resolve_execution.note))::text,
        error_code = record_err ->> 'code',
        finished_at = now()
    WHERE r.execution_id = resolve_execution.execution_id
      AND (r.state = 'running'
           OR (resolve_execution.force AND carmy.record_damaged(r.outcome, r.execution_id, r.state)))
      AND (resolve_execution.principal IS NULL OR r.principal = resolve_execution.principal)
      AND (resolve_execution.force OR carmy.in_flight_state(r.owner_instance) = 'interrupted')
    RETURNING r.execution_id, r.state, r.outcome, r.owner_instance,
              carmy.in_flight_state(r.owner_instance) AS was
    INTO decided;

    IF NOT FOUND THEN
        PERFORM carmy.explain_undecided(execution_id, principal);
    END IF;

    INSERT INTO carmy.audit_log (actor, execution_id, action, before, after, note)
    VALUES (resolve_execution.actor, decided.execution_id, 'resolve',
            CASE WHEN prior.state = 'running'
                 THEN jsonb_build_object('state', 'running', 'in_flight_state', decided.was,
                                         'owner_instance', decided.owner_instance)
                 ELSE jsonb_build_object('state', prior.state, 'damaged', true,
                                         'outcome', carmy.jsonb_or_text(prior.outcome),
                                         'owner_instance', decided.owner_instance)
            END,
            jsonb_build_object('state', decided.state,
                               'outcome', carmy.jsonb_or_text(decided.outcome)),
            resolve_execution.note);
    PERFORM pg_notify('carmy_decided', decided.execution_id);
    RETURN decided.outcome;
END
$$;

COMMENT ON FUNCTION carmy.resolve_execution(text, text, jsonb, jsonb, text, text, boolean, text) IS
    'Records the outcome that reconciliation found for an execution without one '
    '(docs/semantics.md §12), with an audit row, in one compare-and-set: '
    'SELECT carmy.resolve_execution(''exec_...'', ''completed'', ''{"order_id": 17}'', NULL, '
    '''order 17 exists'', ''dba:alice''). status is completed (data = the value, error NULL) or '
    'failed / timed_out / cancelled (error = {"code": ..., "message": ...}, data ignored). The '
    'note is at most 4096 bytes; data and error at most 1048576 bytes of JSON, nested at most 126 '
    'levels, without the reserved member names $serde_json::private::Number and '
    '$serde_json::private::RawValue. The record then replays with resolution {by, at, note}. '
    'Only an interrupted execution, or a running one with force => true, or with force => true a '
    'finished one whose outcome is damaged (carmy.record_damaged; the audit row keeps the damaged '
    'outcome); principal limits it to that principal''s execution. Returns the recorded outcome. '
    'Raises CR400, CR404, CR409 or CR412 and changes nothing otherwise. Notifies carmy_decided '
    'with the execution id.';

-- ---------------------------------------------------------------------------------------------
-- Release, with the API's limits and damaged records.
-- ---------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION carmy.release_execution(
    execution_id text,
    note         text,
    actor        text,
    force        boolean DEFAULT false,
    principal    text    DEFAULT NULL
) RETURNS text
    LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    gone record;
    kept carmy.released_executions%ROWTYPE;
BEGIN
    IF note IS NULL OR btrim(note) = '' THEN
        PERFORM carmy.decision_refused('CR400', 'note is required',
            'Say why the identity may run again, e.g. ''no order found; safe to retry''.');
    END IF;
    IF octet_length(note) > 4096 THEN
        PERFORM carmy.decision_refused('CR400', 'note is longer than 4096 bytes', NULL);
    END IF;
    IF actor IS NULL OR btrim(actor) = '' THEN
        PERFORM carmy.decision_refused('CR400', 'actor is required', 'Name who decides.');
    END IF;

    -- The compare-and-set, as in carmy.resolve_execution.
    DELETE FROM carmy.reservations r
    WHERE r.execution_id = release_execution.execution_id
      AND (r.state = 'running'
           OR (release_execution.force AND carmy.record_damaged(r.outcome, r.execution_id, r.state)))
      AND (release_execution.principal IS NULL OR r.principal = release_execution.principal)
      AND (release_execution.force OR carmy.in_flight_state(r.owner_instance) = 'interrupted')
    RETURNING r.*, carmy.in_flight_state(r.owner_instance) AS was INTO gone;

    IF NOT FOUND THEN
        PERFORM carmy.explain_undecided(execution_id, principal);
    END IF;

    INSERT INTO carmy.released_executions
        (execution_id, principal, session_id, request_id, tool, fingerprint,
         fingerprint_version, owner_instance, in_flight_state, created_at, started_at,
         released_by, note)
    VALUES (gone.execution_id, gone.principal, gone.session_id, gone.request_id, gone.tool,
            gone.fingerprint, gone.fingerprint_version, gone.owner_instance, gone.was,
            gone.created_at, gone.started_at, release_execution.actor, release_execution.note)
    RETURNING * INTO kept;
    INSERT INTO carmy.audit_log (actor, execution_id, action, before, after, note)
    VALUES (release_execution.actor, gone.execution_id, 'release',
            CASE WHEN gone.state = 'running'
                 THEN jsonb_build_object('state', 'running', 'in_flight_state', gone.was,
                                         'owner_instance', gone.owner_instance)
                 ELSE jsonb_build_object('state', gone.state, 'damaged', true,
                                         'outcome', carmy.jsonb_or_text(gone.outcome),
                                         'owner_instance', gone.owner_instance)
            END,
            jsonb_build_object('state', 'released'),
            release_execution.note);
    PERFORM pg_notify('carmy_decided', gone.execution_id);
    RETURN json_build_object(
        'execution_id', kept.execution_id,
        'principal', kept.principal,
        'session_id', kept.session_id,
        'request_id', kept.request_id,
        'tool', kept.tool,
        'in_flight_state', kept.in_flight_state,
        'by', kept.released_by,
        'at', carmy.record_timestamp(kept.released_at),
        'note', kept.note)::text;
END
$$;

COMMENT ON FUNCTION carmy.release_execution(text, text, text, boolean, text) IS
    'Frees the identity of an execution without an outcome so that the next attempt runs the '
    'tool again (docs/semantics.md §12): the reservation row moves to '
    'carmy.released_executions and an audit row is written, in one compare-and-set: '
    'SELECT carmy.release_execution(''exec_...'', ''no order found; safe to retry'', '
    '''dba:alice''). The note is at most 4096 bytes. Only an interrupted execution, or a running '
    'one with force => true, or with force => true a finished one whose outcome is damaged '
    '(carmy.record_damaged; the audit row keeps it); principal limits it to that principal''s '
    'execution. Returns a JSON summary of the released execution. Raises CR400, CR404, CR409 or '
    'CR412 and changes nothing otherwise. Notifies carmy_decided with the execution id.';

-- ---------------------------------------------------------------------------------------------
-- Pruning refuses a short retention unless told.
-- ---------------------------------------------------------------------------------------------

-- The step is V11's function under a new name (its body unchanged but for its own name); the
-- name carmy.prune_expired goes to the checking function below.
DROP FUNCTION carmy.prune_expired(interval, integer);

CREATE FUNCTION carmy.prune_expired_step(
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
      AND carmy.record_expired(r.state, r.finished_at, r.created_at, prune_expired_step.retention);
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


COMMENT ON FUNCTION carmy.prune_expired_step(interval, integer) IS
    'The pruning step of carmy.prune_expired, without its check of the retention. Call '
    'carmy.prune_expired instead.';

CREATE FUNCTION carmy.prune_expired(
    retention          interval,
    batch_size         integer DEFAULT 1000,
    short_retention_ok boolean DEFAULT false,
    OUT locked    boolean,
    OUT records   bigint,
    OUT released  bigint,
    OUT audit     bigint,
    OUT instances bigint
)
    LANGUAGE plpgsql
AS $$
BEGIN
    IF retention IS NOT NULL AND retention < interval '1 hour'
            AND NOT coalesce(short_retention_ok, false) THEN
        PERFORM carmy.decision_refused('CR400',
            format('retention %s is under one hour: every record finished longer ago than that '
                   'would be deleted', retention),
            'A retention of 0 means keep forever to the gateway: do not prune. To prune with a '
            'retention under one hour anyway, pass short_retention_ok => true.');
    END IF;
    SELECT s.locked, s.records, s.released, s.audit, s.instances
    INTO locked, records, released, audit, instances
    FROM carmy.prune_expired_step(retention, batch_size) AS s;
END
$$;

COMMENT ON FUNCTION carmy.prune_expired(interval, integer, boolean) IS
    'One step of retention (docs/semantics.md §12), as carmy.prune_expired_step (at most '
    'batch_size rows of each kind, one session at a time), after checking '
    'the retention: under one hour (interval ''0'' included, which the gateway reads as keep '
    'forever) is refused with CR400 unless short_retention_ok => true. The gateway passes true '
    'for its own CARMY_RETENTION.';

COMMENT ON COLUMN carmy.late_arrivals.outcome IS
    'The late outcome''s record, as jsonb; a record jsonb cannot hold (U+0000, a number beyond '
    'numeric) is kept whole as a JSON string of its text (carmy.jsonb_or_text).';
