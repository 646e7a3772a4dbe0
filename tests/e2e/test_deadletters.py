"""Dead-letter tools on the local stack: a poison message is dead-lettered by the bundled emulator,
listed with its reason, replayed (and dead-lettered again, as a poison message should be), purged, and
every action audited."""

from __future__ import annotations

import json
import uuid
from typing import Any

from azure.servicebus import ServiceBusMessage

from engine import queues
from tests.e2e.conftest import MIDDLE_STEP, LocalStack
from tests.support import wait_for

QUEUE = queues.agent_queue(MIDDLE_STEP.agent)  # an Agent's request queue


def dead_letters(stack: LocalStack, queue: str = QUEUE) -> list[dict[str, Any]]:
    response = stack.api.get(f"/api/deadletters/{queue}", params={"pageSize": 100})
    assert response.status_code == 200, response.text
    return response.json()["items"]


def poison(stack: LocalStack, body: dict[str, Any]) -> str:
    """Send a body no Agent can parse; the worker fails it until the emulator dead-letters it."""
    message_id = f"poison-{uuid.uuid4()}"
    with stack.servicebus() as client, client.get_queue_sender(QUEUE) as sender:
        sender.send_messages(ServiceBusMessage(json.dumps(body), message_id=message_id))
    return message_id


def dead_lettered(stack: LocalStack, message_id: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        return next((m for m in dead_letters(stack) if m["messageId"] == message_id), None)

    return wait_for(found, timeout=60, interval=0.2, what=f"{message_id} to be dead-lettered")


def test_poison_messages_are_listed_replayed_and_purged_with_an_audit_trail(calm: LocalStack) -> None:
    order_id = calm.submit()
    assert calm.wait_terminal(order_id)["processState"] == "Processed"
    named = poison(calm, {"orderId": order_id, "not": "an agent request"})
    anonymous = poison(calm, {"garbage": True})

    message = dead_lettered(calm, named)
    assert message["reason"] == "MaxDeliveryCountExceeded" and message["orderId"] == order_id
    assert message["deliveryCount"] >= 1 and message["enqueuedAt"]
    other = dead_lettered(calm, anonymous)
    assert other["orderId"] is None
    counts = {c["queue"]: c for c in calm.api.get("/api/deadletters").json()["items"]}
    assert set(counts) >= {"scheduler", "scheduler-replies", "order-status", QUEUE}
    assert counts[QUEUE]["count"] >= 2 and counts[QUEUE]["atLeast"] is False

    replayed = calm.api.post(
        f"/api/deadletters/{QUEUE}/{message['sequenceNumber']}/replay", json={"note": "agent fixed"}
    )
    assert replayed.status_code == 200, replayed.text
    assert replayed.json()["auditedOn"] == f"order:{order_id}"
    # The copy is still poison: processed again, it is dead-lettered again under its own message id.
    copy = dead_lettered(calm, f"{named}:replay:{message['sequenceNumber']}")
    assert copy["sequenceNumber"] != message["sequenceNumber"] and copy["orderId"] == order_id
    assert all(m["sequenceNumber"] != message["sequenceNumber"] for m in dead_letters(calm))
    again = calm.api.post(f"/api/deadletters/{QUEUE}/{message['sequenceNumber']}/replay")
    assert again.status_code == 404 and again.json()["error"]["code"] == "NotFound"

    purged = calm.api.post(f"/api/deadletters/{QUEUE}/{other['sequenceNumber']}/purge")
    assert purged.status_code == 200, purged.text
    assert purged.json()["auditedOn"] == f"deadletters:{QUEUE}"
    assert all(m["messageId"] != anonymous for m in dead_letters(calm))

    trail = calm.api.get(f"/api/orders/{order_id}/audit").json()["items"]
    [entry] = [e for e in trail if e["action"] == "deadletter-replay"]
    assert entry["note"] == "agent fixed" and entry["actor"] == "local"
    assert entry["processStateBefore"] == entry["processStateAfter"] == "Processed"
    queue_trail = calm.api.get(f"/api/deadletters/{QUEUE}/audit").json()["items"]
    assert [(e["action"], e["messageId"]) for e in queue_trail if e["messageId"] == anonymous] == [
        ("purge", anonymous)
    ]


def test_bad_requests_get_the_error_shape(calm: LocalStack) -> None:
    for method, url, status in [
        ("GET", "/api/deadletters/no-such-queue", 404),
        ("GET", f"/api/deadletters/{QUEUE}?pageSize=0", 400),
        ("GET", f"/api/deadletters/{QUEUE}?fromSequenceNumber=x", 400),
        ("POST", f"/api/deadletters/{QUEUE}/abc/replay", 400),
        ("POST", f"/api/deadletters/{QUEUE}/999999999/purge", 404),
        ("POST", "/api/deadletters/no-such-queue/1/purge", 404),
    ]:
        response = calm.api.request(method, url)
        assert response.status_code == status, (url, response.text)
        assert response.json()["error"]["code"]
