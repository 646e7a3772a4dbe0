"""The gauges an operator charts, measured after a Supervisor sweep, at most once per interval per process.

- per queue (every queue of the deployed workflows): its active messages (``orders.queue.messages``), the
  age of the oldest (``orders.queue.age``, 0 when none) and its dead letters (``orders.queue.dead_letters``),
  counted by peeking (:mod:`adapters.queue_depth`), each up to :data:`QUEUE_LIMIT`;
- the orders waiting, by what they wait for (``orders.waiting``): every kind the store counts, and 0 for
  each of approval, callback and timer it does not, so a chart drops to 0 rather than keeping its last
  value. Over every workflow: the store counts Waiting orders by kind only (its listing keys say nothing
  of the workflow), and reading every waiting order to tell would cost a read per order per interval.

Each Function App instance measures on its own (its Supervisor timer fires on one instance at a time), so a
chart takes the latest value, never a sum over instances. A queue that cannot be measured is left out (a
warning); a store that cannot count leaves the waiting gauges out (a warning): telemetry never fails the
sweep it follows.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from adapters.queue_depth import QueueDepth, ServiceBusQueueDepth
from engine import WAIT_KINDS, Clock, StateCounts, TaskService, metrics

log = logging.getLogger("orders.gauges")

QUEUE_LIMIT = 1000  # messages counted per queue (and per dead-letter queue); past it a gauge shows the limit
STATE_LIMIT = 10_000  # live listing entries counted per state-table shard (as GET /api/order-counts)


class Gauges:
    """Measures the queue and waiting gauges when metrics are on and ``interval_seconds`` have passed."""

    def __init__(
        self,
        depths: ServiceBusQueueDepth,
        tasks: TaskService,
        queues: Sequence[str],
        clock: Clock,
        interval_seconds: float,
        *,
        queue_limit: int = QUEUE_LIMIT,
        state_limit: int = STATE_LIMIT,
    ) -> None:
        if interval_seconds < 0:
            raise ValueError("interval_seconds must be 0 or more")
        self._depths = depths
        self._tasks = tasks
        self._queues = tuple(queues)
        self._clock = clock
        self._interval = interval_seconds
        self._queue_limit = queue_limit
        self._state_limit = state_limit
        self._last: datetime | None = None

    def _due(self, now: datetime) -> bool:
        if self._last is None or now < self._last:  # never measured, or the clock went back
            return True
        return (now - self._last).total_seconds() >= self._interval

    async def measure(self) -> bool:
        """Measure and record every gauge, unless metrics are off or the interval has not passed since this
        process last measured: then do nothing and return False. Never raises (but a cancellation)."""
        if not metrics.enabled():
            return False
        started = self._clock.now()
        if not self._due(started):
            return False
        self._last = started  # before the first await: a concurrent call does not measure as well
        depths = await self._depths.depths(self._queues, self._queue_limit)
        now = self._clock.now()
        for depth in depths:
            metrics.queue_depth(depth.queue, depth.active, _age(depth, now), depth.dead_letters)
        try:
            counts = await self._tasks.count_by_state(self._state_limit)
        except Exception as exc:
            log.warning("could not count the waiting orders: %s", exc, exc_info=True)
        else:
            for kind, count in _waiting(counts).items():
                metrics.waiting(kind, count)
        return True


def _age(depth: QueueDepth, now: datetime) -> float:
    """Seconds since the oldest active message was enqueued; 0 when none waits."""
    if depth.oldest_enqueued_at is None:
        return 0.0
    return max((now - depth.oldest_enqueued_at).total_seconds(), 0.0)


def _waiting(counts: StateCounts) -> dict[str, int]:
    """Every kind the store counted, and 0 for each usual kind it did not."""
    return {**dict.fromkeys(WAIT_KINDS, 0), **counts.waiting}
