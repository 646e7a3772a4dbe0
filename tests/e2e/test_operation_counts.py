"""One order through the whole local stack costs exactly the operations the capacity figures assume.

The counts come from where the operations happen: the Service Bus emulator (every client operation per
queue) and the function workers (executions per function), read from ``<data-dir>/stats``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from devhost.counts import StackCounts, read_counts
from engine import costs, queues
from orders import catalog
from tests.e2e.conftest import DEFAULT_WORKFLOW, LocalStack, runs, start_stack, stop_stack
from tests.support import wait_for

# The function that reads each queue an order uses.
FUNCTIONS = {
    queues.SCHEDULER_QUEUE: "scheduler",
    queues.REPLY_QUEUE: "scheduler_replies",
    **{queues.agent_queue(service.name): service.function_name for service in catalog.SERVICES},
}
# Status polling, health probes and the timer run whatever the orders do.
NOT_PER_ORDER = {"get_order", "health", "supervisor", "retention", "backfill"}
# The gauges peek at every queue after a sweep now and then (orders.gauges), whatever the orders do.
NOT_PER_ORDER_OPERATIONS = {"peek-message"}


@pytest.fixture(scope="module")
def quiet_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """One worker and step budgets long enough that nothing expires on a loaded machine."""
    running = start_stack(
        tmp_path_factory.mktemp("counts"), workers=1, extra_env={"STEP_COMPLETE_BY_SECONDS": "120"}
    )
    try:
        yield running
    finally:
        stop_stack(running)


def test_one_order_costs_exactly_the_counted_operations(quiet_stack: LocalStack) -> None:
    before = read_counts(quiet_stack.data_dir)
    order_id = quiet_stack.submit()
    assert quiet_stack.wait_terminal(order_id)["processState"] == "Processed"

    # What the order's workflow sends, by the formula the capacity figures use (engine.costs).
    # The steps its orders run (a step left out by its condition costs no message).
    traffic = costs.processed_order(DEFAULT_WORKFLOW.revise(steps=runs(DEFAULT_WORKFLOW, order_id)))
    expected_servicebus = traffic.servicebus()  # the status queue: sends only (the application reads it)
    expected_executions = {
        "submit_order": 1,
        **{FUNCTIONS[queue]: count for queue, count in traffic.deliveries().items()},
    }
    last: list[StackCounts] = []

    def counted() -> bool:
        # The files trail the work by up to half a second: poll until they show it all (or time out).
        delta = read_counts(quiet_stack.data_dir).minus(before)
        delta.executions = {k: v for k, v in delta.executions.items() if k not in NOT_PER_ORDER}
        delta.servicebus = {
            queue: kept
            for queue, operations in delta.servicebus.items()
            if (kept := {k: v for k, v in operations.items() if k not in NOT_PER_ORDER_OPERATIONS})
        }
        last[:] = [delta]
        return delta.servicebus == expected_servicebus and delta.executions == expected_executions

    with contextlib.suppress(AssertionError):  # on a timeout the assertions below say what differs
        wait_for(counted, timeout=30, interval=0.2, what="the order's operations")
    delta = last[0]
    assert delta.servicebus == expected_servicebus
    assert delta.executions == expected_executions
    assert delta.drained(ignore=[queues.STATUS_QUEUE])
    assert delta.servicebus_total() == traffic.servicebus_total()
    assert delta.failures == {}
