-- One definition of the in-flight rule (contract §4): whether a running reservation's owner is
-- alive. Used by the store's statements (carmy_postgres::sql), the operator view
-- carmy.uncertain_executions and the benchmark's pgbench scripts, so they cannot disagree.
--
-- The example tools' table carmy.example_orders is no longer created by the product's
-- migrations (V2 was retired); databases that have it keep it, and the gateway's example tools
-- create it where it is missing.

CREATE FUNCTION carmy.in_flight_state(owner_instance text) RETURNS text
    LANGUAGE sql
    STABLE
    PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN EXISTS (SELECT 1 FROM carmy.instances i
                     WHERE i.instance_id = in_flight_state.owner_instance
                       AND i.lease_expires_at > now()) THEN 'running'
        ELSE 'interrupted'
    END
$$;

COMMENT ON FUNCTION carmy.in_flight_state(text) IS
    'The in-flight state of a running reservation owned by owner_instance '
    '(carmy.reservations.owner_instance): running while that process''s lease is live '
    '(a carmy.instances row with lease_expires_at > now(), database clock: the tool may still be '
    'running); interrupted when it has no row or its lease lapsed (the process died or stopped: '
    'the outcome is unknown and the call is never re-run automatically, contract §4). Meaningful '
    'only for rows with state = running.';

CREATE OR REPLACE VIEW carmy.uncertain_executions AS
SELECT
    r.principal,
    r.session_id,
    r.request_id,
    r.tool,
    r.execution_id,
    r.owner_instance,
    carmy.in_flight_state(r.owner_instance) AS in_flight_state,
    now() - r.created_at AS age,
    r.created_at,
    r.started_at,
    i.hostname AS owner_hostname,
    i.pid AS owner_pid,
    i.lease_expires_at AS owner_lease_expires_at
FROM carmy.reservations r
LEFT JOIN carmy.instances i ON i.instance_id = r.owner_instance
WHERE r.state = 'running';

COMMENT ON COLUMN carmy.uncertain_executions.in_flight_state IS
    'carmy.in_flight_state(owner_instance): running while the owner''s lease is live (the tool may '
    'still be running); interrupted when the owner has no carmy.instances row or its '
    'lease_expires_at <= now() (the process died or stopped: the outcome is unknown and the call '
    'is never re-run automatically).';
