-- Decisions on uncertain executions (docs/semantics.md §12): resolve and release, their audit
-- trail, and the history of released executions. The functions carmy.resolve_execution and
-- carmy.release_execution are the one implementation: the gateway's API calls them, and so does
-- a DBA. Each decides in one compare-and-set statement, so of any number of concurrent
-- decisions on one execution exactly one wins.

-- ---------------------------------------------------------------------------------------------
-- Audit log.
-- ---------------------------------------------------------------------------------------------

CREATE TABLE carmy.audit_log (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    actor        text        NOT NULL,
    at           timestamptz NOT NULL DEFAULT now(),
    execution_id text        NOT NULL,
    action       text        NOT NULL
        CONSTRAINT audit_log_action_check
        CHECK (action IN ('resolve', 'release', 'cancel', 'takeover', 'late_arrival')),
    before       jsonb,
    after        jsonb,
    note         text
);

CREATE INDEX audit_log_execution_id_idx ON carmy.audit_log (execution_id, id);

COMMENT ON TABLE carmy.audit_log IS
    'One row per decision or event that changed (or tried to change) an execution outside the '
    'normal reserve/complete path: resolve, release, cancel, takeover, late_arrival '
    '(docs/semantics.md §12). Written in the same transaction as the change it describes. Rows '
    'are never updated.';
COMMENT ON COLUMN carmy.audit_log.id IS 'Order of writing; later rows have larger ids.';
COMMENT ON COLUMN carmy.audit_log.actor IS
    'Who acted: the owning principal''s name, operator:<name> for an operator key '
    '(CARMY_OPERATOR_KEYS), or the actor a DBA passed to carmy.resolve_execution / '
    'carmy.release_execution.';
COMMENT ON COLUMN carmy.audit_log.at IS 'When (database clock).';
COMMENT ON COLUMN carmy.audit_log.execution_id IS
    'The execution acted on (carmy.reservations.execution_id, or '
    'carmy.released_executions.execution_id once released). Not a foreign key: the row outlives '
    'the reservation.';
COMMENT ON COLUMN carmy.audit_log.action IS
    'resolve (an outcome recorded by a decision), release (the identity freed), cancel, '
    'takeover, late_arrival (an owner''s outcome that arrived after a decision; the effect may '
    'have happened twice).';
COMMENT ON COLUMN carmy.audit_log.before IS
    'The execution before, e.g. {"state": "running", "in_flight_state": "interrupted", '
    '"owner_instance": "inst_..."}.';
COMMENT ON COLUMN carmy.audit_log.after IS
    'The execution after, e.g. {"state": "completed", "outcome": {...}} or {"state": "released"}.';
COMMENT ON COLUMN carmy.audit_log.note IS 'The decision''s note: what reconciliation found.';

-- ---------------------------------------------------------------------------------------------
-- Released executions.
-- ---------------------------------------------------------------------------------------------

CREATE TABLE carmy.released_executions (
    execution_id        text        PRIMARY KEY,
    principal           text        NOT NULL,
    session_id          text        NOT NULL,
    request_id          text        NOT NULL,
    tool                text        NOT NULL,
    fingerprint         text        NOT NULL,
    fingerprint_version text        NOT NULL,
    owner_instance      text,
    in_flight_state     text        NOT NULL
        CONSTRAINT released_executions_in_flight_state_check
        CHECK (in_flight_state IN ('running', 'interrupted')),
    created_at          timestamptz NOT NULL,
    started_at          timestamptz,
    released_at         timestamptz NOT NULL DEFAULT now(),
    released_by         text        NOT NULL,
    note                text        NOT NULL
);

CREATE INDEX released_executions_identity_idx
    ON carmy.released_executions (principal, session_id, request_id);

COMMENT ON TABLE carmy.released_executions IS
    'Executions whose identity was freed by carmy.release_execution (docs/semantics.md §12): the '
    'reservation row moved here, so the next attempt with the same identity runs the tool again '
    'while the trace of this one (and its note) stays. One identity may appear several times.';
COMMENT ON COLUMN carmy.released_executions.execution_id IS 'See carmy.reservations.execution_id.';
COMMENT ON COLUMN carmy.released_executions.principal IS 'See carmy.reservations.principal.';
COMMENT ON COLUMN carmy.released_executions.session_id IS 'See carmy.reservations.session_id.';
COMMENT ON COLUMN carmy.released_executions.request_id IS 'See carmy.reservations.request_id.';
COMMENT ON COLUMN carmy.released_executions.tool IS 'See carmy.reservations.tool.';
COMMENT ON COLUMN carmy.released_executions.fingerprint IS 'See carmy.reservations.fingerprint.';
COMMENT ON COLUMN carmy.released_executions.fingerprint_version IS
    'See carmy.reservations.fingerprint_version.';
COMMENT ON COLUMN carmy.released_executions.owner_instance IS
    'See carmy.reservations.owner_instance: the process that ran (or may still run) the tool.';
COMMENT ON COLUMN carmy.released_executions.in_flight_state IS
    'carmy.in_flight_state(owner_instance) when released: interrupted, or running when the '
    'release was forced while the owner was alive.';
COMMENT ON COLUMN carmy.released_executions.created_at IS 'See carmy.reservations.created_at.';
COMMENT ON COLUMN carmy.released_executions.started_at IS 'See carmy.reservations.started_at.';
COMMENT ON COLUMN carmy.released_executions.released_at IS 'When it was released (database clock).';
COMMENT ON COLUMN carmy.released_executions.released_by IS 'Who released it (see carmy.audit_log.actor).';
COMMENT ON COLUMN carmy.released_executions.note IS 'Why it was released.';

-- ---------------------------------------------------------------------------------------------
-- Helpers.
-- ---------------------------------------------------------------------------------------------

CREATE FUNCTION carmy.record_timestamp(at timestamptz) RETURNS text
    LANGUAGE sql
    IMMUTABLE
    PARALLEL SAFE
AS $$
    SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

COMMENT ON FUNCTION carmy.record_timestamp(timestamptz) IS
    'A timestamp as records write it: UTC, RFC 3339 with milliseconds, e.g. '
    '2026-01-02T03:04:05.678Z.';

CREATE FUNCTION carmy.decision_refused(code text, message text, hint text) RETURNS void
    LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, HINT = coalesce(hint, '');
END
$$;

COMMENT ON FUNCTION carmy.decision_refused(text, text, text) IS
    'Raises the error of a refused decision. SQLSTATEs: CR400 invalid arguments, CR404 no such '
    'execution, CR409 already decided (it has an outcome or was released), CR412 still running '
    '(its owner holds a live lease; pass force => true to decide anyway). Nothing was changed.';

-- ---------------------------------------------------------------------------------------------
-- Why a decision matched no row: raises the matching refusal.
-- ---------------------------------------------------------------------------------------------

CREATE FUNCTION carmy.explain_undecided(execution_id text, principal text) RETURNS void
    LANGUAGE plpgsql
AS $$
#variable_conflict use_column
BEGIN
    IF EXISTS (SELECT 1 FROM carmy.reservations r
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

COMMENT ON FUNCTION carmy.explain_undecided(text, text) IS
    'Used by carmy.resolve_execution and carmy.release_execution after their compare-and-set '
    'matched no row: raises CR409, CR412 or CR404 (see carmy.decision_refused).';

-- ---------------------------------------------------------------------------------------------
-- Resolve.
-- ---------------------------------------------------------------------------------------------

CREATE FUNCTION carmy.resolve_execution(
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
    record_data jsonb := CASE WHEN status = 'completed' THEN coalesce(data, 'null') ELSE 'null' END;
    record_err  jsonb := CASE WHEN status = 'completed' THEN NULL ELSE error END;
BEGIN
    IF note IS NULL OR btrim(note) = '' THEN
        PERFORM carmy.decision_refused('CR400', 'note is required',
            'Say what reconciliation found, e.g. ''order 17 exists; created by this call''.');
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

    -- The compare-and-set: only a running row, only while its owner's lease has lapsed
    -- (unless forced). A concurrent decision waits for this row's lock, then finds it finished.
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
      AND r.state = 'running'
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
            jsonb_build_object('state', 'running', 'in_flight_state', decided.was,
                               'owner_instance', decided.owner_instance),
            jsonb_build_object('state', decided.state, 'outcome', decided.outcome::jsonb),
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
    'record then replays with resolution {by, at, note}. Only an interrupted execution, or a '
    'running one with force => true; principal limits it to that principal''s execution. Returns '
    'the recorded outcome. Raises CR400, CR404, CR409 or CR412 and changes nothing otherwise. '
    'Notifies carmy_decided with the execution id.';

-- ---------------------------------------------------------------------------------------------
-- Release.
-- ---------------------------------------------------------------------------------------------

CREATE FUNCTION carmy.release_execution(
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
    IF actor IS NULL OR btrim(actor) = '' THEN
        PERFORM carmy.decision_refused('CR400', 'actor is required', 'Name who decides.');
    END IF;

    -- The compare-and-set, as in carmy.resolve_execution.
    DELETE FROM carmy.reservations r
    WHERE r.execution_id = release_execution.execution_id
      AND r.state = 'running'
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
            jsonb_build_object('state', 'running', 'in_flight_state', gone.was,
                               'owner_instance', gone.owner_instance),
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
    '''dba:alice''). Only an interrupted execution, or a running one with force => true; '
    'principal limits it to that principal''s execution. Returns a JSON summary of the released '
    'execution. Raises CR400, CR404, CR409 or CR412 and changes nothing otherwise. Notifies '
    'carmy_decided with the execution id.';

-- ---------------------------------------------------------------------------------------------
-- The reservations table's comment no longer asks for hand edits.
-- ---------------------------------------------------------------------------------------------

COMMENT ON TABLE carmy.reservations IS
    'One row per call identity (principal, session_id, request_id), kept as three separate '
    'values (docs/semantics.md §2). Inserted as running before the tool runs (INSERT ... ON '
    'CONFLICT DO NOTHING); updated once, by the execution that reserved it, to a finished state '
    'with the recorded outcome (§3, §4). A finished row is replayed to every later attempt with '
    'the same fingerprint. To settle an interrupted execution, never edit rows by hand: call '
    'carmy.resolve_execution (record what reconciliation found) or carmy.release_execution (let '
    'the next attempt run again); both keep an audit row in carmy.audit_log (§12).';
