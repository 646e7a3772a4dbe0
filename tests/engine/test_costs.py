"""The formula of one order's messages, on workflows declared here."""

from __future__ import annotations

from engine import queues
from engine.costs import processed_order
from engine.workflow import StepDefinition, WorkflowDefinition


def workflow(*agents: str) -> WorkflowDefinition:
    steps = tuple(StepDefinition(name=f"s{i}", agent=agent, action="do") for i, agent in enumerate(agents))
    return WorkflowDefinition(name="w", steps=steps)


def test_a_straight_run_sends_one_request_and_one_reply_per_step() -> None:
    traffic = processed_order(workflow("a", "b", "c", "d"))
    assert traffic.messages() == {
        queues.agent_queue("a"): 1,
        queues.agent_queue("b"): 1,
        queues.agent_queue("c"): 1,
        queues.agent_queue("d"): 1,
        queues.REPLY_QUEUE: 4,
        queues.STATUS_QUEUE: 6,
    }
    assert traffic.status_events == ("received", *["step-completed"] * 4, "processed")
    assert traffic.servicebus_total() == 7 * 4 + 2
    # A submission that kicks the Scheduler rather than claiming the task itself: one command more.
    kicked = processed_order(workflow("a", "b", "c", "d"), kicked=True)
    assert kicked.messages() == {queues.SCHEDULER_QUEUE: 1, **traffic.messages()}
    assert kicked.servicebus_total() == 7 * 4 + 5


def test_two_steps_on_one_agent_share_its_queue() -> None:
    traffic = processed_order(workflow("a", "a"))
    assert traffic.requests == {"a": 2}
    assert traffic.servicebus()[queues.agent_queue("a")] == {"send": 2, "receive": 2, "complete": 2}
    assert traffic.servicebus()[queues.STATUS_QUEUE] == {"send": 4}
    assert queues.STATUS_QUEUE not in traffic.deliveries()
