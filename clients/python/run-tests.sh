#!/usr/bin/env bash
# Tests the Python client (clients/python) against a real carmy-gateway process.
#
# 1. Creates a virtualenv (CARMY_PYCLIENT_VENV, default ${TMPDIR:-/tmp}/carmy-pyclient-venv) with
#    PYTHON (default python3, >= 3.10), and installs this package from the repository with its
#    test extras (pytest, mypy from PyPI). Nothing is uploaded anywhere.
# 2. Uses the gateway binary CARMY_GATEWAY_BIN if set; otherwise builds it (`cargo build -p
#    carmy-gateway`, a no-op when up to date) and uses target/debug/carmy-gateway.
# 3. Type-checks the package, example and tests (mypy --strict), then runs pytest. Extra
#    arguments go to pytest. Exits non-zero on any failure, including "no tests ran" (pytest 5).
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${CARMY_PYCLIENT_VENV:-${TMPDIR:-/tmp}/carmy-pyclient-venv}"

if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
  echo "run-tests.sh: $PYTHON did not run, or is older than 3.10 (set PYTHON)" >&2
  exit 1
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "run-tests.sh: creating the virtualenv $VENV"
  if ! "$PYTHON" -m venv "$VENV"; then
    # Some distributions ship Python without ensurepip; virtualenv from PyPI does the same job.
    "$PYTHON" -m pip install --quiet --user virtualenv
    "$PYTHON" -m virtualenv "$VENV"
  fi
fi
PY="$VENV/bin/python"

echo "run-tests.sh: installing carmy-client from $HERE"
"$PY" -m pip install --quiet --disable-pip-version-check "$HERE[test]"
# Same version number as a previous install: make sure the repository's code is what is tested.
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$HERE"
"$PY" -c 'import carmy_client, sys; print("run-tests.sh: testing", carmy_client.__file__)'

if [[ -z "${CARMY_GATEWAY_BIN:-}" ]]; then
  echo "run-tests.sh: building carmy-gateway"
  (cd "$ROOT" && cargo build --quiet -p carmy-gateway)
  target_dir="${CARGO_TARGET_DIR:-target}"
  [[ "$target_dir" = /* ]] || target_dir="$ROOT/$target_dir"
  export CARMY_GATEWAY_BIN="$target_dir/debug/carmy-gateway"
fi
echo "run-tests.sh: gateway $CARMY_GATEWAY_BIN"

cd "$HERE"
"$VENV/bin/mypy" --config-file pyproject.toml src/carmy_client examples tests

status=0
"$PY" -m pytest -p no:cacheprovider "$@" || status=$?
if [[ $status -eq 5 ]]; then
  echo "run-tests.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
