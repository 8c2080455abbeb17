"""Carmy's MCP front through the official MCP Python SDK (docs/semantics.md §11): initialize,
list, call, replay, conflict, and one execution seen through both fronts (MCP and
``POST /v1/executions``)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from conftest import Gateway

T = TypeVar("T")


def run(gateway: Gateway, body: Callable[[ClientSession], Awaitable[T]]) -> T:
    """Opens an initialized session on the gateway's /mcp and runs ``body`` in it."""

    async def session() -> T:
        async with httpx2.AsyncClient(headers=gateway.headers(), timeout=30) as http:
            async with streamable_http_client(gateway.mcp, http_client=http) as (read, write):
                async with ClientSession(read, write) as client:
                    await client.initialize()
                    return await body(client)

    return asyncio.run(session())


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def execution(result: Any) -> dict[str, Any]:
    assert result.meta is not None, result
    return dict(result.meta["io.carmy/execution"])


GUIDANCE = "io.carmy/guidance"


def data(structured: Any) -> Any:
    """``structuredContent`` (of a result, or as a dict) without Carmy's guidance member
    (docs/semantics.md §11): the tool's data."""
    fields = structured.structured_content if hasattr(structured, "structured_content") else structured
    return {name: value for name, value in fields.items() if name != GUIDANCE}


def text(result: Any) -> str:
    return str(result.content[0].text)


def http_call(gateway: Gateway, tool: str, arguments: dict[str, Any], request_id: str) -> Any:
    response = httpx2.post(
        f"{gateway.url}/v1/executions",
        headers=gateway.headers(),
        json={"tool": tool, "arguments": arguments, "request_id": request_id},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_initialize_and_list(gateway: Gateway) -> None:
    async def body(client: ClientSession) -> None:
        info = await client.initialize()
        assert info.server_info.name == "carmy"
        assert info.capabilities.tools is not None
        listed = await client.list_tools()
        tools = {tool.name: tool for tool in listed.tools}
        assert sorted(tools) == ["create_order", "echo", "fail", "find_orders", "get_order", "sleep"]
        get_order = tools["get_order"]
        assert get_order.description == "Reads one of the caller's orders."
        assert get_order.input_schema["required"] == ["order_id"]
        assert get_order.annotations is not None
        assert get_order.annotations.read_only_hint is True
        assert tools["create_order"].annotations is not None
        assert tools["create_order"].annotations.idempotent_hint is False

    run(gateway, body)


def test_call_and_replay_run_the_tool_once(gateway: Gateway) -> None:
    request_id = unique("py-replay")
    meta = {"io.carmy/request_id": request_id}
    before = gateway.tool_runs("create_order")

    async def body(client: ClientSession) -> tuple[Any, Any]:
        first = await client.call_tool("create_order", {"sku": "PY-1"}, meta=meta)
        again = await client.call_tool("create_order", {"sku": "PY-1"}, meta=meta)
        return first, again

    first, again = run(gateway, body)
    assert first.is_error is False
    assert isinstance(first.structured_content["order_id"], int)
    assert json.loads(text(first)) == data(first)
    assert execution(first)["status"] == "completed"
    assert execution(first)["replayed"] is False
    # finished_at plus the default retention (docs/semantics.md §12.9): the same for the replay
    assert isinstance(execution(first)["expires_at"], str)
    assert execution(again)["expires_at"] == execution(first)["expires_at"]
    assert execution(again)["replayed"] is True
    assert execution(again)["execution_id"] == execution(first)["execution_id"]
    assert data(again) == data(first)
    assert gateway.tool_runs("create_order") == before + 1


def test_a_client_key_in_meta_is_a_request_id(gateway: Gateway) -> None:
    meta = {"claudecode/toolUseId": unique("toolu")}

    async def body(client: ClientSession) -> tuple[Any, Any]:
        return (
            await client.call_tool("echo", {"a": 1}, meta=meta),
            await client.call_tool("echo", {"a": 1}, meta=meta),
        )

    first, again = run(gateway, body)
    assert execution(again)["replayed"] is True
    assert execution(again)["execution_id"] == execution(first)["execution_id"]


def test_a_changed_call_is_a_conflict_for_the_model(gateway: Gateway) -> None:
    meta = {"io.carmy/request_id": unique("py-conflict")}

    async def body(client: ClientSession) -> tuple[Any, Any]:
        first = await client.call_tool("create_order", {"sku": "PY-C1"}, meta=meta)
        changed = await client.call_tool("create_order", {"sku": "PY-C2"}, meta=meta)
        return first, changed

    first, changed = run(gateway, body)
    assert changed.is_error is True
    assert changed.structured_content["code"] == "IDEMPOTENCY_CONFLICT"
    assert changed.structured_content["execution_id"] == execution(first)["execution_id"]
    words = text(changed)
    assert "This call did not run" in words
    assert "new id" not in words.lower()


def test_an_execution_made_over_mcp_replays_over_http(gateway: Gateway) -> None:
    request_id = unique("py-mcp-first")

    async def body(client: ClientSession) -> Any:
        return await client.call_tool(
            "create_order", {"sku": "PY-B1"}, meta={"io.carmy/request_id": request_id}
        )

    over_mcp = run(gateway, body)
    over_http = http_call(gateway, "create_order", {"sku": "PY-B1"}, request_id)
    assert over_http["replayed"] is True
    assert over_http["execution_id"] == execution(over_mcp)["execution_id"]
    assert over_http["data"] == data(over_mcp)


def test_an_execution_made_over_http_replays_over_mcp(gateway: Gateway) -> None:
    request_id = unique("py-http-first")
    over_http = http_call(gateway, "create_order", {"sku": "PY-B2"}, request_id)

    async def body(client: ClientSession) -> Any:
        return await client.call_tool(
            "create_order", {"sku": "PY-B2"}, meta={"io.carmy/request_id": request_id}
        )

    over_mcp = run(gateway, body)
    assert execution(over_mcp)["replayed"] is True
    assert execution(over_mcp)["execution_id"] == over_http["execution_id"]
    assert data(over_mcp) == over_http["data"]
