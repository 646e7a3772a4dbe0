"""Counts of what clients ask of each queue, the way Service Bus meters and throttles them.

The broker sees every operation of every client, so it is where a capacity estimate counts them: one
count per message for sends, scheduled sends, deliveries (receives), settlements (complete, abandon,
dead-letter, defer) and lock renewals, and one per request for the other management operations. The
counts are kept in memory (a dictionary increment per operation) and written, when they changed, to a
JSON file at most every ``interval`` seconds and once more at shutdown, so a benchmark or a test reads
them from outside the process without slowing the broker.

File shape: ``{"queues": {"<queue or queue/$DeadLetterQueue>": {"<operation>": n, ...}}, "written": t}``.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path

# Operation names, as they appear in the file.
SEND = "send"
SCHEDULE = "schedule"
RECEIVE = "receive"
COMPLETE = "complete"
ABANDON = "abandon"
DEAD_LETTER = "deadLetter"
DEFER = "defer"
RELEASE = "release"
RENEW_LOCK = "renewLock"
SETTLEMENTS = (COMPLETE, ABANDON, DEAD_LETTER, DEFER)


class OperationStats:
    """Per-queue operation counts, optionally written to ``path``. Used from the broker's one thread."""

    def __init__(self, path: Path | None = None, interval: float = 0.5) -> None:
        self.path = path
        self.interval = interval
        self.counts: defaultdict[str, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._changed = path is not None  # write an empty file at once, so readers know it is live
        self._last_write = 0.0

    def add(self, entity: str, operation: str, n: int = 1) -> None:
        """Count ``n`` operations of one kind on one queue (or its dead-letter sub-queue)."""
        self.counts[entity][operation] += n
        self._changed = True

    def snapshot(self) -> dict[str, dict[str, int]]:
        """A copy of the counts."""
        return {entity: dict(ops) for entity, ops in self.counts.items()}

    def maybe_write(self, now: float | None = None) -> None:
        """Write the file if the counts changed and ``interval`` has passed since the last write."""
        now = time.monotonic() if now is None else now
        if self._changed and now - self._last_write >= self.interval:
            self.write()
            self._last_write = now

    def write(self) -> None:
        """Write the counts now (atomically: readers never see half a file)."""
        if self.path is None:
            return
        body = {"queues": self.snapshot(), "written": time.time()}
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(body, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(self.path)
        self._changed = False


def read_stats(path: Path) -> dict[str, dict[str, int]]:
    """The per-queue counts in a stats file written by :class:`OperationStats` (empty if none yet)."""
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {str(entity): {str(k): int(v) for k, v in ops.items()} for entity, ops in body["queues"].items()}
