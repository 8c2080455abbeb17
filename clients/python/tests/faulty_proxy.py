"""A faulty HTTP/1.1 TCP proxy for the client tests, in front of a real gateway.

Each client connection carries one request: the proxy reads it, asks its ``policy`` what to do,
and then forwards it to the gateway on a fresh upstream connection (``Connection: close``) and
relays the answer, forwards it but closes the client connection without answering (the answer
is lost after the gateway acted on it), or answers by itself without forwarding. Every request
is logged with its arrival time, request_id and the status the client got (``None`` if none).

It runs its own asyncio loop in a daemon thread so that sync and async tests can use it alike.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass
from typing import Callable

FORWARD = "forward"
DROP_RESPONSE = "drop_response"


@dataclass(frozen=True)
class Seen:
    """One request as the proxy saw it. ``at`` is ``time.monotonic()`` at arrival."""

    method: str
    path: str
    request_id: str | None
    body: bytes
    at: float


@dataclass(frozen=True)
class Answer:
    """The proxy's own answer: status, extra headers and a JSON body."""

    status: int
    headers: dict[str, str]
    body: dict[str, object]

    def encode(self) -> bytes:
        body = json.dumps(self.body).encode()
        lines = [f"HTTP/1.1 {self.status} Proxy", "Content-Type: application/problem+json"]
        lines += [f"{name}: {value}" for name, value in self.headers.items()]
        lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
        return "\r\n".join(lines).encode("latin-1") + body


Action = str | Answer
Policy = Callable[[Seen, int], Action]
"""Decides for a request, given how many earlier requests carried the same request_id."""


def pass_through(seen: Seen, earlier: int) -> Action:
    """Forwards everything."""
    return FORWARD


def drop_first_response(seen: Seen, earlier: int) -> Action:
    """Loses the gateway's answer to the first request of each request_id."""
    if seen.request_id is not None and earlier == 0:
        return DROP_RESPONSE
    return FORWARD


def answer_first_with(answer: Answer) -> Policy:
    """Answers the first request of each request_id itself (it never reaches the gateway)."""

    def policy(seen: Seen, earlier: int) -> Action:
        if seen.request_id is not None and earlier == 0:
            return answer
        return FORWARD

    return policy


@dataclass
class Logged:
    """A logged request and the status its client received (``None``: connection closed)."""

    seen: Seen
    action: str
    status: int | None = None


class FaultyProxy:
    """Listens on 127.0.0.1 (a free port) and forwards to ``upstream`` (host, port)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.policy: Policy = drop_first_response
        self._log: list[Logged] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        self.port = future.result(timeout=10)

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def log(self) -> list[Logged]:
        """A copy of everything logged so far, in arrival order."""
        with self._lock:
            return list(self._log)

    def requests_for(self, request_id: str) -> list[Logged]:
        return [entry for entry in self.log() if entry.seen.request_id == request_id]

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    def _decide(self, seen: Seen) -> tuple[Logged, Action]:
        with self._lock:
            earlier = sum(1 for e in self._log if e.seen.request_id == seen.request_id)
            action = self.policy(seen, earlier)
            entry = Logged(seen, action if isinstance(action, str) else "answer")
            if isinstance(action, Answer):
                entry.status = action.status
            self._log.append(entry)
        return entry, action

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await _read_request(reader)
            if request is None:
                return
            head, body = request
            entry, action = self._decide(_seen(head, body))
            if isinstance(action, Answer):
                writer.write(action.encode())
                await writer.drain()
                return
            response = await self._forward(head, body)
            if action == DROP_RESPONSE:
                return  # the gateway acted; its answer is lost
            entry.status = _status_of(response)
            writer.write(response)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _forward(self, head: list[str], body: bytes) -> bytes:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        lines = [head[0]] + [h for h in head[1:] if not h.lower().startswith("connection:")]
        lines += ["Connection: close", "", ""]
        up_writer.write("\r\n".join(lines).encode("latin-1") + body)
        await up_writer.drain()
        response = await up_reader.read()  # until the gateway closes
        up_writer.close()
        return _with_connection_close(response)


async def _read_request(reader: asyncio.StreamReader) -> tuple[list[str], bytes] | None:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    head = raw.decode("latin-1").split("\r\n")[:-2]
    length = 0
    for line in head[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return head, body


def _seen(head: list[str], body: bytes) -> Seen:
    method, path, _ = head[0].split(" ", 2)
    request_id = None
    if body:
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("request_id"), str):
            request_id = parsed["request_id"]
    return Seen(method, path, request_id, body, time.monotonic())


def _status_of(response: bytes) -> int | None:
    try:
        return int(response.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


def _with_connection_close(response: bytes) -> bytes:
    """Makes sure the client does not reuse a connection the proxy closes after one answer."""
    head, sep, rest = response.partition(b"\r\n\r\n")
    if not sep or b"\r\nconnection:" in head.lower():
        return response
    return head + b"\r\nConnection: close" + sep + rest
