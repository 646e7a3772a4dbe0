"""Operation counts of a running local stack: what Service Bus and the function host would bill.

The emulator counts every client operation per queue (``servicebus_emulator.stats``) and every worker
process counts its executions per function; both keep JSON files under ``<data-dir>/stats/``. A
benchmark or a test takes a snapshot before and after some work and subtracts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, Field

from servicebus_emulator.stats import SETTLEMENTS, read_stats

SERVICEBUS_STATS = "servicebus.json"


class StackCounts(BaseModel):
    """Service Bus operations per queue and operation; executions, failures and wall seconds per function."""

    servicebus: dict[str, dict[str, int]] = Field(default_factory=dict)
    executions: dict[str, int] = Field(default_factory=dict)
    failures: dict[str, int] = Field(default_factory=dict)
    seconds: dict[str, float] = Field(default_factory=dict)

    def minus(self, earlier: StackCounts) -> StackCounts:
        """What happened between ``earlier`` and this snapshot."""
        return StackCounts(
            servicebus={
                queue: {
                    op: n - earlier.servicebus.get(queue, {}).get(op, 0)
                    for op, n in ops.items()
                    if n != earlier.servicebus.get(queue, {}).get(op, 0)
                }
                for queue, ops in self.servicebus.items()
                if ops != earlier.servicebus.get(queue, {})
            },
            executions=_difference(self.executions, earlier.executions),
            failures=_difference(self.failures, earlier.failures),
            seconds={k: v - earlier.seconds.get(k, 0.0) for k, v in self.seconds.items()},
        )

    def servicebus_total(self, operations: Iterable[str] | None = None) -> int:
        """Service Bus operations over every queue (only those named in ``operations``, if given)."""
        wanted = None if operations is None else set(operations)
        return sum(
            n for ops in self.servicebus.values() for op, n in ops.items() if wanted is None or op in wanted
        )

    def drained(self, ignore: Iterable[str] = ()) -> bool:
        """True when every message sent to a main queue has been completed or dead-lettered and every
        delivery settled: nothing is queued, scheduled or in flight. Dead-letter sub-queues and the
        queues in ``ignore`` (read by nobody in the stack, e.g. the status queue) are left out; a message
        the broker drops (duplicate, expired, over MaxDeliveryCount) keeps this False."""
        skip = {q.lower() for q in ignore}
        for queue, ops in self.servicebus.items():
            if queue.lower().endswith("/$deadletterqueue") or queue.lower() in skip:
                continue
            settled = sum(ops.get(op, 0) for op in SETTLEMENTS)
            finished = ops.get("complete", 0) + ops.get("deadLetter", 0)
            arrived = ops.get("send", 0) + ops.get("schedule", 0)
            if ops.get("receive", 0) != settled or finished != arrived:
                return False
        return True


def _difference(later: dict[str, int], earlier: dict[str, int]) -> dict[str, int]:
    return {k: v - earlier.get(k, 0) for k, v in later.items() if v != earlier.get(k, 0)}


def read_counts(data_dir: Path) -> StackCounts:
    """The stack's counts so far (files are rewritten at most every half second while things change)."""
    stats_dir = data_dir / "stats"
    executions: dict[str, int] = {}
    failures: dict[str, int] = {}
    seconds: dict[str, float] = {}
    for path in sorted(stats_dir.glob("worker-*.json")):
        body = json.loads(path.read_text(encoding="utf-8"))
        for name, n in body.get("executions", {}).items():
            executions[name] = executions.get(name, 0) + int(n)
        for name, n in body.get("failures", {}).items():
            failures[name] = failures.get(name, 0) + int(n)
        for name, t in body.get("seconds", {}).items():
            seconds[name] = seconds.get(name, 0.0) + float(t)
    return StackCounts(
        servicebus=read_stats(stats_dir / SERVICEBUS_STATS),
        executions=executions,
        failures=failures,
        seconds=seconds,
    )
