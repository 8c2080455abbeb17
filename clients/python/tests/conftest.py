"""Fixtures: a real ``carmy-gateway`` process (in-memory store, free port) and the faulty proxy.

The binary is ``$CARMY_GATEWAY_BIN``, else ``target/debug/carmy-gateway`` under the repository
root (``run-tests.sh`` builds it). A missing binary fails the tests: it never skips them.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from faulty_proxy import FaultyProxy, drop_first_response

REPO_ROOT = Path(__file__).resolve().parents[3]
STARTUP_DEADLINE_S = 30.0


def gateway_binary() -> Path:
    configured = os.environ.get("CARMY_GATEWAY_BIN")
    path = Path(configured) if configured else REPO_ROOT / "target" / "debug" / "carmy-gateway"
    if not path.is_absolute():
        path = REPO_ROOT / path
    if not path.is_file():
        pytest.fail(
            f"no gateway binary at {path}: run `cargo build -p carmy-gateway` or set "
            "CARMY_GATEWAY_BIN"
        )
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Gateway:
    """A running gateway: its URL, port and process."""

    url: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    def metric(self, name: str, **labels: str) -> float:
        """The value of one sample of ``GET /metrics`` (0 when absent)."""
        text = httpx.get(f"{self.url}/metrics", timeout=5).text
        wanted = ",".join(f'{key}="{value}"' for key, value in labels.items())
        pattern = re.compile(rf"^{re.escape(name)}\{{{re.escape(wanted)}\}} (\S+)$", re.M)
        found = pattern.search(text)
        return float(found.group(1)) if found else 0.0

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.log_path.unlink(missing_ok=True)


def start_gateway(**extra_env: str) -> Gateway:
    """Starts a gateway on a free port with the in-memory store and waits for ``/healthz``."""
    binary = gateway_binary()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARMY_")}
    env.pop("DATABASE_URL", None)
    port = free_port()
    env.update({"CARMY_LISTEN": f"127.0.0.1:{port}", "RUST_LOG": "warn", **extra_env})
    log = tempfile.NamedTemporaryFile(prefix="carmy-gateway-", suffix=".log", delete=False)
    process = subprocess.Popen([str(binary)], env=env, stdout=log, stderr=subprocess.STDOUT)
    gateway = Gateway(f"http://127.0.0.1:{port}", port, process, Path(log.name))
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = gateway.log_path.read_text(errors="replace")
            pytest.fail(f"gateway exited with {process.returncode}:\n{output}")
        try:
            if httpx.get(f"{gateway.url}/healthz", timeout=1).status_code == 200:
                return gateway
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    gateway.stop()
    pytest.fail(f"gateway not healthy within {STARTUP_DEADLINE_S} s")


@pytest.fixture(scope="session")
def gateway() -> Iterator[Gateway]:
    running = start_gateway()
    yield running
    running.stop()


@pytest.fixture
def proxy(gateway: Gateway) -> Iterator[FaultyProxy]:
    """A fresh proxy in front of the session's gateway, losing the first answer per request_id."""
    faulty = FaultyProxy(("127.0.0.1", gateway.port))
    faulty.policy = drop_first_response
    faulty.start()
    yield faulty
    faulty.stop()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
