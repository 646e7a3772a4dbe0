"""Versions across deploys: orders in flight on version 1 while the workers are restarted with version 2
declared finish on version 1; new orders take version 2; an order whose version a later deploy drops goes
to Error with the reason and an alert, never on to another definition.

The deploys are real: a copy of the repository whose declaration (src/orders/catalog.py) is rewritten,
and workers stopped mid-flight, as a deployment stops them, that the devhost restarts on the new code.
Version 1 has a step on a service (invoicing) that version 2 no longer uses: its agent must still serve
version 1's orders.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from devhost import launch
from orders.catalog import CATALOG as DECLARED
from orders.catalog import FULFILMENT, RETURNS
from tests.e2e.conftest import FAST_SETTINGS, TERMINAL, new_order
from tests.e2e.repo_copy import ROOT, RepoCopy, files
from tests.support import wait_for

CATALOG = "src/orders/catalog.py"
MARK = "\n# ---- the deployment under test ----\n"
INVOICE = (
    'StepDefinition(name="issue-invoice", agent=invoicing.SERVICE.name, action="issue", compensation="void")'
)
V1 = f"_V1 = FULFILMENT.revise(version=1, steps=(*FULFILMENT.steps[:2], {INVOICE}, *FULFILMENT.steps[2:]))\n"
# Version 2 swaps the first two calls (the reservation and the payment) and drops the invoice.
_CALLS = [i for i, s in enumerate(FULFILMENT.steps) if s.calls]
ORDER_V2 = tuple({_CALLS[0]: _CALLS[1], _CALLS[1]: _CALLS[0]}.get(i, i) for i in range(len(FULFILMENT.steps)))
V2 = f"_V2 = FULFILMENT.revise(version=2, steps=tuple(FULFILMENT.steps[i] for i in {ORDER_V2}))\n"
V3 = "_V3 = _V2.revise(version=3)\n"
# The steps each version runs, and the service of every step (the declared ones and the invoice).
V1_STEPS = [*(s.name for s in FULFILMENT.steps[:2]), "issue-invoice", *(s.name for s in FULFILMENT.steps[2:])]
V2_STEPS = [FULFILMENT.steps[i].name for i in ORDER_V2]
SERVICE_OF = {s.name: s.agent for w in DECLARED.workflows for s in w.steps if s.agent} | {
    "issue-invoice": "invoicing"
}


def deploy(copy: RepoCopy, *workflows: str) -> None:
    """Declare the invoicing service and exactly ``workflows`` (names of the definitions above) as the
    versions of the fulfilment workflow; every other workflow as it is."""
    base = copy.read(CATALOG).split(MARK)[0]
    block = (
        "from .services import invoicing  # noqa: E402\n\n"
        # A tree that has done the walk-through declares the service already.
        "if invoicing.SERVICE not in SERVICES:\n"
        "    SERVICES = (*SERVICES, invoicing.SERVICE)\n"
        f"{V1}{V2}{V3}"
        # The other workflows stay as declared: a service only they use is still used.
        f"CATALOG = WorkflowCatalog(workflows=({', '.join(workflows)}, "
        "*(w for w in CATALOG.workflows if w.name != FULFILMENT.name)))\n"
        "check_catalog(SERVICES, CATALOG)\n"
    )
    copy.write(CATALOG, base + MARK + block)


def restart_workers(running: launch.RunningDevhost) -> None:
    """Stop every worker mid-flight, as a deployment does (SIGTERM: in-flight invocations get their
    shutdown time, then it exits, taking back its word that it serves its versions); the devhost starts each
    again, on the copy's code as it is now."""
    state = running.data_dir / "devhost.json"
    before = [w["pid"] for w in json.loads(state.read_text())["workers"]]
    for pid in before:
        os.kill(pid, signal.SIGTERM)

    def restarted() -> bool:
        now = [w["pid"] for w in json.loads(state.read_text())["workers"]]
        return not set(now) & set(before)

    wait_for(restarted, timeout=30, what="the workers to be restarted")

    def healthy() -> bool:
        try:
            return httpx.get(f"{running.api_url}/api/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(healthy, timeout=60, what="the restarted workers to serve")


def check_ledger(order: dict[str, Any], steps: list[tuple[str, str]], ledger: dict[str, Any]) -> None:
    """A Processed order has each of its version's steps applied once on the step's service, nothing
    undone, and no effect on any other step."""
    order_id = order["orderId"]
    found = {
        (service, key): entry
        for service, entries in ledger.items()
        for key, entry in entries.items()
        if entry["orderId"] == order_id
    }
    expected = {(service, f"{order_id}:{step}") for step, service in steps}
    assert set(found) == expected, (order_id, sorted(found), sorted(expected))
    assert all((e["applied"], e["compensated"]) == (1, 0) for e in found.values()), (order_id, found)


@pytest.mark.timeout(600)
def test_orders_finish_on_the_version_they_started_on_across_deploys(tmp_path: Path) -> None:
    copy = RepoCopy.make(tmp_path / "repo")
    for path, text in files((ROOT / "docs" / "customizing.md").read_text(encoding="utf-8")):
        copy.write(path, text)  # the invoicing service, as the walk-through declares it
    deploy(copy, "_V1")
    copy.run("-m", "orders.generate")  # the invoicing queue for the emulator
    running = copy.start(tmp_path / "devhost", FAST_SETTINGS, workers=2)
    api = httpx.Client(base_url=running.api_url, timeout=10)
    sims = httpx.Client(base_url=running.simulators_url, timeout=10)
    try:
        slow = {"latencyMs": 600}
        assert sims.post("/faults", json={s: slow for s in sims.get("/faults").json()}).status_code == 200

        def submit(order_id: str, workflow: str | None = None) -> str:
            body = new_order(order_id, DECLARED.current(workflow) if workflow else None)
            assert api.post("/api/orders", json=body).status_code == 202
            return order_id

        def order(order_id: str) -> dict[str, Any]:
            return api.get(f"/api/orders/{order_id}").json()

        def finished(order_id: str, timeout: float = 120) -> dict[str, Any]:
            def done() -> dict[str, Any] | None:
                current = order(order_id)
                return current if current["processState"] in TERMINAL else None

            return wait_for(done, timeout=timeout, interval=0.2, what=f"order {order_id} to finish")

        # ---- version 1 in flight, then a deploy that declares version 2 ----
        first = [submit(f"v1-{i}") for i in range(6)] + [submit(f"r1-{i}", "order-return") for i in range(2)]
        wait_for(
            lambda: all(order(o)["processState"] == "Processing" for o in first),
            timeout=60,
            what="every order to be claimed",
        )
        deploy(copy, "_V1", "_V2")
        restart_workers(running)
        second = [submit(f"v2-{i}") for i in range(4)]
        for order_id in first + second:
            done = finished(order_id)
            assert done["processState"] == "Processed", done
            version = (done["workflow"], done["workflowVersion"])
            names = [s["name"] for s in done["steps"]]
            if order_id.startswith("v1-"):
                assert version == (FULFILMENT.name, 1)
                assert names == V1_STEPS
            elif order_id.startswith("v2-"):
                assert version == (FULFILMENT.name, 2)
                assert names == V2_STEPS
            else:
                assert version == (RETURNS.name, RETURNS.version)
        ledger = sims.get("/ledger").json()
        for order_id in first + second:
            # A wait, or a step left out, leaves nothing in a ledger.
            steps = [
                (s["name"], SERVICE_OF[s["name"]])
                for s in order(order_id)["steps"]
                if s["name"] in SERVICE_OF and s["state"] != "LeftOut"
            ]
            check_ledger(order(order_id), steps, ledger)

        # ---- a deploy that drops version 2 while orders are in flight on it ----
        # Version 2's first step hangs.
        hung = FULFILMENT.steps[ORDER_V2[0]].agent
        assert sims.post("/faults", json={hung: {"hangRate": 1.0, "hangMs": 60_000}}).status_code == 200
        stranded = [submit(f"v2-late-{i}") for i in range(2)]
        wait_for(
            lambda: all(order(o)["steps"][0]["state"] == "Running" for o in stranded),
            timeout=60,
            what="the first steps to hang",
        )
        deploy(copy, "_V1", "_V3")
        restart_workers(running)
        for order_id in stranded:
            done = finished(order_id)
            assert done["processState"] == "Error", done
            assert "workflow order-fulfilment version 2 is not deployed" in done["lastError"], done
            audit = api.get(f"/api/orders/{order_id}/audit").json()["items"]
            assert audit[-1]["action"] == "error" and audit[-1]["processStateAfter"] == "Error", audit
            # An operator cannot run it on another definition either (read again if the order moved between
            # the read and the action, 412: the Error alert is recorded by a save just after the Error's).
            for _ in range(5):
                etag = api.get(f"/api/orders/{order_id}").headers["etag"]
                refused = api.post(f"/api/orders/{order_id}/resubmit", headers={"if-match": etag})
                if refused.status_code != 412:
                    break
            assert refused.status_code == 409 and "not deployed" in refused.json()["error"]["message"]
        logs = "".join(
            p.read_text(errors="replace") for p in (running.data_dir / "logs").glob("worker-*.log")
        )
        assert any("event OrderEnteredError" in line and "not deployed" in line for line in logs.splitlines())
        # New orders take version 3.
        assert sims.post("/faults", json={hung: {}}).status_code == 200
        latest = finished(submit("v3-0"))
        assert (latest["workflowVersion"], latest["processState"]) == (3, "Processed")
    finally:
        api.close()
        sims.close()
        running.stop()
