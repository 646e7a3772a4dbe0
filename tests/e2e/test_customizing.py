"""The walk-through of docs/customizing.md, performed on a copy of the repository: declare a service and a
step on it (the page's own code, nothing else), regenerate, and run an order through it end to end."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import FAST_SETTINGS, new_order
from tests.e2e.repo_copy import ROOT, RepoCopy, blocks, files
from tests.support import wait_for

DOC = ROOT / "docs" / "customizing.md"


def walk_through(copy: RepoCopy) -> None:
    """Every edit the page asks for: its files, its diff, then ``make generate``'s command."""
    page = DOC.read_text(encoding="utf-8")
    declared = files(page)
    assert declared, "docs/customizing.md lost its service file"
    for path, text in declared:
        copy.write(path, text)
    (diff,) = blocks(page, "diff")
    copy.apply(diff)
    copy.run("-m", "orders.generate")


@pytest.mark.timeout(300)
def test_the_walk_through_adds_a_step_and_its_service_and_an_order_runs_through_it(tmp_path: Path) -> None:
    copy = RepoCopy.make(tmp_path / "repo")
    walk_through(copy)
    # What the page promised is derived: the new queue for the emulator, and a generated file up to date.
    assert '"agent-invoicing"' in copy.read("local/servicebus-config.json")
    copy.run("-m", "orders.generate", "--check")
    running = copy.start(tmp_path / "devhost", FAST_SETTINGS)
    try:
        with httpx.Client(base_url=running.api_url, timeout=10) as api:
            accepted = api.post("/api/orders", json=new_order("walk-1"))
            assert accepted.status_code == 202, accepted.text

            def finished() -> dict | None:
                order = api.get("/api/orders/walk-1").json()
                return order if order["processState"] in ("Processed", "Compensated", "Error") else None

            order = wait_for(finished, timeout=60, interval=0.2, what="the order to finish")
        assert order["processState"] == "Processed", order
        assert (order["workflow"], order["workflowVersion"]) == ("order-fulfilment", 2)
        assert [s["name"] for s in order["steps"]] == [
            "reserve-inventory",
            "charge-payment",
            "issue-invoice",
            "create-shipment",
        ]
        ledger = httpx.get(f"{running.simulators_url}/ledger", timeout=10).json()
        invoice = ledger["invoicing"]["walk-1:issue-invoice"]
        assert (invoice["orderId"], invoice["applied"], invoice["compensated"]) == ("walk-1", 1, 0), invoice
    finally:
        running.stop()
