#!/usr/bin/env python3
"""A small MCP server on stdio (newline-delimited JSON-RPC, Python standard library only) for
the gateway's MCP upstream tests. Every event is appended to the file $STATE_FILE as one JSON
line, so the test sees what arrived: {"event": "started", "pid"}, {"event": "call", "tool",
"arguments", "key"} (key = params._meta["io.carmy/idempotency_key"]).

With $GATE_FILE set, a restart (the state file already exists) exits at once until that file
exists, so the test can hold the server down.

Tools: write {"text"} -> structuredContent {"text", "key"}; fail -> isError; hang -> never
answers; add_tool -> adds the tool "extra" and sends notifications/tools/list_changed; lookup
{"key"} (read-only) -> structuredContent {"key", "found": true}.
"""

import json
import os
import sys
import threading

STATE = os.environ["STATE_FILE"]
LOCK = threading.Lock()
TOOLS = [
    {"name": "write", "description": "Writes a text",
     "inputSchema": {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}},
     "annotations": {"readOnlyHint": False, "idempotentHint": True}},
    {"name": "fail", "description": "Always fails", "inputSchema": {"type": "object"}},
    {"name": "hang", "description": "Never answers", "inputSchema": {"type": "object"}},
    {"name": "add_tool", "description": "Adds the tool extra", "inputSchema": {"type": "object"}},
    {"name": "lookup", "description": "Looks a key up",
     "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}},
     "annotations": {"readOnlyHint": True}},
]


def record(entry):
    with LOCK, open(STATE, "a") as state:
        state.write(json.dumps(entry) + "\n")


def send(message):
    with LOCK:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def text(value):
    return [{"type": "text", "text": value}]


def call(request_id, params):
    name = params.get("name")
    arguments = params.get("arguments") or {}
    key = (params.get("_meta") or {}).get("io.carmy/idempotency_key")
    record({"event": "call", "tool": name, "arguments": arguments, "key": key})
    if name == "write":
        result = {"content": text(arguments.get("text", "")),
                  "structuredContent": {"text": arguments.get("text"), "key": key}}
    elif name == "fail":
        result = {"content": text("the disk is full"), "isError": True}
    elif name == "hang":
        return
    elif name == "add_tool":
        TOOLS.append({"name": "extra", "description": "Added at run time", "inputSchema": {"type": "object"}})
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        result = {"content": text("added")}
    elif name == "lookup":
        result = {"content": text("found"),
                  "structuredContent": {"key": arguments.get("key"), "found": True}}
    elif name == "extra":
        result = {"content": text("extra ran")}
    else:
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": f"unknown tool {name}"}})
        return
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def main():
    gate = os.environ.get("GATE_FILE")
    if gate and not os.path.exists(gate) and os.path.exists(STATE):
        # A restart before the test opens the gate: exit at once, so the server stays down.
        record({"event": "refused", "pid": os.getpid()})
        sys.exit(1)
    record({"event": "started", "pid": os.getpid()})
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method = message.get("method")
        request_id = message.get("id")
        if request_id is None:
            continue
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": request_id, "result": {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "carmy-test-stdio", "version": "1.0.0"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": list(TOOLS)}})
        elif method == "tools/call":
            call(request_id, message.get("params") or {})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        else:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no method {method}"}})


if __name__ == "__main__":
    main()
