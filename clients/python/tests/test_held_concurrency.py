"""1,000 concurrent wrapped calls over 200 identities from 4 processes in two languages (two
Python workers, two node workers of clients/typescript), against one gateway on PostgreSQL and a
counting upstream: every identity's function ran exactly once, and every caller of an identity
got that run's value (docs/semantics.md §16)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import Gateway
from counting_upstream import CountingUpstream
from test_held import pg_gateway, upstream  # noqa: F401  (fixtures)

HERE = Path(__file__).resolve().parent
NODE_WORKER = HERE.parents[1] / "typescript" / "test" / "worker.mjs"
IDENTITIES = 200
CALLS = 1000


def test_each_identity_runs_once_across_four_processes_in_two_languages(
    pg_gateway: Gateway, upstream: CountingUpstream  # noqa: F811
) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: the concurrency test runs two node workers")
    run = uuid.uuid4().hex[:8]
    keys = [f"conc-{run}-{i}" for i in range(IDENTITIES)] * (CALLS // IDENTITIES)
    random.Random(7).shuffle(keys)
    parts = [keys[i::4] for i in range(4)]
    commands = [
        [sys.executable, str(HERE / "held_worker.py")],
        [node, str(NODE_WORKER)],
        [sys.executable, str(HERE / "held_worker.py")],
        [node, str(NODE_WORKER)],
    ]
    workers = [
        subprocess.Popen(
            [*command, pg_gateway.url, upstream.url, ",".join(part)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command, part in zip(commands, parts)
    ]
    answers: dict[str, set[int]] = {}
    calls = 0
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err[-4000:]
        for key, charge_id in json.loads(out.strip().splitlines()[-1]):
            answers.setdefault(key, set()).add(charge_id)
            calls += 1
    assert calls == CALLS
    assert len(answers) == IDENTITIES
    charged = {key: upstream.count(key) for key in answers}
    assert set(charged.values()) == {1}, {k: v for k, v in charged.items() if v != 1}
    assert len(upstream.charges) == IDENTITIES
    by_key = {charge["key"]: charge["charge_id"] for charge in upstream.charges}
    assert answers == {key: {by_key[key]} for key in answers}
