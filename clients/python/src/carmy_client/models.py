"""Typed views of the gateway's JSON bodies: recorded executions and tools.

The shapes are those of the gateway's HTTP API (contract §4 and §7): every recorded outcome has
``execution_id``, ``status``, ``data``, ``error``, ``tool``, ``request_id``, ``session_id``,
``replayed``, ``started_at`` and ``finished_at``. Members the client does not know yet are kept in
``raw`` so that nothing the server sends is lost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Mapping, cast

__all__ = [
    "FINISHED_STATUSES",
    "Execution",
    "ExecutionStatus",
    "PendingExecution",
    "PendingStatus",
    "ResponseFormatError",
    "Tool",
    "parse_record",
    "parse_execution",
    "parse_tools",
]

ExecutionStatus = Literal["completed", "failed", "timed_out", "cancelled"]
"""The recorded statuses (contract §4). ``failed`` means the tool returned an error."""

PendingStatus = Literal["running", "interrupted"]
"""The status of an execution without an outcome yet (``GET /v1/executions/{id}`` only)."""

FINISHED_STATUSES: frozenset[str] = frozenset({"completed", "failed", "timed_out", "cancelled"})


class ResponseFormatError(ValueError):
    """A 2xx body that does not have the documented shape (a proxy in the way, or a bug)."""


_RFC3339 = re.compile(r"^(?P<main>[^.]+?)(?:\.(?P<fraction>\d+))?(?P<zone>[+-]\d\d:\d\d)?$")


def _timestamp(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as a datetime. ``Z`` and any number of fractional digits are
    accepted (kept to microseconds) on every supported Python, whose ``fromisoformat`` differs.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise ResponseFormatError(f"timestamp is not a string: {value!r}")
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    parts = _RFC3339.match(text)
    if parts is None:
        raise ResponseFormatError(f"bad timestamp: {value!r}")
    fraction = (parts["fraction"] or "").ljust(6, "0")[:6]
    try:
        return datetime.fromisoformat(f"{parts['main']}.{fraction}{parts['zone'] or ''}")
    except ValueError:
        raise ResponseFormatError(f"bad timestamp: {value!r}") from None


def _optional_str(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise ResponseFormatError(f"{name} is not a string: {value!r}")
    return value


def _required_str(body: Mapping[str, Any], name: str) -> str:
    value = _optional_str(body, name)
    if value is None:
        raise ResponseFormatError(f"missing {name}")
    return value


@dataclass(frozen=True)
class Execution:
    """A recorded outcome of a tool call (contract §4).

    ``status`` is ``completed``, ``failed``, ``timed_out`` or ``cancelled``; all four are
    recorded and replayed alike. ``data`` is the tool's result (any JSON value) when completed,
    ``error`` the tool's error object (``{"code", "message"}``) otherwise. ``replayed`` is true
    when the gateway answered from the record without running the tool. ``request_id`` is
    ``None`` only for a call made without one (not possible through this client's ``execute``).
    ``raw`` holds the whole body as received.
    """

    execution_id: str
    status: ExecutionStatus
    data: Any
    error: Any
    tool: str
    request_id: str | None
    session_id: str | None
    replayed: bool
    started_at: datetime | None
    finished_at: datetime | None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True when ``status`` is ``completed``."""
        return self.status == "completed"


@dataclass(frozen=True)
class PendingExecution:
    """An execution that has no recorded outcome yet, as ``GET /v1/executions/{id}`` shows it.

    ``status`` is ``running`` or ``interrupted`` (its process died; reconcile, do not retry).
    """

    execution_id: str
    status: PendingStatus
    tool: str
    request_id: str | None
    session_id: str | None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Tool:
    """A tool the gateway offers: its name, description and argument JSON Schema."""

    name: str
    description: str | None
    input_schema: Mapping[str, Any]


def _as_object(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, dict):
        raise ResponseFormatError(f"expected a JSON object, got {type(body).__name__}")
    return cast(Mapping[str, Any], body)


def parse_execution(body: Any) -> Execution:
    """Reads a recorded outcome; raises :class:`ResponseFormatError` on any other shape."""
    obj = _as_object(body)
    status = _required_str(obj, "status")
    if status not in FINISHED_STATUSES:
        raise ResponseFormatError(f"not a finished status: {status!r}")
    replayed = obj.get("replayed", False)
    if not isinstance(replayed, bool):
        raise ResponseFormatError(f"replayed is not a boolean: {replayed!r}")
    return Execution(
        execution_id=_required_str(obj, "execution_id"),
        status=cast(ExecutionStatus, status),
        data=obj.get("data"),
        error=obj.get("error"),
        tool=_required_str(obj, "tool"),
        request_id=_optional_str(obj, "request_id"),
        session_id=_optional_str(obj, "session_id"),
        replayed=replayed,
        started_at=_timestamp(obj.get("started_at")),
        finished_at=_timestamp(obj.get("finished_at")),
        raw=obj,
    )


def parse_record(body: Any) -> Execution | PendingExecution:
    """Reads the body of ``GET /v1/executions/{id}``: finished or still pending."""
    obj = _as_object(body)
    status = obj.get("status")
    if status in ("running", "interrupted"):
        return PendingExecution(
            execution_id=_required_str(obj, "execution_id"),
            status=cast(PendingStatus, status),
            tool=_required_str(obj, "tool"),
            request_id=_optional_str(obj, "request_id"),
            session_id=_optional_str(obj, "session_id"),
            raw=obj,
        )
    return parse_execution(obj)


def parse_tools(body: Any) -> list[Tool]:
    """Reads the body of ``GET /v1/tools`` (``{"tools": [{name, description, input_schema}]}``)."""
    tools = _as_object(body).get("tools")
    if not isinstance(tools, list):
        raise ResponseFormatError("missing tools list")
    parsed = []
    for item in tools:
        entry = _as_object(item)
        schema = entry.get("input_schema", {})
        parsed.append(
            Tool(
                name=_required_str(entry, "name"),
                description=_optional_str(entry, "description"),
                input_schema=_as_object(schema),
            )
        )
    return parsed
