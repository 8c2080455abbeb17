"""What the sync and the async client share: configuration, the calls they build, and the
retry loop each call gets. The two clients differ only in how they send and sleep.
"""

from __future__ import annotations

import dataclasses
import random
import time
from typing import Any, Callable, Mapping

from ._protocol import (
    EXECUTIONS_PATH,
    TOOLS_PATH,
    Call,
    base_headers,
    execute_body,
    execution_path,
    new_request_id,
)
from ._version import __version__
from .retry import RetryLoop, RetryPolicy

DEFAULT_BASE_URL = "http://127.0.0.1:8080"
"""The gateway's default listen address (``CARMY_LISTEN``)."""

USER_AGENT = f"carmy-client-python/{__version__}"


class ClientBase:
    """Configuration common to both clients; see :class:`carmy_client.CarmyClient`."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        retry: RetryPolicy | None,
        clock: Callable[[], float] | None,
        rng: random.Random | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry_policy = retry or RetryPolicy()
        self._headers = base_headers(api_key, USER_AGENT)
        self._clock = clock or time.monotonic
        self._rng = rng or random.Random()

    def _loop(self, call: Call) -> RetryLoop:
        policy = self.retry_policy
        if not call.prefer_wait and policy.prefer_wait is not None:
            policy = dataclasses.replace(policy, prefer_wait=None)
        return RetryLoop(policy, start=self._clock(), rng=self._rng, request_id=call.request_id)

    @staticmethod
    def _execute_call(
        tool: str,
        arguments: Mapping[str, Any],
        request_id: str | None,
        session_id: str | None,
        metadata: Mapping[str, Any] | None,
    ) -> Call:
        """The ``POST /v1/executions`` call; a request_id is made here, once, when none is given,
        so that every attempt of the call carries the same one.
        """
        rid = request_id if request_id is not None else new_request_id()
        body = execute_body(tool, arguments, rid, session_id, metadata)
        return Call("POST", EXECUTIONS_PATH, body, request_id=rid, prefer_wait=True)

    @staticmethod
    def _get_execution_call(execution_id: str) -> Call:
        return Call("GET", execution_path(execution_id))

    @staticmethod
    def _list_tools_call() -> Call:
        return Call("GET", TOOLS_PATH)
