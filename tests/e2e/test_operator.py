"""Step-level operator actions on the local stack: ETag-guarded, audited, and effective."""

from __future__ import annotations

from tests.e2e.conftest import FIRST_STEP, LAST_STEP, MIDDLE_STEP, LocalStack, position

HANG = {"hangRate": 1, "hangMs": 60_000}


def audit(stack: LocalStack, order_id: str) -> list[dict]:
    response = stack.api.get(f"/api/orders/{order_id}/audit")
    assert response.status_code == 200, response.text
    return response.json()["items"]


def step(order: dict, name: str) -> dict:
    return next(s for s in order["steps"] if s["name"] == name)


def test_retry_redispatches_a_hung_step_once_the_service_is_back(calm: LocalStack) -> None:
    hung = calm.hung_calls(FIRST_STEP.agent)
    calm.faults(**{FIRST_STEP.agent: HANG})
    order_id = calm.submit()
    first = position(FIRST_STEP)
    calm.wait_state(order_id, lambda o: o["steps"][first]["state"] == "Running", what="the first step to run")
    calm.wait_hung(FIRST_STEP.agent, hung)
    calm.clear_faults()
    response = calm.act(order_id, f"steps/{FIRST_STEP.name}/retry", {"note": "the service is back"})
    assert response.status_code == 202, response.text
    assert response.headers["etag"]
    order = calm.wait_terminal(order_id)
    assert order["processState"] == "Processed" and order["failureCount"] == 0
    retry = [e for e in audit(calm, order_id) if e["action"] == "retry"]
    assert len(retry) == 1 and retry[0]["actor"] == "local" and retry[0]["note"] == "the service is back"
    assert retry[0]["step"] == FIRST_STEP.name and retry[0]["stepStateBefore"] == "Running"
    # The same idempotency key: applied once.
    assert calm.step_entries(order_id)[FIRST_STEP.name]["applied"] == 1


def test_extend_lets_a_slow_step_finish_without_a_retry(calm: LocalStack) -> None:
    # Five seconds per call against a three-second budget: without the extension the step times out.
    calm.faults(**{MIDDLE_STEP.agent: {"latencyMs": 5_000}})
    order_id = calm.submit()
    slow = position(MIDDLE_STEP)
    calm.wait_state(order_id, lambda o: o["steps"][slow]["state"] == "Running", what="the slow step to run")
    response = calm.act(order_id, f"steps/{MIDDLE_STEP.name}/extend", {"seconds": 20, "note": "slow today"})
    assert response.status_code == 202, response.text
    order = calm.wait_terminal(order_id, timeout=60)
    assert order["processState"] == "Processed" and order["failureCount"] == 0
    assert step(order, MIDDLE_STEP.name)["attempts"] == 1
    [extend] = [e for e in audit(calm, order_id) if e["action"] == "extend"]
    assert extend["detail"] == "CompleteBy pushed by 20 s" and extend["processStateAfter"] == "Processing"


def test_skip_marks_a_step_done_by_hand_and_the_order_finishes(calm: LocalStack) -> None:
    calm.faults(**{LAST_STEP.agent: HANG})
    order_id = calm.submit()
    last = position(LAST_STEP)
    calm.wait_state(order_id, lambda o: o["steps"][last]["state"] == "Running", what="the last step to hang")
    response = calm.act(order_id, f"steps/{LAST_STEP.name}/skip", {"note": "done by hand"})
    assert response.status_code == 202, response.text
    order = calm.wait_terminal(order_id)
    assert order["processState"] == "Processed"
    assert step(order, LAST_STEP.name)["state"] == "Completed"
    [skip] = [e for e in audit(calm, order_id) if e["action"] == "skip"]
    assert skip["note"] == "done by hand" and skip["stepStateAfter"] == "Completed"


def test_a_stale_or_missing_etag_changes_nothing(calm: LocalStack) -> None:
    calm.faults(**{FIRST_STEP.agent: HANG})
    order_id = calm.submit()
    first = position(FIRST_STEP)
    calm.wait_state(
        order_id, lambda o: o["steps"][first]["state"] == "Running", what="the first step to hang"
    )
    url = f"/api/orders/{order_id}/steps/{FIRST_STEP.name}/retry"
    missing = calm.api.post(url)
    assert missing.status_code == 428 and missing.json()["error"]["code"] == "PreconditionRequired"
    stale = calm.api.post(url, headers={"if-match": '"0000"'})
    assert stale.status_code == 412 and stale.json()["error"]["code"] == "PreconditionFailed"
    wrong = calm.act(order_id, f"steps/{LAST_STEP.name}/retry")  # not started yet: nothing to retry
    assert wrong.status_code == 409 and wrong.json()["error"]["code"] == "InvalidState"
    assert audit(calm, order_id) == []
    calm.clear_faults()
