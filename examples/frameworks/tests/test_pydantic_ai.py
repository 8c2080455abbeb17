"""The Pydantic AI recipe (pydantic_ai_agent.py) with a scripted model (``FunctionModel``): what
the model read of each answer holds Carmy's guidance, with Pydantic AI's defaults."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, RetryPromptPart, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_agent import carmy_agent, carmy_toolset
from scripted import Script, check_effects, metric


def scripted_model(script: Script) -> FunctionModel:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        view = None
        for part in messages[-1].parts:
            # Exactly what Pydantic AI sends a model for a tool's result or a retry prompt.
            if isinstance(part, ToolReturnPart):
                view = part.model_response_str()
            elif isinstance(part, RetryPromptPart):
                view = part.model_response()
        call = script.next_call(view)
        if call is None:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart(call[0], call[1])])

    return FunctionModel(model)


def test_pydantic_ai_model_reads_carmys_guidance(gateway: tuple[str, str]) -> None:
    base, key = gateway
    script = Script()
    sleeps = metric(base, "carmy_tool_runs_total", "sleep")
    bare = metric(base, "carmy_mcp_unprotected_calls_total", "create_order")
    agent = carmy_agent(scripted_model(script), carmy_toolset(f"{base}/mcp", key))

    async def run() -> None:
        while script.remaining():
            assert (await agent.run("Next step.")).output == "done"

    asyncio.run(run())
    script.check("pydantic-ai")
    check_effects(script, base, key, "pydantic-ai", sleeps)
    assert metric(base, "carmy_mcp_unprotected_calls_total", "create_order") == bare + 1
