"""An OpenAI Agents SDK function tool that runs in the agent's process, protected by Carmy
(docs/held.md): the tool-call id (``ToolContext.tool_call_id``) is the request id.

The gateway declares the tool as a ``[[client_tools]]`` entry named ``charge``.
"""

from __future__ import annotations

from typing import Any

import httpx
from agents import Agent, function_tool
from agents.tool_context import ToolContext

from carmy_client import AsyncCarmyClient, held


def charge_agent(model: Any, carmy: AsyncCarmyClient, bank: str) -> Agent[Any]:
    """An agent on ``model`` with the function tool ``charge``."""

    @held(carmy, "charge")
    async def charge_once(customer: str, amount: int, request_id: str) -> dict[str, Any]:
        async with httpx.AsyncClient() as http:
            answer = await http.post(
                f"{bank}/charge", json={"key": request_id, "customer": customer, "amount": amount}
            )
        return dict(answer.json())

    @function_tool
    async def charge(ctx: ToolContext[Any], customer: str, amount: int) -> dict[str, Any]:
        """Charge a customer's card; amount in cents."""
        return await charge_once(customer, amount, request_id=ctx.tool_call_id)

    return Agent(name="billing", model=model, tools=[charge])
