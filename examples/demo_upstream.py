#!/usr/bin/env python3
"""A tiny payments API that honours Idempotency-Key, to put behind Carmy (README: "Tools file";
docs/tools-file.md). Python 3 standard library only; keeps its payments in memory.

    POST /v1/customers/{customer}/payments   {"amount": 500}  -> 201 {"payment_id", ...}
    GET  /v1/payments                        -> 200 {"payments": [...]}
    GET  /v1/payments?idempotency_key=K      -> 200 the payment made with key K, or 404

The lookup by key is what Carmy's reconciliation probe asks (examples/tools.toml,
[tools.reconcile]). A payment for customer "cus_slow" is created at once but answered only after
DEMO_SLOW_SECONDS (default 30): time to kill the gateway mid-call and see the probe find it.

A POST whose Idempotency-Key was seen before creates nothing: it gets the first answer again,
with the header Idempotent-Replayed: true (as Stripe does). With DEMO_TOKEN set, every request
must carry "Authorization: Bearer $DEMO_TOKEN". Listens on 127.0.0.1:$DEMO_PORT (default 9000).
"""

import json
import os
import threading
import time
from urllib.parse import parse_qs
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAYMENTS = []
BY_KEY = {}
LOCK = threading.Lock()
TOKEN = os.environ.get("DEMO_TOKEN")


class Handler(BaseHTTPRequestHandler):
    def reply(self, status, body, replayed=False):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if replayed:
            self.send_header("Idempotent-Replayed", "true")
        self.end_headers()
        self.wfile.write(data)

    def authorized(self):
        if TOKEN and self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.reply(401, {"error": "missing or wrong bearer token"})
            return False
        return True

    def do_GET(self):
        if not self.authorized():
            return
        path, _, query = self.path.partition("?")
        if path == "/v1/payments":
            keys = parse_qs(query).get("idempotency_key")
            with LOCK:
                if not keys:
                    self.reply(200, {"payments": list(PAYMENTS)})
                elif keys[0] in BY_KEY:
                    print(f"demo upstream: lookup of key {keys[0]}: payment {BY_KEY[keys[0]]['payment_id']}", flush=True)
                    self.reply(200, BY_KEY[keys[0]])
                else:
                    print(f"demo upstream: lookup of key {keys[0]}: no payment", flush=True)
                    self.reply(404, {"error": "no payment with this idempotency key"})
        else:
            self.reply(404, {"error": "no such route"})

    def do_POST(self):
        if not self.authorized():
            return
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) != 4 or parts[:2] != ["v1", "customers"] or parts[3] != "payments":
            self.reply(404, {"error": "no such route"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self.reply(400, {"error": "the body must be JSON"})
            return
        key = self.headers.get("Idempotency-Key")
        with LOCK:
            if key and key in BY_KEY:
                print(f"demo upstream: key {key} seen before; payment {BY_KEY[key]['payment_id']} not created again", flush=True)
                self.reply(201, BY_KEY[key], replayed=True)
                return
            payment = {
                "payment_id": len(PAYMENTS) + 1,
                "customer": parts[2],
                "amount": body.get("amount"),
                "idempotency_key": key,
            }
            PAYMENTS.append(payment)
            if key:
                BY_KEY[key] = payment
        print(f"demo upstream: created payment {payment['payment_id']} (key {key})", flush=True)
        if parts[2] == "cus_slow":
            time.sleep(float(os.environ.get("DEMO_SLOW_SECONDS", "30")))
        self.reply(201, payment)

    def log_message(self, format, *args):
        pass


def main():
    port = int(os.environ.get("DEMO_PORT", "9000"))
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"demo upstream: listening on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
