"""Fixtures: a real ``carmy-gateway`` process (in-memory store, a free port, one API key), more
processes on a fresh PostgreSQL database, and that database.

The binary is ``$CARMY_GATEWAY_BIN``, else ``target/debug/carmy-gateway`` under the repository
root (``run-tests.sh`` builds it). A missing binary fails the tests: it never skips them.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx2
import psycopg
import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
STARTUP_DEADLINE_S = 30.0
API_KEY = "mcp-python-key"


def gateway_binary() -> Path:
    configured = os.environ.get("CARMY_GATEWAY_BIN")
    path = Path(configured) if configured else REPO_ROOT / "target" / "debug" / "carmy-gateway"
    if not path.is_absolute():
        path = REPO_ROOT / path
    if not path.is_file():
        pytest.fail(f"no gateway binary at {path}: run `cargo build -p carmy-gateway`")
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Gateway:
    """A running gateway: its base URL and the key its callers send."""

    url: str
    key: str

    @property
    def mcp(self) -> str:
        return f"{self.url}/mcp"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def tool_runs(self, tool: str) -> int:
        """How many times ``tool`` started in this process (``GET /metrics``)."""
        text = httpx2.get(f"{self.url}/metrics", timeout=5).text
        pattern = re.compile(rf'^carmy_tool_runs_total\{{tool="{re.escape(tool)}"\}} (\S+)$', re.M)
        found = pattern.search(text)
        return int(float(found.group(1))) if found else 0


@dataclass
class Replica(Gateway):
    """A gateway process the test may kill."""

    process: subprocess.Popen[bytes]

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)


@contextlib.contextmanager
def started(extra_env: dict[str, str]) -> Iterator[Replica]:
    """Starts a gateway with ``extra_env`` (and one API key) and stops it at the end."""
    port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "CARMY_API_KEYS", "CARMY_API_KEYS_FILE")
    }
    env.update(
        CARMY_LISTEN=f"127.0.0.1:{port}",
        CARMY_API_KEYS=f"{API_KEY}=python",
        RUST_LOG="warn",
    )
    env.update(extra_env)
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen([str(gateway_binary())], env=env, stdout=log, stderr=log)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        while True:
            try:
                if httpx2.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                pytest.fail(f"the gateway did not start: {log.read().decode(errors='replace')}")
            time.sleep(0.05)
        try:
            yield Replica(url=url, key=API_KEY, process=process)
        finally:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=30)


@pytest.fixture(scope="session")
def gateway() -> Iterator[Gateway]:
    with started({}) as replica:
        yield replica


@pytest.fixture
def database_url() -> Iterator[str]:
    """A fresh PostgreSQL database on the server of ``$DATABASE_URL`` (scripts/test sets it),
    dropped at the end. Without ``DATABASE_URL`` the test fails: it never skips."""
    server = os.environ.get("DATABASE_URL")
    if not server:
        pytest.fail("DATABASE_URL is not set: run through scripts/test, or set it")
    name = f"carmy_mcp_py_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(server)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
