#!/usr/bin/env bash
# Creates (once) the virtualenv with the official MCP Python SDK (`mcp` 2.x from PyPI) that the
# gateway's interoperability test runs its server with, and prints that venv's python path.
# CARMY_MCP_VENV sets the venv (default ${TMPDIR:-/tmp}/carmy-mcp-sdk-venv); PYTHON the
# interpreter (default python3, >= 3.10). Progress goes to stderr.
set -euo pipefail
PYTHON="${PYTHON:-python3}"
VENV="${CARMY_MCP_VENV:-${TMPDIR:-/tmp}/carmy-mcp-sdk-venv}"
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "python-venv.sh: creating $VENV" >&2
  if ! "$PYTHON" -m venv "$VENV" >&2; then
    "$PYTHON" -m pip install --quiet --user virtualenv >&2
    "$PYTHON" -m virtualenv "$VENV" >&2
  fi
fi
# 2.3 at least: tests/mcp/python_sdk_task_server.py writes the tasks extension with the SDK's
# server `Extension` hooks and 2026-07-28 results.
check='import importlib.metadata as m, mcp.server.mcpserver, mcp.server.extension
assert tuple(int(part) for part in m.version("mcp").split(".")[:2]) >= (2, 3)'
if ! "$VENV/bin/python" -c "$check" 2>/dev/null; then
  echo "python-venv.sh: installing mcp>=2.3,<3 from PyPI" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check 'mcp>=2.3,<3' >&2
fi
echo "$VENV/bin/python"
