"""``EXECUTION_UNCERTAIN`` through the official MCP Python SDK (docs/semantics.md §11): the same
call while it runs, and a call whose replica was killed, retried on another replica of the same
PostgreSQL database (running until the dead replica's lease lapses, then interrupted)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

from mcp import ClientSession

from conftest import Gateway, started
from test_mcp_sdk import execution, run, text

DEADLINE_S = 15.0


def call_in_background(gateway: Gateway, tool: str, arguments: dict[str, Any], meta: dict[str, str]) -> None:
    """Starts the call on a thread of its own whose answer nobody waits for (the replica may
    die under it)."""

    async def body(client: ClientSession) -> Any:
        return await client.call_tool(tool, arguments, meta=meta)

    def call() -> None:
        try:
            run(gateway, body)
        except BaseException:  # noqa: BLE001 - the replica was killed on purpose
            pass

    threading.Thread(target=call, daemon=True).start()


def until(what: str, condition: Any) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        seen = condition()
        if seen:
            return seen
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def retry(gateway: Gateway, tool: str, arguments: dict[str, Any], meta: dict[str, str]) -> Any:
    async def body(client: ClientSession) -> Any:
        return await client.call_tool(tool, arguments, meta=meta)

    return run(gateway, body)


def test_the_same_call_while_it_runs_is_uncertain(gateway: Gateway) -> None:
    meta = {"io.carmy/request_id": f"py-running-{uuid.uuid4().hex[:12]}"}
    before = gateway.tool_runs("sleep")
    call_in_background(gateway, "sleep", {"ms": 2000}, meta)
    until("the sleep started", lambda: gateway.tool_runs("sleep") == before + 1)
    answer = retry(gateway, "sleep", {"ms": 2000}, meta)
    assert answer.is_error is False
    assert answer.structured_content["code"] == "EXECUTION_UNCERTAIN"
    assert answer.structured_content["state"] == "running"
    assert execution(answer)["status"] == "running"
    assert "Retry the same call unchanged to get its outcome; this answer is not an error" in text(answer)
    done = until(
        "the outcome",
        lambda: execution(result := retry(gateway, "sleep", {"ms": 2000}, meta))["status"] == "completed" and result,
    )
    assert execution(done)["replayed"] is True
    assert execution(done)["execution_id"] == answer.structured_content["execution_id"]
    assert gateway.tool_runs("sleep") == before + 1


def test_a_call_whose_replica_died_is_interrupted_on_another(database_url: str) -> None:
    env = {"DATABASE_URL": database_url, "CARMY_LEASE_TTL_MS": "1500"}
    meta = {"io.carmy/request_id": "py-interrupted"}
    with started(env) as a, started(env) as b:
        call_in_background(a, "sleep", {"ms": 10000}, meta)
        until("the sleep started on A", lambda: a.tool_runs("sleep") == 1)
        a.kill()
        at_once = retry(b, "sleep", {"ms": 10000}, meta)
        assert at_once.is_error is False
        assert at_once.structured_content["code"] == "EXECUTION_UNCERTAIN"
        assert at_once.structured_content["state"] == "running"
        later = until(
            "A's lease to lapse",
            lambda: (result := retry(b, "sleep", {"ms": 10000}, meta)).structured_content["state"]
            == "interrupted"
            and result,
        )
        assert later.structured_content["execution_id"] == at_once.structured_content["execution_id"]
        assert execution(later)["status"] == "interrupted"
        words = text(later)
        assert "Carmy will not run it again" in words
        assert "`find_orders`" in words
        assert b.tool_runs("sleep") == 0
