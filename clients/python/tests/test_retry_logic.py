"""Unit tests of the I/O-free retry decisions: backoff bounds with a seeded RNG, Retry-After,
what is retried and what is not, attempt and deadline bounds.
"""

from __future__ import annotations

import random
from datetime import datetime, timezone

import httpx
import pytest

from carmy_client import (
    CapacityError,
    ConflictError,
    ExecutionInterrupted,
    InvalidRequestError,
    RetryPolicy,
    UnauthorizedError,
    UnavailableError,
    UncertainRunningError,
    UnknownToolError,
)
from carmy_client.retry import (
    RetryLoop,
    backoff_ceiling,
    full_jitter,
    is_retryable_answer,
    is_retryable_transport_error,
    parse_retry_after,
)

UNAVAILABLE = {"code": "STORE_UNAVAILABLE", "status": 503, "detail": "store down"}
RUNNING = {"code": "EXECUTION_UNCERTAIN", "state": "running", "execution_id": "exec_1"}
INTERRUPTED = {"code": "EXECUTION_UNCERTAIN", "state": "interrupted", "execution_id": "exec_2"}
CONFLICT = {"code": "IDEMPOTENCY_CONFLICT", "execution_id": "exec_3", "differs": ["arguments"]}


def test_backoff_ceiling_doubles_up_to_the_cap() -> None:
    policy = RetryPolicy(initial_backoff=0.1, multiplier=2.0, max_backoff=5.0)
    ceilings = [backoff_ceiling(policy, n) for n in range(1, 10)]
    assert ceilings == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0])
    assert backoff_ceiling(policy, 10_000) == 5.0
    with pytest.raises(ValueError):
        backoff_ceiling(policy, 0)


def test_full_jitter_draws_the_seeded_uniform_values_within_bounds() -> None:
    mine, reference = random.Random(1234), random.Random(1234)
    for ceiling in (0.1, 0.2, 0.4, 5.0, 5.0):
        value = full_jitter(ceiling, mine)
        assert value == reference.uniform(0.0, ceiling)
        assert 0.0 <= value <= ceiling


def test_full_jitter_spans_the_whole_range() -> None:
    rng = random.Random(7)
    samples = [full_jitter(2.0, rng) for _ in range(5000)]
    assert min(samples) < 0.01  # full jitter, not "half" or "equal" jitter
    assert max(samples) > 1.99
    assert all(0.0 <= s <= 2.0 for s in samples)


def test_loop_delays_follow_seeded_full_jitter_with_growing_ceilings() -> None:
    policy = RetryPolicy(max_attempts=6, deadline=1000.0, initial_backoff=0.5, max_backoff=3.0)
    loop = RetryLoop(policy, start=0.0, rng=random.Random(99), request_id="r")
    reference = random.Random(99)
    delays = []
    for n in range(1, 6):
        loop.plan(0.0)
        delays.append(loop.after_transport_error(httpx.ReadTimeout("slow"), 0.0))
        ceiling = min(3.0, 0.5 * 2 ** (n - 1))
        assert delays[-1] == reference.uniform(0.0, ceiling)
        assert 0.0 <= delays[-1] <= ceiling
    loop.plan(0.0)
    with pytest.raises(UnavailableError) as caught:
        loop.after_transport_error(httpx.ConnectError("refused"), 0.0)
    error = caught.value
    assert error.status is None and error.code == "TRANSPORT" and error.request_id == "r"
    assert isinstance(error.__cause__, httpx.ConnectError)
    assert "after 6 attempts" in error.detail


def test_retry_after_is_a_floor_on_the_wait() -> None:
    policy = RetryPolicy(initial_backoff=0.1, max_backoff=0.1, deadline=30.0)
    loop = RetryLoop(policy, start=100.0, rng=random.Random(1))
    loop.plan(100.0)
    assert loop.after_answer(503, UNAVAILABLE, "2", 100.0) == 2.0
    loop.plan(102.0)
    # Without the header, the jittered backoff alone (at most 0.2 s here).
    assert 0.0 <= loop.after_answer(503, UNAVAILABLE, None, 102.0) <= 0.2


def test_retry_after_past_the_deadline_gives_up_at_once() -> None:
    loop = RetryLoop(RetryPolicy(deadline=5.0), start=0.0, rng=random.Random(1), request_id="r")
    loop.plan(0.0)
    with pytest.raises(UnavailableError) as caught:
        loop.after_answer(503, UNAVAILABLE, "10", 1.0)
    assert "deadline" in caught.value.detail
    assert caught.value.status == 503 and caught.value.code == "STORE_UNAVAILABLE"


def test_deadline_counts_time_already_spent() -> None:
    policy = RetryPolicy(deadline=10.0, initial_backoff=0.1, max_backoff=0.1)
    loop = RetryLoop(policy, start=0.0, rng=random.Random(3))
    loop.plan(0.0)
    assert loop.after_answer(409, RUNNING, None, 9.0) <= 0.1
    plan = loop.plan(9.5)
    assert plan.timeout == pytest.approx(0.5)
    with pytest.raises(UncertainRunningError) as caught:
        loop.after_answer(409, RUNNING, None, 10.0)
    assert caught.value.execution_id == "exec_1" and caught.value.state == "running"


def test_parse_retry_after_seconds_and_dates() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 0 ") == 0.0
    assert parse_retry_after("Wed, 01 Jan 2025 12:00:07 GMT", now=now) == 7.0
    assert parse_retry_after("Wed, 01 Jan 2025 11:00:00 GMT", now=now) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after("-1") is None
    assert parse_retry_after(None) is None


@pytest.mark.parametrize(
    ("status", "problem", "retried"),
    [
        (503, UNAVAILABLE, True),
        (503, {"code": "EXECUTION_UNCERTAIN", "state": "running"}, True),
        (503, {}, True),
        (502, {}, True),
        (504, {}, True),
        (409, RUNNING, True),
        (409, INTERRUPTED, False),
        (409, CONFLICT, False),
        (400, {"code": "INVALID_REQUEST"}, False),
        (401, {"code": "UNAUTHORIZED"}, False),
        (404, {"code": "UNKNOWN_TOOL"}, False),
        (507, {"code": "IDEMPOTENCY_CAPACITY"}, False),
        (500, {"code": "INTERNAL"}, False),
    ],
)
def test_which_answers_are_retried(status: int, problem: dict[str, str], retried: bool) -> None:
    assert is_retryable_answer(status, problem) is retried


@pytest.mark.parametrize(
    ("status", "problem", "expected"),
    [
        (409, CONFLICT, ConflictError),
        (409, INTERRUPTED, ExecutionInterrupted),
        (400, {"code": "INVALID_REQUEST"}, InvalidRequestError),
        (401, {"code": "UNAUTHORIZED"}, UnauthorizedError),
        (404, {"code": "UNKNOWN_TOOL"}, UnknownToolError),
        (507, {"code": "IDEMPOTENCY_CAPACITY"}, CapacityError),
    ],
)
def test_final_answers_raise_their_typed_error_on_the_first_attempt(
    status: int, problem: dict[str, object], expected: type[Exception]
) -> None:
    loop = RetryLoop(RetryPolicy(), start=0.0, rng=random.Random(1), request_id="rid")
    loop.plan(0.0)
    with pytest.raises(expected) as caught:
        loop.after_answer(status, problem, "1", 0.0)
    assert getattr(caught.value, "status") == status
    assert getattr(caught.value, "request_id") == "rid"


def test_conflict_names_what_differs() -> None:
    loop = RetryLoop(RetryPolicy(), start=0.0, rng=random.Random(1))
    loop.plan(0.0)
    with pytest.raises(ConflictError) as caught:
        loop.after_answer(409, CONFLICT, None, 0.0)
    assert caught.value.differs == ["arguments"]
    assert caught.value.execution_id == "exec_3"


def test_transport_errors_that_are_retried() -> None:
    request = httpx.Request("POST", "http://x/v1/executions")
    for error in (
        httpx.ConnectError("refused", request=request),
        httpx.ReadTimeout("slow", request=request),
        httpx.ReadError("connection reset by peer", request=request),
        httpx.RemoteProtocolError("Server disconnected", request=request),
        httpx.ConnectTimeout("slow", request=request),
    ):
        assert is_retryable_transport_error(error)
    assert not is_retryable_transport_error(httpx.UnsupportedProtocol("ftp://"))
    loop = RetryLoop(RetryPolicy(), start=0.0, rng=random.Random(1))
    loop.plan(0.0)
    with pytest.raises(httpx.UnsupportedProtocol):
        loop.after_transport_error(httpx.UnsupportedProtocol("ftp://"), 0.0)


def test_prefer_wait_fits_inside_the_attempt_timeout() -> None:
    loop = RetryLoop(RetryPolicy(deadline=60.0, prefer_wait=10), start=0.0, rng=random.Random())
    assert loop.plan(0.0).prefer_wait == 10
    assert loop.plan(55.5).prefer_wait == 3  # 4.5 s left: wait 3, a second to answer
    assert loop.plan(59.5).prefer_wait is None
    silent = RetryLoop(RetryPolicy(prefer_wait=None), start=0.0, rng=random.Random())
    assert silent.plan(0.0).prefer_wait is None


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(deadline=0)
    with pytest.raises(ValueError):
        RetryPolicy(multiplier=0.5)
