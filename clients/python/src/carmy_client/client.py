"""The synchronous client, :class:`CarmyClient`, over ``httpx.Client``.

It sends and sleeps; every decision (retry or not, how long to wait, when to stop) is made by
:class:`carmy_client.retry.RetryLoop`, shared with the async client.
"""

from __future__ import annotations

import random
import time
from types import TracebackType
from typing import Any, Callable, Mapping

import httpx

from ._base import DEFAULT_BASE_URL, ClientBase
from ._protocol import Answer, Call, attempt_headers, attempt_timeout, decode
from .held import DEFAULT_LEASE, Holding, Reconciliation, _Plan
from .models import Execution, PendingExecution, Tool, parse_execution, parse_record, parse_tools
from .retry import RetryPolicy

__all__ = ["CarmyClient"]


class CarmyClient(ClientBase):
    """A blocking Carmy client.

    ``base_url``: the gateway (default ``http://127.0.0.1:8080``). ``api_key``: sent as
    ``Authorization: Bearer <key>`` when given. ``retry``: bounds and pacing
    (:class:`RetryPolicy`). ``transport``: an httpx transport (e.g. ``httpx.MockTransport`` in
    tests). ``sleep``, ``clock`` (monotonic seconds) and ``rng``: injectable for tests.

    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(base_url, api_key, retry, clock, rng)
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=self.base_url, headers=self._headers, transport=transport
        )

    def execute(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        request_id: str | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Execution:
        """Runs ``tool`` with ``arguments`` at most once and returns its recorded outcome.

        Without ``request_id`` a UUID is generated; every retry of this call reuses it, so a
        lost answer is replayed (``replayed`` true) instead of running the tool again. Pass your
        own ``request_id`` to make retries across processes safe too.

        Returns an :class:`Execution` whose ``status`` is ``completed``, ``failed``,
        ``timed_out`` or ``cancelled`` (a tool error is an outcome, not an exception).
        Raises :class:`ConflictError`, :class:`ExecutionInterrupted`, :class:`CapacityError`,
        :class:`UnauthorizedError`, :class:`InvalidRequestError`, :class:`UnknownToolError` at
        once; :class:`UnavailableError` or :class:`UncertainRunningError` when the attempts or
        the deadline ran out. Every error carries the ``request_id`` to retry with later.
        """
        call = self._execute_call(tool, arguments, request_id, session_id, metadata)
        return parse_execution(self._run(call))

    def get_execution(self, execution_id: str) -> Execution | PendingExecution:
        """The record of ``execution_id`` (finished, or still running / interrupted).
        Raises :class:`NotFoundError` when it is not this principal's.
        """
        return parse_record(self._run(self._get_execution_call(execution_id)))

    def hold(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        request_id: str,
        *,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        lease: float = DEFAULT_LEASE,
        reconcile: Callable[[], Reconciliation] | None = None,
    ) -> Holding:
        """A context manager holding ``tool``'s execution for ``request_id`` while this process
        runs it (docs/semantics.md §16; see :mod:`carmy_client.held`). Raises
        :class:`NotJsonError` at once for arguments JSON cannot carry.
        """
        plan = _Plan(tool, arguments, request_id, session_id, metadata, lease)
        return Holding(self, plan, reconcile)

    def list_tools(self) -> list[Tool]:
        """The gateway's tools with their argument JSON Schemas."""
        return parse_tools(self._run(self._list_tools_call()))

    def _run(self, call: Call) -> Any:
        return (self._answer(call)).body

    def _answer(self, call: Call) -> Answer:
        """The first 2xx answer to ``call``, after the retries of its :class:`RetryLoop`."""
        loop = self._loop(call)
        while True:
            plan = loop.plan(self._clock())
            try:
                response = self._http.request(
                    call.method,
                    call.path,
                    content=call.body,
                    headers=attempt_headers(plan, call),
                    timeout=attempt_timeout(plan),
                )
            except httpx.TransportError as error:
                delay = loop.after_transport_error(error, self._clock())
            else:
                answer = decode(response)
                if answer.success:
                    return answer
                delay = loop.after_answer(
                    answer.status, answer.problem, answer.retry_after, self._clock()
                )
            self._sleep(delay)

    def close(self) -> None:
        """Closes the connection pool."""
        self._http.close()

    def __enter__(self) -> CarmyClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
