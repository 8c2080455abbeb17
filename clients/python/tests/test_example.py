"""The agent-tool example works against a real gateway: a repeated tool-call id replays the
order, a reused id with other arguments is refused with a message the model can act on.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import uuid
from pathlib import Path
from types import ModuleType

import pytest

from carmy_client import CarmyClient
from conftest import Gateway

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "agent_tool.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agent_tool", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_wrapped_tool_replays_and_explains_refusals(gateway: Gateway) -> None:
    example = load_example()
    call_id = f"call_{uuid.uuid4().hex}"
    with CarmyClient(gateway.url) as client:
        create_order = example.make_create_order(client)
        first = create_order("example-sku", 2, tool_call_id=call_id)
        again = create_order("example-sku", 2, tool_call_id=call_id)
        with pytest.raises(example.ToolOutcomeUnknown, match="Use a new id"):
            create_order("other-sku", 1, tool_call_id=call_id)
        with pytest.raises(example.ToolOutcomeUnknown, match="was not run"):
            create_order("", 1, tool_call_id=f"call_{uuid.uuid4().hex}")
    assert first["ok"] is True and first["replayed"] is False
    assert again == dict(first, replayed=True)
    assert isinstance(first["result"]["order_id"], int)


def test_example_script_runs(gateway: Gateway) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        env={"CARMY_URL": gateway.url, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and "'replayed': True" in lines[1]
    assert lines[2].startswith("refused: tool_call_id 'call_42' was already used")
