-- The ceiling for replays: one read of one completed reservation by primary key, the record
-- columns PostgresStore reads (LOOKUP_SQL in crates/carmy-postgres/src/sql.rs), one statement
-- in autocommit.
--
-- Run by carmy-bench as
--   pgbench -n -M prepared -c 32 -j 2 -T <seconds> -D nrows=<N> -f read_one.sql
-- after it completed N calls with request_id replay-1 … replay-N (principal anonymous, session
-- default) through the gateway, the same identities its replay scenario cycles through.
\set i random(1, :nrows)
SELECT r.execution_id, r.tool, r.fingerprint, r.fingerprint_version, r.state, r.outcome,
       CASE WHEN r.state <> 'running' THEN NULL
            ELSE CASE WHEN EXISTS (SELECT 1 FROM carmy.instances lease
                                   WHERE lease.instance_id = r.owner_instance
                                     AND lease.lease_expires_at > now())
                      THEN 'running' ELSE 'interrupted' END
       END AS in_flight_state, r.fingerprint_parts
FROM carmy.reservations r
WHERE r.principal = 'anonymous' AND r.session_id = 'default'
  AND r.request_id = 'replay-' || :i::text;
