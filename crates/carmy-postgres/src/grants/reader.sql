-- The grants of a read-only DBA role (docs/semantics.md §14.2, docs/operations.md "Roles"):
-- reads every table and view of the schema carmy (carmy.uncertain_executions,
-- carmy.late_arrivals, carmy.audit_log, …) and changes nothing. Run by the schema's owner, e.g.
-- with `carmy-gateway migrate --grant-reader ROLE`; {role} stands for the quoted role name.
-- Running it again is harmless.

REVOKE ALL ON ALL TABLES IN SCHEMA carmy FROM {role};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA carmy FROM {role};
REVOKE CREATE ON SCHEMA carmy FROM {role};
GRANT USAGE ON SCHEMA carmy TO {role};
GRANT SELECT ON ALL TABLES IN SCHEMA carmy TO {role};
