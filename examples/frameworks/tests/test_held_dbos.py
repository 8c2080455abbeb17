"""The DBOS recipe of docs/held.md (held_dbos.py): a workflow's process is killed mid-step, after
its held function charged the bank and before the outcome was recorded; a new process launches
DBOS, which recovers the workflow and re-runs the step; Carmy answers it uncertain until the dead
holder's lease lapses, then the reconcile hook finds the charge. The bank is charged once and
the workflow returns that charge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from held_bank import Bank

RECIPE = Path(__file__).resolve().parents[1] / "held_dbos.py"


@pytest.fixture
def system_database() -> Iterator[str]:
    server = os.environ.get("DATABASE_URL")
    if not server:
        pytest.fail("DATABASE_URL is not set: run examples/frameworks/run-tests.sh through scripts/test")
    name = f"carmy_fw_dbos_{uuid.uuid4().hex[:12]}"
    subprocess.run(["psql", server, "-qc", f'CREATE DATABASE "{name}"'], check=True, capture_output=True)
    try:
        yield urlunsplit(urlsplit(server)._replace(scheme="postgresql", path=f"/{name}"))
    finally:
        subprocess.run(["psql", server, "-qc", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'], capture_output=True)


def test_a_workflow_killed_mid_step_is_recovered_and_charges_once(system_database: str) -> None:
    gateway = os.environ.get("CARMY_FW_HELD_GATEWAY")
    if not gateway:
        pytest.fail("CARMY_FW_HELD_GATEWAY is not set: run examples/frameworks/run-tests.sh")
    bank = Bank()
    workflow = f"checkout-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "DBOS_SYSTEM_DATABASE_URL": system_database, "CARMY_GATEWAY": gateway,
           "CARMY_BANK": bank.url, "CARMY_LEASE_SECONDS": "1"}
    try:
        first = subprocess.Popen(
            [sys.executable, str(RECIPE), "start", workflow],
            env={**env, "CARMY_DEMO_CRASH_AFTER_CHARGE": "1"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        deadline = time.monotonic() + 60
        while not any(charge["key"].startswith(f"{workflow}:") for charge in bank.charges):
            if first.poll() is not None or time.monotonic() > deadline:
                first.kill()
                pytest.fail(f"the first run never charged: {first.communicate()}")
            time.sleep(0.05)
        first.kill()  # SIGKILL mid-step: DBOS has no step output, Carmy no outcome
        first.wait(timeout=10)

        second = subprocess.run(
            [sys.executable, str(RECIPE), "recover", workflow],
            env=env, capture_output=True, text=True, timeout=120,
        )
        assert second.returncode == 0, second.stderr[-4000:]
        result = json.loads(second.stdout.strip().splitlines()[-1])
        charges = [charge for charge in bank.charges if charge["key"].startswith(f"{workflow}:")]
        assert len(charges) == 1, charges
        assert result["charge_id"] == charges[0]["charge_id"]
        record = httpx.get(f"{gateway}/v1/executions", params={"request_id": charges[0]["key"]}).json()
        assert record["status"] == "completed"
        assert record["resolution"]["note"].startswith("reconciled by the client")
    finally:
        bank.close()
