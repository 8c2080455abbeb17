-- Carmy reservations (contract §2, §3, §4, §8).
--
-- Run by refinery under a PostgreSQL advisory lock (see carmy_postgres::migrate); the history of
-- applied migrations lives in carmy.refinery_schema_history.

CREATE SCHEMA IF NOT EXISTS carmy;

COMMENT ON SCHEMA carmy IS
    'Carmy: retry-safety layer for AI agents'' tool calls. One reservation per call identity '
    '(principal, session_id, request_id), its recorded outcome, and the gateway processes that own '
    'running executions.';

-- ---------------------------------------------------------------------------------------------
-- Gateway processes and their leases.
-- ---------------------------------------------------------------------------------------------

CREATE TABLE carmy.instances (
    instance_id      text        PRIMARY KEY,
    hostname         text,
    pid              integer,
    started_at       timestamptz NOT NULL DEFAULT now(),
    lease_expires_at timestamptz NOT NULL
);

COMMENT ON TABLE carmy.instances IS
    'One row per gateway process (PostgresStore). The process renews lease_expires_at every third '
    'of its lease TTL while it runs. A running reservation whose owner has no row here, or whose '
    'lease_expires_at <= now(), is interrupted: its outcome is unknown and it is never re-run '
    'automatically (contract §4). Rows are kept after a process stops, for operators; deleting an '
    'old row is safe.';
COMMENT ON COLUMN carmy.instances.instance_id IS
    'The process''s id, by default inst_ followed by 32 hex digits (a random UUID); '
    'referenced by carmy.reservations.owner_instance.';
COMMENT ON COLUMN carmy.instances.hostname IS
    'Host name of the machine the process ran on, when it could be read; for operators only.';
COMMENT ON COLUMN carmy.instances.pid IS
    'Operating-system process id of the gateway process; for operators only.';
COMMENT ON COLUMN carmy.instances.started_at IS
    'When the process first registered (database clock).';
COMMENT ON COLUMN carmy.instances.lease_expires_at IS
    'Until when the process is known to be alive (database clock): now() + lease TTL at each '
    'renewal; set to now() on a clean shutdown.';

-- ---------------------------------------------------------------------------------------------
-- Reservations: one row per call identity.
-- ---------------------------------------------------------------------------------------------

CREATE TABLE carmy.reservations (
    principal           text        NOT NULL,
    session_id          text        NOT NULL,
    request_id          text        NOT NULL,
    tool                text        NOT NULL,
    fingerprint         text        NOT NULL,
    fingerprint_version text        NOT NULL,
    state               text        NOT NULL
        CONSTRAINT reservations_state_check
        CHECK (state IN ('running', 'completed', 'failed', 'timed_out', 'cancelled')),
    execution_id        text        NOT NULL
        CONSTRAINT reservations_execution_id_key UNIQUE,
    outcome             text,
    error_code          text,
    owner_instance      text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    finished_at         timestamptz,
    CONSTRAINT reservations_pkey PRIMARY KEY (principal, session_id, request_id),
    CONSTRAINT reservations_outcome_iff_finished CHECK ((state = 'running') = (outcome IS NULL))
);

COMMENT ON TABLE carmy.reservations IS
    'One row per call identity (principal, session_id, request_id), kept as three separate '
    'values (contract §2). Inserted as running before the tool runs (INSERT ... ON CONFLICT DO '
    'NOTHING); updated once, by the execution that reserved it, to a finished state with the '
    'recorded outcome (contract §3, §4). A finished row is replayed to every later attempt with the '
    'same fingerprint. Rows are never expired automatically: a row may stand for a committed effect. '
    'To resolve an interrupted execution, an operator sets state to a finished state and outcome to '
    'a full record JSON of the same status and execution_id, or deletes the row (the next attempt '
    'then runs the tool again).';
COMMENT ON COLUMN carmy.reservations.principal IS
    'Who called, from authentication (contract §6). Principals never see each other''s rows.';
COMMENT ON COLUMN carmy.reservations.session_id IS
    'The call''s session_id, or ''default'' when it named none (contract §2).';
COMMENT ON COLUMN carmy.reservations.request_id IS
    'The caller''s request_id: 1 to 255 bytes of UTF-8 without control characters (contract §2).';
COMMENT ON COLUMN carmy.reservations.tool IS
    'The tool the call named (the fingerprint already binds it; kept for operators).';
COMMENT ON COLUMN carmy.reservations.fingerprint IS
    'SHA-256 of the tool, canonical arguments and canonical metadata, as 64 lowercase hex digits '
    '(contract §2). A later attempt with another fingerprint is IDEMPOTENCY_CONFLICT.';
COMMENT ON COLUMN carmy.reservations.fingerprint_version IS
    'The fingerprint algorithm, e.g. v1. Two fingerprints are equal only when both version and '
    'digest are equal.';
COMMENT ON COLUMN carmy.reservations.state IS
    'running (reserved, no outcome yet; see carmy.uncertain_executions for whether its owner is '
    'alive), or the finished status of the recorded outcome: completed, failed, timed_out, '
    'cancelled (contract §4).';
COMMENT ON COLUMN carmy.reservations.execution_id IS
    'The execution holding this identity: exec_ followed by 32 hex digits. Globally unique; '
    'replays repeat it; GET /v1/executions/{execution_id} finds the row by it (for its principal only).';
COMMENT ON COLUMN carmy.reservations.outcome IS
    'The recorded outcome: the exact compact JSON text of the record (execution_id, status, data, '
    'error, tool, request_id, session_id, started_at, finished_at), replayed verbatim. NULL exactly '
    'while state = running. Stored as text, not jsonb, because storage must be lossless: jsonb '
    'rejects strings holding \u0000 and does not keep numbers as written. For ad hoc queries, '
    'outcome::jsonb works for every value except those holding \u0000.';
COMMENT ON COLUMN carmy.reservations.error_code IS
    'The outcome''s error.code (e.g. TOOL_ERROR, TIMEOUT, RESULT_TOO_LARGE) for a finished state '
    'other than completed; NULL otherwise. A copy for operators; outcome is authoritative.';
COMMENT ON COLUMN carmy.reservations.owner_instance IS
    'The carmy.instances.instance_id of the gateway process that reserved the row and runs (or '
    'ran) the tool. Not a foreign key: a missing instance row means the owner is gone.';
COMMENT ON COLUMN carmy.reservations.created_at IS
    'When the identity was reserved (database clock).';
COMMENT ON COLUMN carmy.reservations.started_at IS
    'When the owner started the execution (database clock, set at reservation).';
COMMENT ON COLUMN carmy.reservations.finished_at IS
    'When the outcome was recorded (database clock); NULL while running.';

CREATE INDEX reservations_running_created_at_idx
    ON carmy.reservations (created_at)
    WHERE state = 'running';

COMMENT ON INDEX carmy.reservations_running_created_at_idx IS
    'Finds unfinished reservations (carmy.uncertain_executions) without scanning finished ones.';

-- Lookup by (principal, execution_id) uses reservations_execution_id_key: execution ids are
-- globally unique, so the principal is filtered after the unique index finds the row.

-- ---------------------------------------------------------------------------------------------
-- Operator view of executions whose outcome is not known yet.
-- ---------------------------------------------------------------------------------------------

CREATE VIEW carmy.uncertain_executions AS
SELECT
    r.principal,
    r.session_id,
    r.request_id,
    r.tool,
    r.execution_id,
    r.owner_instance,
    CASE
        WHEN i.lease_expires_at > now() THEN 'running'
        ELSE 'interrupted'
    END AS in_flight_state,
    now() - r.created_at AS age,
    r.created_at,
    r.started_at,
    i.hostname AS owner_hostname,
    i.pid AS owner_pid,
    i.lease_expires_at AS owner_lease_expires_at
FROM carmy.reservations r
LEFT JOIN carmy.instances i ON i.instance_id = r.owner_instance
WHERE r.state = 'running';

COMMENT ON VIEW carmy.uncertain_executions IS
    'Reservations without a recorded outcome (state = running), with whether their owner process '
    'is still alive. Every later attempt with the same identity and fingerprint gets '
    'EXECUTION_UNCERTAIN with this in_flight_state (contract §3, §4).';
COMMENT ON COLUMN carmy.uncertain_executions.principal IS 'See carmy.reservations.principal.';
COMMENT ON COLUMN carmy.uncertain_executions.session_id IS 'See carmy.reservations.session_id.';
COMMENT ON COLUMN carmy.uncertain_executions.request_id IS 'See carmy.reservations.request_id.';
COMMENT ON COLUMN carmy.uncertain_executions.tool IS 'See carmy.reservations.tool.';
COMMENT ON COLUMN carmy.uncertain_executions.execution_id IS 'See carmy.reservations.execution_id.';
COMMENT ON COLUMN carmy.uncertain_executions.owner_instance IS
    'See carmy.reservations.owner_instance.';
COMMENT ON COLUMN carmy.uncertain_executions.in_flight_state IS
    'running while the owner''s lease is live (the tool may still be running); interrupted when the '
    'owner has no carmy.instances row or its lease_expires_at <= now() (the process died or stopped: '
    'the outcome is unknown and the call is never re-run automatically).';
COMMENT ON COLUMN carmy.uncertain_executions.age IS
    'now() - created_at: how long the identity has been reserved without an outcome.';
COMMENT ON COLUMN carmy.uncertain_executions.created_at IS 'See carmy.reservations.created_at.';
COMMENT ON COLUMN carmy.uncertain_executions.started_at IS 'See carmy.reservations.started_at.';
COMMENT ON COLUMN carmy.uncertain_executions.owner_hostname IS
    'carmy.instances.hostname of the owner, NULL when it has no row.';
COMMENT ON COLUMN carmy.uncertain_executions.owner_pid IS
    'carmy.instances.pid of the owner, NULL when it has no row.';
COMMENT ON COLUMN carmy.uncertain_executions.owner_lease_expires_at IS
    'carmy.instances.lease_expires_at of the owner, NULL when it has no row.';

-- refinery creates its history table before it applies this migration; describe it too.
DO $$
BEGIN
    IF to_regclass('carmy.refinery_schema_history') IS NOT NULL THEN
        COMMENT ON TABLE carmy.refinery_schema_history IS
            'Migrations applied by refinery (files migrations/V<version>__<name>.sql of the Carmy '
            'repository). Gateways are ready only when max(version) reaches the version they were '
            'built with.';
    END IF;
END
$$;
