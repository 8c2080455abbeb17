"""MCP tasks (the ``io.modelcontextprotocol/tasks`` extension, protocol 2026-07-28) answered from
Carmy's records (docs/semantics.md §11, "Tasks"), on replicas of one PostgreSQL database.

The official Python SDK (``mcp`` 2.3 from PyPI) speaks 2026-07-28 but ships no client for the
tasks extension (only the generic ``ClientExtension`` hooks), so these tests drive the protocol
with raw JSON-RPC over ``httpx2`` (the SDK's own HTTP client): each request carries the
2026-07-28 per-request ``_meta`` (protocol version, client info, client capabilities declaring
the tasks extension) and the standard headers.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import httpx2

from conftest import API_KEY, REPO_ROOT, Gateway, free_port, started
from test_mcp_sdk import data

VERSION = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
DEADLINE_S = 20.0
OTHER_KEY = "mcp-python-other-key"
_ids = itertools.count(1)


def rpc(
    gateway: Gateway,
    method: str,
    params: dict[str, Any],
    *,
    tasks: bool = True,
    key: str = API_KEY,
    timeout: float = 30,
) -> dict[str, Any]:
    """One JSON-RPC request of protocol 2026-07-28; the whole response body."""
    capabilities: dict[str, Any] = {"extensions": {TASKS: {}}} if tasks else {}
    meta = dict(params.get("_meta", {}))
    meta.update(
        {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientInfo": {"name": "carmy-tasks-test", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        }
    )
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": {**params, "_meta": meta}}
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
    }
    if method == "tools/call":
        headers["Mcp-Name"] = params["name"]
    elif method.startswith("tasks/"):
        headers["Mcp-Name"] = params["taskId"]
    response = httpx2.post(gateway.mcp, json=body, headers=headers, timeout=timeout)
    return dict(response.json())


def call(gateway: Gateway, tool: str, arguments: dict[str, Any], request_id: str, **kwargs: Any) -> dict[str, Any]:
    params = {"name": tool, "arguments": arguments, "_meta": {"io.carmy/request_id": request_id}}
    return rpc(gateway, "tools/call", params, **kwargs)


def get(gateway: Gateway, task_id: str, **kwargs: Any) -> dict[str, Any]:
    return rpc(gateway, "tasks/get", {"taskId": task_id}, **kwargs)


def until(what: str, condition: Any) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        seen = condition()
        if seen:
            return seen
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def status_of(gateway: Gateway, task_id: str) -> str:
    return str(get(gateway, task_id)["result"]["status"])


def record(gateway: Gateway, execution_id: str) -> dict[str, Any]:
    response = httpx2.get(f"{gateway.url}/v1/executions/{execution_id}", headers=gateway.headers(), timeout=10)
    assert response.status_code == 200, response.text
    return dict(response.json())


def two_replicas_env(database_url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "CARMY_LEASE_TTL_MS": "1500",
        "CARMY_API_KEYS": f"{API_KEY}=python,{OTHER_KEY}=other",
    }


def test_a_long_call_is_a_task_any_replica_answers(database_url: str) -> None:
    with started(two_replicas_env(database_url)) as a, started(two_replicas_env(database_url)) as b:
        request_id = f"py-task-{uuid.uuid4().hex[:12]}"
        created = call(a, "sleep", {"ms": 3000}, request_id)["result"]
        assert created["resultType"] == "task", created
        assert created["status"] == "working"
        task_id = created["taskId"]
        assert task_id.startswith("exec_")
        assert created["pollIntervalMs"] == 500

        working = get(b, task_id)["result"]
        assert working["status"] == "working", working
        assert working["taskId"] == task_id

        # Another principal cannot see it, on either replica.
        refused = get(b, task_id, key=OTHER_KEY)
        assert "result" not in refused, refused
        assert refused["error"]["code"] == -32602
        assert "no task" in refused["error"]["message"]

        until("the task completed on B", lambda: status_of(b, task_id) == "completed")
        done = get(b, task_id)["result"]
        assert done["result"]["isError"] is False
        assert data(done["result"]["structuredContent"]) == {"slept_ms": 3000}
        execution = done["result"]["_meta"]["io.carmy/execution"]
        assert execution["execution_id"] == task_id
        assert execution["status"] == "completed"
        assert 0 < done["ttlMs"] <= 7 * 24 * 3600 * 1000
        assert a.tool_runs("sleep") == 1
        assert b.tool_runs("sleep") == 0

        # The same call again replays (a client without tasks gets the plain result).
        again = call(b, "sleep", {"ms": 3000}, request_id, tasks=False)["result"]
        assert again["isError"] is False
        assert again["_meta"]["io.carmy/execution"]["replayed"] is True
        assert again["_meta"]["io.carmy/execution"]["execution_id"] == task_id


def test_a_client_without_tasks_keeps_todays_answer(gateway: Gateway) -> None:
    request_id = f"py-notask-{uuid.uuid4().hex[:12]}"
    plain = call(gateway, "sleep", {"ms": 1500}, request_id, tasks=False)["result"]
    assert "resultType" not in plain or plain["resultType"] == "complete", plain
    assert plain["isError"] is False
    assert data(plain["structuredContent"]) == {"slept_ms": 1500}
    refused = get(gateway, "exec_00000000000000000000000000000000", tasks=False)
    assert refused["error"]["code"] == -32021, refused


def test_the_owner_killed_mid_task_fails_uncertain(database_url: str) -> None:
    with started(two_replicas_env(database_url)) as a, started(two_replicas_env(database_url)) as b:
        created = call(a, "sleep", {"ms": 10000}, f"py-task-killed-{uuid.uuid4().hex[:12]}")["result"]
        task_id = created["taskId"]
        a.kill()
        seen: list[str] = []

        def failed() -> bool:
            status = status_of(b, task_id)
            seen.append(status)
            return status == "failed"

        until("A's lease to lapse", failed)
        assert "completed" not in seen
        answer = get(b, task_id)["result"]
        error = answer["error"]
        assert error["code"] == -32001
        assert error["data"] == {
            "code": "EXECUTION_UNCERTAIN",
            "state": "interrupted",
            "execution_id": task_id,
            "effect_may_have_happened": True,
        }
        assert task_id in error["message"]
        assert "Carmy will not run it again" in error["message"]
        assert record(b, task_id)["status"] == "interrupted"
        assert b.tool_runs("sleep") == 0


def test_tasks_cancel_is_carmys_cancel(database_url: str) -> None:
    with started(two_replicas_env(database_url)) as a, started(two_replicas_env(database_url)) as b:
        created = call(a, "sleep", {"ms": 10000}, f"py-task-cancel-{uuid.uuid4().hex[:12]}")["result"]
        task_id = created["taskId"]
        # Another principal's cancel is refused and changes nothing.
        refused = rpc(b, "tasks/cancel", {"taskId": task_id}, key=OTHER_KEY)
        assert refused["error"]["code"] == -32602, refused
        assert status_of(b, task_id) == "working"
        # Cancelled from the other replica.
        ack = rpc(b, "tasks/cancel", {"taskId": task_id})
        assert ack["result"]["resultType"] == "complete", ack
        until("the task cancelled", lambda: status_of(b, task_id) == "cancelled")
        stored = record(b, task_id)
        assert stored["status"] == "cancelled"
        assert stored["error"]["code"] == "CANCELLED"
        # Cancelling a finished task is refused: its outcome stays.
        again = rpc(b, "tasks/cancel", {"taskId": task_id})
        assert again["error"]["code"] == -32602
        assert "already finished" in again["error"]["message"]


def test_a_disconnect_is_not_a_cancellation(gateway: Gateway) -> None:
    """The client gives up (its HTTP request times out and the connection closes) while the
    tool runs: the execution runs on and is recorded; the same call later replays it."""
    request_id = f"py-leave-{uuid.uuid4().hex[:12]}"
    before = gateway.tool_runs("sleep")
    gave_up = threading.Event()

    def leave() -> None:
        try:
            call(gateway, "sleep", {"ms": 2000}, request_id, tasks=False, timeout=0.5)
        except httpx2.TimeoutException:
            gave_up.set()

    thread = threading.Thread(target=leave)
    thread.start()
    thread.join()
    assert gave_up.is_set(), "the client did not give up before the answer"
    replay = until(
        "the outcome recorded",
        lambda: (result := call(gateway, "sleep", {"ms": 2000}, request_id, tasks=False)["result"])["_meta"][
            "io.carmy/execution"
        ]["status"]
        == "completed"
        and result,
    )
    execution = replay["_meta"]["io.carmy/execution"]
    assert execution["replayed"] is True
    assert execution["status"] == "completed"
    assert data(replay["structuredContent"]) == {"slept_ms": 2000}
    assert gateway.tool_runs("sleep") == before + 1


def test_a_tool_configured_always_is_a_task_at_once(tmp_path: Any) -> None:
    """``task = "always"`` (docs/semantics.md §10): even a quick call is answered with a task,
    read with ``tasks/get``; here the tools of an upstream server written with the Python SDK."""
    port = free_port()
    script = REPO_ROOT / "crates" / "carmy-gateway" / "tests" / "mcp" / "python_sdk_server.py"
    env = {**os.environ, "STATE_FILE": str(tmp_path / "state.jsonl")}
    server = subprocess.Popen([sys.executable, str(script), str(port)], env=env)
    try:

        def listening() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", port)) == 0

        until("the Python SDK server listens", listening)
        tools = tmp_path / "tools.toml"
        tools.write_text(
            f'[[mcp_servers]]\nname = "sdk"\nurl = "http://127.0.0.1:{port}/mcp"\nprefix = "sdk."\ntask = "always"\n'
        )
        with started({"CARMY_TOOLS_FILE": str(tools)}) as gateway:
            request_id = f"py-always-{uuid.uuid4().hex[:12]}"
            created = call(gateway, "sdk.note", {"text": "hi"}, request_id)["result"]
            assert created["resultType"] == "task", created
            task_id = created["taskId"]
            until("the task completed", lambda: status_of(gateway, task_id) == "completed")
            done = get(gateway, task_id)["result"]
            assert data(done["result"]["structuredContent"]) == {"text": "hi", "key": task_id}
            # Without the extension: the plain (replayed) result.
            plain = call(gateway, "sdk.note", {"text": "hi"}, request_id, tasks=False)["result"]
            assert plain["_meta"]["io.carmy/execution"] == {
                **plain["_meta"]["io.carmy/execution"],
                "execution_id": task_id,
                "replayed": True,
            }
    finally:
        server.kill()
        server.wait(timeout=30)
