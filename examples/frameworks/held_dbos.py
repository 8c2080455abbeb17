"""A DBOS workflow whose step calls a function held by Carmy (docs/held.md): the request id is
the workflow id and the step number, the same on every recovery. DBOS runs a step at least
once; Carmy makes its effect happen once: a step re-run after a crash finds the first run's
record, or, when the crash came mid-step, the interrupted execution its reconcile hook settles.

    DBOS_SYSTEM_DATABASE_URL=postgresql://… CARMY_GATEWAY=http://127.0.0.1:8080 \\
    CARMY_BANK=http://127.0.0.1:9000 python held_dbos.py start checkout-1
    python held_dbos.py recover checkout-1      # after a crash: DBOS resumes it at launch

The gateway declares the tool as a ``[[client_tools]]`` entry named ``charge``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import httpx
from dbos import DBOS, SetWorkflowID

from carmy_client import CarmyClient, Found, NotFound, Reconciliation, held

carmy = CarmyClient(os.environ.get("CARMY_GATEWAY", "http://127.0.0.1:8080"))
BANK = os.environ.get("CARMY_BANK", "http://127.0.0.1:9000")
# How long a dead holder blocks the step's retry before its reconcile hook may look.
LEASE = float(os.environ.get("CARMY_LEASE_SECONDS", "30"))


@held(carmy, "charge", lease=LEASE)
def charge_once(customer: str, amount: int, request_id: str) -> dict[str, Any]:
    answer = httpx.post(f"{BANK}/charge", json={"key": request_id, "customer": customer, "amount": amount})
    if os.environ.get("CARMY_DEMO_CRASH_AFTER_CHARGE"):
        print("charged; hanging until killed", flush=True)
        time.sleep(600)
    return dict(answer.json())


@charge_once.reconcile  # type: ignore[attr-defined, untyped-decorator]
def _(customer: str, amount: int, request_id: str) -> Reconciliation:
    found = httpx.get(f"{BANK}/charges/{request_id}")
    if found.status_code == 404:
        return NotFound()
    return Found(found.json()["charges"][0])


@DBOS.step()
def charge_step(customer: str, amount: int) -> dict[str, Any]:
    return charge_once(customer, amount, request_id=f"{DBOS.workflow_id}:{DBOS.step_id}")


@DBOS.workflow()
def checkout(customer: str, amount: int) -> dict[str, Any]:
    return charge_step(customer, amount)


def main(mode: str, workflow_id: str) -> None:
    DBOS(config={"name": "carmy-held-checkout", "system_database_url": os.environ["DBOS_SYSTEM_DATABASE_URL"]})
    DBOS.launch()
    if mode == "start":
        with SetWorkflowID(workflow_id):
            result = checkout("cus_42", 500)
    else:
        result = DBOS.retrieve_workflow(workflow_id).get_result()
    print(json.dumps(result), flush=True)
    DBOS.destroy()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
