-- Waiting for a running duplicate's outcome across replicas (docs/semantics.md §12,
-- Prefer: wait=N). A replica that waits registers in carmy.outcome_waiters and listens on the
-- channel carmy_recorded; when the execution's outcome is recorded, a trigger notifies that
-- channel, but only when someone waits, so recording an outcome costs no NOTIFY otherwise.
-- Decisions notify carmy_decided themselves (V6).

CREATE UNLOGGED TABLE carmy.outcome_waiters (
    execution_id text        NOT NULL,
    waiter       text        NOT NULL,
    since        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outcome_waiters_pkey PRIMARY KEY (execution_id, waiter)
);

COMMENT ON TABLE carmy.outcome_waiters IS
    'Calls waiting (Prefer: wait=N) for a running execution''s outcome, one row per waiting call '
    'while it waits (docs/semantics.md §12). Unlogged: after a crash it is empty, which only means '
    'nobody waits. Rows older than an hour (a replica died while waiting) are removed by the next '
    'waiter; deleting rows is always safe (waiters also read the record every second).';
COMMENT ON COLUMN carmy.outcome_waiters.execution_id IS
    'The running execution waited for (carmy.reservations.execution_id).';
COMMENT ON COLUMN carmy.outcome_waiters.waiter IS 'A random id of the waiting call.';
COMMENT ON COLUMN carmy.outcome_waiters.since IS 'When the call started waiting (database clock).';

CREATE FUNCTION carmy.notify_outcome_waiters() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM carmy.outcome_waiters w WHERE w.execution_id = NEW.execution_id) THEN
        PERFORM pg_notify('carmy_recorded', NEW.execution_id);
    END IF;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION carmy.notify_outcome_waiters() IS
    'Trigger of carmy.reservations: when a running row gets its outcome, notifies channel '
    'carmy_recorded with the execution id if a call waits for it (carmy.outcome_waiters).';

CREATE TRIGGER reservations_outcome_recorded
    AFTER UPDATE OF state ON carmy.reservations
    FOR EACH ROW
    WHEN (OLD.state = 'running' AND NEW.state <> 'running')
    EXECUTE FUNCTION carmy.notify_outcome_waiters();

COMMENT ON TRIGGER reservations_outcome_recorded ON carmy.reservations IS
    'Wakes calls waiting for this execution''s outcome (carmy.notify_outcome_waiters).';
