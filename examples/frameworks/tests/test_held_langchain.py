"""The held LangChain recipe of docs/held.md (LangChain 1.x ``create_agent``) with a scripted
chat model that calls ``charge`` under one tool-call id, run twice: one charge, the same
result."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from carmy_client import CarmyClient
from held_bank import Bank
from held_langchain import charge_tool


class ScriptedChatModel(BaseChatModel):
    call_id: str
    returned: list[str]

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ScriptedChatModel":
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            self.returned.append(str(last.content))
            message = AIMessage(content="done")
        else:
            call = {"name": "charge", "args": {"customer": "cus_42", "amount": 500}, "id": self.call_id, "type": "tool_call"}
            message = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])


def test_a_langchain_tool_charges_once_across_a_retried_run() -> None:
    gateway = os.environ.get("CARMY_FW_HELD_GATEWAY")
    if not gateway:
        pytest.fail("CARMY_FW_HELD_GATEWAY is not set: run examples/frameworks/run-tests.sh")
    bank = Bank()
    call_id = f"call_{uuid.uuid4().hex}"
    model = ScriptedChatModel(call_id=call_id, returned=[])
    try:
        with CarmyClient(gateway) as carmy:
            agent = create_agent(model, [charge_tool(carmy, bank.url)])
            for _ in range(2):
                state = agent.invoke({"messages": [("user", "Charge cus_42 five dollars.")]})
                assert state["messages"][-1].content == "done"
        assert bank.count(call_id) == 1
        returned = model.returned
        assert len(returned) == 2 and returned[0] == returned[1]
        assert str(bank.charges[-1]["charge_id"]) in returned[0]
    finally:
        bank.close()
