#!/usr/bin/env bash
# Searching executions by what was asked (docs/semantics.md §8.5), at 5 million rows: loads
# carmy.reservations once with generate_series (finished rows whose kept arguments name one of
# 100,000 customers, 50 rows each), then prints EXPLAIN (ANALYZE, BUFFERS) of the search the API
# runs (GET /v1/executions?arguments={"customer":"cus_42"}) and of the lookup by id
# (GET /v1/executions/{id}), and their latencies from pgbench: one client, 20 s each, p50 / p99
# computed from pgbench's per-transaction log.
#
#   bench/arguments/run.sh            # DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres
#
# It creates the database carmy_bench_arguments (kept between runs: the rows are loaded only when
# the table is empty; CARMY_BENCH_RELOAD=1 drops it first) and migrates it with the gateway
# binary (CARMY_GATEWAY, default target/debug/carmy-gateway; build it first). Needs psql and
# pgbench (Debian: postgresql-client), on PATH or in /usr/lib/postgresql/*/bin.
set -euo pipefail
cd "$(dirname "$0")/../.."
ADMIN_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
DB=carmy_bench_arguments
URL="${ADMIN_URL%/*}/$DB"
GATEWAY="${CARMY_GATEWAY:-target/debug/carmy-gateway}"
ROWS="${CARMY_BENCH_ROWS:-5000000}"
SECONDS_EACH="${CARMY_BENCH_SECONDS:-20}"
for dir in /usr/lib/postgresql/*/bin; do PATH="$PATH:$dir"; done
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

if [[ "${CARMY_BENCH_RELOAD:-}" == 1 ]]; then
  psql -q "$ADMIN_URL" -c "DROP DATABASE IF EXISTS $DB"
fi
psql -qtA "$ADMIN_URL" -c "SELECT 1 FROM pg_database WHERE datname = '$DB'" | grep -q 1 \
  || psql -q "$ADMIN_URL" -c "CREATE DATABASE $DB"
DATABASE_URL="$URL" "$GATEWAY" migrate >/dev/null 2>&1

if [[ "$(psql -qtA "$URL" -c 'SELECT count(*) FROM carmy.reservations')" == 0 ]]; then
  echo "loading $ROWS rows (once)…"
  # The index is built after the load, as CREATE INDEX would build it on an existing table.
  psql -q -v ON_ERROR_STOP=1 "$URL" <<SQL
\timing on
DROP INDEX carmy.reservations_arguments_idx;
INSERT INTO carmy.reservations
    (principal, session_id, request_id, tool, fingerprint, fingerprint_version, state,
     execution_id, outcome, created_at, started_at, finished_at, arguments)
SELECT 'bench', 'default', 'req-' || n, 'create_payment', md5(n::text) || md5(n::text), 'v1',
       'completed', 'exec_' || lpad(n::text, 32, '0'),
       format('{"execution_id":"exec_%s","status":"completed","data":{"payment_id":%s},"error":null,"tool":"create_payment","request_id":"req-%s","session_id":"default","started_at":"2026-12-07T00:00:00.000Z","finished_at":"2026-12-07T00:00:00.000Z"}',
              lpad(n::text, 32, '0'), n, n),
       now() - n * interval '1 millisecond', now(), now(),
       format('{"amount":%s,"customer":"cus_%s","sku":"sku_%s"}', n % 1000, n % 100000, n % 977)
FROM generate_series(1, $ROWS) AS n;
CREATE INDEX reservations_arguments_idx ON carmy.reservations
    USING gin (carmy.arguments_jsonb(arguments) jsonb_path_ops);
VACUUM ANALYZE carmy.reservations;
SQL
fi
psql -qtA "$URL" -c "SELECT 'rows: ' || count(*) || ', table: ' || pg_size_pretty(pg_table_size('carmy.reservations')) || ', argument index: ' || pg_size_pretty(pg_relation_size('carmy.reservations_arguments_idx')) FROM carmy.reservations"

# The statements as the store sends them (crates/carmy-postgres/src/sql.rs: FIND_EXECUTION_SQL
# and the listing with its arguments filter), with constants where pgbench sets variables.
SEARCH="SELECT r.principal, r.session_id, r.request_id, r.arguments, r.execution_id, r.tool, r.state, r.outcome FROM carmy.reservations r WHERE r.principal = 'bench' AND carmy.arguments_jsonb(r.arguments) @> ('{\"customer\":\"cus_' || :c || '\"}')::jsonb ORDER BY r.created_at DESC, r.execution_id DESC LIMIT 100"
BY_ID="SELECT r.principal, r.session_id, r.request_id, r.arguments, r.execution_id, r.tool, r.state, r.outcome FROM carmy.reservations r WHERE r.execution_id = 'exec_' || lpad(:k::text, 32, '0') AND r.principal = 'bench'"

echo; echo "== EXPLAIN ANALYZE: search by argument (customer cus_42: 50 rows)"
psql -qtA "$URL" -c "EXPLAIN (ANALYZE, BUFFERS) ${SEARCH//:c/42}"
echo; echo "== EXPLAIN ANALYZE: lookup by id"
psql -qtA "$URL" -c "EXPLAIN (ANALYZE, BUFFERS) ${BY_ID//:k/4242}"

latency() { # name, script body
  printf '\\set c random(0, 99999)\n\\set k random(1, %s)\n%s;\n' "$ROWS" "$2" >"$WORK/$1.sql"
  (cd "$WORK" && pgbench -n -c 1 -T "$SECONDS_EACH" -M prepared -f "$1.sql" -l --log-prefix="$1" "$URL" >/dev/null)
  cat "$WORK/$1".* | awk '{print $3}' | sort -n | awk -v name="$1" '
    { v[NR] = $1 } END {
      p50 = v[int(NR * 0.50) + 1]; p99 = v[int(NR * 0.99) + 1];
      printf "%-22s %8d queries  p50 %7.3f ms  p99 %7.3f ms\n", name, NR, p50 / 1000, p99 / 1000 }'
}
echo; echo "== latency, one client, ${SECONDS_EACH} s each (pgbench, prepared statements)"
latency lookup_by_id "$BY_ID"
latency search_by_argument "$SEARCH"
