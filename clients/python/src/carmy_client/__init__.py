"""Python client for the Carmy gateway: tool calls for AI agents whose retries are safe.

``CarmyClient`` (blocking) and ``AsyncCarmyClient`` (async) send ``POST /v1/executions`` with
a request_id that stays the same on every retry, back off with full jitter on transport errors
and 503, wait out a running duplicate, honour ``Retry-After``, and never retry a conflict or an
interrupted execution. Results are :class:`Execution` records; failures are
:class:`CarmyError` subclasses.

Functions that run in this process are protected with :func:`held` (a decorator) or
``client.hold(...)`` (a context manager): docs/semantics.md §16.

>>> from carmy_client import CarmyClient
>>> with CarmyClient("http://127.0.0.1:8080") as carmy:  # doctest: +SKIP
...     print(carmy.execute("create_order", {"sku": "book"}).data)
{'order_id': 1}
"""

from ._version import __version__
from .aio import AsyncCarmyClient
from .client import CarmyClient
from .errors import (
    CapacityError,
    CarmyError,
    ConflictError,
    ExecutionFinishedError,
    ExecutionInterrupted,
    ExecutionSupersededError,
    ExecutionUncertainError,
    InvalidRequestError,
    NotFoundError,
    UnauthorizedError,
    UnavailableError,
    UncertainRunningError,
    UnknownToolError,
)
from .held import (
    Found,
    HeldExecution,
    NotFound,
    NotJsonError,
    Reconciliation,
    ToolFailedError,
    held,
)
from .models import (
    Execution,
    ExecutionStatus,
    PendingExecution,
    PendingStatus,
    ResponseFormatError,
    Tool,
)
from .retry import RetryPolicy

__all__ = [
    "__version__",
    "AsyncCarmyClient",
    "CapacityError",
    "CarmyClient",
    "CarmyError",
    "ConflictError",
    "Execution",
    "ExecutionFinishedError",
    "ExecutionInterrupted",
    "ExecutionSupersededError",
    "Found",
    "HeldExecution",
    "NotFound",
    "NotJsonError",
    "Reconciliation",
    "ToolFailedError",
    "held",
    "ExecutionStatus",
    "ExecutionUncertainError",
    "InvalidRequestError",
    "NotFoundError",
    "PendingExecution",
    "PendingStatus",
    "ResponseFormatError",
    "RetryPolicy",
    "Tool",
    "UnauthorizedError",
    "UnavailableError",
    "UncertainRunningError",
    "UnknownToolError",
]
