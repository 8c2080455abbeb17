"""The scripted model every framework test drives, and what it must have read.

The model plays one conversation that meets each kind of answer once: a success, its replay, a
conflict, an input error, a call slower than Carmy's answer time (the gateway of run-tests.sh
answers after ``CARMY_MCP_ANSWER_WITHIN_MS=1000``; ``sleep`` takes 4 s), and a write without a
request id. It follows Carmy's texts as a model would: on "Call the tool again now with the same
arguments" it repeats the call unchanged. What it read for each step (the framework's view of
the tool result, as the framework put it in front of the model) is kept for the checks. Each step is a run of its
own (a user turn), so that no run needs more turns than a framework allows by default.
"""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any

SLOW_MS = 4000
# Carmy's key phrases, per answer (docs/semantics.md §11).
CALL_AGAIN = "Call the tool again now with the same arguments and the same `request_id`"
EXPECTED = {
    "success": ["Nothing more is needed for this action", "order_id"],
    "replay": ["it was not done again", "order_id"],
    "conflict": ["already belongs to a different action", "Do not repeat this call as it is"],
    "input_error": ["Carmy refused this call before running it", "Correct what the message names"],
    "uncertain": ["is still running as execution", CALL_AGAIN, "this answer is not an error"],
    "unprotected": ["This call carried no `request_id`", "random id you generate"],
}
# A guard against a model loop that never ends: more repeats than a 4 s call needs.
MOST_REPEATS = 15


@dataclass
class Script:
    """The conversation, step by step."""

    sku: str = field(default_factory=lambda: f"FW-{uuid.uuid4().hex[:10]}")
    views: dict[str, list[str]] = field(default_factory=dict)
    plan: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    current: tuple[str, str, dict[str, Any]] | None = None
    repeats: int = 0

    def __post_init__(self) -> None:
        order = {"sku": self.sku, "request_id": str(uuid.uuid4())}
        self.plan = [
            ("success", "create_order", order),
            ("replay", "create_order", dict(order)),
            ("conflict", "create_order", {**order, "sku": f"{self.sku}-other"}),
            ("input_error", "sleep", {"ms": "soon", "request_id": str(uuid.uuid4())}),
            ("uncertain", "sleep", {"ms": SLOW_MS, "request_id": str(uuid.uuid4())}),
            ("unprotected", "create_order", {"sku": f"{self.sku}-bare"}),
        ]

    def next_call(self, view: str | None) -> tuple[str, dict[str, Any]] | None:
        """The model's next tool call after reading ``view`` (the last tool result's view), or
        ``None`` to end the run."""
        if view is not None and self.current is not None:
            label = self.current[0]
            self.views.setdefault(label, []).append(view)
            if "Call the tool again now with the same arguments" in view:
                self.repeats += 1
                assert self.repeats <= MOST_REPEATS, f"still not done after {self.repeats}: {view}"
                return self.current[1], dict(self.current[2])
            # This step's answer is read: the run ends, the next run takes the next step.
            self.current = None
            return None
        if not self.plan:
            return None
        self.current = self.plan.pop(0)
        return self.current[1], dict(self.current[2])

    def remaining(self) -> bool:
        """Whether a step is left for another run."""
        return bool(self.plan)

    def check(self, framework: str) -> None:
        """Each answer's view holds Carmy's key phrases; the slow call ended with its outcome."""
        for label, phrases in EXPECTED.items():
            assert label in self.views, f"{framework}: no {label} view; saw {self.views}"
            first = self.views[label][0]
            for phrase in phrases:
                assert phrase in first, f"{framework}: {label} view lacks {phrase!r}: {first}"
        slow = self.views["uncertain"]
        assert len(slow) >= 2, f"{framework}: the slow call was answered at once: {slow}"
        assert f'"slept_ms":{SLOW_MS}' in slow[-1].replace(" ", ""), f"{framework}: {slow[-1]}"
        assert "it was not done again" in slow[-1], f"{framework}: {slow[-1]}"


def gateway_call(base: str, key: str, tool: str, arguments: dict[str, Any]) -> Any:
    """A call over Carmy's HTTP API (no request id): the tool's data."""
    request = urllib.request.Request(
        f"{base}/v1/executions",
        data=json.dumps({"tool": tool, "arguments": arguments}).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)["data"]


def orders(base: str, key: str, sku: str) -> int:
    """How many orders of ``sku`` the gateway holds."""
    return len(gateway_call(base, key, "find_orders", {"sku": sku})["orders"])


def metric(base: str, name: str, tool: str) -> int:
    """A counter of ``GET /metrics`` for ``tool`` (0 when absent)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(rf'^{name}\{{tool="{re.escape(tool)}"\}} (\S+)$', text, re.M)
    return int(float(found.group(1))) if found else 0


def check_effects(script: Script, base: str, key: str, framework: str, sleeps_before: int) -> None:
    """The same request_id twice made one order; the slow call ran once."""
    assert orders(base, key, script.sku) == 1, framework
    assert orders(base, key, f"{script.sku}-other") == 0, framework
    assert orders(base, key, f"{script.sku}-bare") == 1, framework
    assert metric(base, "carmy_tool_runs_total", "sleep") == sleeps_before + 1, framework
