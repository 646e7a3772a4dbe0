"""Waits through the local stack: the fulfilment workflow's cancellation window (a timer), its fraud
review (an approval) of orders above 1,000, with the roles enforced, and its payment provider answering
later (202, then a signed callback).

One stack, with a window of a second and a half and a review deadline of a few seconds. Each test checks
what the order shows, what the simulators' ledger holds (the calls that were made, and those that never
were), and the audit trail.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from orders.callbacks import signed_headers
from orders.catalog import CATALOG, FULFILMENT
from tests.e2e.conftest import LocalStack, new_order, start_stack, stop_stack
from tests.support import wait_for

WINDOW_SECONDS = 2.5
REVIEW_SECONDS = 4


def total(example: dict[str, Any]) -> float:
    return float(sum(item["quantity"] * item["unitPrice"] for item in example["items"]))


# An order the review holds, and one it does not that has goods to ship.
LARGE = next(e for e in FULFILMENT.examples() if total(e) > 1000)
SMALL = next(
    e for e in FULFILMENT.examples() if total(e) <= 1000 and not all(i.get("digital") for i in e["items"])
)


@pytest.fixture(scope="module")
def waits(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    running = start_stack(
        tmp_path_factory.mktemp("waits"),
        workers=2,
        auth="roles",
        extra_env={
            "CANCELLATION_WINDOW_SECONDS": str(WINDOW_SECONDS),
            "FRAUD_REVIEW_SECONDS": str(REVIEW_SECONDS),
            "PAYMENT_CALLBACK_SECRET": PAY_SECRET,
        },
    )
    try:
        yield running
    finally:
        stop_stack(running)


def as_role(stack: LocalStack, role: str) -> httpx.Client:
    return httpx.Client(
        base_url=stack.devhost.api_url, headers={"x-functions-key": stack.devhost.keys[role]}, timeout=10
    )


def submit(stack: LocalStack, example: dict[str, Any]) -> str:
    order_id = f"w-{uuid.uuid4().hex[:12]}"
    response = stack.api.post("/api/orders", json=new_order(order_id, FULFILMENT, **example))
    assert response.status_code == 202, response.text
    return order_id


def step(order: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in order["steps"] if s["name"] == name)


def waiting_for(stack: LocalStack, order_id: str, kind: str) -> dict[str, Any]:
    return stack.wait_state(
        order_id,
        lambda o: o["processState"] == "Waiting" and o["waitingFor"] == kind,
        timeout=30,
        what=f"order {order_id} to wait for {kind}",
    )


def decide(client: httpx.Client, stack: LocalStack, order_id: str, verb: str, note: str) -> httpx.Response:
    """Approve or reject, as ``client``'s role, the version of a fresh read."""
    return stack.act(order_id, f"steps/fraud-review/{verb}", {"note": note}, client=client)


def test_the_fulfilment_runs_version_2_with_its_waits() -> None:
    current = CATALOG.current(FULFILMENT.name)
    assert current is FULFILMENT and FULFILMENT.version == 2
    assert {s.name for s in FULFILMENT.steps if s.wait} == {"fraud-review", "cancellation-window"}


def test_the_window_holds_the_shipment_until_its_time_and_then_the_order_goes_on(waits: LocalStack) -> None:
    order_id = submit(waits, SMALL)
    waiting = waiting_for(waits, order_id, "timer")
    until = datetime.fromisoformat(waiting["waitUntil"])
    assert step(waiting, "cancellation-window")["state"] == "Waiting"
    assert step(waiting, "fraud-review")["state"] == "LeftOut", "a small order needs no review"
    # Before the window's time: paid, and nothing shipped.
    entries = waits.step_entries(order_id)
    assert datetime.now(UTC) < until, "the window ended before the test could look (a slow machine?)"
    assert set(entries) == {"reserve-inventory", "charge-payment"}
    listed = waits.api.get("/api/orders", params={"processState": "Waiting", "waitingFor": "timer"}).json()
    assert order_id in {o["orderId"] for o in listed["items"]}
    done = waits.wait_terminal(order_id)
    assert done["processState"] == "Processed" and done["waitingFor"] is None
    assert step(done, "cancellation-window")["reason"] == "timer due"
    assert datetime.fromisoformat(done["updatedAt"]) >= until
    assert set(waits.step_entries(order_id)) == {
        "reserve-inventory",
        "charge-payment",
        "create-shipment",
        "send-confirmation",
    }


def test_a_cancel_inside_the_window_refunds_and_ships_nothing(waits: LocalStack) -> None:
    order_id = submit(waits, SMALL)
    waiting_for(waits, order_id, "timer")
    assert waits.act(order_id, "cancel", {"note": "changed my mind"}).status_code == 202
    done = waits.wait_terminal(order_id)
    assert done["processState"] == "Compensated"
    assert step(done, "cancellation-window")["lastError"] == "cancelled while waiting"
    entries = waits.step_entries(order_id)
    assert set(entries) == {"reserve-inventory", "charge-payment"}, "nothing shipped, nothing confirmed"
    assert all(entry["compensated"] == 1 for entry in entries.values()), entries


def test_a_large_order_waits_for_a_person_and_only_an_approver_or_operator_may_decide(
    waits: LocalStack,
) -> None:
    order_id = submit(waits, LARGE)
    waiting = waiting_for(waits, order_id, "approval")
    assert set(waits.step_entries(order_id)) == {"reserve-inventory"}, "no payment before the review"
    counts = waits.api.get("/api/order-counts").json()
    assert {c["waitingFor"]: c["count"] for c in counts["waiting"]}["approval"] >= 1
    for role in ("reader", "submitter"):
        with as_role(waits, role) as client:
            refused = decide(client, waits, order_id, "approve", "looks fine")
            assert refused.status_code == 403, (role, refused.text)
    assert waits.order(order_id)["updatedAt"] == waiting["updatedAt"], "a refusal changed the order"
    with as_role(waits, "approver") as approver:
        missing = approver.post(f"/api/orders/{order_id}/steps/fraud-review/approve", json={})
        assert missing.status_code == 428, "an approval applies to the version the approver read"
        approved = decide(approver, waits, order_id, "approve", "called the customer")
        assert approved.status_code == 202, approved.text
        again = decide(approver, waits, order_id, "approve", "twice")
        assert again.status_code == 409, again.text
        assert approver.post(f"/api/orders/{order_id}/cancel", headers={"If-Match": "*"}).status_code == 403
    done = waits.wait_terminal(order_id)
    assert done["processState"] == "Processed"
    assert step(done, "fraud-review")["reason"] == "approved"
    audit = waits.api.get(f"/api/orders/{order_id}/audit").json()["items"]
    (entry,) = [e for e in audit if e["action"] == "approve"]
    assert entry["actor"] and entry["note"] == "called the customer" and entry["step"] == "fraud-review"


def test_a_rejected_review_undoes_the_reservation_and_never_charges(waits: LocalStack) -> None:
    order_id = submit(waits, LARGE)
    waiting_for(waits, order_id, "approval")
    with as_role(waits, "approver") as approver:
        assert decide(approver, waits, order_id, "reject", "stolen card").status_code == 202
    done = waits.wait_terminal(order_id)
    assert done["processState"] == "Compensated"
    assert step(done, "fraud-review")["lastError"] == "rejected: stolen card"
    assert {name: e["compensated"] for name, e in waits.step_entries(order_id).items()} == {
        "reserve-inventory": 1
    }


def test_a_review_left_past_its_deadline_undoes_the_order(waits: LocalStack) -> None:
    order_id = submit(waits, LARGE)
    waiting_for(waits, order_id, "approval")
    done = waits.wait_terminal(order_id, timeout=REVIEW_SECONDS + 30)
    assert done["processState"] == "Compensated"
    assert step(done, "fraud-review")["lastError"] == "no approval by its deadline"
    assert {name: e["compensated"] for name, e in waits.step_entries(order_id).items()} == {
        "reserve-inventory": 1
    }
    with as_role(waits, "approver") as approver:
        late = decide(approver, waits, order_id, "approve", "too late")
        assert late.status_code == 409, late.text
    wait_for(lambda: waits.order(order_id)["processState"] == "Compensated", timeout=1, what="unchanged")


# ---- a service that answers later: the payment provider's callbacks ----------------------------------------
PAY_SECRET = "test-callback-secret"
ASYNC_PAYMENT = {"asyncRate": 1, "callbackDelayMs": 1500}


def callback(
    stack: LocalStack, body: dict[str, Any], secret: str = PAY_SECRET, at: float | None = None
) -> httpx.Response:
    raw = json.dumps(body).encode()
    headers = signed_headers(secret, raw, at)
    with httpx.Client(base_url=stack.devhost.api_url, timeout=10) as client:
        return client.post("/api/callbacks/payment", content=raw, headers=headers)


def test_a_payment_answered_later_waits_for_its_signed_callback(waits: LocalStack) -> None:
    waits.faults(payment=ASYNC_PAYMENT)
    try:
        order_id = submit(waits, SMALL)
        waiting = waiting_for(waits, order_id, "callback")
        assert step(waiting, "charge-payment")["state"] == "Waiting"
        assert "charge-payment" not in waits.step_entries(order_id), "not charged until the provider says"
        done = waits.wait_terminal(order_id)
    finally:
        waits.clear_faults()
    assert done["processState"] == "Processed"
    charge = step(done, "charge-payment")
    assert (
        charge["attempts"] == 1
        and charge["result"] == waits.step_entries(order_id)["charge-payment"]["result"]
    )
    stats = waits.simulators.get("/stats").json()["payment"]
    assert stats["accepted"] >= 1 and stats["callbacks"] >= 1
    # The same outcome again, correctly signed: the order no longer waits for it.
    context = f"{order_id}:{position_of('charge-payment')}:f:1"
    replayed = callback(waits, {"context": context, "outcome": "done", "result": charge["result"]})
    assert replayed.status_code == 409, replayed.text
    assert waits.order(order_id)["updatedAt"] == done["updatedAt"]


def test_unsigned_wrongly_signed_and_stale_callbacks_are_refused_and_change_nothing(
    waits: LocalStack,
) -> None:
    waits.faults(payment={**ASYNC_PAYMENT, "callbackLostRate": 1})
    try:
        order_id = submit(waits, SMALL)
        before = waiting_for(waits, order_id, "callback")
        context = f"{order_id}:{position_of('charge-payment')}:f:1"
        body = {"context": context, "outcome": "done", "result": {"chargeId": "forged"}}
        raw = json.dumps(body).encode()
        with httpx.Client(base_url=waits.devhost.api_url, timeout=10) as client:
            unsigned = client.post("/api/callbacks/payment", content=raw)
        assert unsigned.status_code == 401, unsigned.text
        assert callback(waits, body, secret="not-the-secret").status_code == 401
        assert callback(waits, body, at=time.time() - 3600).status_code == 401, "a replay an hour later"
        assert callback(waits, {**body, "context": "nonsense"}).status_code == 400
        with httpx.Client(base_url=waits.devhost.api_url, timeout=10) as client:
            unknown = client.post(
                "/api/callbacks/inventory", content=raw, headers=signed_headers(PAY_SECRET, raw)
            )
        assert unknown.status_code == 404, "inventory answers at once: it sends no callbacks"
        assert waits.order(order_id)["updatedAt"] == before["updatedAt"], (
            "a refused callback changed the order"
        )
        # Its callback lost, the step is dispatched again past its CompleteBy, with the same key; this time
        # the provider's callback comes, and the charge was made once.
        waits.faults(payment=ASYNC_PAYMENT)
        done = waits.wait_terminal(order_id, timeout=60)
    finally:
        waits.clear_faults()
    assert done["processState"] == "Processed"
    assert step(done, "charge-payment")["attempts"] == 2
    assert waits.step_entries(order_id)["charge-payment"]["applied"] == 1
    # The first attempt's outcome, now: out of order, refused.
    assert callback(waits, body).status_code == 409


def position_of(name: str) -> int:
    return [s.name for s in FULFILMENT.steps].index(name)
