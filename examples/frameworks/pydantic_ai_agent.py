"""A Pydantic AI agent with Carmy's tools over MCP (docs/mcp.md, "Pydantic AI").

Pydantic AI shows the model a tool result's ``structuredContent`` when it has one; Carmy puts
its guidance there too (member ``io.carmy/guidance``), so the model reads it. Carmy's answers
never spend the tool's retry budget except for real errors, and a call still running is
answered within ``CARMY_MCP_ANSWER_WITHIN_MS`` (45 s), well inside ``read_timeout`` (300 s):
no setting to change.

Run with a real model (Pydantic AI's model names, e.g. ``openai:gpt-4o``; the provider's key in
the environment) against a gateway on 127.0.0.1:8080:

    python pydantic_ai_agent.py openai:gpt-4o "Order one A1, then tell me its order id."
"""

from __future__ import annotations

import os
import sys
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset

GATEWAY_MCP = os.environ.get("CARMY_MCP_URL", "http://127.0.0.1:8080/mcp")


def carmy_toolset(url: str = GATEWAY_MCP, api_key: str | None = None) -> MCPToolset[Any]:
    """Carmy's tools; ``api_key`` when the gateway has keys (``CARMY_API_KEYS``)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    # include_instructions: the server's two sentences on request ids reach the model.
    return MCPToolset(url, headers=headers, include_instructions=True)


def carmy_agent(model: Any, toolset: MCPToolset[Any]) -> Agent[None, str]:
    """An agent on ``model`` with Carmy's tools; Pydantic AI's defaults otherwise."""
    return Agent(model, toolsets=[toolset])


if __name__ == "__main__":
    model_name, prompt = sys.argv[1], sys.argv[2]
    agent = carmy_agent(model_name, carmy_toolset(api_key=os.environ.get("CARMY_API_KEY")))
    print(agent.run_sync(prompt).output)
