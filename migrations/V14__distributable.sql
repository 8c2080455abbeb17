-- A schema that Citus can distribute by principal and that plain PostgreSQL runs the same
-- (docs/semantics.md §15, docs/scale.md). Nothing here needs Citus; distributing is a separate,
-- explicit step (`carmy-gateway migrate --distribute citus`).
--
-- 1. Every unique key of a per-identity table includes principal, and audit_log carries it:
--    - reservations: UNIQUE (execution_id) becomes UNIQUE (execution_id, principal). Execution
--      ids stay unique by construction (exec_ and 32 random hex digits); the index still leads
--      with execution_id, so a lookup by execution id alone reads it as before (on Citus that
--      lookup is a read of every shard).
--    - released_executions: PRIMARY KEY (execution_id) becomes (execution_id, principal).
--    - audit_log: a principal column (the principal of the execution acted on), filled in for
--      existing rows; PRIMARY KEY (id) becomes (id, principal).
-- 2. The in-flight rule is a semi-join with carmy.instances, written where it is used, instead
--    of the function carmy.in_flight_state called per row (Citus cannot read a reference table
--    from a function called inside a shard's query). The function is dropped.
-- 3. No trigger on a per-identity table. The gateway announces what the triggers announced:
--    carmy_recorded after it records an outcome someone waits for, carmy_changed after it
--    replaces an expired finished record; the decision functions announce a changed damaged
--    record themselves. A DBA who edits or deletes a finished row by hand calls
--    carmy.announce_change(...) (below). A late arrival's contradicts_decision is computed by
--    the statement that writes it.
-- 4. The decision functions find an execution's principal first and then work on that one
--    row, with no stable function over a column in an UPDATE or DELETE; the pruner deletes by
--    key instead of by ctid under FOR UPDATE. In an UPDATE's or DELETE's condition the lease
--    semi-join stays inside a CASE: a bare NOT EXISTS becomes an anti-join, whose answer
--    PostgreSQL reuses when it rechecks a row a concurrent transaction changed.

-- ---------------------------------------------------------------------------------------------
-- Triggers.
-- ---------------------------------------------------------------------------------------------

DROP TRIGGER reservations_outcome_recorded ON carmy.reservations;
DROP TRIGGER reservations_finished_changed ON carmy.reservations;
DROP TRIGGER reservations_truncated ON carmy.reservations;
DROP TRIGGER audit_log_late_arrival_contradiction ON carmy.audit_log;
DROP FUNCTION carmy.notify_outcome_waiters();
DROP FUNCTION carmy.notify_record_changed();
DROP FUNCTION carmy.flag_contradicting_late_arrival();

CREATE FUNCTION carmy.announce_change(
    principal  text DEFAULT NULL,
    session_id text DEFAULT NULL,
    request_id text DEFAULT NULL
) RETURNS void
    LANGUAGE plpgsql
AS $$
DECLARE
    -- Empty: every record may have changed, every replica drops every copy.
    payload text := '';
BEGIN
    IF principal IS NOT NULL AND session_id IS NOT NULL AND request_id IS NOT NULL THEN
        payload := json_build_array(principal, session_id, request_id)::text;
    END IF;
    -- NOTIFY refuses a payload of 8000 bytes or more: drop every copy instead.
    IF octet_length(payload) >= 8000 THEN
        payload := '';
    END IF;
    PERFORM pg_notify('carmy_changed', payload);
END
$$;

COMMENT ON FUNCTION carmy.announce_change(text, text, text) IS
    'Tells every gateway replica to drop its cached copy of a finished record (channel '
    'carmy_changed, docs/semantics.md §8.4): call it in the transaction that updates or deletes a '
    'finished row of carmy.reservations by hand, with the row''s principal, session_id and '
    'request_id, or with no arguments (every copy) after a bulk edit or a TRUNCATE. Delivered '
    'when the transaction commits. Without it a replica may replay the old record until its '
    'replay cache''s time to live (CARMY_REPLAY_CACHE_TTL_MS) ends.';

-- ---------------------------------------------------------------------------------------------
-- Unique keys with principal.
-- ---------------------------------------------------------------------------------------------

ALTER TABLE carmy.reservations DROP CONSTRAINT reservations_execution_id_key;
ALTER TABLE carmy.reservations
    ADD CONSTRAINT reservations_execution_id_key UNIQUE (execution_id, principal);

COMMENT ON CONSTRAINT reservations_execution_id_key ON carmy.reservations IS
    'Execution ids are unique by construction (exec_ and 32 random hex digits); the key includes '
    'principal so that Citus can distribute the table by it. Leading with execution_id, it also '
    'serves a lookup by execution id alone (on Citus, a read of every shard).';

ALTER TABLE carmy.released_executions DROP CONSTRAINT released_executions_pkey;
ALTER TABLE carmy.released_executions
    ADD CONSTRAINT released_executions_pkey PRIMARY KEY (execution_id, principal);

ALTER TABLE carmy.audit_log ADD COLUMN principal text;

UPDATE carmy.audit_log a
SET principal = coalesce(
    (SELECT r.principal FROM carmy.reservations r WHERE r.execution_id = a.execution_id LIMIT 1),
    (SELECT h.principal FROM carmy.released_executions h
     WHERE h.execution_id = a.execution_id LIMIT 1),
    a.before ->> 'principal',
    '');

ALTER TABLE carmy.audit_log ALTER COLUMN principal SET NOT NULL;
ALTER TABLE carmy.audit_log DROP CONSTRAINT audit_log_pkey;
ALTER TABLE carmy.audit_log ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id, principal);

COMMENT ON COLUMN carmy.audit_log.principal IS
    'The principal of the execution acted on (carmy.reservations.principal); the column Citus '
    'distributes the table by. Rows written before migration V14 got it from their execution''s '
    'record, else from the row''s before->>''principal'', else the empty string.';

-- ---------------------------------------------------------------------------------------------
-- The in-flight rule as a semi-join.
-- ---------------------------------------------------------------------------------------------

CREATE OR REPLACE VIEW carmy.uncertain_executions AS
SELECT
    r.principal,
    r.session_id,
    r.request_id,
    r.tool,
    r.execution_id,
    r.owner_instance,
    CASE WHEN i.lease_expires_at > now() THEN 'running' ELSE 'interrupted' END
        AS in_flight_state,
    now() - r.created_at AS age,
    r.created_at,
    r.started_at,
    i.hostname AS owner_hostname,
    i.pid AS owner_pid,
    i.lease_expires_at AS owner_lease_expires_at
FROM carmy.reservations r
LEFT JOIN carmy.instances i ON i.instance_id = r.owner_instance
WHERE r.state = 'running';

CREATE OR REPLACE VIEW carmy.late_arrivals AS
SELECT
    a.at,
    a.execution_id,
    a.actor AS owner_instance,
    a.principal,
    a.before ->> 'session_id' AS session_id,
    a.before ->> 'request_id' AS request_id,
    a.before ->> 'current_execution_id' AS current_execution_id,
    a.after ->> 'state' AS status,
    a.after -> 'outcome' AS outcome,
    a.note,
    a.contradicts_decision
FROM carmy.audit_log a
WHERE a.action = 'late_arrival';

DROP FUNCTION carmy.in_flight_state(text);

-- ---------------------------------------------------------------------------------------------
-- Decisions: the principal first, then one row.
-- ---------------------------------------------------------------------------------------------

-- PL/pgSQL, not SQL: Citus cannot plan a distributed query with an SQL function's parameters.
CREATE FUNCTION carmy.execution_principal(execution_id text, principal text) RETURNS text
    LANGUAGE plpgsql
    STABLE
AS $$
#variable_conflict use_column
DECLARE
    found_principal text;
BEGIN
    IF execution_principal.principal IS NOT NULL THEN
        RETURN execution_principal.principal;
    END IF;
    SELECT r.principal INTO found_principal FROM carmy.reservations r
    WHERE r.execution_id = execution_principal.execution_id
    LIMIT 1;
    RETURN found_principal;
END
$$;

COMMENT ON FUNCTION carmy.execution_principal(text, text) IS
    'The principal whose record holds execution_id: principal when given, else read by '
    'execution id alone (on Citus, a read of every shard); NULL when no record holds it.';

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
    owner       text;
    prior       record;
    was         text;
    recorded    text;
    decided     record;
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

    owner := carmy.execution_principal(resolve_execution.execution_id, resolve_execution.principal);

    -- The row as it was, locked: a concurrent decision waits here, then finds it decided.
    SELECT r.state, r.outcome, r.tool, r.request_id, r.session_id, r.owner_instance,
           coalesce(r.started_at, r.created_at) AS started
    INTO prior FROM carmy.reservations r
    WHERE r.execution_id = resolve_execution.execution_id AND r.principal = owner
    FOR UPDATE;
    SELECT CASE WHEN EXISTS (SELECT 1 FROM carmy.instances lease
                             WHERE lease.instance_id = prior.owner_instance
                               AND lease.lease_expires_at > now())
                THEN 'running' ELSE 'interrupted' END
    INTO was;

    -- The record, built from the locked row: the UPDATE below sets values, not expressions
    -- over the row's columns.
    recorded := json_build_object(
        'execution_id', resolve_execution.execution_id,
        'status', resolve_execution.status,
        'data', record_data,
        'error', record_err,
        'tool', prior.tool,
        'request_id', prior.request_id,
        'session_id', prior.session_id,
        'started_at', carmy.record_timestamp(prior.started),
        'finished_at', carmy.record_timestamp(now()),
        'resolution', json_build_object(
            'by', resolve_execution.actor,
            'at', carmy.record_timestamp(now()),
            'note', resolve_execution.note))::text;

    -- The compare-and-set: only a running row (or, forced, a damaged one), only while its
    -- owner's lease has lapsed (unless forced).
    UPDATE carmy.reservations r
    SET state = resolve_execution.status,
        outcome = recorded,
        error_code = record_err ->> 'code',
        finished_at = now()
    WHERE r.execution_id = resolve_execution.execution_id
      AND r.principal = owner
      AND (r.state = 'running'
           OR (resolve_execution.force AND carmy.record_damaged(r.outcome, r.execution_id, r.state)))
      AND (resolve_execution.force
           OR CASE WHEN EXISTS (SELECT 1 FROM carmy.instances lease
                                WHERE lease.instance_id = r.owner_instance
                                  AND lease.lease_expires_at > now())
                   THEN 'running' ELSE 'interrupted' END = 'interrupted')
    RETURNING r.execution_id, r.principal, r.state, r.outcome, r.owner_instance
    INTO decided;

    IF NOT FOUND THEN
        PERFORM carmy.explain_undecided(execution_id, principal);
    END IF;

    INSERT INTO carmy.audit_log (actor, principal, execution_id, action, before, after, note)
    VALUES (resolve_execution.actor, decided.principal, decided.execution_id, 'resolve',
            CASE WHEN prior.state = 'running'
                 THEN jsonb_build_object('state', 'running', 'in_flight_state', was,
                                         'owner_instance', decided.owner_instance)
                 ELSE jsonb_build_object('state', prior.state, 'damaged', true,
                                         'outcome', carmy.jsonb_or_text(prior.outcome),
                                         'owner_instance', decided.owner_instance)
            END,
            jsonb_build_object('state', decided.state,
                               'outcome', carmy.jsonb_or_text(decided.outcome)),
            resolve_execution.note);
    IF prior.state <> 'running' THEN
        -- A damaged finished record was replaced: replicas drop their copies.
        PERFORM carmy.announce_change(decided.principal, prior.session_id, prior.request_id);
    END IF;
    PERFORM pg_notify('carmy_decided', decided.execution_id);
    RETURN decided.outcome;
END
$$;

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
    owner  text;
    holder text;
    was    text;
    gone   record;
    kept  carmy.released_executions%ROWTYPE;
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

    owner := carmy.execution_principal(release_execution.execution_id, release_execution.principal);

    -- The row locked first, as in carmy.resolve_execution, and its owner's state then.
    SELECT r.owner_instance INTO holder FROM carmy.reservations r
    WHERE r.execution_id = release_execution.execution_id AND r.principal = owner
    FOR UPDATE;
    SELECT CASE WHEN EXISTS (SELECT 1 FROM carmy.instances lease
                             WHERE lease.instance_id = holder
                               AND lease.lease_expires_at > now())
                THEN 'running' ELSE 'interrupted' END
    INTO was;

    -- The compare-and-set, as in carmy.resolve_execution.
    DELETE FROM carmy.reservations r
    WHERE r.execution_id = release_execution.execution_id
      AND r.principal = owner
      AND (r.state = 'running'
           OR (release_execution.force AND carmy.record_damaged(r.outcome, r.execution_id, r.state)))
      AND (release_execution.force
           OR CASE WHEN EXISTS (SELECT 1 FROM carmy.instances lease
                                WHERE lease.instance_id = r.owner_instance
                                  AND lease.lease_expires_at > now())
                   THEN 'running' ELSE 'interrupted' END = 'interrupted')
    RETURNING r.* INTO gone;

    IF NOT FOUND THEN
        PERFORM carmy.explain_undecided(execution_id, principal);
    END IF;

    INSERT INTO carmy.released_executions
        (execution_id, principal, session_id, request_id, tool, fingerprint,
         fingerprint_version, owner_instance, in_flight_state, created_at, started_at,
         released_by, note)
    VALUES (gone.execution_id, gone.principal, gone.session_id, gone.request_id, gone.tool,
            gone.fingerprint, gone.fingerprint_version, gone.owner_instance, was,
            gone.created_at, gone.started_at, release_execution.actor, release_execution.note)
    RETURNING * INTO kept;
    INSERT INTO carmy.audit_log (actor, principal, execution_id, action, before, after, note)
    VALUES (release_execution.actor, gone.principal, gone.execution_id, 'release',
            CASE WHEN gone.state = 'running'
                 THEN jsonb_build_object('state', 'running', 'in_flight_state', was,
                                         'owner_instance', gone.owner_instance)
                 ELSE jsonb_build_object('state', gone.state, 'damaged', true,
                                         'outcome', carmy.jsonb_or_text(gone.outcome),
                                         'owner_instance', gone.owner_instance)
            END,
            jsonb_build_object('state', 'released'),
            release_execution.note);
    IF gone.state <> 'running' THEN
        -- A damaged finished record was deleted: replicas drop their copies.
        PERFORM carmy.announce_change(gone.principal, gone.session_id, gone.request_id);
    END IF;
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

CREATE OR REPLACE FUNCTION carmy.explain_undecided(execution_id text, principal text) RETURNS void
    LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    found_row record;
BEGIN
    SELECT r.state, r.outcome, r.execution_id INTO found_row FROM carmy.reservations r
    WHERE r.execution_id = explain_undecided.execution_id
      AND (explain_undecided.principal IS NULL OR r.principal = explain_undecided.principal)
    LIMIT 1;
    IF FOUND AND carmy.record_damaged(found_row.outcome, found_row.execution_id, found_row.state) THEN
        PERFORM carmy.decision_refused('CR409',
            format('execution %s has a damaged outcome', execution_id),
            'Pass force => true to record a decision in its place; the damaged outcome is kept in the audit row.');
    ELSIF (FOUND AND found_row.state <> 'running')
       OR EXISTS (SELECT 1 FROM carmy.released_executions h
                  WHERE h.execution_id = explain_undecided.execution_id
                    AND (explain_undecided.principal IS NULL
                         OR h.principal = explain_undecided.principal)) THEN
        PERFORM carmy.decision_refused('CR409',
            format('execution %s already has an outcome or was released', execution_id),
            'Nothing was changed. Read it with SELECT * FROM carmy.reservations WHERE execution_id = ...');
    ELSIF FOUND THEN
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
-- Pruning by key.
-- ---------------------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION carmy.prune_expired_step(
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

    -- Expired finished records, oldest first, deleted by key. The condition is checked again on
    -- each row as it is deleted (a row a concurrent reservation replaced meanwhile is running
    -- again and stays). Pruned records are not announced: no replica replays a copy past its
    -- retention.
    DELETE FROM carmy.reservations r
    USING (SELECT c.principal, c.session_id, c.request_id FROM carmy.reservations c
           WHERE c.state <> 'running'
             AND coalesce(c.finished_at, c.created_at) <= cutoff
           ORDER BY coalesce(c.finished_at, c.created_at)
           LIMIT batch_size) old
    WHERE r.principal = old.principal AND r.session_id = old.session_id
      AND r.request_id = old.request_id
      AND r.state <> 'running'
      AND coalesce(r.finished_at, r.created_at) <= cutoff;
    GET DIAGNOSTICS records = ROW_COUNT;

    DELETE FROM carmy.released_executions h
    USING (SELECT c.principal, c.execution_id FROM carmy.released_executions c
           WHERE c.released_at <= cutoff
           ORDER BY c.released_at
           LIMIT batch_size) old
    WHERE h.principal = old.principal AND h.execution_id = old.execution_id;
    GET DIAGNOSTICS released = ROW_COUNT;

    -- Audit rows (late arrivals included) only once their execution holds no record: the trail
    -- of an execution that is still running, interrupted or finished stays with it.
    DELETE FROM carmy.audit_log a
    USING (SELECT c.principal, c.id FROM carmy.audit_log c
           WHERE c.at <= cutoff
             AND NOT EXISTS (SELECT 1 FROM carmy.reservations r
                             WHERE r.principal = c.principal
                               AND r.execution_id = c.execution_id)
           ORDER BY c.at
           LIMIT batch_size) old
    WHERE a.principal = old.principal AND a.id = old.id;
    GET DIAGNOSTICS audit = ROW_COUNT;

    -- Stopped instances: lease lapsed more than the retention ago (so every record they
    -- finished has expired too), owning no running row.
    -- The batch is chosen among the instances that may go, so that a batch full of owners of
    -- running rows never ends the pruning early.
    DELETE FROM carmy.instances i
    WHERE i.lease_expires_at <= cutoff
      AND i.instance_id IN (SELECT c.instance_id FROM carmy.instances c
                            WHERE c.lease_expires_at <= cutoff
                              AND c.instance_id NOT IN (
                                  SELECT r.owner_instance FROM carmy.reservations r
                                  WHERE r.state = 'running' AND r.owner_instance IS NOT NULL)
                            LIMIT batch_size);
    GET DIAGNOSTICS instances = ROW_COUNT;
END
$$;
