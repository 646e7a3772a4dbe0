"""Step-level operator actions on the local stack: ETag-guarded, audited, and effective."""

from __future__ import annotations

from tests.e2e.conftest import LocalStack


def audit(stack: LocalStack, order_id: str) -> list[dict]:
    response = stack.api.get(f"/api/orders/{order_id}/audit")
    assert response.status_code == 200, response.text
    return response.json()["items"]


def step(order: dict, name: str) -> dict:
    return next(s for s in order["steps"] if s["name"] == name)


def test_retry_redispatches_a_hung_step_once_the_service_is_back(calm: LocalStack) -> None:
    calm.faults(inventory={"hangRate": 1, "hangMs": 60_000})
    order_id = calm.submit()
    calm.wait_state(order_id, lambda o: o["steps"][0]["state"] == "Running", what="inventory to hang")
    calm.clear_faults()
    response = calm.act(order_id, "steps/reserve-inventory/retry", {"note": "inventory is back"})
    assert response.status_code == 202, response.text
    assert response.headers["etag"]
    order = calm.wait_terminal(order_id)
    assert order["processState"] == "Processed" and order["failureCount"] == 0
    retry = [e for e in audit(calm, order_id) if e["action"] == "retry"]
    assert len(retry) == 1 and retry[0]["actor"] == "local" and retry[0]["note"] == "inventory is back"
    assert retry[0]["step"] == "reserve-inventory" and retry[0]["stepStateBefore"] == "Running"
    assert calm.entries(order_id)["inventory"]["applied"] == 1  # the same idempotency key: applied once


def test_extend_lets_a_slow_step_finish_without_a_retry(calm: LocalStack) -> None:
    # Five seconds per call against a three-second budget: without the extension the step times out.
    calm.faults(payment={"latencyMs": 5_000})
    order_id = calm.submit()
    calm.wait_state(order_id, lambda o: o["steps"][1]["state"] == "Running", what="payment to run")
    response = calm.act(order_id, "steps/charge-payment/extend", {"seconds": 20, "note": "slow today"})
    assert response.status_code == 202, response.text
    order = calm.wait_terminal(order_id, timeout=60)
    assert order["processState"] == "Processed" and order["failureCount"] == 0
    assert step(order, "charge-payment")["attempts"] == 1
    [extend] = [e for e in audit(calm, order_id) if e["action"] == "extend"]
    assert extend["detail"] == "CompleteBy pushed by 20 s" and extend["processStateAfter"] == "Processing"


def test_skip_marks_a_step_done_by_hand_and_the_order_finishes(calm: LocalStack) -> None:
    calm.faults(shipping={"hangRate": 1, "hangMs": 60_000})
    order_id = calm.submit()
    calm.wait_state(order_id, lambda o: o["steps"][2]["state"] == "Running", what="shipping to hang")
    response = calm.act(order_id, "steps/create-shipment/skip", {"note": "shipped by courier"})
    assert response.status_code == 202, response.text
    order = calm.wait_terminal(order_id)
    assert order["processState"] == "Processed"
    assert step(order, "create-shipment")["state"] == "Completed"
    [skip] = [e for e in audit(calm, order_id) if e["action"] == "skip"]
    assert skip["note"] == "shipped by courier" and skip["stepStateAfter"] == "Completed"


def test_a_stale_or_missing_etag_changes_nothing(calm: LocalStack) -> None:
    calm.faults(inventory={"hangRate": 1, "hangMs": 60_000})
    order_id = calm.submit()
    calm.wait_state(order_id, lambda o: o["steps"][0]["state"] == "Running", what="inventory to hang")
    url = f"/api/orders/{order_id}/steps/reserve-inventory/retry"
    missing = calm.api.post(url)
    assert missing.status_code == 428 and missing.json()["error"]["code"] == "PreconditionRequired"
    stale = calm.api.post(url, headers={"if-match": '"0000"'})
    assert stale.status_code == 412 and stale.json()["error"]["code"] == "PreconditionFailed"
    wrong = calm.act(order_id, "steps/create-shipment/retry")
    assert wrong.status_code == 409 and wrong.json()["error"]["code"] == "InvalidState"
    assert audit(calm, order_id) == []
    calm.clear_faults()
