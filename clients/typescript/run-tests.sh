#!/usr/bin/env bash
# Tests the TypeScript client (clients/typescript) with node's built-in test runner against a
# real carmy-gateway on a fresh database of the PostgreSQL server of DATABASE_URL (scripts/test
# sets it; psql creates and drops the database), and checks that `npm install` of this folder
# from another project works and imports. No runtime dependencies; nothing is downloaded.
# Uses CARMY_GATEWAY_BIN if set; otherwise builds it (`cargo build -p carmy-gateway`).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
echo "run-tests.sh: node $(node --version)"
if [[ -z "${DATABASE_URL:-}" ]]; then
  echo "run-tests.sh: DATABASE_URL is not set: the tests need a PostgreSQL server (run through scripts/test)" >&2
  exit 1
fi
if [[ -z "${CARMY_GATEWAY_BIN:-}" ]]; then
  (cd "$ROOT" && cargo build --quiet -p carmy-gateway)
  target_dir="${CARGO_TARGET_DIR:-target}"
  [[ "$target_dir" = /* ]] || target_dir="$ROOT/$target_dir"
  CARMY_GATEWAY_BIN="$target_dir/debug/carmy-gateway"
fi
export CARMY_GATEWAY_BIN

# `npm install ./clients/typescript` from another project, then import it by name.
consumer="$(mktemp -d)"
database="carmy_ts_client_$(node -e 'console.log(require("crypto").randomBytes(6).toString("hex"))')"
trap 'rm -rf "$consumer"; psql "$DATABASE_URL" -qc "DROP DATABASE IF EXISTS \"$database\" WITH (FORCE)" >/dev/null || true' EXIT
(cd "$consumer" && npm init -y >/dev/null && npm install --no-audit --no-fund --silent "$HERE" \
  && node --input-type=module -e 'import { CarmyClient, held } from "@carmy/client"; if (typeof held !== "function" || typeof CarmyClient !== "function") process.exit(1); console.log("run-tests.sh: @carmy/client installs and imports")')

psql "$DATABASE_URL" -qc "CREATE DATABASE \"$database\"" >/dev/null
CARMY_TEST_DATABASE_URL="$(node -e 'const u=new URL(process.argv[1]);u.pathname="/"+process.argv[2];console.log(u.toString())' "$DATABASE_URL" "$database")"
export CARMY_TEST_DATABASE_URL
cd "$HERE"
node --test --test-concurrency=1 test/*.test.mjs
