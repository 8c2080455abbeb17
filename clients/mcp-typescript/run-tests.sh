#!/usr/bin/env bash
# Tests Carmy's MCP front with the official MCP TypeScript SDK (@modelcontextprotocol/sdk from
# npm, run with the machine's node >= 18), an implementation we did not write, against a real
# carmy-gateway process on the in-memory store.
#
# 1. `npm install` into this directory (node_modules/ is ignored by git).
# 2. Uses the gateway binary CARMY_GATEWAY_BIN if set; otherwise builds it (`cargo build -p
#    carmy-gateway`) and uses target/debug/carmy-gateway.
# 3. Starts the gateway on a free port, runs model-loop.mjs against it, stops the gateway.
# 4. Runs tasks.mjs (MCP tasks through the SDK's 2026-07-28 client, @modelcontextprotocol/client)
#    on two gateways of a fresh database on the PostgreSQL server of DATABASE_URL (scripts/test
#    sets it; psql creates and drops the database). Fails without DATABASE_URL.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$HERE"
echo "run-tests.sh: node $(node --version)"
npm install --no-audit --no-fund --silent

if [[ -z "${CARMY_GATEWAY_BIN:-}" ]]; then
  (cd "$ROOT" && cargo build --quiet -p carmy-gateway)
  target_dir="${CARGO_TARGET_DIR:-target}"
  [[ "$target_dir" = /* ]] || target_dir="$ROOT/$target_dir"
  CARMY_GATEWAY_BIN="$target_dir/debug/carmy-gateway"
fi

port="$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')"
# shellcheck source=scripts/test-gateway.sh
source "$ROOT/scripts/test-gateway.sh"
trap test_gateway_stop EXIT
test_gateway_start "$CARMY_GATEWAY_BIN" "$port" CARMY_API_KEYS="mcp-ts-key=typescript"
node model-loop.mjs "http://127.0.0.1:$port" mcp-ts-key

test_gateway_stop
if [[ -z "${DATABASE_URL:-}" ]]; then
  echo "run-tests.sh: DATABASE_URL is not set: tasks.mjs needs a PostgreSQL server (run through scripts/test)" >&2
  exit 1
fi
database="carmy_mcp_ts_$(node -e 'console.log(require("crypto").randomBytes(6).toString("hex"))')"
psql "$DATABASE_URL" -qc "CREATE DATABASE \"$database\"" >/dev/null
trap 'psql "$DATABASE_URL" -qc "DROP DATABASE IF EXISTS \"$database\" WITH (FORCE)" >/dev/null || true' EXIT
tasks_url="$(node -e 'const u=new URL(process.argv[1]);u.pathname="/"+process.argv[2];console.log(u.toString())' "$DATABASE_URL" "$database")"
node tasks.mjs "$CARMY_GATEWAY_BIN" "$tasks_url"
