"""What one order costs in messages, derived from its workflow's declaration: the one formula that the
tests and the Capacity figures (``bench/orders_throughput.py``) use, so a workflow with other steps changes
the expected counts without anyone editing a number.

An order that runs straight through (no retry, no recovery, no undo) of a workflow of ``n`` steps:

- no command to the Scheduler: the submission writes the task claimed and sends the first request
  (``Scheduler.claim_new``); where it kicks the Scheduler instead (``kicked``), one command;
- per step, one request to its Agent's queue and one reply to the Scheduler;
- ``n + 2`` status messages: ``received``, ``step-completed`` per step, ``processed``.

Each message on a queue a function reads is sent, received and completed once: three client operations;
the status queue is read by the application, so only its sends count here. In all, ``7 n + 2`` operations
(``7 n + 5`` kicked).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from . import queues, waits
from .workflow import WorkflowDefinition

RECEIVED, STEP_COMPLETED, PROCESSED = "received", "step-completed", "processed"
WAITING = "waiting"
# A message a function reads: sent, received (peek-lock), completed.
READ_MESSAGE_OPERATIONS = ("send", "receive", "complete")


@dataclass(frozen=True)
class OrderTraffic:
    """The messages one order sends, per kind and per queue."""

    commands: int
    requests: dict[str, int] = field(default_factory=dict)  # per agent
    replies: int = 0
    status_events: tuple[str, ...] = ()

    def messages(self) -> dict[str, int]:
        """Messages sent per queue, every queue the order uses (and none it does not)."""
        every = {
            queues.SCHEDULER_QUEUE: self.commands,
            **{queues.agent_queue(agent): count for agent, count in self.requests.items()},
            queues.REPLY_QUEUE: self.replies,
            queues.STATUS_QUEUE: len(self.status_events),
        }
        return {queue: count for queue, count in every.items() if count}

    def servicebus(self) -> dict[str, dict[str, int]]:
        """Client operations per queue, as the broker counts them (the status queue: sends only)."""
        return {
            queue: (
                {"send": count}
                if queue == queues.STATUS_QUEUE
                else dict.fromkeys(READ_MESSAGE_OPERATIONS, count)
            )
            for queue, count in self.messages().items()
        }

    def servicebus_total(self) -> int:
        """Every client operation of the order, summed over its queues."""
        return sum(sum(operations.values()) for operations in self.servicebus().values())

    def deliveries(self) -> dict[str, int]:
        """Messages delivered to a function, per queue (each is one execution of that queue's trigger)."""
        return {queue: count for queue, count in self.messages().items() if queue != queues.STATUS_QUEUE}


def processed_order(
    workflow: WorkflowDefinition, document: dict[str, Any] | None = None, *, kicked: bool = False
) -> OrderTraffic:
    """The traffic of an order of ``workflow`` that runs straight through to Processed; ``kicked``: its
    submission kicks the Scheduler (a :class:`~engine.tasks.TaskService` without ``start``).

    A step left out by its condition costs nothing on the bus (it is decided in the save that dispatches
    the next step); pass the order's ``document`` (``{"input": ..., "results": ...}``) to leave out the
    steps whose conditions fail on it, else every step counts.
    """
    steps = [
        step for step in workflow.steps if document is None or step.when is None or step.when.holds(document)
    ]
    calls = [step.call_agent for step in steps if step.calls]
    # A wait says it waits, then that it is done; what its kind sends (a timer's wake-up) is more commands.
    events = [e for step in steps for e in ((STEP_COMPLETED,) if step.calls else (WAITING, STEP_COMPLETED))]
    sent = sum(waits.BY_NAME[step.wait.kind].commands for step in steps if step.wait is not None)
    return OrderTraffic(
        commands=int(kicked) + sent,
        requests=dict(Counter(calls)),
        replies=len(calls),
        status_events=(RECEIVED, *events, PROCESSED),
    )
