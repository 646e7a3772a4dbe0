"""The compatibility corpora (devhost.corpus, docs/upgrading.md): what each of the last two releases' own
local stacks held mid-run (orders in every state they have, the messages their queues held, the
simulators' ledger), loaded into this release's local stack, which finishes every order: nothing lost,
every effect once (the ledger check), nothing dead-lettered."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from devhost import corpus
from tests.e2e.conftest import TERMINAL, LocalStack, start_stack, stop_stack
from tests.support import wait_for

ROOT = Path(__file__).resolve().parents[2]
CORPORA = ROOT / "tests" / "compat"


def _version(folder: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in folder.name.split("."))


# The last two releases' corpora: each release adds its own.
LAST_TWO = sorted((p for p in CORPORA.iterdir() if (p / corpus.MANIFEST).exists()), key=_version)[-2:]


def holds(orders: dict[str, dict[str, Any]], what: str) -> bool:
    """Whether the corpus holds an order in one of the states a release has."""

    def running(o: dict[str, Any]) -> int:
        return o["steps"].count("Running")

    found = {
        # A submission is written claimed, its first step sent (1.0.0 on): nothing else started yet.
        "submitted": any(
            o["processState"] == "Processing"
            and o["steps"][0] == "Running"
            and set(o["steps"][1:]) == {"NotStarted"}
            for o in orders.values()
        ),
        "mid-step": any(o["processState"] == "Processing" and running(o) for o in orders.values()),
        "in a group": any(running(o) > 1 for o in orders.values()),
        "waiting for an approval, parked": any(
            o["waitingFor"] == "approval" and o["parked"] for o in orders.values()
        ),
        "in a timer": any(o["waitingFor"] == "timer" for o in orders.values()),
        "waiting for a callback": any(o["waitingFor"] == "callback" for o in orders.values()),
        "compensating": any(o["processState"] == "Compensating" for o in orders.values()),
        "in Error": any(o["processState"] == "Error" for o in orders.values()),
        "finished in the history": any(
            o["processState"] in ("Processed", "Compensated") for o in orders.values()
        ),
    }
    return found[what]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("release", LAST_TWO, ids=lambda p: p.name)
def test_this_release_finishes_every_order_a_release_left_mid_run(tmp_path: Path, release: Path) -> None:
    manifest = json.loads((release / corpus.MANIFEST).read_text(encoding="utf-8"))
    orders: dict[str, dict[str, Any]] = manifest["orders"]
    wanted = (
        "submitted",
        "mid-step",
        "in a group",
        "waiting for an approval, parked",
        "in a timer",
        "waiting for a callback",
        "compensating",
        "in Error",
        "finished in the history",
    )
    assert [w for w in wanted if not holds(orders, w)] == [], "capture the corpus again with more of the run"
    assert manifest["tombstones"], "the corpus holds no purged order"
    data_dir = tmp_path / "devhost"
    corpus.unpack(release, data_dir)
    stack = start_stack(data_dir, workers=2)
    try:
        assert corpus.resend(release, stack.sb_port) > 0
        finish(stack, list(orders))
        # Its purged orders are gone, their tombstones read (and, expired, dropped) without a failure.
        for order_id in manifest["tombstones"]:
            assert stack.api.get(f"/api/orders/{order_id}").status_code in (404, 409), order_id
        # The deployment's backfills went through the release's orders by themselves, and the answers
        # that waited for them no longer say they may be incomplete.
        wait_for(
            lambda: stack.api.get("/api/order-counts").json()["backfilling"] == [],
            timeout=90,
            interval=1,
            what="the backfills to finish",
        )
    finally:
        stop_stack(stack)


def finish(stack: LocalStack, order_ids: list[str]) -> None:
    """Every order ends (the waits the release left are long past: timers end, approvals expire); one in
    Error is resubmitted by an operator once and ends again. Then the ledger check and the dead letters."""
    ended = {order_id: stack.wait_terminal(order_id, timeout=240)["processState"] for order_id in order_ids}
    for order_id in [o for o, state in ended.items() if state == "Error"]:
        response = stack.act(order_id, "resubmit", {"note": "after the upgrade"})
        assert response.status_code in (200, 202), response.text
        ended[order_id] = stack.wait_terminal(order_id, timeout=120)["processState"]
    assert set(ended.values()) <= TERMINAL - {"Error"}, ended
    assert stack.ledger_problems(order_ids) == []
    counts = stack.api.get("/api/deadletters").json()["items"]
    assert [c for c in counts if c["count"]] == [], counts
