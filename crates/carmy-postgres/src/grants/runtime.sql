-- The grants of Carmy's runtime role (docs/semantics.md §14.2, docs/operations.md "Roles"):
-- exactly what a gateway replica does, nothing more. Run by the schema's owner, e.g. with
-- `carmy-gateway migrate --grant-runtime ROLE`, after the migrations; {role} stands for the
-- quoted role name. Running it again is harmless: it first takes back whatever the role held on
-- the schema's tables, so it also narrows a role granted too much.
--
-- What the role cannot do: any DDL (no CREATE on the schema, owns nothing), DELETE or UPDATE on
-- carmy.audit_log (so neither on the view carmy.late_arrivals, which shows its late_arrival
-- rows), DELETE on carmy.instances or carmy.released_executions, TRUNCATE anywhere. Records
-- past their retention are deleted only through carmy.prune_expired, which runs with its
-- owner's rights and keeps the retention rules (docs/semantics.md §12.9).

-- On Citus (docs/scale.md) the grants on distributed tables reach their shards over one
-- connection per node, so that the function changes at the end may follow in the same
-- transaction (Citus refuses them after a parallel multi-shard command). Plain PostgreSQL keeps
-- the setting as an unused placeholder for the transaction; outside a transaction it is
-- ignored with a warning.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

REVOKE ALL ON ALL TABLES IN SCHEMA carmy FROM {role};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA carmy FROM {role};
REVOKE CREATE ON SCHEMA carmy FROM {role};
GRANT USAGE ON SCHEMA carmy TO {role};

-- Reads: every table and view (the migration history included, for readiness).
GRANT SELECT ON ALL TABLES IN SCHEMA carmy TO {role};

-- Reservations: reserve (INSERT), complete, take over and decide (UPDATE), release a
-- reservation whose tool never ran, or an execution an operator released (DELETE).
GRANT INSERT, UPDATE, DELETE ON carmy.reservations TO {role};
-- The lease: register and renew (INSERT … ON CONFLICT DO UPDATE), end it (UPDATE).
GRANT INSERT, UPDATE ON carmy.instances TO {role};
-- Decisions and late arrivals append to the audit trail; nothing rewrites it.
GRANT INSERT ON carmy.audit_log TO {role};
GRANT INSERT ON carmy.released_executions TO {role};
-- Calls waiting for another replica's outcome register and unregister.
GRANT INSERT, DELETE ON carmy.outcome_waiters TO {role};
-- The example tools' orders, when the gateway made them (`carmy-gateway migrate` does):
-- INSERT, UPDATE on carmy.example_orders, granted by the same step (not in this file).
GRANT USAGE ON ALL SEQUENCES IN SCHEMA carmy TO {role};

-- The decision functions run with the caller's rights (the grants above); the pruner runs with
-- its owner's, so that the runtime role may delete expired rows only through it.
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA carmy TO {role};
DO $$
DECLARE
    pruner regprocedure;
BEGIN
    FOR pruner IN SELECT p.oid::regprocedure FROM pg_proc p
                  WHERE p.pronamespace = 'carmy'::regnamespace AND p.proname = 'prune_expired'
    LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, pg_temp',
                       pruner);
        -- Running with the owner's rights, it is for the runtime role only (granted above),
        -- not for PUBLIC.
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', pruner);
    END LOOP;
END
$$;
