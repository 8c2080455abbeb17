#!/usr/bin/env bash
# Runs the framework recipes of docs/mcp.md against one real carmy-gateway, each framework
# with a scripted model and the real packages from their registries:
# - Pydantic AI, the OpenAI Agents SDK and the official MCP Python SDK 2.x: one venv,
#   CARMY_FW_PY_VENV (default ${TMPDIR:-/tmp}/carmy-fw-py-venv), from requirements-py.txt;
# - LangChain / LangGraph through langchain-mcp-adapters 0.3 on the MCP SDK 1.x: its own venv,
#   CARMY_FW_LC_VENV (default ${TMPDIR:-/tmp}/carmy-fw-lc-venv), from requirements-langchain.txt;
# - DBOS Transact for the held workflow recipe of docs/held.md: its own venv, CARMY_FW_DBOS_VENV
#   (default ${TMPDIR:-/tmp}/carmy-fw-dbos-venv), from requirements-dbos.txt;
# - the Vercel AI SDK (`ai`, `@ai-sdk/mcp`), the official TypeScript SDK and Claude Code's JSON:
#   node_modules cached in CARMY_FW_NODE_CACHE (default ${TMPDIR:-/tmp}/carmy-fw-node) and linked
#   here (node_modules/ is ignored by git).
# A venv or cache whose requirements did not change is reused as it is (no registry traffic).
# The gateway is CARMY_GATEWAY_BIN if set, else target/debug/carmy-gateway built by cargo; it runs
# on the in-memory store with CARMY_MCP_ANSWER_WITHIN_MS=1000 so that the tests' 4 s `sleep` is a
# call slower than Carmy's answer time. The held recipes of docs/held.md (functions run by the
# agent, docs/semantics.md §16) run against a second gateway on a fresh database of the
# PostgreSQL server of DATABASE_URL (scripts/test sets it; psql creates and drops it), with the
# repository's clients (clients/python and its dependencies installed into the venvs,
# clients/typescript imported by path). Exits non-zero on any failure.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
PY_VENV="${CARMY_FW_PY_VENV:-${TMPDIR:-/tmp}/carmy-fw-py-venv}"
LC_VENV="${CARMY_FW_LC_VENV:-${TMPDIR:-/tmp}/carmy-fw-lc-venv}"
DBOS_VENV="${CARMY_FW_DBOS_VENV:-${TMPDIR:-/tmp}/carmy-fw-dbos-venv}"
NODE_CACHE="${CARMY_FW_NODE_CACHE:-${TMPDIR:-/tmp}/carmy-fw-node}"

# Creates the venv $1 (once) with the requirements file $2, reinstalling only when it changed.
venv() {
  local dir="$1" requirements="$2" stamp
  stamp="$(sha256sum "$requirements" | cut -d' ' -f1)"
  if [[ ! -x "$dir/bin/python" ]]; then
    echo "run-tests.sh: creating $dir" >&2
    "$PYTHON" -m venv "$dir" >&2
  fi
  if [[ "$(cat "$dir/.carmy-requirements" 2>/dev/null)" != "$stamp" ]]; then
    echo "run-tests.sh: installing $(basename "$requirements") into $dir" >&2
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2
    echo "$stamp" >"$dir/.carmy-requirements"
  fi
}
venv "$PY_VENV" "$HERE/requirements-py.txt"
venv "$LC_VENV" "$HERE/requirements-langchain.txt"
venv "$DBOS_VENV" "$HERE/requirements-dbos.txt"
for dir in "$PY_VENV" "$LC_VENV" "$DBOS_VENV"; do
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "$ROOT/clients/python" >&2
  # Same version number as a previous install: the repository's code is what runs.
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall \
    "$ROOT/clients/python" >&2
done

stamp="$(sha256sum "$HERE/package.json" | cut -d' ' -f1)"
if [[ "$(cat "$NODE_CACHE/.carmy-package" 2>/dev/null)" != "$stamp" ]]; then
  echo "run-tests.sh: npm install into $NODE_CACHE" >&2
  mkdir -p "$NODE_CACHE"
  cp "$HERE/package.json" "$NODE_CACHE/package.json"
  (cd "$NODE_CACHE" && npm install --no-audit --no-fund --silent)
  echo "$stamp" >"$NODE_CACHE/.carmy-package"
fi
if [[ ! -L "$HERE/node_modules" ]]; then
  rm -rf "$HERE/node_modules"
fi
ln -sfn "$NODE_CACHE/node_modules" "$HERE/node_modules"

if [[ -z "${CARMY_GATEWAY_BIN:-}" ]]; then
  (cd "$ROOT" && cargo build --quiet -p carmy-gateway)
  target_dir="${CARGO_TARGET_DIR:-target}"
  [[ "$target_dir" = /* ]] || target_dir="$ROOT/$target_dir"
  CARMY_GATEWAY_BIN="$target_dir/debug/carmy-gateway"
fi

port="$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
# shellcheck source=scripts/test-gateway.sh
source "$ROOT/scripts/test-gateway.sh"
trap test_gateway_stop EXIT
test_gateway_start "$CARMY_GATEWAY_BIN" "$port" CARMY_API_KEYS="fw-key=frameworks" \
  CARMY_MCP_ANSWER_WITHIN_MS=1000
export CARMY_FW_GATEWAY="http://127.0.0.1:$port" CARMY_FW_KEY="fw-key"

# The held recipes' gateway: PostgreSQL, the client tool `charge`.
if [[ -z "${DATABASE_URL:-}" ]]; then
  echo "run-tests.sh: DATABASE_URL is not set: the held recipes need a PostgreSQL server (run through scripts/test)" >&2
  exit 1
fi
held_db="carmy_fw_held_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
held_dir="$(mktemp -d)"
held_port="$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
held_stop() {
  [[ -n "${HELD_PID:-}" ]] && { kill "$HELD_PID" 2>/dev/null || true; wait "$HELD_PID" 2>/dev/null || true; }
  psql "$DATABASE_URL" -qc "DROP DATABASE IF EXISTS \"$held_db\" WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$held_dir"
}
trap 'test_gateway_stop; held_stop' EXIT
psql "$DATABASE_URL" -qc "CREATE DATABASE \"$held_db\"" >/dev/null
printf '[[client_tools]]\nname = "charge"\ninput_schema = { type = "object", required = ["customer", "amount"] }\n' \
  >"$held_dir/tools.toml"
held_url="$("$PYTHON" -c 'import sys, urllib.parse as u; p=u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/"+sys.argv[2])))' "$DATABASE_URL" "$held_db")"
env -u CARMY_API_KEYS_FILE DATABASE_URL="$held_url" CARMY_TOOLS_FILE="$held_dir/tools.toml" \
  CARMY_LISTEN="127.0.0.1:$held_port" RUST_LOG=warn "$CARMY_GATEWAY_BIN" >"$held_dir/gateway.log" 2>&1 &
HELD_PID=$!
for _ in $(seq 1 300); do
  curl -fsS "http://127.0.0.1:$held_port/healthz" >/dev/null 2>&1 && break
  kill -0 "$HELD_PID" 2>/dev/null || { cat "$held_dir/gateway.log" >&2; exit 1; }
  sleep 0.1
done
export CARMY_FW_HELD_GATEWAY="http://127.0.0.1:$held_port"

cd "$HERE/tests"
status=0
"$PY_VENV/bin/python" -m pytest -q -p no:cacheprovider test_pydantic_ai.py test_openai_agents.py \
  test_mcp_sdk_model.py test_held_recipes.py || status=1
"$LC_VENV/bin/python" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning test_langgraph.py \
  test_held_langchain.py || status=1
"$DBOS_VENV/bin/python" -m pytest -q -p no:cacheprovider test_held_dbos.py || status=1
node --test ai_sdk.test.mjs sdk.test.mjs held_ai_sdk.test.mjs || status=1
if [[ $status -ne 0 ]]; then
  echo "run-tests.sh: the gateway's log:" >&2
  cat "$TEST_GATEWAY_LOG" >&2
  echo "run-tests.sh: the held recipes' gateway's log:" >&2
  cat "$held_dir/gateway.log" >&2
fi
exit "$status"
