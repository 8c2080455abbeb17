-- A finished row's outcome must be a record of the same execution and status (docs/semantics.md
-- §5 RECORD_DAMAGED, §8.3), so that a hand-written SQL fix that stores something else fails at
-- its UPDATE instead of making every later retry and GET answer RECORD_DAMAGED.
--
-- The constraint is added NOT VALID: existing rows are not scanned (a large table migrates at
-- once, and a row damaged before this migration does not stop it); every row inserted or updated
-- from now on is checked. An operator may check the old rows later with
--   ALTER TABLE carmy.reservations VALIDATE CONSTRAINT reservations_outcome_is_record;

CREATE FUNCTION carmy.outcome_is_record(outcome text, execution_id text, state text)
    RETURNS boolean
    LANGUAGE plpgsql
    IMMUTABLE
    PARALLEL SAFE
AS $$
DECLARE
    record json;
BEGIN
    IF outcome IS NULL OR state NOT IN ('completed', 'failed', 'timed_out', 'cancelled') THEN
        -- Not a finished row with an outcome: reservations_state_check and
        -- reservations_outcome_iff_finished decide those.
        RETURN true;
    END IF;
    -- PostgreSQL's JSON functions cannot de-escape \u0000 (they raise an error), and records
    -- may hold it (docs/semantics.md §4). Replacing the six characters \u0000 by \ufffd keeps
    -- the text valid JSON of the same shape (an escaped backslash followed by u0000 stays an
    -- escaped backslash followed by text) and changes only string contents.
    -- Text that is not JSON raises invalid_text_representation here: refused as well.
    record := replace(outcome, '\u0000', '\ufffd')::json;
    IF json_typeof(record) <> 'object' THEN
        RETURN false;
    END IF;
    RETURN (record ->> 'execution_id') IS NOT DISTINCT FROM outcome_is_record.execution_id
       AND (record ->> 'status') IS NOT DISTINCT FROM outcome_is_record.state
       AND (SELECT count(DISTINCT member) FROM json_object_keys(record) AS keys(member)
            WHERE member IN ('execution_id', 'status', 'data', 'error', 'tool', 'request_id',
                             'session_id', 'started_at', 'finished_at')) = 9;
END
$$;

COMMENT ON FUNCTION carmy.outcome_is_record(text, text, text) IS
    'Whether outcome (carmy.reservations.outcome) is a record of the execution execution_id with '
    'status state: a JSON object with the members execution_id (equal to the column), status '
    '(equal to the state column), data, error, tool, request_id, session_id, started_at and '
    'finished_at. True when outcome is NULL or state is not a finished status (the other '
    'constraints of the table decide those rows). Text that is not JSON raises an '
    'error. Used by the constraint reservations_outcome_is_record.';

ALTER TABLE carmy.reservations
    ADD CONSTRAINT reservations_outcome_is_record
    CHECK (carmy.outcome_is_record(outcome, execution_id, state)) NOT VALID;

COMMENT ON CONSTRAINT reservations_outcome_is_record ON carmy.reservations IS
    'A finished row''s outcome is a record of the same execution and status '
    '(carmy.outcome_is_record). To resolve an execution by hand, write a full record: copy the '
    'members of another record and set execution_id and status to the row''s own.';
