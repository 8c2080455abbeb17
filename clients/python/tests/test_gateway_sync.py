"""The sync client against a real gateway, directly and behind the faulty proxy.

Counts are exact: orders are found by a SKU unique to the test (``find_orders``), tool runs by
the delta of ``carmy_tool_runs_total`` (the tests of one session run one after another).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from typing import Any

import pytest

from carmy_client import (
    CapacityError,
    CarmyClient,
    ConflictError,
    Execution,
    InvalidRequestError,
    NotFoundError,
    RetryPolicy,
    UnauthorizedError,
    UncertainRunningError,
    UnknownToolError,
)
from conftest import Gateway, start_gateway
from faulty_proxy import Answer, FaultyProxy, answer_first_with, pass_through

FAST = RetryPolicy(initial_backoff=0.05, max_backoff=0.2, max_attempts=8, deadline=20.0)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def orders_with(client: CarmyClient, sku: str) -> list[dict[str, Any]]:
    found = client.execute("find_orders", {"sku": sku})
    assert found.status == "completed"
    orders: list[dict[str, Any]] = found.data["orders"]
    return orders


def test_lost_answer_is_replayed_and_the_tool_ran_once(
    gateway: Gateway, proxy: FaultyProxy
) -> None:
    sku = unique("lost")
    runs_before = gateway.metric("carmy_tool_runs_total", tool="create_order")
    with CarmyClient(proxy.url, retry=FAST) as client:
        result = client.execute("create_order", {"sku": sku})
    assert isinstance(result, Execution)
    assert result.status == "completed" and result.replayed is True
    assert result.request_id is not None
    posts = proxy.requests_for(result.request_id)
    assert [(p.action, p.status) for p in posts] == [("drop_response", None), ("forward", 200)]
    assert [entry.seen.request_id for entry in proxy.log()] == [result.request_id] * 2
    assert gateway.metric("carmy_tool_runs_total", tool="create_order") == runs_before + 1
    with CarmyClient(gateway.url) as direct:
        orders = orders_with(direct, sku)
        assert orders == [{"order_id": result.data["order_id"], "quantity": 1, "sku": sku}]
        record = direct.get_execution(result.execution_id)
    assert isinstance(record, Execution) and record.data == result.data


def test_conflict_is_raised_at_once_without_a_retry(gateway: Gateway, proxy: FaultyProxy) -> None:
    request_id = unique("conflict")
    with CarmyClient(proxy.url, retry=FAST) as client:
        first = client.execute("create_order", {"sku": unique("c")}, request_id=request_id)
        assert first.replayed is True  # its first answer was lost
        sent_before = len(proxy.log())
        started = time.monotonic()
        with pytest.raises(ConflictError) as caught:
            client.execute("create_order", {"sku": unique("other")}, request_id=request_id)
    assert len(proxy.log()) == sent_before + 1
    assert proxy.log()[-1].status == 409
    assert time.monotonic() - started < 1.0
    error = caught.value
    assert error.status == 409 and error.code == "IDEMPOTENCY_CONFLICT"
    assert error.execution_id == first.execution_id and error.request_id == request_id
    assert error.differs in ([], ["arguments"])  # named once the server names it (§12.8)


def test_retry_after_from_the_proxy_is_waited(gateway: Gateway, proxy: FaultyProxy) -> None:
    proxy.policy = answer_first_with(
        Answer(
            503,
            {"Retry-After": "1"},
            {"type": "urn:carmy:problem:store-unavailable", "title": "Store unavailable",
             "status": 503, "detail": "try later", "code": "STORE_UNAVAILABLE"},
        )
    )
    sku = unique("later")
    runs_before = gateway.metric("carmy_tool_runs_total", tool="create_order")
    with CarmyClient(proxy.url, retry=FAST) as client:
        started = time.monotonic()
        result = client.execute("create_order", {"sku": sku})
        elapsed = time.monotonic() - started
    assert result.replayed is False  # the first request never reached the gateway
    posts = proxy.requests_for(result.request_id or "")
    assert [(p.action, p.status) for p in posts] == [("answer", 503), ("forward", 200)]
    assert posts[1].seen.at - posts[0].seen.at >= 1.0
    assert elapsed >= 1.0
    assert gateway.metric("carmy_tool_runs_total", tool="create_order") == runs_before + 1


def wait_for_metric(gateway: Gateway, tool: str, above: float, deadline_s: float = 10.0) -> None:
    deadline = time.monotonic() + deadline_s
    while gateway.metric("carmy_tool_runs_total", tool=tool) <= above:
        assert time.monotonic() < deadline, f"{tool} did not start within {deadline_s} s"
        time.sleep(0.01)


def test_running_duplicate_is_waited_out(gateway: Gateway, proxy: FaultyProxy) -> None:
    proxy.policy = pass_through
    request_id = unique("running")
    runs_before = gateway.metric("carmy_tool_runs_total", tool="sleep")
    outcome: dict[str, Execution] = {}

    def first_call() -> None:
        with CarmyClient(gateway.url) as direct:
            outcome["first"] = direct.execute("sleep", {"ms": 1500}, request_id=request_id)

    thread = threading.Thread(target=first_call)
    thread.start()
    try:
        wait_for_metric(gateway, "sleep", runs_before)
        # The default policy (seeded so the test is repeatable) outwaits a 1.5 s duplicate.
        with CarmyClient(proxy.url, rng=random.Random(0)) as client:
            second = client.execute("sleep", {"ms": 1500}, request_id=request_id)
    finally:
        thread.join(timeout=20)
    first = outcome["first"]
    assert first.replayed is False and second.replayed is True
    assert second.execution_id == first.execution_id and second.status == "completed"
    statuses = [p.status for p in proxy.requests_for(request_id)]
    # The client sends `Prefer: wait`, which the server honours: the duplicate may be answered
    # by the wait itself (one 200) or after 409 running answers and retries.
    assert statuses[-1] == 200 and set(statuses[:-1]) <= {409}
    assert gateway.metric("carmy_tool_runs_total", tool="sleep") == runs_before + 1


def test_running_duplicate_past_the_deadline_is_uncertain(gateway: Gateway) -> None:
    request_id = unique("slow")
    runs_before = gateway.metric("carmy_tool_runs_total", tool="sleep")
    def first_call() -> None:
        with CarmyClient(gateway.url) as direct:
            direct.execute("sleep", {"ms": 1500}, request_id=request_id)

    thread = threading.Thread(target=first_call)
    thread.start()
    try:
        wait_for_metric(gateway, "sleep", runs_before)
        short = RetryPolicy(deadline=0.5, initial_backoff=0.05, max_backoff=0.1)
        with CarmyClient(gateway.url, retry=short) as client:
            with pytest.raises(UncertainRunningError) as caught:
                client.execute("sleep", {"ms": 1500}, request_id=request_id)
    finally:
        thread.join(timeout=20)
    assert caught.value.state == "running" and caught.value.request_id == request_id
    assert caught.value.execution_id is not None


def test_rejections_are_typed_and_not_retried(gateway: Gateway, proxy: FaultyProxy) -> None:
    proxy.policy = pass_through
    with CarmyClient(proxy.url, retry=FAST) as client:
        with pytest.raises(UnknownToolError) as unknown:
            client.execute("no_such_tool", {}, request_id="u1")
        with pytest.raises(InvalidRequestError) as invalid:
            client.execute("create_order", {"quantity": 1}, request_id="u2")
        with pytest.raises(NotFoundError):
            client.get_execution("exec_00000000000000000000000000000000")
    assert (unknown.value.status, invalid.value.status) == (404, 400)
    assert [(e.seen.request_id, e.status) for e in proxy.log()[:2]] == [("u1", 404), ("u2", 400)]
    assert len(proxy.log()) == 3


def test_list_tools(gateway: Gateway) -> None:
    with CarmyClient(gateway.url) as client:
        tools = {tool.name: tool for tool in client.list_tools()}
    assert {"create_order", "find_orders", "sleep", "echo", "fail"} <= set(tools)
    assert tools["create_order"].input_schema["required"] == ["sku"]


def test_failed_tool_is_an_outcome_not_an_exception(gateway: Gateway) -> None:
    with CarmyClient(gateway.url) as client:
        result = client.execute("fail", {"message": "nope"})
    assert result.status == "failed" and not result.ok and result.data is None
    assert isinstance(result.error, dict) and "nope" in str(result.error)


def test_api_keys_and_capacity() -> None:
    keyed = start_gateway(CARMY_API_KEYS="k-py-test=alice", CARMY_MEMORY_CAPACITY="1")
    try:
        with CarmyClient(keyed.url) as anonymous:
            with pytest.raises(UnauthorizedError) as denied:
                anonymous.execute("echo", {"x": 1})
        assert denied.value.status == 401
        with CarmyClient(keyed.url, api_key="k-py-test") as alice:
            echoed = alice.execute("echo", {"x": 1}, request_id="fills-the-store")
            assert echoed.data == {"x": 1}
            with pytest.raises(CapacityError) as full:
                alice.execute("echo", {"x": 2}, request_id="no-room")
            assert full.value.status == 507
            # The recorded identity still replays when the store is full.
            assert alice.execute("echo", {"x": 1}, request_id="fills-the-store").replayed
    finally:
        keyed.stop()
