"""The retry discipline, free of I/O: which answers are retried, how long to wait, when to stop.

Both clients drive one :class:`RetryLoop` per call; they only send requests and sleep. The rules
(contract §3, §4, §12, §13):

- retried: transport errors (connect errors, timeouts, resets, a connection closed before the
  answer), 503 (``STORE_UNAVAILABLE``; ``EXECUTION_UNCERTAIN`` "recording pending"; a 502, 503
  or 504 without a machine code, from a load balancer in front), and 409
  ``EXECUTION_UNCERTAIN`` with ``state: "running"`` (a duplicate still running: its outcome is
  replayed once recorded);
- never retried: ``IDEMPOTENCY_CONFLICT``, an ``interrupted`` execution, and every other answer
  (400, 401, 404, 507, ...);
- waits: exponential backoff with full jitter, ``uniform(0, min(max_backoff,
  initial_backoff * multiplier ** (n - 1)))`` before retry ``n``; a ``Retry-After`` answer
  header (seconds, or an HTTP date) is a floor on that wait;
- bounds: at most ``max_attempts`` requests and ``deadline`` seconds per call, sleeps included;
  a wait that would end past the deadline is not started.

Retrying is safe only because every attempt of an ``execute`` carries the same request_id: the
gateway then runs the tool at most once and replays its recorded outcome.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Callable, Mapping

import httpx

from .errors import CarmyError, UnavailableError, error_from_problem

__all__ = [
    "RetryLoop",
    "RetryPolicy",
    "AttemptPlan",
    "backoff_ceiling",
    "full_jitter",
    "is_retryable_answer",
    "is_retryable_transport_error",
    "parse_retry_after",
]


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds and pacing of one call's retries. Times are in seconds.

    ``max_attempts``: requests per call, the first included (>= 1). ``deadline``: total time per
    call, waits included. ``initial_backoff``, ``multiplier``, ``max_backoff``: the backoff
    ceiling before retry n is ``min(max_backoff, initial_backoff * multiplier ** (n - 1))``.
    ``attempt_timeout``: longest wait for one answer (also bounded by the time left).
    ``connect_timeout``: longest wait for a connection. ``prefer_wait``: seconds sent as
    ``Prefer: wait=N`` so that a server supporting it holds a duplicate's answer until the
    running execution is recorded (contract §12.6); ``None`` sends no header.
    """

    max_attempts: int = 10
    deadline: float = 60.0
    initial_backoff: float = 0.1
    multiplier: float = 2.0
    max_backoff: float = 5.0
    attempt_timeout: float = 35.0
    connect_timeout: float = 5.0
    prefer_wait: int | None = 10

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.deadline <= 0 or self.attempt_timeout <= 0 or self.connect_timeout <= 0:
            raise ValueError("deadline and timeouts must be positive")
        if self.initial_backoff < 0 or self.max_backoff < 0 or self.multiplier < 1:
            raise ValueError("backoffs must be >= 0 and multiplier >= 1")
        if self.prefer_wait is not None and self.prefer_wait < 0:
            raise ValueError("prefer_wait must be >= 0 or None")


def backoff_ceiling(policy: RetryPolicy, retry_number: int) -> float:
    """The largest wait before retry ``retry_number`` (1 for the first retry), in seconds."""
    if retry_number < 1:
        raise ValueError("retry_number starts at 1")
    exponent = retry_number - 1
    # Past this exponent the ceiling is max_backoff anyway; avoids float overflow.
    if policy.multiplier > 1 and exponent > 64:
        return policy.max_backoff
    return min(policy.max_backoff, policy.initial_backoff * policy.multiplier**exponent)


def full_jitter(ceiling: float, rng: random.Random) -> float:
    """A wait drawn uniformly from ``[0, ceiling]`` ("full jitter")."""
    return rng.uniform(0.0, ceiling)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (RFC 9110 §10.2.3): delay-seconds or an
    HTTP date. ``None`` when absent or unreadable; never negative.
    """
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(int(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    current = now or datetime.now(timezone.utc)
    return max(0.0, (when - current).total_seconds())


def is_retryable_transport_error(error: BaseException) -> bool:
    """True for failures where the request may or may not have reached the gateway and a retry
    with the same request_id is the way to learn the outcome: timeouts, connect/read/write
    errors (resets) and a connection closed before the answer. False for local mistakes such as
    a malformed URL.
    """
    return isinstance(
        error, (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
    )


def is_retryable_answer(status: int, problem: Mapping[str, Any]) -> bool:
    """True for the non-2xx answers a retry with the same request_id may turn into an outcome."""
    code = problem.get("code")
    if status == 503:
        return True
    if status in (502, 504):
        return not isinstance(code, str)
    if status == 409 and code == "EXECUTION_UNCERTAIN":
        return problem.get("state") == "running"
    return False


@dataclass(frozen=True)
class AttemptPlan:
    """What the next request may use: ``timeout`` for the answer and ``connect_timeout`` (both
    seconds, already bounded by the time left), and ``prefer_wait`` (seconds, or ``None`` to
    send no ``Prefer`` header).
    """

    number: int
    timeout: float
    connect_timeout: float
    prefer_wait: int | None


class RetryLoop:
    """The retry state of one call. ``now`` values come from a monotonic clock in seconds.

    Per attempt: :meth:`plan` before sending; then, if no 2xx answer came, either
    :meth:`after_answer` or :meth:`after_transport_error`, which return the seconds to sleep
    before the next attempt, or raise the :class:`CarmyError` to give the caller.
    """

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        start: float,
        rng: random.Random,
        request_id: str | None = None,
        wall_clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.policy = policy
        self.start = start
        self.rng = rng
        self.request_id = request_id
        self.attempts = 0
        self.execution_id: str | None = None
        self._wall_clock = wall_clock

    def remaining(self, now: float) -> float:
        """Seconds left before the deadline (may be negative)."""
        return self.policy.deadline - (now - self.start)

    def plan(self, now: float) -> AttemptPlan:
        """Counts an attempt and bounds its timeouts by the time left."""
        self.attempts += 1
        left = max(self.remaining(now), 0.001)
        timeout = min(self.policy.attempt_timeout, left)
        wait = self.policy.prefer_wait
        if wait is not None:
            # Leave the server a second to answer after its wait ends.
            wait = min(wait, math.floor(timeout) - 1)
            wait = wait if wait > 0 else None
        return AttemptPlan(
            number=self.attempts,
            timeout=timeout,
            connect_timeout=min(self.policy.connect_timeout, timeout),
            prefer_wait=wait,
        )

    def after_answer(
        self,
        status: int,
        problem: Mapping[str, Any],
        retry_after: str | None,
        now: float,
    ) -> float:
        """Seconds to sleep after a non-2xx answer, or raises the error for it."""
        error = error_from_problem(status, problem, request_id=self.request_id)
        if error.execution_id is not None:
            self.execution_id = error.execution_id
        elif self.execution_id is not None:
            error.execution_id = self.execution_id
        if not is_retryable_answer(status, problem):
            raise error
        now_wall = self._wall_clock() if self._wall_clock else None
        floor = parse_retry_after(retry_after, now=now_wall)
        return self._next_delay(now, floor, error)

    def after_transport_error(self, error: BaseException, now: float) -> float:
        """Seconds to sleep after a failed exchange, or raises. Errors that are not transport
        failures (see :func:`is_retryable_transport_error`) propagate unchanged.
        """
        if not is_retryable_transport_error(error):
            raise error
        final = UnavailableError(
            f"no answer from the gateway ({type(error).__name__}: {error}); retry later with "
            f"the same request_id to learn whether the call ran",
            code="TRANSPORT",
            status=None,
            execution_id=self.execution_id,
            request_id=self.request_id,
        )
        final.__cause__ = error
        return self._next_delay(now, None, final)

    def _next_delay(self, now: float, floor: float | None, error: CarmyError) -> float:
        if self.attempts >= self.policy.max_attempts:
            raise self._exhausted(error, f"after {self.attempts} attempts")
        delay = full_jitter(backoff_ceiling(self.policy, self.attempts), self.rng)
        if floor is not None:
            delay = max(delay, floor)
        if delay >= self.remaining(now):
            raise self._exhausted(
                error, f"the {self.policy.deadline:g} s deadline leaves no time for a retry"
            )
        return delay

    def _exhausted(self, error: CarmyError, why: str) -> CarmyError:
        error.detail = f"{error.detail} ({why})"
        error.args = (error.detail,)
        return error
