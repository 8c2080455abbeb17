"""The official MCP Python SDK (``mcp`` 2.x) as a host that shows the model a result's text
blocks, on both protocol versions Carmy serves: the same conversation as the frameworks'."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from scripted import Script, check_effects, metric


def view_of(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


@pytest.mark.parametrize("protocol", ["2026-07-28", "2025-11-25"])
def test_the_python_sdks_text_blocks_carry_carmys_guidance(gateway: tuple[str, str], protocol: str) -> None:
    base, key = gateway
    script = Script()
    sleeps = metric(base, "carmy_tool_runs_total", "sleep")

    async def run() -> None:
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            async with streamable_http_client(f"{base}/mcp", http_client=http) as (read, write):
                async with ClientSession(read, write) as client:
                    if protocol == "2026-07-28":
                        await client.discover()
                    else:
                        await client.initialize()
                    assert client.protocol_version == protocol
                    while script.remaining():
                        call = script.next_call(None)
                        while call is not None:
                            result = await client.call_tool(call[0], call[1])
                            call = script.next_call(view_of(result))

    asyncio.run(run())
    script.check(f"python-sdk {protocol}")
    check_effects(script, base, key, f"python-sdk {protocol}", sleeps)
