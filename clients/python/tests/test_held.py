"""Functions held by this process (docs/semantics.md §16) against a real gateway on PostgreSQL
(``$DATABASE_URL``, a fresh database per module) and a counting HTTP upstream: run once,
replay, conflict, failures, values JSON cannot carry, and holders killed (SIGKILL) or paused
past their lease (SIGSTOP) in processes of their own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from carmy_client import (
    AsyncCarmyClient,
    CarmyClient,
    ConflictError,
    ExecutionInterrupted,
    Found,
    NotFound,
    NotJsonError,
    ToolFailedError,
    held,
)
from conftest import Gateway, start_gateway
from counting_upstream import CountingUpstream

HERE = Path(__file__).resolve().parent
TOOLS = """
[[client_tools]]
name = "charge"
input_schema = { type = "object", required = ["customer", "amount"] }

[[client_tools]]
name = "add"
"""


def _psql(server: str, statement: str) -> None:
    subprocess.run(["psql", server, "-qc", statement], check=True, capture_output=True)


@pytest.fixture(scope="module")
def pg_gateway() -> Iterator[Gateway]:
    """A gateway on a fresh PostgreSQL database with the client tools ``charge`` and ``add``."""
    server = os.environ.get("DATABASE_URL")
    if not server:
        pytest.fail("DATABASE_URL is not set: run through scripts/test, or set it")
    name = f"carmy_held_py_{uuid.uuid4().hex[:12]}"
    _psql(server, f'CREATE DATABASE "{name}"')
    tools = Path(tempfile.mkdtemp()) / "tools.toml"
    tools.write_text(TOOLS)
    url = urlunsplit(urlsplit(server)._replace(path=f"/{name}"))
    gateway = start_gateway(DATABASE_URL=url, CARMY_TOOLS_FILE=str(tools))
    try:
        yield gateway
    finally:
        gateway.stop()
        _psql(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def upstream() -> Iterator[CountingUpstream]:
    running = CountingUpstream().start()
    yield running
    running.stop()


def rid() -> str:
    return f"held-{uuid.uuid4().hex}"


def record_of(gateway: Gateway, request_id: str) -> httpx.Response:
    return httpx.get(f"{gateway.url}/v1/executions", params={"request_id": request_id})


def test_a_wrapped_function_runs_once_and_its_retries_replay(pg_gateway: Gateway) -> None:
    runs: list[int] = []
    with CarmyClient(pg_gateway.url) as carmy:

        @held(carmy)
        def add(a: int, b: int, request_id: str) -> dict[str, int]:
            runs.append(a + b)
            return {"sum": a + b, "big": 2**64}

        key = rid()
        assert add(2, 3, request_id=key) == {"sum": 5, "big": 2**64}
        assert add(2, 3, request_id=key) == {"sum": 5, "big": 2**64}
        assert runs == [5]
        record = record_of(pg_gateway, key).json()
        assert record["status"] == "completed" and record["tool"] == "add"
        with pytest.raises(ConflictError):
            add(2, 4, request_id=key)
        assert runs == [5]


def test_the_context_manager_holds_renews_and_records(pg_gateway: Gateway) -> None:
    key = rid()
    with CarmyClient(pg_gateway.url) as carmy:
        with carmy.hold("add", {"a": 1}, key, lease=0.6) as execution:
            assert execution.replay is None and execution.fencing_token
            # Past three leases: only the background renewal keeps it running.
            time.sleep(2.0)
            other = httpx.post(
                f"{pg_gateway.url}/v1/held",
                json={"tool": "add", "arguments": {"a": 1}, "request_id": key},
            )
            assert other.status_code == 409 and other.json()["state"] == "running"
        # Left without complete(): recorded as a failure whose effect is unknown.
        record = record_of(pg_gateway, key).json()
        assert record["status"] == "failed"
        assert record["error"]["code"] == "NO_OUTCOME"
        with carmy.hold("add", {"a": 1}, key) as again:
            assert again.replay is not None and again.replay.execution_id == record["execution_id"]


def test_a_failure_is_recorded_and_replayed_without_running_again(pg_gateway: Gateway) -> None:
    runs: list[str] = []
    with CarmyClient(pg_gateway.url) as carmy:

        @held(carmy, "add")
        def boom(request_id: str) -> None:
            runs.append(request_id)
            raise RuntimeError("the bank said no")

        key = rid()
        with pytest.raises(RuntimeError):
            boom(request_id=key)
        with pytest.raises(ToolFailedError) as replayed:
            boom(request_id=key)
        assert runs == [key]
        assert replayed.value.code == "CLIENT_ERROR"
        assert "the bank said no" in replayed.value.detail
        assert replayed.value.execution.error["effect"] == "unknown"


def test_values_json_cannot_carry_are_refused_before_anything_runs(pg_gateway: Gateway) -> None:
    runs: list[Any] = []
    with CarmyClient(pg_gateway.url) as carmy:

        @held(carmy, "add")
        def store(value: Any, request_id: str) -> Any:
            runs.append(value)
            return value

        for bad in ({1, 2}, float("nan"), (1, 2), {1: "a"}, object()):
            key = rid()
            with pytest.raises(NotJsonError):
                store(bad, request_id=key)
            assert record_of(pg_gateway, key).status_code == 404
        assert runs == []


@pytest.mark.anyio
async def test_an_async_function_runs_once_and_replays(pg_gateway: Gateway) -> None:
    runs: list[int] = []
    async with AsyncCarmyClient(pg_gateway.url) as carmy:

        @held(carmy, "add", lease=0.6)
        async def add(a: int, request_id: str) -> int:
            runs.append(a)
            import anyio

            await anyio.sleep(1.5)  # past two leases: the renewal task keeps it
            return a * 10

        key = rid()
        assert await add(4, request_id=key) == 40
        assert await add(4, request_id=key) == 40
        assert runs == [4]


def _child(gateway: Gateway, upstream: CountingUpstream, key: str, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "held_child.py"), gateway.url, upstream.url, key, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _until(what: str, check: Any, deadline: float = 20.0) -> None:
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_reservation_after_a_release_names_the_released_execution(pg_gateway: Gateway) -> None:
    key = rid()
    call = {"tool": "add", "arguments": {"a": 4}, "request_id": key, "lease_ms": 500}
    first = httpx.post(f"{pg_gateway.url}/v1/held", json=call)
    assert first.status_code == 201 and "rerun_of" not in first.json()
    released_id = first.json()["execution_id"]
    _until(
        "the holder's lease to lapse",
        lambda: record_of(pg_gateway, key).json().get("status") == "interrupted",
    )
    released = httpx.post(
        f"{pg_gateway.url}/v1/executions/{released_id}/release",
        json={"note": "operator: nothing happened"},
    )
    assert released.status_code == 200, released.text
    with CarmyClient(pg_gateway.url) as carmy:
        with carmy.hold("add", {"a": 4}, key) as holding:
            assert holding.rerun_of == {
                "execution_id": released_id,
                "ended": "released",
                "by": released.json()["resolution"]["by"],
                "note": "operator: nothing happened",
            }
            holding.complete({"sum": 4})


def test_a_holder_killed_mid_charge_is_reconciled_and_charges_once(
    pg_gateway: Gateway, upstream: CountingUpstream
) -> None:
    key = rid()
    child = _child(pg_gateway, upstream, key, "hang")
    try:
        _until("the child's charge", lambda: upstream.count(key) == 1)
        child.kill()  # SIGKILL: no outcome, no release
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
    # Another process's retry: uncertain (running) while the dead holder's lease lasts.
    call = {"tool": "charge", "arguments": {"customer": "cus_42", "amount": 500}, "request_id": key}
    first = httpx.post(f"{pg_gateway.url}/v1/held", json=call)
    assert first.status_code == 409 and first.json()["code"] == "EXECUTION_UNCERTAIN"
    assert first.json()["state"] == "running"

    runs: list[str] = []
    reconciled: list[str] = []
    with CarmyClient(pg_gateway.url) as carmy:

        @held(carmy, "charge", lease=1.0)
        def charge(customer: str, amount: int, request_id: str) -> dict[str, object]:
            runs.append(request_id)
            answer = httpx.post(f"{upstream.url}/charge", json={"key": request_id})
            return {"charge_id": answer.json()["charge_id"]}

        @charge.reconcile  # type: ignore[attr-defined, untyped-decorator]
        def _(customer: str, amount: int, request_id: str) -> Found | NotFound | None:
            reconciled.append(request_id)
            found = httpx.get(f"{upstream.url}/charges/{request_id}")
            if found.status_code == 404:
                return NotFound()
            return Found({"charge_id": found.json()["charges"][0]["charge_id"]})

        assert charge("cus_42", 500, request_id=key) == {"charge_id": 1}
        # A later retry replays the reconciled outcome: no hook, no run.
        assert charge("cus_42", 500, request_id=key) == {"charge_id": 1}
    assert runs == [] and reconciled == [key]
    assert upstream.count(key) == 1
    record = record_of(pg_gateway, key).json()
    assert record["data"] == {"charge_id": 1}
    assert record["resolution"]["note"].startswith("reconciled by the client")


def test_without_a_reconcile_hook_an_interrupted_execution_raises(
    pg_gateway: Gateway, upstream: CountingUpstream
) -> None:
    key = rid()
    child = _child(pg_gateway, upstream, key, "hang")
    try:
        _until("the child's charge", lambda: upstream.count(key) == 1)
        child.kill()
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
    with CarmyClient(pg_gateway.url) as carmy:
        with pytest.raises(ExecutionInterrupted) as interrupted:
            with carmy.hold("charge", {"customer": "cus_42", "amount": 500}, key):
                pytest.fail("the function must not run")
    assert interrupted.value.execution_id
    assert upstream.count(key) == 1


def test_a_holder_paused_past_its_lease_is_refused_and_the_decision_stands(
    pg_gateway: Gateway, upstream: CountingUpstream
) -> None:
    key = rid()
    child = _child(pg_gateway, upstream, key, "finish")
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "charged"
        os.kill(child.pid, signal.SIGSTOP)
        _until(
            "the paused holder's lease to lapse",
            lambda: record_of(pg_gateway, key).json().get("status") == "interrupted",
        )
        execution_id = record_of(pg_gateway, key).json()["execution_id"]
        decided = httpx.post(
            f"{pg_gateway.url}/v1/executions/{execution_id}/resolve",
            json={"status": "completed", "data": {"charge_id": "seen by the operator"},
                  "note": "operator: charge found at the bank"},
        )
        assert decided.status_code == 200, decided.text
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
    assert child.returncode == 3, (out, err)
    assert "superseded EXECUTION_SUPERSEDED" in out
    record = record_of(pg_gateway, key).json()
    assert record["data"] == {"charge_id": "seen by the operator"}
    metrics = httpx.get(f"{pg_gateway.url}/metrics").text.splitlines()
    assert "carmy_late_arrivals_total 1" in metrics
    assert upstream.count(key) == 1
