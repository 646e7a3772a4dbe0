"""Queue names and broker properties: one place for the code, the Bicep, the emulator config and the tests.

``python -m orders.generate`` writes every queue of the deployed workflows, with the properties of its
kind, into ``infra/app/catalog.json`` (Bicep) and ``local/servicebus-config.json`` (the emulators).
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULER_QUEUE = "scheduler"
REPLY_QUEUE = "scheduler-replies"
STATUS_QUEUE = "order-status"
AGENT_QUEUE_PREFIX = "agent-"


def agent_queue(agent: str) -> str:
    """The request queue of one agent: one per agent, so a slow service does not hold up the others."""
    return f"{AGENT_QUEUE_PREFIX}{agent}"


def status_queue(submitter: str) -> str:
    """The status queue of one submitting application (a storefront): its own, which only it reads."""
    return f"{STATUS_QUEUE}-{submitter}"


def is_status_queue(queue: str) -> bool:
    """Whether a queue carries status messages (the shared one or a submitter's)."""
    return queue == STATUS_QUEUE or queue.startswith(f"{STATUS_QUEUE}-")


# A submitter's order ids are its own: the task's id is ``<submitter>.<id>`` (an id a client gives has no
# dot), so two submitters may use the same id and never meet. A submitter's name also names its status
# queue, so it starts and ends with a letter or digit, as a queue's name does.
SCOPE_SEPARATOR = "."
SUBMITTER_PATTERN = r"[a-z](?:[a-z0-9-]{0,22}[a-z0-9])?"
ORDER_ID_PATTERN = r"[A-Za-z0-9-]{1,64}"
TASK_ID_PATTERN = rf"(?:{SUBMITTER_PATTERN}\.)?{ORDER_ID_PATTERN}"


def scoped_id(order_id: str, submitter: str | None) -> str:
    """The task id of a submitter's order id (the id itself when there is no submitter)."""
    return f"{submitter}{SCOPE_SEPARATOR}{order_id}" if submitter else order_id


def unscoped_id(task_id: str, submitter: str | None) -> str:
    """The order id as its submitter gave it."""
    prefix = f"{submitter}{SCOPE_SEPARATOR}" if submitter else ""
    return task_id[len(prefix) :] if prefix and task_id.startswith(prefix) else task_id


def all_queues(agents: list[str]) -> list[str]:
    """Every queue a workflow with these agents uses."""
    return [SCHEDULER_QUEUE, REPLY_QUEUE, STATUS_QUEUE, *(agent_queue(a) for a in agents)]


@dataclass(frozen=True)
class QueueProperties:
    """The broker properties of a queue, the same in Azure and in the local emulators.

    Durations are ISO 8601, as Service Bus and the emulator config write them. Nothing tier-specific is
    set (no express entities, which Premium refuses; no partitioning, which Premium decides per namespace;
    no message size, which only Premium reads and whose 1 MB default is above anything the engine sends),
    so the same queues deploy on Standard and Premium.
    """

    max_delivery_count: int
    dead_lettering_on_message_expiration: bool
    requires_duplicate_detection: bool
    # Longer than a step's complete-by (30 s by default); the host also renews the lock (host.json
    # maxAutoLockRenewalDuration), so a slow call never loses its message mid-flight.
    lock_duration: str = "PT1M"
    # Nothing in the workflow waits an hour; the Supervisor recovers anything older from the state store.
    default_message_time_to_live: str = "PT1H"
    duplicate_detection_history_time_window: str = "PT10M"
    # The triggers do not use sessions.
    requires_session: bool = False


# The Scheduler's commands and the agents' replies: five failed deliveries make a message poison (or its
# handler crashes), so it is dead-lettered and the DeadletteredMessages alert fires; an expired message is
# lost work to look at, so it is dead-lettered too. The engine sends them with a stable message id, and
# the broker drops a re-send after a crash.
_WORK = QueueProperties(
    max_delivery_count=5, dead_lettering_on_message_expiration=True, requires_duplicate_detection=True
)
# An agent's requests carry the step's deadline as their time-to-live and are meant to vanish when it
# passes (the Supervisor retries the step): not dead-lettered on expiry.
_AGENT = QueueProperties(
    max_delivery_count=5, dead_lettering_on_message_expiration=False, requires_duplicate_detection=True
)
# Status notifications have no consumer in this app: best effort, and 10 deliveries for whoever subscribes.
_STATUS = QueueProperties(
    max_delivery_count=10, dead_lettering_on_message_expiration=False, requires_duplicate_detection=False
)

QUEUE_PROPERTIES = {SCHEDULER_QUEUE: _WORK, REPLY_QUEUE: _WORK, STATUS_QUEUE: _STATUS}


def queue_properties(queue: str) -> QueueProperties:
    """The properties of one of :func:`all_queues`: every agent's request queue gets the agent kind's."""
    if queue in QUEUE_PROPERTIES:
        return QUEUE_PROPERTIES[queue]
    if is_status_queue(queue):
        return _STATUS
    if queue.startswith(AGENT_QUEUE_PREFIX):
        return _AGENT
    raise KeyError(f"{queue!r} is not a queue of the engine")
