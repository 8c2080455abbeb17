"""A holder in a process of its own, for the SIGKILL and SIGSTOP tests.

``python held_child.py GATEWAY UPSTREAM REQUEST_ID MODE``: charges the counting upstream inside a
held execution of the gateway's client tool ``charge`` (lease 1 s), printing ``charged`` once the
upstream has the charge, then ``MODE`` decides: ``hang`` sleeps (to be killed), ``finish``
sleeps briefly (to be paused past its lease) and then records, printing the outcome.
"""

from __future__ import annotations

import sys
import time

import httpx

from carmy_client import CarmyClient, ExecutionSupersededError, held


def main() -> int:
    gateway, upstream, request_id, mode = sys.argv[1:5]
    carmy = CarmyClient(gateway)

    @held(carmy, "charge", lease=1.0)
    def charge(customer: str, amount: int, request_id: str) -> dict[str, object]:
        answer = httpx.post(
            f"{upstream}/charge", json={"key": request_id, "customer": customer, "amount": amount}
        )
        print("charged", flush=True)
        if mode == "hang":
            time.sleep(600)
        time.sleep(2.0)
        return {"charge_id": answer.json()["charge_id"]}

    try:
        result = charge("cus_42", 500, request_id=request_id)
    except ExecutionSupersededError as superseded:
        print(f"superseded {superseded.code}", flush=True)
        return 3
    print(f"recorded {result}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
