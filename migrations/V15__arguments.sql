-- The arguments kept with each execution (docs/semantics.md §8.5).
--
-- 1. carmy.reservations.arguments and carmy.released_executions.arguments: the call's arguments
--    as the gateway keeps them (canonical JSON text, redacted before storage), written by the
--    reservation's own INSERT; NULL when none were kept (CARMY_KEEP_ARGUMENTS=none, or a row
--    from before V15). text, not jsonb, for the reason carmy.reservations.outcome is text:
--    jsonb refuses \u0000 and the text is kept exactly as the fingerprint covered it.
-- 2. carmy.arguments_jsonb(text): the same value as jsonb for searching, NULL for a text jsonb
--    refuses; a GIN index (jsonb_path_ops) over it answers "arguments containing this JSON value"
--    (`?arguments=` on GET /v1/executions). The index is built inside the migration's
--    transaction (refinery cannot run CREATE INDEX CONCURRENTLY); every existing row has a NULL
--    argument, so it is quick.
-- 3. carmy.release_execution keeps the arguments in the released row; carmy.uncertain_executions
--    shows them.

ALTER TABLE carmy.reservations ADD COLUMN arguments text;
ALTER TABLE carmy.released_executions ADD COLUMN arguments text;

COMMENT ON COLUMN carmy.reservations.arguments IS
    'The call''s arguments as kept with the execution (docs/semantics.md §8.5): RFC 8785 canonical '
    'JSON text (a number a double cannot hold exactly as the caller sent it), with the values the '
    'tool''s redact_arguments names replaced by the string "[redacted]" before storage (the whole '
    'arguments: the JSON string "[redacted]"). NULL when none were kept (CARMY_KEEP_ARGUMENTS=none, '
    'or reserved before migration V15). Header secrets never appear here. Search it with '
    'carmy.arguments_jsonb(arguments) @> ''{"customer": "cus_42"}''.';
COMMENT ON COLUMN carmy.released_executions.arguments IS
    'See carmy.reservations.arguments: the released execution''s kept arguments.';

-- IMMUTABLE so that it may back an index; it reads nothing but its argument. Any text jsonb
-- refuses gives NULL rather than an error, so the INSERT of a call the gateway accepted never
-- fails because of the index: a string holding \u0000, a number beyond numeric's range (the
-- gateway keeps numbers as sent, docs/semantics.md §2.3), nesting deeper than the server's
-- stack allows. Only such rows are missing from searches; their text column keeps them whole.
CREATE FUNCTION carmy.arguments_jsonb(arguments text) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    RETURN arguments::jsonb;
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION carmy.arguments_jsonb(text) IS
    'carmy.reservations.arguments as jsonb for searching (docs/semantics.md §8.5), NULL when '
    'jsonb refuses the text (\u0000, a number beyond numeric, nesting too deep). The index reservations_arguments_idx is over this '
    'expression: write carmy.arguments_jsonb(r.arguments) @> $1::jsonb to use it.';

CREATE INDEX reservations_arguments_idx ON carmy.reservations
    USING gin (carmy.arguments_jsonb(arguments) jsonb_path_ops);

COMMENT ON INDEX carmy.reservations_arguments_idx IS
    'Finds executions whose kept arguments contain a JSON value (@>, docs/semantics.md §8.5).';

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
    i.lease_expires_at AS owner_lease_expires_at,
    carmy.arguments_jsonb(r.arguments) AS arguments
FROM carmy.reservations r
LEFT JOIN carmy.instances i ON i.instance_id = r.owner_instance
WHERE r.state = 'running';

COMMENT ON COLUMN carmy.uncertain_executions.arguments IS
    'What the call tried to do: carmy.reservations.arguments as jsonb (NULL when none were kept, '
    'or when they hold \u0000: read the table''s text column then).';

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
         released_by, note, arguments)
    VALUES (gone.execution_id, gone.principal, gone.session_id, gone.request_id, gone.tool,
            gone.fingerprint, gone.fingerprint_version, gone.owner_instance, was,
            gone.created_at, gone.started_at, release_execution.actor, release_execution.note,
            gone.arguments)
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
