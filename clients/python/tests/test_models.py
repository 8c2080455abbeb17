"""Parsing of the gateway's bodies into typed records, the same on every supported Python."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from carmy_client import Execution, PendingExecution, ResponseFormatError
from carmy_client.models import parse_execution, parse_record, parse_tools

BODY: dict[str, Any] = {
    "execution_id": "exec_1", "status": "timed_out", "data": None,
    "error": {"code": "TIMEOUT", "message": "deadline passed"}, "tool": "sleep",
    "request_id": "r", "session_id": "default", "replayed": False,
    "started_at": "2026-12-01T10:22:04Z", "finished_at": "2026-12-01T10:22:05.5+02:00",
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-01T10:22:04.475Z", datetime(2026, 12, 1, 10, 22, 4, 475000, timezone.utc)),
        ("2026-12-01T10:22:04.4751239Z", datetime(2026, 12, 1, 10, 22, 4, 475123, timezone.utc)),
        ("2026-12-01T10:22:04Z", datetime(2026, 12, 1, 10, 22, 4, 0, timezone.utc)),
        (
            "2026-12-01T10:22:04.1-05:30",
            datetime(2026, 12, 1, 10, 22, 4, 100000, timezone(-timedelta(hours=5, minutes=30))),
        ),
    ],
)
def test_timestamps(text: str, expected: datetime) -> None:
    parsed = parse_execution(dict(BODY, finished_at=text)).finished_at
    assert parsed == expected and parsed is not None and parsed.utcoffset() == expected.utcoffset()


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01T00:00:00Z", "2026-12-01T10:22:04.Z"])
def test_bad_timestamps_are_format_errors(text: str) -> None:
    with pytest.raises(ResponseFormatError):
        parse_execution(dict(BODY, started_at=text))


def test_execution_fields() -> None:
    execution = parse_execution(BODY)
    assert isinstance(execution, Execution)
    assert (execution.status, execution.ok) == ("timed_out", False)
    assert execution.error == {"code": "TIMEOUT", "message": "deadline passed"}
    assert execution.raw["tool"] == "sleep"
    with pytest.raises(ResponseFormatError):
        parse_execution(dict(BODY, status="running"))
    with pytest.raises(ResponseFormatError):
        parse_execution(dict(BODY, replayed="yes"))
    with pytest.raises(ResponseFormatError):
        parse_execution([BODY])


def test_pending_record_and_tools() -> None:
    pending = parse_record(dict(BODY, status="interrupted"))
    assert isinstance(pending, PendingExecution) and pending.status == "interrupted"
    tools = parse_tools({"tools": [{"name": "echo", "description": None, "input_schema": {}}]})
    assert [(t.name, t.description, dict(t.input_schema)) for t in tools] == [("echo", None, {})]
