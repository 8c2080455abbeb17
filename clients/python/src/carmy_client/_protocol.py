"""The HTTP shapes both clients share: request bodies and headers, and answer decoding.

Routes (contract §7): ``POST /v1/executions``, ``GET /v1/executions/{id}``, ``GET /v1/tools``.
Everything here is pure; the clients in :mod:`carmy_client.client` and
:mod:`carmy_client.aio` only move bytes.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Mapping

import httpx

from .retry import AttemptPlan

EXECUTIONS_PATH = "/v1/executions"
TOOLS_PATH = "/v1/tools"

_EXECUTION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def new_request_id() -> str:
    """A fresh request_id: a random UUID (version 4) in its canonical text form."""
    return str(uuid.uuid4())


def execute_body(
    tool: str,
    arguments: Mapping[str, Any],
    request_id: str,
    session_id: str | None,
    metadata: Mapping[str, Any] | None,
) -> bytes:
    """The JSON body of ``POST /v1/executions``; optional members are left out when ``None``."""
    body: dict[str, Any] = {"tool": tool, "arguments": dict(arguments), "request_id": request_id}
    if session_id is not None:
        body["session_id"] = session_id
    if metadata is not None:
        body["metadata"] = dict(metadata)
    return json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")


@dataclass(frozen=True)
class Call:
    """One logical request, sent once per attempt: ``method``, ``path``, ``body`` (JSON bytes
    or ``None``), the ``request_id`` it carries (for errors), and whether it may ask the server
    to wait for a running duplicate (``prefer_wait``).
    """

    method: str
    path: str
    body: bytes | None = None
    request_id: str | None = None
    prefer_wait: bool = False


def base_headers(api_key: str | None, user_agent: str) -> dict[str, str]:
    """Headers of every request: ``Authorization: Bearer`` when a key is given (contract §6)."""
    headers = {"Accept": "application/json", "User-Agent": user_agent}
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def attempt_headers(plan: AttemptPlan, call: Call) -> dict[str, str]:
    """Per-attempt headers: ``Prefer: wait=N`` (RFC 7240) when planned, and the JSON type."""
    headers: dict[str, str] = {}
    if call.body is not None:
        headers["Content-Type"] = "application/json"
    if plan.prefer_wait is not None:
        headers["Prefer"] = f"wait={plan.prefer_wait}"
    return headers


def attempt_timeout(plan: AttemptPlan) -> httpx.Timeout:
    """The httpx timeout of one attempt, from its plan."""
    return httpx.Timeout(plan.timeout, connect=plan.connect_timeout)


def execution_path(execution_id: str) -> str:
    """``/v1/executions/{id}``; an id the gateway could never issue is refused here."""
    if not _EXECUTION_ID.match(execution_id):
        raise ValueError(f"not an execution id: {execution_id!r}")
    return f"{EXECUTIONS_PATH}/{execution_id}"


@dataclass(frozen=True)
class Answer:
    """A decoded answer: ``status``, ``body`` (parsed JSON of a 2xx answer), ``problem`` (the
    problem object of a non-2xx answer, ``{}`` without a JSON object body), ``retry_after``
    (the raw header).
    """

    status: int
    body: Any
    problem: Mapping[str, Any]
    retry_after: str | None

    @property
    def success(self) -> bool:
        """True for 2xx."""
        return 200 <= self.status < 300


def decode(response: httpx.Response) -> Answer:
    """Decodes an httpx response whose body has been read. A 2xx body that is not JSON raises
    :class:`ValueError` (it would be a bug or a foreign server); an error body that is not a
    JSON object becomes ``{}``.
    """
    retry_after = response.headers.get("retry-after")
    if 200 <= response.status_code < 300:
        return Answer(response.status_code, json.loads(response.content), {}, retry_after)
    try:
        parsed = json.loads(response.content) if response.content else {}
    except ValueError:
        parsed = {}
    problem = parsed if isinstance(parsed, dict) else {}
    return Answer(response.status_code, None, problem, retry_after)
