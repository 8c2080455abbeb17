"""An MCP server written with the official Python SDK (`mcp` 2.x from PyPI) that answers calls
with tasks (the `io.modelcontextprotocol/tasks` extension, protocol 2026-07-28), served over
Streamable HTTP on 127.0.0.1:<port>/mcp, for the gateway's upstream-task tests
(docs/semantics.md §10, "Upstream tasks"). The SDK has no built-in tasks support, so the
extension is written here with the SDK's own `Extension` hooks: a `tools/call` interceptor that
answers with a task, and a `tasks/get` method.

Tools (each call is appended to $STATE_FILE as one JSON line with the key Carmy sent):
- `slow_note(text)`: a task that completes after $TASK_MS (default 1000) ms with the note;
- `stuck()`: a task that stays `working` forever;
- `ask()`: answers `input_required` (it wants the user's input), runs nothing.

Usage: python python_sdk_task_server.py <port>
"""

import json
import os
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Optional

from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolRequestParams, InputRequiredResult, RequestParams

STATE = os.environ["STATE_FILE"]
TASK_MS = int(os.environ.get("TASK_MS", "1000"))
TASKS: dict[str, dict[str, Any]] = {}
LOCK = threading.Lock()


def now() -> str:
    return datetime.now(timezone.utc).isoformat()


def record(tool: str, arguments: dict[str, Any], meta: Any) -> Optional[str]:
    if meta is not None and not isinstance(meta, dict):
        meta = meta.model_dump(by_alias=True) if hasattr(meta, "model_dump") else dict(meta)
    key = (meta or {}).get("io.carmy/idempotency_key")
    with open(STATE, "a") as state:
        state.write(json.dumps({"tool": tool, "arguments": arguments, "key": key}) + "\n")
    return key


def new_task(status: str = "working") -> dict[str, Any]:
    task_id = f"upstream-{uuid.uuid4().hex[:12]}"
    task = {"taskId": task_id, "status": status, "createdAt": now(), "lastUpdatedAt": now(), "ttlMs": 600000}
    with LOCK:
        TASKS[task_id] = task
    return task


def finish(task_id: str, result: dict[str, Any]) -> None:
    with LOCK:
        TASKS[task_id].update(status="completed", result=result, lastUpdatedAt=now())


class TaskParams(RequestParams):
    taskId: str


class Tasks(Extension):
    identifier = "io.modelcontextprotocol/tasks"

    def methods(self):
        return [MethodBinding(method="tasks/get", params_type=TaskParams, handler=self.get)]

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        with LOCK:
            task = dict(TASKS[params.taskId])
        return {**task, "pollIntervalMs": 100, "resultType": "complete"}

    async def intercept_tool_call(self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext):
        arguments = dict(params.arguments or {})
        name = params.name
        if name == "ask":
            record(name, arguments, params.meta)
            return InputRequiredResult(request_state="the user must confirm first")
        if name not in ("slow_note", "stuck"):
            return await call_next(ctx)
        key = record(name, arguments, params.meta)
        task = new_task()
        if name == "slow_note":
            text = arguments.get("text", "")

            def complete() -> None:
                time.sleep(TASK_MS / 1000)
                payload = {"text": text, "key": key}
                finish(
                    task["taskId"],
                    {"content": [{"type": "text", "text": json.dumps(payload)}], "structuredContent": payload, "isError": False},
                )

            threading.Thread(target=complete, daemon=True).start()
        return {"resultType": "task", **task, "pollIntervalMs": 100}


server = MCPServer("carmy-test-python-sdk-tasks", extensions=[Tasks()])


@server.tool(description="Records a note, as a task")
def slow_note(text: str, ctx: Context) -> str:
    raise RuntimeError("answered by the tasks extension")


@server.tool(description="A task that never ends")
def stuck(ctx: Context) -> str:
    raise RuntimeError("answered by the tasks extension")


@server.tool(description="Needs the user's input")
def ask(ctx: Context) -> str:
    raise RuntimeError("answered by the tasks extension")


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
