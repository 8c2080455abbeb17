"""Both clients against scripted answers (``httpx.MockTransport``), with a fake clock and sleep:
what goes on the wire on each attempt, and how long the client sleeps between attempts.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from carmy_client import (
    AsyncCarmyClient,
    CarmyClient,
    ConflictError,
    Execution,
    ExecutionInterrupted,
    PendingExecution,
    RetryPolicy,
    UnavailableError,
    UncertainRunningError,
)

RECORD = {
    "execution_id": "exec_a1",
    "status": "completed",
    "data": {"order_id": 7},
    "error": None,
    "tool": "create_order",
    "request_id": None,  # filled in from the request
    "session_id": "default",
    "replayed": True,
    "started_at": "2026-12-01T10:22:04.475Z",
    "finished_at": "2026-12-01T10:22:04.4751234Z",
}


def problem(status: int, **members: Any) -> httpx.Response:
    headers = {"content-type": "application/problem+json"}
    retry_after = members.pop("retry_after", None)
    if retry_after is not None:
        headers["retry-after"] = retry_after
    return httpx.Response(status, headers=headers, json={"status": status, **members})


class Script:
    """Answers the n-th request with the n-th entry (a response, or an exception to raise)."""

    def __init__(self, *steps: httpx.Response | Exception) -> None:
        self.steps = list(steps)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        step = self.steps[len(self.requests) - 1]
        if isinstance(step, Exception):
            raise step
        if step.status_code == 200:
            body = dict(RECORD, request_id=json.loads(request.content)["request_id"])
            return httpx.Response(200, json=body)
        return step

    def request_ids(self) -> list[str]:
        return [json.loads(r.content)["request_id"] for r in self.requests]


class FakeTime:
    """A monotonic clock that only moves when the client sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


Runner = Callable[[Script, FakeTime, RetryPolicy], Any]


def run_sync(script: Script, fake: FakeTime, policy: RetryPolicy, **call: Any) -> Execution:
    with CarmyClient(
        "http://carmy.test",
        api_key="k1",
        retry=policy,
        transport=httpx.MockTransport(script),
        sleep=fake.sleep,
        clock=fake.clock,
        rng=random.Random(5),
    ) as client:
        return client.execute("create_order", {"sku": "a"}, **call)


async def run_async(script: Script, fake: FakeTime, policy: RetryPolicy, **call: Any) -> Execution:
    async with AsyncCarmyClient(
        "http://carmy.test",
        api_key="k1",
        retry=policy,
        transport=httpx.MockTransport(script),
        sleep=fake.async_sleep,
        clock=fake.clock,
        rng=random.Random(5),
    ) as client:
        return await client.execute("create_order", {"sku": "a"}, **call)


@pytest.fixture(params=["sync", "async"])
def execute(request: pytest.FixtureRequest) -> Callable[..., Execution]:
    """Runs one execute through the sync or the async client (same assertions for both)."""
    import anyio

    def call(script: Script, fake: FakeTime, policy: RetryPolicy, **kw: Any) -> Execution:
        if request.param == "sync":
            return run_sync(script, fake, policy, **kw)

        async def main() -> Execution:
            return await run_async(script, fake, policy, **kw)

        return anyio.run(main)

    return call


POLICY = RetryPolicy(initial_backoff=0.1, max_backoff=0.1, deadline=60.0, max_attempts=5)


def test_same_generated_request_id_on_every_attempt(execute: Callable[..., Execution]) -> None:
    script = Script(
        httpx.RemoteProtocolError("Server disconnected without sending a response."),
        problem(503, code="STORE_UNAVAILABLE"),
        problem(409, code="EXECUTION_UNCERTAIN", state="running", execution_id="exec_a1"),
        httpx.Response(200),
    )
    fake = FakeTime()
    result = execute(script, fake, POLICY)
    ids = script.request_ids()
    assert len(ids) == 4 and len(set(ids)) == 1
    assert result.request_id == ids[0] and result.replayed and result.data == {"order_id": 7}
    assert result.finished_at is not None and result.finished_at.microsecond == 475123
    assert len(fake.sleeps) == 3 and all(0.0 <= s <= 0.1 for s in fake.sleeps)
    for sent in script.requests:
        assert sent.headers["authorization"] == "Bearer k1"
        assert sent.headers["prefer"] == "wait=10"
        assert sent.headers["content-type"] == "application/json"


def test_given_request_id_and_optional_members_are_sent(execute: Callable[..., Execution]) -> None:
    script = Script(httpx.Response(200))
    execute(script, FakeTime(), POLICY, request_id="mine", session_id="s1", metadata={"k": 1})
    assert json.loads(script.requests[0].content) == {
        "tool": "create_order",
        "arguments": {"sku": "a"},
        "request_id": "mine",
        "session_id": "s1",
        "metadata": {"k": 1},
    }


def test_retry_after_is_slept(execute: Callable[..., Execution]) -> None:
    script = Script(problem(503, code="STORE_UNAVAILABLE", retry_after="4"), httpx.Response(200))
    fake = FakeTime()
    execute(script, fake, POLICY)
    assert fake.sleeps == [4.0]


def test_conflict_and_interrupted_are_never_retried(execute: Callable[..., Execution]) -> None:
    conflict = Script(problem(409, code="IDEMPOTENCY_CONFLICT", execution_id="exec_c"))
    fake = FakeTime()
    with pytest.raises(ConflictError) as caught:
        execute(conflict, fake, POLICY, request_id="r1")
    assert len(conflict.requests) == 1 and fake.sleeps == []
    assert caught.value.request_id == "r1" and caught.value.execution_id == "exec_c"
    interrupted = Script(
        problem(409, code="EXECUTION_UNCERTAIN", state="interrupted", execution_id="exec_i")
    )
    with pytest.raises(ExecutionInterrupted) as stopped:
        execute(interrupted, fake, POLICY)
    assert len(interrupted.requests) == 1 and fake.sleeps == []
    assert stopped.value.execution_id == "exec_i"


def test_exhausted_attempts_raise_the_last_error(execute: Callable[..., Execution]) -> None:
    running = problem(409, code="EXECUTION_UNCERTAIN", state="running", execution_id="exec_r")
    script = Script(*[running] * 5)
    with pytest.raises(UncertainRunningError) as caught:
        execute(script, FakeTime(), POLICY, request_id="r2")
    assert len(script.requests) == 5
    assert caught.value.execution_id == "exec_r" and caught.value.request_id == "r2"
    resets = Script(*[httpx.ReadError("connection reset by peer")] * 5)
    with pytest.raises(UnavailableError) as lost:
        execute(resets, FakeTime(), POLICY)
    assert len(resets.requests) == 5 and lost.value.status is None


def test_get_execution_reads_pending_records_without_prefer() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = {"execution_id": "exec_p", "status": "running", "data": None, "error": None,
                "tool": "sleep", "request_id": "r", "session_id": "default"}
        return httpx.Response(200, json=body)

    with CarmyClient("http://carmy.test", transport=httpx.MockTransport(answer)) as client:
        record = client.get_execution("exec_p")
        with pytest.raises(ValueError):
            client.get_execution("../v1/tools")
    assert isinstance(record, PendingExecution) and record.status == "running"
    assert seen[0].url.path == "/v1/executions/exec_p" and "prefer" not in seen[0].headers
    assert "authorization" not in seen[0].headers
