"""The LangChain / LangGraph recipe (langgraph_agent.py, langchain-mcp-adapters 0.3 on the MCP
SDK 1.x) with a scripted chat model: what the model read of each answer (the ToolMessage's text
blocks) holds Carmy's guidance, with the adapters' and LangGraph's defaults."""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from langgraph_agent import carmy_agent, carmy_tools
from scripted import Script, check_effects, metric


def view_of(message: ToolMessage) -> str:
    """The text a model gets of a ToolMessage (a string, or text blocks)."""
    if isinstance(message.content, str):
        return message.content
    return "\n".join(block["text"] if isinstance(block, dict) else str(block) for block in message.content)


class ScriptedChatModel(BaseChatModel):
    script: Any
    step: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ScriptedChatModel":
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        last = messages[-1]
        call = self.script.next_call(view_of(last) if isinstance(last, ToolMessage) else None)
        self.step += 1
        if call is None:
            message = AIMessage(content="done")
        else:
            message = AIMessage(
                content="", tool_calls=[{"name": call[0], "args": call[1], "id": f"call_{self.step}", "type": "tool_call"}]
            )
        return ChatResult(generations=[ChatGeneration(message=message)])


def test_langgraph_model_reads_carmys_guidance(gateway: tuple[str, str]) -> None:
    base, key = gateway
    script = Script()
    sleeps = metric(base, "carmy_tool_runs_total", "sleep")

    async def run() -> None:
        agent = carmy_agent(ScriptedChatModel(script=script), await carmy_tools(f"{base}/mcp", key))
        while script.remaining():
            state = await agent.ainvoke({"messages": [("user", "Next step.")]})
            assert state["messages"][-1].content == "done"

    asyncio.run(run())
    script.check("langgraph")
    check_effects(script, base, key, "langgraph", sleeps)
