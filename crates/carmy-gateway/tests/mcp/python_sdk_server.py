"""An MCP server written with the official Python SDK (`mcp` 2.x from PyPI), served over
Streamable HTTP on 127.0.0.1:<port>/mcp, for the gateway's interoperability test. Each call is
appended to $STATE_FILE as one JSON line with the key Carmy sent in
params._meta["io.carmy/idempotency_key"].

The `hang` tool records its call and then never answers, so a test can kill the server mid-call.
With $TOOLS_VARIANT=restarted the server has another tool list, as after an upgrade: `extra`
added, `broken` gone.

Usage: python python_sdk_server.py <port>
"""

import json
import os
import sys
import time
from typing import Optional, TypedDict

from mcp.server.mcpserver import Context, MCPServer

STATE = os.environ["STATE_FILE"]
RESTARTED = os.environ.get("TOOLS_VARIANT") == "restarted"
server = MCPServer("carmy-test-python-sdk")


def record(tool, arguments, ctx):
    meta = ctx.request_context.meta
    if meta is not None and not isinstance(meta, dict):
        meta = meta.model_dump(by_alias=True) if hasattr(meta, "model_dump") else dict(meta)
    key = (meta or {}).get("io.carmy/idempotency_key")
    with open(STATE, "a") as state:
        state.write(json.dumps({"tool": tool, "arguments": arguments, "key": key}) + "\n")
    return key


class Note(TypedDict):
    text: str
    key: Optional[str]


@server.tool(description="Records a note")
def note(text: str, ctx: Context) -> Note:
    key = record("note", {"text": text}, ctx)
    return {"text": text, "key": key}


if not RESTARTED:

    @server.tool(description="Always fails")
    def broken(ctx: Context) -> str:
        record("broken", {}, ctx)
        raise ValueError("broken on purpose")

else:

    @server.tool(description="Added by the restart")
    def extra(text: str, ctx: Context) -> Note:
        key = record("extra", {"text": text}, ctx)
        return {"text": text, "key": key}


@server.tool(description="Records its call, then never answers")
def hang(ctx: Context) -> str:
    record("hang", {}, ctx)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
