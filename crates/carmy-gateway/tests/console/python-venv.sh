#!/usr/bin/env bash
# Creates (once) the virtualenv with Selenium (PyPI) that the console's browser test
# (tests/it/front/console.rs) drives headless Chromium with, and prints that venv's python path.
# Chromium and its driver come from Debian's packages (`chromium`, `chromium-driver`; scripts/test
# installs them). CARMY_CONSOLE_VENV sets the venv (default ${TMPDIR:-/tmp}/carmy-console-venv);
# PYTHON the interpreter (default python3). Progress goes to stderr.
set -euo pipefail
PYTHON="${PYTHON:-python3}"
VENV="${CARMY_CONSOLE_VENV:-${TMPDIR:-/tmp}/carmy-console-venv}"
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "python-venv.sh: creating $VENV" >&2
  if ! "$PYTHON" -m venv "$VENV" >&2; then
    "$PYTHON" -m pip install --quiet --user virtualenv >&2
    "$PYTHON" -m virtualenv "$VENV" >&2
  fi
fi
if ! "$VENV/bin/python" -c 'import selenium' 2>/dev/null; then
  echo "python-venv.sh: installing selenium>=4.10,<5 from PyPI" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check 'selenium>=4.10,<5' >&2
fi
echo "$VENV/bin/python"
