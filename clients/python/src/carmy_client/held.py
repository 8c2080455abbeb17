"""Functions protected by Carmy while they run in this process (docs/semantics.md §16).

A function (a framework's tool, a workflow's step) that has an effect runs here, not in the
gateway; Carmy holds its identity. :func:`held` wraps it, and ``client.hold(...)`` is the same
as a context manager:

1. reserve the identity (``POST /v1/held``): a recorded outcome is returned without running the
   function (a replay); a conflict raises :class:`ConflictError`; an execution another process
   still holds is waited for (its outcome is then replayed);
2. run the function while a background renewal keeps the lease live (every third of it);
3. record its outcome with the fencing token (``POST /v1/held/{id}/outcome``).

An execution whose holder died (``interrupted``) is handed to the function's ``reconcile``
hook: :class:`Found` resolves it with what the hook found (a decision by the client, in the
audit log), :class:`NotFound` (proof that nothing happened) releases it and runs the function,
``None`` raises :class:`ExecutionInterrupted`. Arguments (and results) that JSON cannot carry
exactly raise :class:`NotJsonError` before anything is reserved.
"""

from __future__ import annotations

import functools
import inspect
import json
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, TypeVar, Union

import anyio

from ._protocol import Call, execution_path
from .errors import (
    CarmyError,
    ExecutionFinishedError,
    ExecutionInterrupted,
    InvalidRequestError,
    NotFoundError,
)
from .models import Execution, parse_execution

if TYPE_CHECKING:
    from .aio import AsyncCarmyClient
    from .client import CarmyClient

__all__ = [
    "AsyncHolding",
    "Found",
    "HeldExecution",
    "Holding",
    "NotFound",
    "NotJsonError",
    "Reconciliation",
    "ToolFailedError",
    "check_json",
    "held",
]

HELD_PATH = "/v1/held"
DEFAULT_LEASE = 30.0
"""Seconds each reservation or renewal keeps the lease (the gateway's default too)."""


@dataclass(frozen=True)
class Found:
    """A reconcile hook's answer: the effect happened; ``value`` is what the function would have
    returned (recorded as the outcome, ``completed``)."""

    value: Any


@dataclass(frozen=True)
class NotFound:
    """A reconcile hook's answer: proof that the effect did not happen (the identity is released
    and the function runs)."""


Reconciliation = Union[Found, NotFound, None]
"""What a reconcile hook returns; ``None``: it cannot tell (the execution stays uncertain)."""


class NotJsonError(InvalidRequestError):
    """A value JSON cannot carry exactly (a set, a tuple, NaN, a non-string key, an object):
    raised before anything is reserved (arguments) or after the function's outcome was recorded
    as ``failed`` ``RESULT_NOT_RECORDABLE`` (its result)."""


class ToolFailedError(CarmyError):
    """The recorded outcome is not ``completed`` (the function raised, or a decision recorded a
    failure): ``execution`` holds the record. Replayed like any outcome: the function does not
    run again."""

    def __init__(self, execution: Execution) -> None:
        error = execution.error or {}
        code = error.get("code") if isinstance(error, Mapping) else None
        message = error.get("message") if isinstance(error, Mapping) else None
        super().__init__(
            str(message or execution.status),
            code=str(code or execution.status),
            execution_id=execution.execution_id,
            request_id=execution.request_id,
        )
        self.execution = execution


def check_json(value: Any, what: str) -> str:
    """The compact JSON text of ``value`` if JSON carries it exactly (it reads back equal, with
    the same types); raises :class:`NotJsonError` naming ``what`` otherwise."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise NotJsonError(
            f"{what} cannot be sent as JSON: {error}", code="INVALID_REQUEST"
        ) from None
    if not _same(json.loads(text), value):
        raise NotJsonError(
            f"{what} would not read back unchanged from JSON (tuples, non-string keys or "
            "subclasses of JSON types change); convert it first",
            code="INVALID_REQUEST",
        )
    return text


def _same(read: Any, value: Any) -> bool:
    if type(read) is not type(value):
        return False
    if isinstance(value, dict):
        return read.keys() == value.keys() and all(_same(read[k], value[k]) for k in value)
    if isinstance(value, list):
        return len(read) == len(value) and all(map(_same, read, value))
    return bool(read == value)


def _value_of(execution: Execution) -> Any:
    if execution.status == "completed":
        return execution.data
    raise ToolFailedError(execution)


@dataclass
class HeldExecution:
    """The state of one held execution: either ``replay`` (the recorded outcome: do not run the
    function) or a reservation (``execution_id``, ``fencing_token``, ``lease`` in seconds)."""

    request_id: str
    execution_id: str | None = None
    fencing_token: str | None = None
    lease: float = DEFAULT_LEASE
    replay: Execution | None = None
    recorded: Execution | None = None
    attempted: bool = False
    """Whether an outcome was sent (recorded, or refused: it is sent once)."""
    lost: bool = False
    """Set by the renewal when the holder lost the execution (decided while its lease lapsed)."""
    rerun_of: dict[str, Any] | None = None
    """The released execution this reservation replaced (``{"execution_id", "ended":
    "released", "by", "note"}``, docs/semantics.md §12.1); ``None`` for a first reservation."""


class _Plan:
    """The calls of one held execution (pure)."""

    def __init__(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        request_id: str,
        session_id: str | None,
        metadata: Mapping[str, Any] | None,
        lease: float,
    ) -> None:
        if not 0.5 <= lease <= 600:
            raise ValueError("lease must be between 0.5 and 600 seconds")
        body: dict[str, Any] = {
            "tool": tool,
            "arguments": dict(arguments),
            "request_id": request_id,
            "lease_ms": int(lease * 1000),
        }
        if session_id is not None:
            body["session_id"] = session_id
        if metadata is not None:
            body["metadata"] = dict(metadata)
        self.reserve = Call("POST", HELD_PATH, check_json(body, "the arguments").encode(), request_id)
        self.request_id = request_id
        self.lease = lease

    def renew(self, held: HeldExecution) -> Call:
        body = {"fencing_token": held.fencing_token, "lease_ms": int(self.lease * 1000)}
        path = f"{HELD_PATH}/{held.execution_id}/renew"
        return Call("POST", path, json.dumps(body).encode(), self.request_id)

    def outcome(self, held: HeldExecution, status: str, data: Any, error: Any) -> Call:
        body = {"fencing_token": held.fencing_token, "status": status, "data": data, "error": error}
        path = f"{HELD_PATH}/{held.execution_id}/outcome"
        return Call("POST", path, check_json(body, "the outcome").encode(), self.request_id)

    def resolve(self, execution_id: str, value: Any) -> Call:
        body = {
            "status": "completed",
            "data": value,
            "note": "reconciled by the client's reconcile hook: the effect was found",
        }
        path = f"{execution_path(execution_id)}/resolve"
        return Call("POST", path, check_json(body, "the found value").encode(), self.request_id)

    def release(self, execution_id: str) -> Call:
        body = {"note": "reconciled by the client's reconcile hook: the effect did not happen"}
        path = f"{execution_path(execution_id)}/release"
        return Call("POST", path, json.dumps(body).encode(), self.request_id)

    def failure(self, error: BaseException) -> tuple[str, Any, Any]:
        message = f"{type(error).__name__}: {error}"[:4096]
        return "failed", None, {"code": "CLIENT_ERROR", "message": message, "effect": "unknown"}

    def held(self, status: int, body: Any) -> HeldExecution:
        if status == 201:
            return HeldExecution(
                request_id=self.request_id,
                execution_id=body["execution_id"],
                fencing_token=body["fencing_token"],
                lease=body["lease_ms"] / 1000,
                rerun_of=body.get("rerun_of"),
            )
        return HeldExecution(request_id=self.request_id, replay=parse_execution(body))


class Holding:
    """``with client.hold(tool, arguments, request_id) as holding:`` (blocking client). See the
    module. Inside, call :meth:`complete` (or :meth:`fail`) unless ``holding.replay`` is set. An
    exception leaving the block is recorded as ``failed`` ``CLIENT_ERROR`` with ``effect:
    "unknown"`` and propagates."""

    def __init__(
        self,
        client: CarmyClient,
        plan: _Plan,
        reconcile: Callable[[], Reconciliation] | None,
    ) -> None:
        self._client = client
        self._plan = plan
        self._reconcile = reconcile
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.held = HeldExecution(request_id=plan.request_id)

    @property
    def replay(self) -> Execution | None:
        """The recorded outcome when there is one: do not run the function."""
        return self.held.replay

    @property
    def execution_id(self) -> str | None:
        """The execution this process holds (``None`` for a replay)."""
        return self.held.execution_id

    @property
    def fencing_token(self) -> str | None:
        """The token the renewal and the record send."""
        return self.held.fencing_token

    @property
    def rerun_of(self) -> dict[str, Any] | None:
        """The released execution this reservation replaced, as the gateway named it
        (``{"execution_id", "ended": "released", "by", "note"}``); ``None`` otherwise."""
        return self.held.rerun_of

    @property
    def lost(self) -> bool:
        """Whether the renewal found the execution decided by someone else."""
        return self.held.lost

    def __enter__(self) -> Holding:
        for _ in range(2):
            try:
                answer = self._client._answer(self._plan.reserve)
            except ExecutionInterrupted as interrupted:
                if self._reconcile is None or interrupted.execution_id is None:
                    raise
                found = self._reconcile()
                if isinstance(found, Found):
                    call = self._plan.resolve(interrupted.execution_id, found.value)
                    self.held = HeldExecution(
                        request_id=self._plan.request_id,
                        replay=parse_execution(self._client._answer(call).body),
                    )
                    return self
                if isinstance(found, NotFound):
                    self._client._answer(self._plan.release(interrupted.execution_id))
                    continue
                raise
            self.held = self._plan.held(answer.status, answer.body)
            if self.held.replay is None:
                self._renewer = threading.Thread(target=self._renew, daemon=True)
                self._renewer.start()
            return self
        raise ExecutionInterrupted(
            "the execution was interrupted again after its release",
            code="EXECUTION_UNCERTAIN",
            request_id=self._plan.request_id,
        )

    def _renew(self) -> None:
        while not self._stop.wait(self.held.lease / 3):
            try:
                self._client._answer(self._plan.renew(self.held))
            except (ExecutionFinishedError, NotFoundError):
                # After a record was sent, finished is its own doing.
                self.held.lost = not self.held.attempted
                return
            except CarmyError:
                continue

    def complete(self, value: Any) -> Execution:
        """Records ``value`` as the function's outcome (``completed``) and returns the record.
        Raises :class:`ExecutionSupersededError` when the execution was decided meanwhile."""
        try:
            check_json(value, "the result")
        except NotJsonError:
            self.fail("RESULT_NOT_RECORDABLE", "the result cannot be recorded as JSON", effect_unknown=False)
            raise
        return self._record("completed", value, None)

    def fail(self, code: str, message: str, *, effect_unknown: bool = True) -> Execution:
        """Records a failure (``effect: "unknown"`` unless the function knows nothing happened
        and still wants the failure replayed)."""
        error: dict[str, Any] = {"code": code, "message": message}
        if effect_unknown:
            error["effect"] = "unknown"
        return self._record("failed", None, error)

    def _record(self, status: str, data: Any, error: Any) -> Execution:
        self.held.attempted = True
        call = self._plan.outcome(self.held, status, data, error)
        try:
            # The lease is renewed until the record is acknowledged: a record delayed by
            # retries must not find the execution interrupted.
            self.held.recorded = parse_execution(self._client._answer(call).body)
        finally:
            self._stop.set()
        return self.held.recorded

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self.held.replay is not None or self.held.attempted:
            return
        if self.held.execution_id is None:
            return
        if exc is not None:
            try:
                self._record(*self._plan.failure(exc))
            except CarmyError:
                pass  # the block's own exception says more; the execution reads interrupted
            return
        self.fail("NO_OUTCOME", "the held block ended without complete() or fail()")


class AsyncHolding:
    """``async with client.hold(...) as held:`` (async client): :class:`Holding`, awaited; the
    renewal is a task of its own."""

    def __init__(
        self,
        client: AsyncCarmyClient,
        plan: _Plan,
        reconcile: Callable[[], Awaitable[Reconciliation]] | None,
    ) -> None:
        self._client = client
        self._plan = plan
        self._reconcile = reconcile
        self._group: anyio.abc.TaskGroup | None = None
        self.held = HeldExecution(request_id=plan.request_id)

    @property
    def replay(self) -> Execution | None:
        """The recorded outcome when there is one: do not run the function."""
        return self.held.replay

    @property
    def execution_id(self) -> str | None:
        """The execution this process holds (``None`` for a replay)."""
        return self.held.execution_id

    @property
    def fencing_token(self) -> str | None:
        """The token the renewal and the record send."""
        return self.held.fencing_token

    @property
    def rerun_of(self) -> dict[str, Any] | None:
        """The released execution this reservation replaced, as the gateway named it
        (``{"execution_id", "ended": "released", "by", "note"}``); ``None`` otherwise."""
        return self.held.rerun_of

    @property
    def lost(self) -> bool:
        """Whether the renewal found the execution decided by someone else."""
        return self.held.lost

    async def __aenter__(self) -> AsyncHolding:
        for _ in range(2):
            try:
                answer = await self._client._answer(self._plan.reserve)
            except ExecutionInterrupted as interrupted:
                if self._reconcile is None or interrupted.execution_id is None:
                    raise
                found = await self._reconcile()
                if isinstance(found, Found):
                    call = self._plan.resolve(interrupted.execution_id, found.value)
                    resolved = await self._client._answer(call)
                    self.held = HeldExecution(
                        request_id=self._plan.request_id, replay=parse_execution(resolved.body)
                    )
                    return self
                if isinstance(found, NotFound):
                    await self._client._answer(self._plan.release(interrupted.execution_id))
                    continue
                raise
            self.held = self._plan.held(answer.status, answer.body)
            if self.held.replay is None:
                self._group = anyio.create_task_group()
                await self._group.__aenter__()
                self._group.start_soon(self._renew)
            return self
        raise ExecutionInterrupted(
            "the execution was interrupted again after its release",
            code="EXECUTION_UNCERTAIN",
            request_id=self._plan.request_id,
        )

    async def _renew(self) -> None:
        while True:
            await anyio.sleep(self.held.lease / 3)
            try:
                await self._client._answer(self._plan.renew(self.held))
            except (ExecutionFinishedError, NotFoundError):
                self.held.lost = not self.held.attempted
                return
            except CarmyError:
                continue

    async def _stop(self) -> None:
        if self._group is not None:
            group, self._group = self._group, None
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)

    async def complete(self, value: Any) -> Execution:
        """See :meth:`Holding.complete`."""
        try:
            check_json(value, "the result")
        except NotJsonError:
            await self.fail(
                "RESULT_NOT_RECORDABLE", "the result cannot be recorded as JSON", effect_unknown=False
            )
            raise
        return await self._record("completed", value, None)

    async def fail(self, code: str, message: str, *, effect_unknown: bool = True) -> Execution:
        """See :meth:`Holding.fail`."""
        error: dict[str, Any] = {"code": code, "message": message}
        if effect_unknown:
            error["effect"] = "unknown"
        return await self._record("failed", None, error)

    async def _record(self, status: str, data: Any, error: Any) -> Execution:
        self.held.attempted = True
        call = self._plan.outcome(self.held, status, data, error)
        try:
            # Renewed until the record is acknowledged (see Holding._record).
            self.held.recorded = parse_execution((await self._client._answer(call)).body)
        finally:
            await self._stop()
        return self.held.recorded

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stop()
        if self.held.replay is not None or self.held.attempted:
            return
        if self.held.execution_id is None:
            return
        if exc is not None:
            try:
                await self._record(*self._plan.failure(exc))
            except CarmyError:
                pass
            return
        await self.fail("NO_OUTCOME", "the held block ended without complete() or fail()")


F = TypeVar("F", bound=Callable[..., Any])


def held(
    client: CarmyClient | AsyncCarmyClient,
    tool: str | None = None,
    *,
    request_id: str | Callable[..., str] = "request_id",
    reconcile: Callable[..., Any] | None = None,
    lease: float = DEFAULT_LEASE,
    session_id: str | None = None,
) -> Callable[[F], F]:
    """Protects a function (sync with :class:`CarmyClient`, ``async def`` with
    :class:`AsyncCarmyClient`): the gateway's client-held ``tool`` (default: the function's
    name) is reserved with the request id, the function runs at most once per request id across
    processes, and a retry returns the recorded value without running it.

    ``request_id``: the name of the function's parameter that carries it (left out of the
    arguments sent to Carmy), or a callable of the function's arguments that returns it.
    ``reconcile``: called with the same arguments when the execution was interrupted; returns
    :class:`Found`, :class:`NotFound` or ``None`` (async for an async function). The wrapped
    function also takes a hook later: ``@fn.reconcile``.
    """

    def decorate(function: F) -> F:
        signature = inspect.signature(function)
        name = tool or function.__name__
        hooks: dict[str, Callable[..., Any] | None] = {"reconcile": reconcile}

        def prepare(args: Any, kwargs: Any) -> tuple[_Plan, Callable[[], Any] | None]:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
            if isinstance(request_id, str):
                if request_id not in arguments:
                    raise TypeError(f"{function.__name__} has no parameter {request_id!r}")
                rid = arguments.pop(request_id)
            else:
                rid = request_id(*args, **kwargs)
            if not isinstance(rid, str) or not rid:
                raise InvalidRequestError(
                    f"the request id must be a non-empty string (got {rid!r})",
                    code="INVALID_REQUEST",
                )
            plan = _Plan(name, arguments, rid, session_id, None, lease)
            hook = hooks["reconcile"]
            return plan, (functools.partial(hook, *args, **kwargs) if hook else None)

        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                plan, hook = prepare(args, kwargs)
                async with AsyncHolding(client, plan, hook) as holding:  # type: ignore[arg-type]
                    if holding.replay is not None:
                        return _value_of(holding.replay)
                    value = await function(*args, **kwargs)
                    # The record, not the value: the first answer is what every retry gets.
                    return _value_of(await holding.complete(value))

            wrapper: Any = run_async
        else:

            @functools.wraps(function)
            def run(*args: Any, **kwargs: Any) -> Any:
                plan, hook = prepare(args, kwargs)
                with Holding(client, plan, hook) as holding:  # type: ignore[arg-type]
                    if holding.replay is not None:
                        return _value_of(holding.replay)
                    value = function(*args, **kwargs)
                    # The record, not the value: the first answer is what every retry gets.
                    return _value_of(holding.complete(value))

            wrapper = run

        def set_reconcile(hook: Callable[..., Any]) -> Callable[..., Any]:
            hooks["reconcile"] = hook
            return hook

        wrapper.reconcile = set_reconcile
        return wrapper  # type: ignore[no-any-return]

    return decorate
