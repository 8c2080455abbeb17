"""The gateway run-tests.sh started (``CARMY_FW_GATEWAY``, ``CARMY_FW_KEY``) and the recipes'
directory on the import path. Without the gateway the tests fail: they never skip."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@pytest.fixture(scope="session")
def gateway() -> tuple[str, str]:
    """The gateway's base URL and API key."""
    base, key = os.environ.get("CARMY_FW_GATEWAY"), os.environ.get("CARMY_FW_KEY")
    if not base or not key:
        pytest.fail("CARMY_FW_GATEWAY and CARMY_FW_KEY are not set: run examples/frameworks/run-tests.sh")
    return base, key
