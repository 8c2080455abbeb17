"""The client's exceptions, one per answer an agent has to handle differently (contract §3, §5).

Every exception derives from :class:`CarmyError` and carries the gateway's machine ``code``,
the HTTP ``status`` (``None`` when no answer arrived), the human ``detail``, the
``execution_id`` where an execution exists, and the ``request_id`` the client used: retrying
later with that same ``request_id`` is always safe, since the gateway replays a recorded outcome
instead of running the tool again.

Which of them the client retries by itself is decided in :mod:`carmy_client.retry`.
"""

from __future__ import annotations

from typing import Any, Mapping

__all__ = [
    "CarmyError",
    "CapacityError",
    "ConflictError",
    "ExecutionFinishedError",
    "ExecutionInterrupted",
    "ExecutionSupersededError",
    "ExecutionUncertainError",
    "InvalidRequestError",
    "NotFoundError",
    "UnauthorizedError",
    "UnavailableError",
    "UncertainRunningError",
    "UnknownToolError",
    "error_from_problem",
]


class CarmyError(Exception):
    """Base of every error this client raises for a gateway answer or a failed transport.

    Attributes: ``code`` (e.g. ``"IDEMPOTENCY_CONFLICT"``, or ``"TRANSPORT"`` when no answer
    arrived), ``status`` (HTTP status or ``None``), ``detail`` (text for humans and models),
    ``execution_id`` (or ``None``), ``request_id`` (the identity used, or ``None`` for calls
    that have none), ``problem`` (the whole RFC 9457 body, empty without one).
    """

    def __init__(
        self,
        detail: str,
        *,
        code: str,
        status: int | None = None,
        execution_id: str | None = None,
        request_id: str | None = None,
        problem: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code
        self.status = status
        self.execution_id = execution_id
        self.request_id = request_id
        self.problem: Mapping[str, Any] = problem or {}

    def __str__(self) -> str:
        where = f" (execution {self.execution_id})" if self.execution_id else ""
        status = f"{self.status} " if self.status is not None else ""
        return f"{status}{self.code}: {self.detail}{where}"


class ConflictError(CarmyError):
    """409 ``IDEMPOTENCY_CONFLICT``: the request_id was already used for a different call.

    Never retried: the same request_id cannot run a different call. ``differs`` lists the parts
    that differ (``tool``, ``arguments``, ``metadata``) when the server names them, else it is
    empty. Use a new request_id for a new call.
    """

    @property
    def differs(self) -> list[str]:
        """The parts of the call that differ from the recorded one, as the server names them."""
        value = self.problem.get("differs")
        if isinstance(value, list):
            return [str(item) for item in value]
        return []


class ExecutionUncertainError(CarmyError):
    """``EXECUTION_UNCERTAIN``: an execution holds the identity but has no recorded outcome.

    ``state`` is ``"running"`` or ``"interrupted"``. See the two subclasses.
    """

    @property
    def state(self) -> str | None:
        """``running`` or ``interrupted`` as the server sent it."""
        value = self.problem.get("state")
        return value if isinstance(value, str) else None


class UncertainRunningError(ExecutionUncertainError):
    """The execution was still running (409), or ran but was not recorded yet (503), when the
    client's attempts or deadline ran out. Retrying later with the same ``request_id`` returns
    its outcome once it is recorded; the tool does not run again.
    """


class ExecutionInterrupted(ExecutionUncertainError):
    """409 ``EXECUTION_UNCERTAIN`` with ``state: "interrupted"``: the process running the tool
    died and nobody knows whether its effect happened. Never retried: reconcile instead (look
    for the effect, then resolve or release ``execution_id`` with an operator).
    """


class ExecutionFinishedError(CarmyError):
    """409 ``EXECUTION_FINISHED``: the execution already has an outcome or was released. For a
    holder's renewal (docs/semantics.md §16): it lost the execution; stop, its outcome will not
    be recorded.
    """


class ExecutionSupersededError(CarmyError):
    """409 ``EXECUTION_SUPERSEDED``: the outcome arrived after the execution was decided (its
    holder's lease had lapsed and someone resolved or released it). The outcome was kept as a
    late arrival in the audit log, not the record; the decision stands, and the effect may have
    happened twice. ``current_execution_id`` names the execution holding the identity now.
    """

    @property
    def current_execution_id(self) -> str | None:
        """The execution that holds the identity now (``None`` when it is free)."""
        value = self.problem.get("current_execution_id")
        return value if isinstance(value, str) else None


class CapacityError(CarmyError):
    """507 ``IDEMPOTENCY_CAPACITY``: the gateway's in-memory store is full; nothing ran."""


class UnauthorizedError(CarmyError):
    """401 ``UNAUTHORIZED``: missing or unknown API key."""


class InvalidRequestError(CarmyError):
    """400 ``INVALID_REQUEST`` (also 408, 413, 415): the call was rejected before anything was
    reserved; fix the call. The identity stays free.
    """


class UnknownToolError(CarmyError):
    """404 ``UNKNOWN_TOOL``: the gateway has no tool of that name; nothing was reserved."""


class NotFoundError(CarmyError):
    """404 ``NOT_FOUND``: no such execution for this principal (or no such route)."""


class UnavailableError(CarmyError):
    """The gateway could not be reached, or answered 503 ``STORE_UNAVAILABLE``, on every
    attempt until the attempts or the deadline ran out. ``status`` is that of the last answer
    (``None`` if none arrived); ``__cause__`` is the last transport error, if any.

    Whether the tool ran is unknown when no answer arrived: retry later with the same
    ``request_id`` to get its outcome (or run it, if it never reached the gateway).
    """


_BY_CODE: dict[str, type[CarmyError]] = {
    "IDEMPOTENCY_CONFLICT": ConflictError,
    "IDEMPOTENCY_CAPACITY": CapacityError,
    "UNAUTHORIZED": UnauthorizedError,
    "INVALID_REQUEST": InvalidRequestError,
    "PAYLOAD_TOO_LARGE": InvalidRequestError,
    "UNSUPPORTED_MEDIA_TYPE": InvalidRequestError,
    "REQUEST_TIMEOUT": InvalidRequestError,
    "UNKNOWN_TOOL": UnknownToolError,
    "NOT_FOUND": NotFoundError,
    "STORE_UNAVAILABLE": UnavailableError,
    "EXECUTION_FINISHED": ExecutionFinishedError,
    "EXECUTION_SUPERSEDED": ExecutionSupersededError,
}


_BY_STATUS: dict[int, type[CarmyError]] = {
    400: InvalidRequestError,
    401: UnauthorizedError,
    404: NotFoundError,
    502: UnavailableError,
    503: UnavailableError,
    504: UnavailableError,
    507: CapacityError,
}


def _problem_class(code: str, status: int, state: str | None) -> type[CarmyError]:
    if code == "EXECUTION_UNCERTAIN":
        return ExecutionInterrupted if state == "interrupted" else UncertainRunningError
    if code in _BY_CODE:
        return _BY_CODE[code]
    if code.startswith("HTTP_"):
        # No machine code (e.g. a proxy's own answer): the status alone decides.
        return _BY_STATUS.get(status, CarmyError)
    return CarmyError


def error_from_problem(
    status: int, problem: Mapping[str, Any], *, request_id: str | None = None
) -> CarmyError:
    """The exception for a non-2xx answer with its RFC 9457 body (``{}`` if it had none).

    The class follows the machine ``code`` (and ``state`` for ``EXECUTION_UNCERTAIN``); a body
    without a code (e.g. a load balancer's own answer) gets the code ``HTTP_<status>`` and the
    class its status suggests (502, 503 and 504 are :class:`UnavailableError`).
    """
    raw_code = problem.get("code")
    code = raw_code if isinstance(raw_code, str) else f"HTTP_{status}"
    detail = problem.get("detail")
    state = problem.get("state")
    execution_id = problem.get("execution_id")
    cls = _problem_class(code, status, state if isinstance(state, str) else None)
    return cls(
        detail if isinstance(detail, str) else f"HTTP {status}",
        code=code,
        status=status,
        execution_id=execution_id if isinstance(execution_id, str) else None,
        request_id=request_id,
        problem=problem,
    )
