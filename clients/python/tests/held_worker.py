"""One worker process of the concurrency test: ``python held_worker.py GATEWAY UPSTREAM KEYS``
runs the held function ``charge`` once per key of the comma-separated ``KEYS`` (repeats
included), all at once, and prints ``{"key": charge_id, ...}`` lists as JSON lines."""

from __future__ import annotations

import json
import sys

import anyio
import httpx

from carmy_client import AsyncCarmyClient, RetryPolicy, held


async def main() -> None:
    gateway, upstream, keys = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    results: list[tuple[str, int]] = []
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(limits=limits) as bank, AsyncCarmyClient(
        gateway, retry=RetryPolicy(max_attempts=200, deadline=120.0, max_backoff=0.5)
    ) as carmy:

        @held(carmy, "charge")
        async def charge(customer: str, amount: int, request_id: str) -> int:
            answer = await bank.post(f"{upstream}/charge", json={"key": request_id})
            return int(answer.json()["charge_id"])

        async def one(key: str) -> None:
            results.append((key, await charge("cus_42", 5, request_id=key)))

        async with anyio.create_task_group() as group:
            for key in keys:
                group.start_soon(one, key)
    print(json.dumps(results))


if __name__ == "__main__":
    anyio.run(main)
