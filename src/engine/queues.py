"""Queue names: one place for the code, the Bicep, the emulator config and the tests."""

from __future__ import annotations

SCHEDULER_QUEUE = "scheduler"
REPLY_QUEUE = "scheduler-replies"
STATUS_QUEUE = "order-status"
AGENT_QUEUE_PREFIX = "agent-"


def agent_queue(agent: str) -> str:
    """The request queue of one agent: one per agent, so a slow service does not hold up the others."""
    return f"{AGENT_QUEUE_PREFIX}{agent}"


def all_queues(agents: list[str]) -> list[str]:
    """Every queue a workflow with these agents uses."""
    return [SCHEDULER_QUEUE, REPLY_QUEUE, STATUS_QUEUE, *(agent_queue(a) for a in agents)]
