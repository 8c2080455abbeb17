"""A counting HTTP upstream for the held-execution tests: ``POST /charge`` with ``{"key", "amount"}``
records one charge per call (duplicates included, so a second run is visible), ``GET
/charges/<key>`` answers the charges made with that key (404 when none)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class CountingUpstream:
    """Runs in a thread of the test process; ``charges`` lists every charge in arrival order."""

    def __init__(self) -> None:
        self.charges: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: Any) -> None:
                text = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with upstream.lock:
                    charge = {"charge_id": len(upstream.charges) + 1, **body}
                    upstream.charges.append(charge)
                self._answer(201, charge)

            def do_GET(self) -> None:
                key = self.path.rsplit("/", 1)[-1]
                with upstream.lock:
                    found = [c for c in upstream.charges if c.get("key") == key]
                self._answer(200 if found else 404, {"charges": found})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> CountingUpstream:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def count(self, key: str) -> int:
        with self.lock:
            return sum(1 for c in self.charges if c.get("key") == key)
