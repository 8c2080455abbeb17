"""An OpenAI Agents SDK agent with Carmy's tools over MCP (docs/mcp.md, "OpenAI Agents SDK").

The one setting to change: ``client_session_timeout_seconds``. Its default (5 s) gives up on
any call slower than 5 s, and the model then reads only "An error occurred while running the
tool. Please try again."; Carmy answers a call still running after
``CARMY_MCP_ANSWER_WITHIN_MS`` (45 s by default), so the client must wait longer than that.

Run with a real model (the SDK's model names, e.g. ``gpt-4o``; ``OPENAI_API_KEY`` in the
environment) against a gateway on 127.0.0.1:8080:

    python openai_agents_agent.py gpt-4o "Order one A1, then tell me its order id."
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from agents import Agent, Runner
from agents.mcp import MCPServerStreamableHttp

GATEWAY_MCP = os.environ.get("CARMY_MCP_URL", "http://127.0.0.1:8080/mcp")

# Longer than Carmy's CARMY_MCP_ANSWER_WITHIN_MS (45 s), so that Carmy answers first.
CLIENT_SESSION_TIMEOUT_SECONDS = 60


def carmy_server(url: str = GATEWAY_MCP, api_key: str | None = None) -> MCPServerStreamableHttp:
    """Carmy's MCP server; ``api_key`` when the gateway has keys (``CARMY_API_KEYS``)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return MCPServerStreamableHttp(
        params={"url": url, "headers": headers},
        name="carmy",
        client_session_timeout_seconds=CLIENT_SESSION_TIMEOUT_SECONDS,
    )


def carmy_agent(model: Any, server: MCPServerStreamableHttp) -> Agent[Any]:
    """An agent on ``model`` with Carmy's tools; the SDK's defaults otherwise."""
    return Agent(name="assistant", model=model, mcp_servers=[server])


async def main(model: str, prompt: str) -> None:
    async with carmy_server(api_key=os.environ.get("CARMY_API_KEY")) as server:
        result = await Runner.run(carmy_agent(model, server), prompt)
        print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
