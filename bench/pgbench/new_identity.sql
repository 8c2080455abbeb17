-- The SQL work of one new idempotent call, as PostgresStore does it (crates/carmy-postgres/src/
-- sql.rs): the reserve statement (RESERVE_SQL) and the complete statement (COMPLETE_SQL), two
-- statements in autocommit, each its own round trip and its own commit. The reservation's
-- retention is the default, 7 days (604800000 ms); the kept arguments are a small object
-- (docs/semantics.md §8.5).
--
-- Run by carmy-bench as
--   pgbench -n -M prepared -c 32 -j 2 -T <seconds> -D run=<unique> -D n=0 -f new_identity.sql
-- Each client numbers its calls with :n (pgbench keeps a client's variables from one
-- transaction to the next), so (:run, :client_id, :n) is a fresh identity every time.
-- pgbench turns every colon followed by a name character into a parameter, even inside a
-- string literal: the recorded outcome below (about the size of an echo record) therefore
-- writes "error": null with a space and its timestamps in ISO 8601 basic format.
\set n :n + 1
WITH ins AS (
    INSERT INTO carmy.reservations
        (principal, session_id, request_id, tool, fingerprint, fingerprint_version,
         state, execution_id, owner_instance, started_at, fingerprint_parts, arguments)
    VALUES ('pgbench', 'default', 'pgb-' || :run::text || '-' || :client_id::text || '-' || :n::text,
            'echo', '9b2c6f0de3f1a4c85e7d20b6a1c94f3e8d5b7a60c2e1f9d43b8a7c6e5d4f3a2b1', 'v1',
            'running', 'exec_pgb_' || :run::text || '_' || :client_id::text || '_' || :n::text,
            'inst_pgbench', now(), '0123456789abcdef.0123456789abcdef.0123456789abcdef',
            '{"message": "hello"}')
    ON CONFLICT (principal, session_id, request_id) DO NOTHING
    RETURNING execution_id
), renewed AS (
    UPDATE carmy.reservations r
    SET tool = 'echo', fingerprint = '9b2c6f0de3f1a4c85e7d20b6a1c94f3e8d5b7a60c2e1f9d43b8a7c6e5d4f3a2b1',
        fingerprint_version = 'v1', state = 'running',
        execution_id = 'exec_pgb_' || :run::text || '_' || :client_id::text || '_' || :n::text,
        outcome = NULL, error_code = NULL, owner_instance = 'inst_pgbench',
        created_at = now(), started_at = now(), finished_at = NULL,
        fingerprint_parts = '0123456789abcdef.0123456789abcdef.0123456789abcdef', attempt = 1,
        arguments = '{"message": "hello"}'
    WHERE r.principal = 'pgbench' AND r.session_id = 'default'
      AND r.request_id = 'pgb-' || :run::text || '-' || :client_id::text || '-' || :n::text
      AND NOT EXISTS (SELECT 1 FROM ins)
      AND r.state <> 'running'
      AND coalesce(r.finished_at, r.created_at) <= now() - 604800000::bigint * interval '1 millisecond'
    RETURNING r.execution_id
)
SELECT true AS inserted, false AS renewed, NULL::text AS execution_id, NULL::text AS tool,
       NULL::text AS fingerprint, NULL::text AS fingerprint_version, NULL::text AS state,
       NULL::text AS outcome, NULL::text AS in_flight_state,
       NULL::text AS fingerprint_parts, NULL::boolean AS expired,
       replaced.replaced_execution_id, replaced.replaced_by, replaced.replaced_note
FROM ins
LEFT JOIN LATERAL (SELECT h.execution_id AS replaced_execution_id,
                          h.released_by AS replaced_by, h.note AS replaced_note
                   FROM carmy.released_executions h
                   WHERE h.principal = 'pgbench' AND h.session_id = 'default'
                     AND h.request_id = 'pgb-' || :run::text || '-' || :client_id::text || '-' || :n::text
                   ORDER BY h.released_at DESC LIMIT 1) replaced ON true
UNION ALL
SELECT true, true, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM renewed
UNION ALL
SELECT false AS inserted, false AS renewed, r.execution_id, r.tool, r.fingerprint, r.fingerprint_version, r.state,
       r.outcome,
       CASE WHEN r.state <> 'running' THEN NULL
            ELSE CASE WHEN EXISTS (SELECT 1 FROM carmy.instances lease
                                   WHERE lease.instance_id = r.owner_instance
                                     AND lease.lease_expires_at > now())
                      THEN 'running' ELSE 'interrupted' END
       END AS in_flight_state, r.fingerprint_parts,
       coalesce(carmy.record_expired(r.state, r.finished_at, r.created_at,
                                     604800000::bigint * interval '1 millisecond'), false) AS expired,
       NULL, NULL, NULL
FROM carmy.reservations r
WHERE r.principal = 'pgbench' AND r.session_id = 'default'
  AND r.request_id = 'pgb-' || :run::text || '-' || :client_id::text || '-' || :n::text
  AND NOT EXISTS (SELECT 1 FROM ins) AND NOT EXISTS (SELECT 1 FROM renewed);
UPDATE carmy.reservations r
SET state = 'completed',
    outcome = '{"execution_id":"exec_pgb_' || :run::text || '_' || :client_id::text || '_' || :n::text || '","status":"completed","data":{},"error": null,"tool":"echo","request_id":"pgb-' || :run::text || '-' || :client_id::text || '-' || :n::text || '","session_id":"default","started_at":"20260101T000000.000Z","finished_at":"20260101T000000.001Z"}',
    error_code = NULL,
    finished_at = now()
WHERE r.principal = 'pgbench' AND r.session_id = 'default'
  AND r.request_id = 'pgb-' || :run::text || '-' || :client_id::text || '-' || :n::text
  AND r.execution_id = 'exec_pgb_' || :run::text || '_' || :client_id::text || '_' || :n::text
  AND r.fingerprint = '9b2c6f0de3f1a4c85e7d20b6a1c94f3e8d5b7a60c2e1f9d43b8a7c6e5d4f3a2b1'
  AND r.fingerprint_version = 'v1'
  AND r.state = 'running' AND r.attempt = 1
RETURNING EXISTS (SELECT 1 FROM carmy.outcome_waiters w WHERE w.execution_id = r.execution_id)
          AS awaited;
