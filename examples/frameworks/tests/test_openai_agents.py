"""The OpenAI Agents SDK recipe (openai_agents_agent.py) with a scripted ``Model``: what the
model read of each answer holds Carmy's guidance, with the recipe's one setting."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import Runner
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from openai_agents_agent import carmy_agent, carmy_server
from scripted import Script, check_effects, metric


def view_of(output: Any) -> str:
    """The text of a ``function_call_output`` item, as the SDK sends it to the model."""
    if isinstance(output, str):
        return output
    return "\n".join(str(item.get("text", item)) for item in output)


class ScriptedModel(Model):
    def __init__(self, script: Script) -> None:
        self.script = script
        self.step = 0

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        view = None
        if isinstance(input, list) and input and isinstance(input[-1], dict):
            if input[-1].get("type") == "function_call_output":
                view = view_of(input[-1]["output"])
        call = self.script.next_call(view)
        self.step += 1
        if call is None:
            text = ResponseOutputText(type="output_text", text="done", annotations=[])
            output: list[Any] = [
                ResponseOutputMessage(id="m", type="message", role="assistant", status="completed", content=[text])
            ]
        else:
            output = [
                ResponseFunctionToolCall(
                    type="function_call",
                    call_id=f"call_{self.step}",
                    name=call[0],
                    arguments=json.dumps(call[1]),
                    id=f"fc_{self.step}",
                    status="completed",
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def test_openai_agents_model_reads_carmys_guidance(gateway: tuple[str, str]) -> None:
    base, key = gateway
    script = Script()
    sleeps = metric(base, "carmy_tool_runs_total", "sleep")

    async def run() -> None:
        async with carmy_server(f"{base}/mcp", key) as server:
            agent = carmy_agent(ScriptedModel(script), server)
            while script.remaining():
                assert (await Runner.run(agent, "Next step.")).final_output == "done"

    asyncio.run(run())
    script.check("openai-agents")
    check_effects(script, base, key, "openai-agents", sleeps)
