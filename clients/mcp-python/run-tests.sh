#!/usr/bin/env bash
# Tests Carmy's MCP front (/mcp) with the official MCP Python SDK (`mcp` 2.x from PyPI), an
# implementation we did not write, against a real carmy-gateway process.
#
# 1. Creates a virtualenv (CARMY_MCP_PY_VENV, default ${TMPDIR:-/tmp}/carmy-mcp-py-venv) with
#    PYTHON (default python3, >= 3.10) and installs requirements.txt into it.
# 2. Uses the gateway binary CARMY_GATEWAY_BIN if set; otherwise builds it (`cargo build -p
#    carmy-gateway`, a no-op when up to date) and uses target/debug/carmy-gateway.
# 3. Runs pytest; extra arguments go to pytest. The multi-replica test needs DATABASE_URL (a
#    server where the user may CREATE DATABASE; scripts/test sets it) and fails without it. Exits non-zero on any failure, including "no
#    tests ran" (pytest's exit code 5).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${CARMY_MCP_PY_VENV:-${TMPDIR:-/tmp}/carmy-mcp-py-venv}"

if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
  echo "run-tests.sh: $PYTHON did not run, or is older than 3.10 (set PYTHON)" >&2
  exit 1
fi
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "run-tests.sh: creating the virtualenv $VENV"
  if ! "$PYTHON" -m venv "$VENV"; then
    "$PYTHON" -m pip install --quiet --user virtualenv
    "$PYTHON" -m virtualenv "$VENV"
  fi
fi
PY="$VENV/bin/python"
"$PY" -m pip install --quiet --disable-pip-version-check -r "$HERE/requirements.txt"
"$PY" -c 'import importlib.metadata as m; print("run-tests.sh: mcp", m.version("mcp"))'

if [[ -z "${CARMY_GATEWAY_BIN:-}" ]]; then
  echo "run-tests.sh: building carmy-gateway"
  (cd "$ROOT" && cargo build --quiet -p carmy-gateway)
  target_dir="${CARGO_TARGET_DIR:-target}"
  [[ "$target_dir" = /* ]] || target_dir="$ROOT/$target_dir"
  export CARMY_GATEWAY_BIN="$target_dir/debug/carmy-gateway"
fi
echo "run-tests.sh: gateway $CARMY_GATEWAY_BIN"

cd "$HERE"
status=0
"$PY" -m pytest -p no:cacheprovider "$@" || status=$?
if [[ $status -eq 5 ]]; then
  echo "run-tests.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
