-- Reconciliation (docs/semantics.md §12, part "reconciliation"): the gateway asks the upstream
-- of an interrupted execution whether its effect happened (the tool's [tools.reconcile] probe)
-- and decides it through carmy.resolve_execution / carmy.release_execution with actor
-- 'reconciler'. Three columns on reservations, each added without a default or with a
-- constant one, so none rewrites the table:
-- - reconcile_due_at: when a replica may next claim the execution for a probe (NULL: at once);
--   claiming moves it forward under FOR UPDATE SKIP LOCKED, so one replica at a time probes it;
-- - reconcile_attempts: probes claimed so far (bounded by the gateway's setting);
-- - reconcile_evidence: the last probe's answer, kept for the person who decides otherwise.

ALTER TABLE carmy.reservations ADD COLUMN reconcile_due_at timestamptz;
ALTER TABLE carmy.reservations ADD COLUMN reconcile_attempts integer NOT NULL DEFAULT 0;
ALTER TABLE carmy.reservations ADD COLUMN reconcile_evidence jsonb;

COMMENT ON COLUMN carmy.reservations.reconcile_due_at IS
    'When a gateway replica may next claim this interrupted execution to run its tool''s '
    'reconciliation probe (docs/semantics.md §12); NULL: as soon as it is interrupted. A claim '
    'moves it past the probe''s deadline (FOR UPDATE SKIP LOCKED), an inconclusive probe to the '
    'next backoff step. Meaningful only for rows with state = running.';
COMMENT ON COLUMN carmy.reservations.reconcile_attempts IS
    'How many times a replica claimed this execution for a reconciliation probe; no more '
    'claims once it reaches the gateway''s CARMY_RECONCILE_MAX_ATTEMPTS.';
COMMENT ON COLUMN carmy.reservations.reconcile_evidence IS
    'The last reconciliation probe''s answer: {"at", "answer" (found, absent, error), "status", '
    '"body", "detail", "attempts"}; header values are never kept. Evidence for the person who '
    'decides an execution the probe could not.';

CREATE INDEX reservations_reconcile_due_idx
    ON carmy.reservations (reconcile_due_at NULLS FIRST, created_at)
    WHERE state = 'running';

COMMENT ON INDEX carmy.reservations_reconcile_due_idx IS
    'Finds unfinished reservations due for a reconciliation probe without scanning finished ones.';

-- A late arrival that contradicts the reconciler's decision (the probe said "found" and the
-- owner's outcome failed, or the probe said "absent" and the owner's outcome completed) is
-- flagged: it means the probe was wrong.
ALTER TABLE carmy.audit_log ADD COLUMN contradicts_decision boolean;

COMMENT ON COLUMN carmy.audit_log.contradicts_decision IS
    'For late_arrival rows after a decision by the reconciler: true when the late outcome '
    'contradicts what the probe decided (docs/semantics.md §12, reconciliation); NULL otherwise.';

CREATE FUNCTION carmy.flag_contradicting_late_arrival() RETURNS trigger
    LANGUAGE plpgsql
AS $$
DECLARE
    decided record;
BEGIN
    SELECT a.action, a.after ->> 'state' AS state INTO decided
    FROM carmy.audit_log a
    WHERE a.execution_id = NEW.execution_id
      AND a.actor = 'reconciler'
      AND a.action IN ('resolve', 'release')
    ORDER BY a.id DESC
    LIMIT 1;
    IF FOUND THEN
        NEW.contradicts_decision :=
            (decided.action = 'release' AND NEW.after ->> 'state' = 'completed')
            OR (decided.action = 'resolve' AND decided.state = 'completed'
                AND NEW.after ->> 'state' = 'failed');
    END IF;
    RETURN NEW;
END
$$;

COMMENT ON FUNCTION carmy.flag_contradicting_late_arrival() IS
    'Sets audit_log.contradicts_decision on a late_arrival row of an execution the reconciler '
    'decided: true when the late outcome is completed after a release (the probe said absent) or '
    'failed after a resolve completed (the probe said found); false for any other late outcome '
    '(cancelled and timed_out say nothing about the effect).';

CREATE TRIGGER audit_log_late_arrival_contradiction
    BEFORE INSERT ON carmy.audit_log
    FOR EACH ROW
    WHEN (NEW.action = 'late_arrival')
    EXECUTE FUNCTION carmy.flag_contradicting_late_arrival();

COMMENT ON TRIGGER audit_log_late_arrival_contradiction ON carmy.audit_log IS
    'See carmy.flag_contradicting_late_arrival().';

CREATE OR REPLACE VIEW carmy.late_arrivals AS
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
    a.note,
    a.contradicts_decision
FROM carmy.audit_log a
WHERE a.action = 'late_arrival';

COMMENT ON COLUMN carmy.late_arrivals.contradicts_decision IS
    'See carmy.audit_log.contradicts_decision: true when the late outcome contradicts the '
    'reconciler''s decision (its probe was wrong).';
