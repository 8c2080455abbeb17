-- Takeover of interrupted executions (docs/semantics.md §12, on_interrupted = "rerun"): every
-- reservation counts the attempts that ran its tool, and an outcome is recorded only by the
-- attempt that holds the execution now. A constant default adds the column without rewriting
-- the table; existing rows read as their first attempt.

ALTER TABLE carmy.reservations ADD COLUMN attempt integer NOT NULL DEFAULT 1;

COMMENT ON COLUMN carmy.reservations.attempt IS
    'Which attempt of the execution holds it: 1 when reserved, incremented each time the next '
    'call took the interrupted execution over and ran its tool again (on_interrupted = rerun, '
    'docs/semantics.md §12; an audit_log row with action takeover each time). Only this '
    'attempt may record the outcome; an earlier attempt that finishes later is kept as a late '
    'arrival in carmy.audit_log.';
