#!/usr/bin/env bash
# Creates (once) the virtualenv with the official OpenTelemetry protocol bindings
# (`opentelemetry-proto` from PyPI) that the gateway's trace test runs its OTLP receiver with
# (receiver.py), and prints that venv's python path.
# CARMY_OTLP_VENV sets the venv (default ${TMPDIR:-/tmp}/carmy-otlp-venv); PYTHON the
# interpreter (default python3). Progress goes to stderr.
set -euo pipefail
PYTHON="${PYTHON:-python3}"
VENV="${CARMY_OTLP_VENV:-${TMPDIR:-/tmp}/carmy-otlp-venv}"
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "otlp/python-venv.sh: creating $VENV" >&2
  if ! "$PYTHON" -m venv "$VENV" >&2; then
    "$PYTHON" -m pip install --quiet --user virtualenv >&2
    "$PYTHON" -m virtualenv "$VENV" >&2
  fi
fi
if ! "$VENV/bin/python" -c 'import opentelemetry.proto.collector.trace.v1.trace_service_pb2' 2>/dev/null; then
  echo "otlp/python-venv.sh: installing opentelemetry-proto from PyPI" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check 'opentelemetry-proto>=1.20,<2' >&2
fi
echo "$VENV/bin/python"
