"""The asynchronous client, :class:`AsyncCarmyClient`, over ``httpx.AsyncClient``.

Same calls, same retry decisions (:class:`carmy_client.retry.RetryLoop`) as the sync client;
it sleeps with ``anyio.sleep``, so it runs under asyncio and trio alike.
"""

from __future__ import annotations

import random
from types import TracebackType
from typing import Any, Awaitable, Callable, Mapping

import anyio
import httpx

from ._base import DEFAULT_BASE_URL, ClientBase
from ._protocol import Answer, Call, attempt_headers, attempt_timeout, decode
from .held import DEFAULT_LEASE, AsyncHolding, Reconciliation, _Plan
from .models import Execution, PendingExecution, Tool, parse_execution, parse_record, parse_tools
from .retry import RetryPolicy

__all__ = ["AsyncCarmyClient"]


class AsyncCarmyClient(ClientBase):
    """The async twin of :class:`carmy_client.CarmyClient`; see it for the parameters.

    ``sleep`` is an async callable (default ``anyio.sleep``). Use it with ``async with``, or
    call :meth:`aclose`.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        clock: Callable[[], float] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(base_url, api_key, retry, clock, rng)
        self._sleep = sleep
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=self._headers, transport=transport
        )

    async def execute(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        request_id: str | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Execution:
        """See :meth:`carmy_client.CarmyClient.execute`: same contract, awaited."""
        call = self._execute_call(tool, arguments, request_id, session_id, metadata)
        return parse_execution(await self._run(call))

    async def get_execution(self, execution_id: str) -> Execution | PendingExecution:
        """See :meth:`carmy_client.CarmyClient.get_execution`."""
        return parse_record(await self._run(self._get_execution_call(execution_id)))

    def hold(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        request_id: str,
        *,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        lease: float = DEFAULT_LEASE,
        reconcile: Callable[[], Awaitable[Reconciliation]] | None = None,
    ) -> AsyncHolding:
        """See :meth:`carmy_client.CarmyClient.hold`; use with ``async with``."""
        plan = _Plan(tool, arguments, request_id, session_id, metadata, lease)
        return AsyncHolding(self, plan, reconcile)

    async def list_tools(self) -> list[Tool]:
        """See :meth:`carmy_client.CarmyClient.list_tools`."""
        return parse_tools(await self._run(self._list_tools_call()))

    async def _run(self, call: Call) -> Any:
        return (await self._answer(call)).body

    async def _answer(self, call: Call) -> Answer:
        """The first 2xx answer to ``call``, after the retries of its :class:`RetryLoop`."""
        loop = self._loop(call)
        while True:
            plan = loop.plan(self._clock())
            try:
                response = await self._http.request(
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
            await self._sleep(delay)

    async def aclose(self) -> None:
        """Closes the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncCarmyClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
