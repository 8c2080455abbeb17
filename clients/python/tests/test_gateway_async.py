"""The async client against a real gateway behind the faulty proxy: the same guarantees as the
sync client (lost answer replayed with the same request_id and the tool run once, conflict at
once, Retry-After waited, running duplicate waited out).
"""

from __future__ import annotations

import random
import time
import uuid

import anyio
import pytest

from carmy_client import AsyncCarmyClient, ConflictError, Execution, RetryPolicy
from conftest import Gateway
from faulty_proxy import Answer, FaultyProxy, answer_first_with, pass_through

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(initial_backoff=0.05, max_backoff=0.2, max_attempts=8, deadline=20.0)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


async def test_lost_answer_is_replayed_and_the_tool_ran_once(
    gateway: Gateway, proxy: FaultyProxy
) -> None:
    sku = unique("async-lost")
    runs_before = gateway.metric("carmy_tool_runs_total", tool="create_order")
    async with AsyncCarmyClient(proxy.url, retry=FAST) as client:
        result = await client.execute("create_order", {"sku": sku}, session_id="agent-7")
    assert result.status == "completed" and result.replayed is True
    assert result.session_id == "agent-7" and result.request_id is not None
    posts = proxy.requests_for(result.request_id)
    assert [(p.action, p.status) for p in posts] == [("drop_response", None), ("forward", 200)]
    assert [entry.seen.request_id for entry in proxy.log()] == [result.request_id] * 2
    assert gateway.metric("carmy_tool_runs_total", tool="create_order") == runs_before + 1
    async with AsyncCarmyClient(gateway.url) as direct:
        found = await direct.execute("find_orders", {"sku": sku})
        tools = await direct.list_tools()
    assert found.data == {"orders": [{"order_id": result.data["order_id"], "quantity": 1,
                                      "sku": sku}]}
    assert "create_order" in {tool.name for tool in tools}


async def test_conflict_is_raised_at_once_without_a_retry(
    gateway: Gateway, proxy: FaultyProxy
) -> None:
    request_id = unique("async-conflict")
    async with AsyncCarmyClient(proxy.url, retry=FAST) as client:
        first = await client.execute("echo", {"n": 1}, request_id=request_id)
        sent_before = len(proxy.log())
        with pytest.raises(ConflictError) as caught:
            await client.execute("echo", {"n": 2}, request_id=request_id)
    assert first.replayed is True
    assert len(proxy.log()) == sent_before + 1 and proxy.log()[-1].status == 409
    assert caught.value.execution_id == first.execution_id


async def test_retry_after_from_the_proxy_is_waited(gateway: Gateway, proxy: FaultyProxy) -> None:
    proxy.policy = answer_first_with(
        Answer(503, {"Retry-After": "1"}, {"status": 503, "code": "STORE_UNAVAILABLE",
                                           "detail": "try later"})
    )
    async with AsyncCarmyClient(proxy.url, retry=FAST) as client:
        started = time.monotonic()
        result = await client.execute("echo", {"later": True})
        elapsed = time.monotonic() - started
    posts = proxy.requests_for(result.request_id or "")
    assert [(p.action, p.status) for p in posts] == [("answer", 503), ("forward", 200)]
    assert posts[1].seen.at - posts[0].seen.at >= 1.0 and elapsed >= 1.0
    assert result.replayed is False and result.data == {"later": True}


async def test_running_duplicate_is_waited_out(gateway: Gateway, proxy: FaultyProxy) -> None:
    proxy.policy = pass_through
    request_id = unique("async-running")
    runs_before = gateway.metric("carmy_tool_runs_total", tool="sleep")
    results: dict[str, Execution] = {}

    async def call(name: str, url: str) -> None:
        async with AsyncCarmyClient(url, rng=random.Random(0)) as client:
            results[name] = await client.execute("sleep", {"ms": 1500}, request_id=request_id)

    async with anyio.create_task_group() as group:
        group.start_soon(call, "first", gateway.url)
        with anyio.fail_after(10):
            while gateway.metric("carmy_tool_runs_total", tool="sleep") <= runs_before:
                await anyio.sleep(0.01)
        group.start_soon(call, "second", proxy.url)
    assert results["second"].replayed is True and results["first"].replayed is False
    assert results["second"].execution_id == results["first"].execution_id
    statuses = [p.status for p in proxy.requests_for(request_id)]
    # The client sends `Prefer: wait`, which the server honours: the duplicate may be answered
    # by the wait itself (one 200) or after 409 running answers and retries.
    assert statuses[-1] == 200 and set(statuses[:-1]) <= {409}
    assert gateway.metric("carmy_tool_runs_total", tool="sleep") == runs_before + 1
