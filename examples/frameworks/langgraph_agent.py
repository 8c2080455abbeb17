"""A LangGraph agent with Carmy's tools through langchain-mcp-adapters (docs/mcp.md,
"LangChain / LangGraph").

langchain-mcp-adapters 0.3 runs on the MCP SDK 1.x (``mcp<2``): give it an environment of its
own. The model reads the text blocks of every answer (a tool error as a ToolMessage with
``status="error"``); no setting to change for Carmy: the session waits 300 s for an answer, and
Carmy answers within ``CARMY_MCP_ANSWER_WITHIN_MS`` (45 s). A slow call costs a few more steps,
well inside LangGraph's ``recursion_limit`` (10,007 steps by default in langgraph 1.2).

Run with a real chat model (e.g. ``langchain-openai``'s ``ChatOpenAI``) against a gateway on
127.0.0.1:8080:

    python langgraph_agent.py "Order one A1, then tell me its order id."
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.tools import BaseTool
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain.agents import create_agent

GATEWAY_MCP = os.environ.get("CARMY_MCP_URL", "http://127.0.0.1:8080/mcp")


async def carmy_tools(url: str = GATEWAY_MCP, api_key: str | None = None) -> list[BaseTool]:
    """Carmy's tools as LangChain tools; ``api_key`` when the gateway has keys."""
    connection: dict[str, Any] = {"url": url, "transport": "streamable_http"}
    if api_key:
        connection["headers"] = {"Authorization": f"Bearer {api_key}"}
    client = MultiServerMCPClient({"carmy": connection})  # type: ignore[dict-item]
    return await client.get_tools()


def carmy_agent(model: BaseChatModel, tools: list[BaseTool]) -> Any:
    """An agent (LangChain 1.x, on LangGraph) on ``model`` with ``tools``; defaults otherwise."""
    return create_agent(model, tools)


async def main(prompt: str) -> None:
    from langchain_openai import ChatOpenAI  # type: ignore[import-not-found]

    tools = await carmy_tools(api_key=os.environ.get("CARMY_API_KEY"))
    agent = carmy_agent(ChatOpenAI(model="gpt-4o"), tools)
    state = await agent.ainvoke({"messages": [("user", prompt)]})
    print(state["messages"][-1].content)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
