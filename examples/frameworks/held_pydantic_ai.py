"""A Pydantic AI tool that runs in the agent's process, protected by Carmy (docs/held.md): the
model's tool-call id is the request id, so a run retried from its history (a crash after the
charge, a framework retry) charges once and the retry gets the recorded charge.

The gateway declares the tool as a ``[[client_tools]]`` entry named ``charge``.
"""

from __future__ import annotations

from typing import Any

import httpx
from pydantic_ai import Agent, RunContext

from carmy_client import AsyncCarmyClient, held


def charge_agent(model: Any, carmy: AsyncCarmyClient, bank: str) -> Agent[None, str]:
    """An agent on ``model`` with the tool ``charge``, which charges through ``bank``'s API."""

    @held(carmy, "charge")
    async def charge_once(customer: str, amount: int, request_id: str) -> dict[str, Any]:
        async with httpx.AsyncClient() as http:
            answer = await http.post(
                f"{bank}/charge", json={"key": request_id, "customer": customer, "amount": amount}
            )
        return dict(answer.json())

    agent: Agent[None, str] = Agent(model)

    @agent.tool
    async def charge(ctx: RunContext[None], customer: str, amount: int) -> dict[str, Any]:
        """Charge a customer's card; amount in cents."""
        assert ctx.tool_call_id is not None
        return await charge_once(customer, amount, request_id=ctx.tool_call_id)

    return agent
