"""A LangChain tool that runs in the agent's process, protected by Carmy (docs/held.md): the
tool-call id (``InjectedToolCallId``) is the request id.

The gateway declares the tool as a ``[[client_tools]]`` entry named ``charge``.
"""

from __future__ import annotations

from typing import Annotated, Any

import httpx
from langchain_core.tools import BaseTool, InjectedToolCallId, tool

from carmy_client import CarmyClient, held


def charge_tool(carmy: CarmyClient, bank: str) -> BaseTool:
    """The tool ``charge``, which charges through ``bank``'s API at most once per tool call."""

    @held(carmy, "charge")
    def charge_once(customer: str, amount: int, request_id: str) -> dict[str, Any]:
        answer = httpx.post(
            f"{bank}/charge", json={"key": request_id, "customer": customer, "amount": amount}
        )
        return dict(answer.json())

    @tool
    def charge(
        customer: str, amount: int, tool_call_id: Annotated[str, InjectedToolCallId]
    ) -> dict[str, Any]:
        """Charge a customer's card; amount in cents."""
        return charge_once(customer, amount, request_id=tool_call_id)

    return charge
