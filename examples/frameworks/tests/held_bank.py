"""A counting payments API for the held recipes: ``POST /charge`` records one charge per call
(duplicates included), so a second run of a tool is visible; ``GET /charges/<key>`` lists the
charges made with ``key`` (404 when none), for reconcile hooks."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Bank:
    def __init__(self) -> None:
        self.charges: list[dict[str, Any]] = []
        bank = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                charge = {"charge_id": len(bank.charges) + 1, **body}
                bank.charges.append(charge)
                text = json.dumps(charge).encode()
                self.send_response(201)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def do_GET(self) -> None:
                key = self.path.rsplit("/", 1)[-1]
                found = [charge for charge in bank.charges if charge.get("key") == key]
                text = json.dumps({"charges": found}).encode()
                self.send_response(200 if found else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self, key: str) -> int:
        return sum(1 for charge in self.charges if charge.get("key") == key)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
