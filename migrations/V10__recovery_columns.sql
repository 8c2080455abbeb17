-- Two columns for recovery (docs/semantics.md §12), each added with a constant default or none,
-- so neither rewrites the table:
-- - attempt, for takeover (on_interrupted = "rerun"): every reservation counts the attempts
--   that ran its tool, and an outcome is recorded only by the attempt that holds the execution
--   now; existing rows read as their first attempt;
-- - fingerprint_parts, for IDEMPOTENCY_CONFLICT's `differs`: digests of the call's tool,
--   arguments and metadata; existing rows have none and still conflict by their fingerprint.

ALTER TABLE carmy.reservations ADD COLUMN attempt integer NOT NULL DEFAULT 1;

COMMENT ON COLUMN carmy.reservations.attempt IS
    'Which attempt of the execution holds it: 1 when reserved, incremented each time the next '
    'call took the interrupted execution over and ran its tool again (on_interrupted = rerun, '
    'docs/semantics.md §12; an audit_log row with action takeover each time). Only this '
    'attempt may record the outcome; an earlier attempt that finishes later is kept as a late '
    'arrival in carmy.audit_log.';

ALTER TABLE carmy.reservations ADD COLUMN fingerprint_parts text;

COMMENT ON COLUMN carmy.reservations.fingerprint_parts IS
    'Digests of the reserved call''s tool name, arguments and metadata, as '
    '<tool>.<arguments>.<metadata> (16 hex digits each: the first 64 bits of a SHA-256 of each '
    'part''s canonical JSON). Diagnostic only: a later call with another fingerprint gets '
    'IDEMPOTENCY_CONFLICT naming the parts whose digests differ (docs/semantics.md §12), never '
    'their values. NULL for rows written before this column, or by hand.';
