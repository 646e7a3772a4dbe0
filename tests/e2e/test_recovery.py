"""The whole system through orders-devhost: every failure mode the pattern must survive."""

from __future__ import annotations

import os
import signal

from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue

from engine import queues, telemetry
from tests.e2e.conftest import LocalStack
from tests.support import wait_for

STEP_NAMES = ["reserve-inventory", "charge-payment", "create-shipment"]


def assert_applied_once(stack: LocalStack, order_id: str) -> None:
    entries = stack.entries(order_id)
    assert set(entries) == {"inventory", "payment", "shipping"}, entries
    assert all(e["applied"] == 1 and e["compensated"] == 0 for e in entries.values()), entries


def test_happy_path(calm: LocalStack) -> None:
    order_id = calm.submit()
    order = calm.wait_terminal(order_id)
    assert order["processState"] == "Processed" and order["failureCount"] == 0
    assert order["lockedBy"] is None and order["completeBy"] is None
    assert [s["name"] for s in order["steps"]] == STEP_NAMES
    assert all(s["state"] == "Completed" and s["attempts"] == 1 for s in order["steps"])
    assert_applied_once(calm, order_id)


def test_status_messages_carry_the_order_id(calm: LocalStack) -> None:
    order_id = calm.submit()
    calm.wait_terminal(order_id)
    events = [event for event, _ in calm.status_events(order_id, until="processed")]
    assert events == ["received", "step-completed", "step-completed", "step-completed", "processed"]


def test_transient_faults_are_retried_transparently(calm: LocalStack) -> None:
    calm.faults(
        inventory={"transientRate": 0.5}, payment={"transientRate": 0.5}, shipping={"transientRate": 0.5}
    )
    ids = [calm.submit() for _ in range(5)]
    for order_id in ids:
        assert calm.wait_terminal(order_id)["processState"] == "Processed"
        assert_applied_once(calm, order_id)
    stats = calm.simulators.get("/stats").json()
    assert sum(stats[s]["transient"] for s in ("inventory", "payment", "shipping")) > 0  # faults did happen


def test_hang_past_complete_by_is_recovered_by_the_supervisor(calm: LocalStack) -> None:
    calm.faults(shipping={"hangRate": 1, "hangMs": 10_000})
    order_id = calm.submit()
    # A second attempt at the hung step exists only once the Supervisor has recovered the first.
    calm.wait_state(
        order_id, lambda o: o["steps"][2]["attempts"] >= 2, what="the hung step to be re-dispatched"
    )
    calm.clear_faults()
    order = calm.wait_terminal(order_id)
    assert order["processState"] == "Processed" and order["failureCount"] >= 1
    assert_applied_once(calm, order_id)


def test_lost_replies_do_not_double_the_effect(calm: LocalStack) -> None:
    calm.faults(payment={"lostReplyRate": 1})
    order_id = calm.submit()
    wait_for(lambda: calm.entries(order_id).get("payment"), timeout=30, what="the charge to be applied")
    calm.wait_state(
        order_id, lambda o: o["steps"][1]["attempts"] >= 2 or o["failureCount"] >= 1, what="a retry"
    )
    calm.clear_faults()
    assert calm.wait_terminal(order_id)["processState"] == "Processed"
    assert_applied_once(calm, order_id)


def test_permanent_failure_at_the_last_step_compensates_in_reverse(calm: LocalStack) -> None:
    calm.faults(shipping={"permanentRate": 1})
    order_id = calm.submit()
    order = calm.wait_terminal(order_id)
    assert order["processState"] == "Compensated"
    assert [s["state"] for s in order["steps"]] == ["Compensated"] * 3
    entries = calm.entries(order_id)
    assert entries["inventory"] == {"orderId": order_id, "applied": 1, "compensated": 1}
    assert entries["payment"] == {"orderId": order_id, "applied": 1, "compensated": 1}
    assert "shipping" not in entries  # rejected: nothing applied, nothing to undo
    events = calm.status_events(order_id, until="compensated")
    undone = [step for event, step in events if event == "step-compensated"]
    assert undone == ["create-shipment", "charge-payment", "reserve-inventory"]


def test_repeated_timeouts_end_in_error_with_an_alert_then_resubmit_processes(calm: LocalStack) -> None:
    calm.faults(inventory={"hangRate": 1, "hangMs": 10_000})
    order_id = calm.submit()
    order = calm.wait_terminal(order_id, timeout=90)
    assert order["processState"] == "Error" and order["failureCount"] == 3
    assert any(
        telemetry.ORDER_ENTERED_ERROR in line and order_id in line
        for line in calm.all_worker_logs().splitlines()
    )
    calm.clear_faults()
    response = calm.act(order_id, "resubmit")
    assert response.status_code == 202, response.text
    order = calm.wait_terminal(order_id)
    assert order["processState"] == "Processed" and order["failureCount"] == 0
    assert_applied_once(calm, order_id)


def test_cancel_compensates_an_order_in_flight(calm: LocalStack) -> None:
    calm.faults(payment={"latencyMs": 1500})
    order_id = calm.submit()
    calm.wait_state(order_id, lambda o: o["steps"][1]["state"] == "Running", what="the payment step to run")
    response = calm.act(order_id, "cancel")
    assert response.status_code == 202, response.text
    order = calm.wait_terminal(order_id)
    assert order["processState"] == "Compensated"
    for service, entry in calm.entries(order_id).items():
        assert entry["applied"] == entry["compensated"], (service, entry)
    assert calm.act(order_id, "cancel").status_code == 409


def test_two_workers_never_process_an_order_twice(calm: LocalStack) -> None:
    assert len(calm.state["workers"]) == 2
    ids = [calm.submit() for _ in range(20)]
    for order_id in ids:
        order = calm.wait_terminal(order_id)
        assert order["processState"] == "Processed"
        # A step is dispatched again only after the Supervisor recovered it, which counts a failure.
        assert order["failureCount"] > 0 or all(s["attempts"] == 1 for s in order["steps"]), order
        assert_applied_once(calm, order_id)
    # Both workers took part.
    logs = [calm.worker_log(1), calm.worker_log(2)]
    assert all("claimed" in log or "replied" in log for log in logs)


def test_a_poison_message_is_dead_lettered_and_workers_keep_going(calm: LocalStack) -> None:
    pids = [w["pid"] for w in calm.state["workers"]]
    with calm.servicebus() as client:
        with client.get_queue_sender(queues.SCHEDULER_QUEUE) as sender:
            sender.send_messages(ServiceBusMessage(b"\x00 not json", message_id="poison-1"))
        order_id = calm.submit()
        assert calm.wait_terminal(order_id)["processState"] == "Processed"
        with client.get_queue_receiver(
            queues.SCHEDULER_QUEUE, sub_queue=ServiceBusSubQueue.DEAD_LETTER
        ) as dlq:
            found = []

            def dead_lettered() -> bool:
                for message in dlq.receive_messages(max_message_count=10, max_wait_time=1):
                    dlq.complete_message(message)
                    if message.message_id == "poison-1":
                        found.append(message)
                return bool(found)

            wait_for(
                dead_lettered, timeout=30, interval=0.0, what="the poison message in the dead-letter queue"
            )
    assert found[0].dead_letter_reason == "MaxDeliveryCountExceeded"
    assert telemetry.POISON_MESSAGE in calm.all_worker_logs()
    assert [w["pid"] for w in calm.state["workers"]] == pids  # no worker crashed


def test_a_worker_killed_mid_batch_loses_no_order(calm: LocalStack) -> None:
    calm.faults(inventory={"latencyMs": 300}, payment={"latencyMs": 300}, shipping={"latencyMs": 300})
    ids = [calm.submit() for _ in range(12)]
    victim = calm.state["workers"][1]["pid"]
    wait_for(lambda: "claimed" in calm.worker_log(2), timeout=20, what="worker 2 to be busy")
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: calm.state["workers"][1]["pid"] != victim, timeout=20, what="worker 2 to be restarted")
    calm.clear_faults()
    for order_id in ids:
        assert calm.wait_terminal(order_id, timeout=90)["processState"] == "Processed"
        assert_applied_once(calm, order_id)
