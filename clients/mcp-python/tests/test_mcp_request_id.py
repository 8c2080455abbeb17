"""The request id a model holds (docs/semantics.md §11), through the official MCP Python SDK at
protocol 2025-11-25 (``initialize``) and 2026-07-28 (``server/discover``): a simulated model loop
whose client cancels the first attempt after 50 ms and retries with a new JSON-RPC id and a new
``claudecode/toolUseId`` but the same ``request_id``; on the in-memory store and across two
replicas of one PostgreSQL database."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from conftest import Gateway, started
from test_mcp_sdk import data, execution, text, unique

T = TypeVar("T")
PROTOCOLS = ["2025-11-25", "2026-07-28"]
READ_ONLY = {"get_order", "find_orders"}


def session(gateway: Gateway, protocol: str, body: Callable[[ClientSession], Awaitable[T]]) -> T:
    """Runs ``body`` in a session on the gateway at ``protocol``."""

    async def go() -> T:
        async with httpx2.AsyncClient(headers=gateway.headers(), timeout=30) as http:
            async with streamable_http_client(gateway.mcp, http_client=http) as (read, write):
                async with ClientSession(read, write) as client:
                    if protocol == "2026-07-28":
                        await client.discover()
                    else:
                        await client.initialize()
                    assert client.protocol_version == protocol
                    return await body(client)

    return asyncio.run(go())


def tool_use() -> dict[str, str]:
    """A new tool-use block's ``_meta``, as an agent client sends it."""
    return {"claudecode/toolUseId": unique("toolu")}


async def cancelled_after_50_ms(client: ClientSession, tool: str, arguments: dict[str, Any]) -> Any:
    """The first attempt: the client gives up after 50 ms (the SDK cancels the request)."""
    try:
        return await asyncio.wait_for(client.call_tool(tool, arguments, meta=tool_use()), 0.05)
    except (asyncio.TimeoutError, TimeoutError):
        return None


def model_loop(first: Gateway, second: Gateway, protocol: str) -> None:
    """The model's loop: attempt, give up, retry with the same request_id; then the same id for
    another sku, and an id that is not random."""
    request_id = str(uuid.uuid4())
    sku = unique("PY-MODEL")
    arguments = {"sku": sku, "quantity": 1, "request_id": request_id}

    async def attempt(client: ClientSession) -> Any:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        for name, tool in listed.items():
            properties = tool.input_schema.get("properties", {})
            assert ("request_id" in properties) == (name not in READ_ONLY), name
        described = listed["create_order"].input_schema["properties"]["request_id"]
        assert described["type"] == "string"
        assert "same id" in described["description"]
        assert "request_id" not in listed["create_order"].input_schema["required"]
        return await cancelled_after_50_ms(client, "create_order", arguments)

    gave_up = session(first, protocol, attempt)

    async def retry(client: ClientSession) -> tuple[Any, Any, Any, Any]:
        again = await client.call_tool("create_order", arguments, meta=tool_use())
        other = dict(arguments, sku=f"{sku}-other")
        conflict = await client.call_tool("create_order", other, meta=tool_use())
        weak = dict(arguments, sku=f"{sku}-weak", request_id="r1")
        refused = await client.call_tool("create_order", weak, meta=tool_use())
        found = await client.call_tool("find_orders", {"sku": sku})
        return again, conflict, refused, found

    again, conflict, refused, found = session(second, protocol, retry)
    assert again.is_error is False, text(again)
    assert execution(again)["source"] == "argument"
    orders = found.structured_content["orders"]
    assert len(orders) == 1, orders
    assert data(again) == {"order_id": orders[0]["order_id"]}
    assert "it was not done again" in again.structured_content["io.carmy/guidance"]
    if gave_up is not None:
        # The first attempt answered within 50 ms: the retry is its replay.
        assert data(gave_up) == data(again)
        assert execution(again)["execution_id"] == execution(gave_up)["execution_id"]
    assert execution(again)["replayed"] is True
    assert "Nothing more is needed" in again.content[1].text

    assert conflict.is_error is True
    assert conflict.structured_content["code"] == "IDEMPOTENCY_CONFLICT"
    assert "belongs to a different action" in text(conflict)
    assert conflict.structured_content["execution_id"] == execution(again)["execution_id"]

    assert refused.is_error is True
    assert refused.structured_content["code"] == "REQUEST_ID_INVALID"
    assert '"r1" is not random enough' in text(refused)
    assert "set to a new random UUID that you generate now" in text(refused)
    assert execution(refused)["source"] is None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_model_loop_on_the_memory_store(gateway: Gateway, protocol: str) -> None:
    before = gateway.tool_runs("create_order")
    model_loop(gateway, gateway, protocol)
    assert gateway.tool_runs("create_order") == before + 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_model_loop_across_two_postgresql_replicas(database_url: str, protocol: str) -> None:
    env = {"DATABASE_URL": database_url}
    with started(env) as a, started(env) as b:
        model_loop(a, b, protocol)
        assert a.tool_runs("create_order") + b.tool_runs("create_order") == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_call_cancelled_while_it_runs_is_not_run_again(gateway: Gateway, protocol: str) -> None:
    arguments = {"ms": 400, "request_id": str(uuid.uuid4())}
    before = gateway.tool_runs("sleep")

    async def loop(client: ClientSession) -> tuple[Any, Any]:
        first = await cancelled_after_50_ms(client, "sleep", arguments)
        return first, await client.call_tool("sleep", arguments, meta=tool_use())

    first, again = session(gateway, protocol, loop)
    assert first is None, "the 400 ms sleep answered within 50 ms"
    # The retry waited for the running execution's outcome.
    assert again.is_error is False, text(again)
    assert execution(again)["replayed"] is True
    assert gateway.tool_runs("sleep") == before + 1


def test_a_call_still_running_is_answered_before_the_client_gives_up() -> None:
    with started({"CARMY_MCP_ANSWER_WITHIN_MS": "500"}) as gateway:
        arguments = {"ms": 3000, "request_id": str(uuid.uuid4())}

        async def loop(client: ClientSession) -> tuple[Any, float, Any]:
            began = time.monotonic()
            first = await client.call_tool("sleep", arguments, meta=tool_use())
            took = time.monotonic() - began
            deadline = time.monotonic() + 15
            while True:
                again = await client.call_tool("sleep", arguments, meta=tool_use())
                if execution(again)["status"] == "completed" or time.monotonic() > deadline:
                    return first, took, again

        first, took, again = session(gateway, "2025-11-25", loop)
        assert took < 2.0, took
        assert first.is_error is False
        assert first.structured_content["code"] == "EXECUTION_UNCERTAIN"
        assert "still running" in text(first)
        assert "and the same `request_id` to get its outcome" in text(first)
        assert again.is_error is False, text(again)
        assert execution(again)["execution_id"] == first.structured_content["execution_id"]
        assert execution(again)["replayed"] is True
        assert gateway.tool_runs("sleep") == 1


def test_input_errors_are_tool_results(gateway: Gateway) -> None:
    """SEP-1303: an unknown tool and arguments failing the schema are tool results the model
    reads, with the reason and what to send instead, on the SDK's 2026-07-28 and 2025-11-25."""

    async def body(client: ClientSession) -> list[Any]:
        answers = []
        for tool, arguments in (("no_such_tool", {}), ("sleep", {"ms": "soon"})):
            answers.append(await client.call_tool(tool, arguments, meta={"io.carmy/request_id": unique("pm")}))
        return answers

    for version in ("2026-07-28", "2025-11-25"):
        unknown, schema = session(gateway, version, body)
        assert unknown.is_error is True and schema.is_error is True
        assert unknown.structured_content["code"] == "UNKNOWN_TOOL"
        assert "Call one of the tools this server lists now" in text(unknown)
        assert schema.structured_content["code"] == "INVALID_REQUEST"
        assert "does not match" in text(schema) or "not of type" in text(schema), text(schema)
        assert "Correct what the message names and call the tool again" in text(schema)
        assert schema.structured_content["io.carmy/guidance"] == text(schema)
