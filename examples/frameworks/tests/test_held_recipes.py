"""The held recipes of docs/held.md for Pydantic AI and the OpenAI Agents SDK, each with a
scripted model that calls ``charge`` under one tool-call id, run twice (a run retried from its
history): the bank is charged once and both runs' tool results are the same charge."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Runner
from agents.items import ModelResponse as AgentsResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from carmy_client import AsyncCarmyClient
from held_bank import Bank
from held_openai_agents import charge_agent as openai_charge_agent
from held_pydantic_ai import charge_agent as pydantic_charge_agent

ARGS = {"customer": "cus_42", "amount": 500}


@pytest.fixture
def held_gateway() -> str:
    url = os.environ.get("CARMY_FW_HELD_GATEWAY")
    if not url:
        pytest.fail("CARMY_FW_HELD_GATEWAY is not set: run examples/frameworks/run-tests.sh")
    return url


@pytest.fixture
def bank() -> Iterator[Bank]:
    running = Bank()
    yield running
    running.close()


def test_a_pydantic_ai_tool_charges_once_across_a_retried_run(held_gateway: str, bank: Bank) -> None:
    call_id = f"call_{uuid.uuid4().hex}"
    returned: list[Any] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        for part in messages[-1].parts:
            if isinstance(part, ToolReturnPart):
                returned.append(part.content)
                return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("charge", ARGS, tool_call_id=call_id)])

    async def run() -> None:
        async with AsyncCarmyClient(held_gateway) as carmy:
            agent = pydantic_charge_agent(FunctionModel(model), carmy, bank.url)
            for _ in range(2):
                assert (await agent.run("Charge cus_42 five dollars.")).output == "done"

    asyncio.run(run())
    assert bank.count(call_id) == 1
    assert returned[0] == returned[1] and returned[0]["charge_id"] == bank.charges[-1]["charge_id"]


class ScriptedModel(Model):
    """Calls ``charge`` under ``call_id``, then answers "done" once it read the result."""

    def __init__(self, call_id: str, returned: list[str]) -> None:
        self.call_id = call_id
        self.returned = returned

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> AgentsResponse:
        if isinstance(input, list) and input and isinstance(input[-1], dict):
            if input[-1].get("type") == "function_call_output":
                self.returned.append(str(input[-1]["output"]))
                text = ResponseOutputText(type="output_text", text="done", annotations=[])
                message = ResponseOutputMessage(id="m", type="message", role="assistant", status="completed", content=[text])
                return AgentsResponse(output=[message], usage=Usage(), response_id=None)
        call = ResponseFunctionToolCall(
            type="function_call", call_id=self.call_id, name="charge", arguments=json.dumps(ARGS),
            id="fc_1", status="completed",
        )
        return AgentsResponse(output=[call], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def test_an_openai_agents_function_tool_charges_once_across_a_retried_run(held_gateway: str, bank: Bank) -> None:
    call_id = f"call_{uuid.uuid4().hex}"
    returned: list[str] = []

    async def run() -> None:
        async with AsyncCarmyClient(held_gateway) as carmy:
            agent = openai_charge_agent(ScriptedModel(call_id, returned), carmy, bank.url)
            for _ in range(2):
                assert (await Runner.run(agent, "Charge cus_42 five dollars.")).final_output == "done"

    asyncio.run(run())
    assert bank.count(call_id) == 1
    assert len(returned) == 2 and returned[0] == returned[1]
    assert f"'charge_id': {bank.charges[-1]['charge_id']}" in returned[0]
