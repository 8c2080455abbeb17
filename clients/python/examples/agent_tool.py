"""Wraps a Carmy tool as a plain Python function that an agent framework can call.

Most frameworks (function calling, LangChain-style ``@tool``, MCP adapters) take a function with
typed parameters and a docstring, call it with the model's arguments, and hand its return value
or its exception message back to the model. This one:

- passes the framework's tool-call id as the request_id, so when the agent re-runs the same step
  (after a crash, a timeout, a lost answer) the gateway replays the recorded outcome instead of
  creating a second order;
- returns a dict for every recorded outcome, including a tool failure, which the model can read;
- raises :class:`ToolOutcomeUnknown` with a message the model can act on when the outcome is
  not known yet (still running, interrupted) or the call was refused.

Run it against a local gateway (``cargo run -p carmy-gateway``)::

    python examples/agent_tool.py            # CARMY_URL, CARMY_API_KEY are read if set
"""

from __future__ import annotations

import os
import uuid
from typing import Any, Callable

from carmy_client import (
    CarmyClient,
    CarmyError,
    ConflictError,
    ExecutionInterrupted,
    UnavailableError,
    UncertainRunningError,
)


class ToolOutcomeUnknown(Exception):
    """Raised when the model must not simply assume success or failure; the message says what
    to do next (retry with the same id, reconcile, or use a new id).
    """


def call_carmy_tool(
    client: CarmyClient, tool: str, arguments: dict[str, Any], tool_call_id: str
) -> dict[str, Any]:
    """Runs ``tool`` through Carmy at most once per ``tool_call_id`` and describes the outcome."""
    try:
        execution = client.execute(tool, arguments, request_id=tool_call_id)
    except UncertainRunningError as error:
        raise ToolOutcomeUnknown(
            f"{tool} is still running (execution {error.execution_id}). Call it again later "
            f"with the same tool_call_id {tool_call_id!r} to get its result; do not start it "
            "again under a new id."
        ) from error
    except ExecutionInterrupted as error:
        raise ToolOutcomeUnknown(
            f"{tool} was interrupted (execution {error.execution_id}) and may or may not have "
            "taken effect. Check whether it did (for orders: find_orders) before doing "
            "anything else; an operator can resolve the execution."
        ) from error
    except ConflictError as error:
        raise ToolOutcomeUnknown(
            f"tool_call_id {tool_call_id!r} was already used for a different call "
            f"({', '.join(error.differs) or 'tool, arguments or metadata'} differ). "
            "Use a new id for a new call."
        ) from error
    except UnavailableError as error:
        raise ToolOutcomeUnknown(
            f"Carmy could not be reached ({error.detail}). Retry later with the same "
            f"tool_call_id {tool_call_id!r}: it will not run twice."
        ) from error
    except CarmyError as error:
        # Refused before anything ran (bad arguments, unknown tool, no key, store full).
        raise ToolOutcomeUnknown(f"{tool} was not run: {error}") from error
    return {
        "ok": execution.status == "completed",
        "status": execution.status,
        "result": execution.data,
        "error": execution.error,
        "execution_id": execution.execution_id,
        "replayed": execution.replayed,
    }


def make_create_order(client: CarmyClient) -> Callable[..., dict[str, Any]]:
    """The function an agent framework registers as its ``create_order`` tool."""

    def create_order(
        sku: str, quantity: int = 1, tool_call_id: str | None = None
    ) -> dict[str, Any]:
        """Create an order for ``quantity`` items of ``sku``; returns ``{"order_id": int}`` in
        ``result``. Safe to call again with the same ``tool_call_id``: it never orders twice.
        """
        call_id = tool_call_id or str(uuid.uuid4())
        return call_carmy_tool(
            client, "create_order", {"sku": sku, "quantity": quantity}, call_id
        )

    return create_order


def main() -> None:
    url = os.environ.get("CARMY_URL", "http://127.0.0.1:8080")
    with CarmyClient(url, api_key=os.environ.get("CARMY_API_KEY")) as client:
        create_order = make_create_order(client)
        first = create_order("book", 2, tool_call_id="call_42")
        again = create_order("book", 2, tool_call_id="call_42")  # the agent retried the step
        print(first)
        print(again)  # same order_id, "replayed": True
        try:
            create_order("pen", 1, tool_call_id="call_42")
        except ToolOutcomeUnknown as refused:
            print(f"refused: {refused}")


if __name__ == "__main__":
    main()
