-- Late arrivals (docs/semantics.md §12): an owner that finished after its execution was
-- resolved, released or taken over never overwrites the record; the gateway keeps its outcome as
-- an audit row (action late_arrival, actor = the owner's instance id). This view lists them.

CREATE VIEW carmy.late_arrivals AS
SELECT
    a.at,
    a.execution_id,
    a.actor AS owner_instance,
    a.before ->> 'principal' AS principal,
    a.before ->> 'session_id' AS session_id,
    a.before ->> 'request_id' AS request_id,
    a.before ->> 'current_execution_id' AS current_execution_id,
    a.after ->> 'state' AS status,
    a.after -> 'outcome' AS outcome,
    a.note
FROM carmy.audit_log a
WHERE a.action = 'late_arrival';

COMMENT ON VIEW carmy.late_arrivals IS
    'Outcomes that arrived after their execution was decided (carmy.audit_log rows with action '
    'late_arrival): not recorded, and their effect may have happened in addition to the recorded '
    'one (e.g. a second order). Reconcile each with the target system.';
COMMENT ON COLUMN carmy.late_arrivals.at IS 'When the late outcome arrived (database clock).';
COMMENT ON COLUMN carmy.late_arrivals.execution_id IS 'The execution whose outcome arrived late.';
COMMENT ON COLUMN carmy.late_arrivals.owner_instance IS
    'The carmy.instances.instance_id of the process that ran the tool.';
COMMENT ON COLUMN carmy.late_arrivals.principal IS 'The identity''s principal.';
COMMENT ON COLUMN carmy.late_arrivals.session_id IS 'The identity''s session.';
COMMENT ON COLUMN carmy.late_arrivals.request_id IS 'The identity''s request_id.';
COMMENT ON COLUMN carmy.late_arrivals.current_execution_id IS
    'The execution holding the identity when the outcome arrived (the same execution when it was '
    'resolved; a newer one after a release and a new attempt; NULL when vacant).';
COMMENT ON COLUMN carmy.late_arrivals.status IS 'The late outcome''s status (completed, failed, ...).';
COMMENT ON COLUMN carmy.late_arrivals.outcome IS
    'The late outcome''s record, as jsonb; a record holding \u0000 is kept as a JSON string of its text.';
COMMENT ON COLUMN carmy.late_arrivals.note IS 'See carmy.audit_log.note.';
