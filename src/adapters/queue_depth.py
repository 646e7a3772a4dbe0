"""What waits on each queue, measured on Service Bus (asynchronous SDK) by peeking.

The app holds no Manage right, so the queues' runtime properties (message counts) are out of reach; like
:meth:`adapters.deadletters.ServiceBusDeadLetters.count`, this counts by peeking a page at a time from
sequence number 0, locking nothing, up to a limit (then the count is a lower bound: ``at_least``).

A queue's peek returns messages of every state: the active ones (waiting to be received, or locked by a
receiver that has not settled them yet), the deferred and the scheduled ones (the engine schedules its
delayed sends). Only the active ones are counted, and the oldest active one's enqueued time is kept. The
scan peeks at most ``limit + 1`` messages of a queue, of any state, so its cost is bounded even when the
queue holds many scheduled messages; stopping there, the count is a lower bound (``at_least``). The
dead-letter sub-queue is counted by the dead-letter port's own count, every message of it.

Each measurement opens its own receivers (``prefetch_count=0``: a peek never takes a message) and closes
them: gauges are read every few tens of seconds, and an open receiver would hold a link for nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from azure.servicebus import ServiceBusMessageState, ServiceBusReceivedMessage
from azure.servicebus.aio import ServiceBusClient

from .deadletters import ServiceBusDeadLetters

log = logging.getLogger("adapters.queue_depth")

PEEK_PAGE = 100  # messages per peek request
TIMEOUT_SECONDS = 10.0  # one queue's measurement; a queue that takes longer is skipped


@dataclass(frozen=True)
class QueueDepth:
    """What waits on one queue: its active messages (up to the limit, ``active_at_least`` when there may
    be more), the oldest active message's enqueued time (None when there is none), and its dead-lettered
    messages (up to the limit, ``dead_letters_at_least`` when there may be more)."""

    queue: str
    active: int
    active_at_least: bool
    oldest_enqueued_at: datetime | None
    dead_letters: int
    dead_letters_at_least: bool


@dataclass(frozen=True)
class _Scan:
    counted: int
    at_least: bool
    oldest: datetime | None


class ServiceBusQueueDepth:
    """Queue depths on Service Bus, with the Data Receiver role only."""

    def __init__(
        self, client: ServiceBusClient, page: int = PEEK_PAGE, timeout_seconds: float = TIMEOUT_SECONDS
    ) -> None:
        if page < 1:
            raise ValueError("page must be 1 or more")
        self._client = client
        self._dead_letters = ServiceBusDeadLetters(client)  # its count is the dead-letter half
        self._page = page
        self._timeout = timeout_seconds

    async def depth(self, queue: str, limit: int) -> QueueDepth:
        """Count ``queue``'s active and dead-lettered messages, each up to ``limit``, at once; raises what
        the SDK raises (an unknown queue, a broker that cannot be reached)."""
        if limit < 0:
            raise ValueError("limit must be 0 or more")
        active, dead = await asyncio.gather(self._scan(queue, limit), self._dead_letters.count(queue, limit))
        return QueueDepth(
            queue=queue,
            active=active.counted,
            active_at_least=active.at_least,
            oldest_enqueued_at=active.oldest,
            dead_letters=dead.count,
            dead_letters_at_least=dead.at_least,
        )

    async def depths(self, queues: Sequence[str], limit: int) -> list[QueueDepth]:
        """Every queue's depth, measured concurrently, in the order given; a queue that cannot be measured
        (an error, or longer than the timeout) is logged as a warning and left out."""

        async def one(queue: str) -> QueueDepth | None:
            try:
                return await asyncio.wait_for(self.depth(queue, limit), self._timeout)
            except Exception as exc:  # one queue must not keep the others from being measured
                log.warning("could not measure queue %s: %s", queue, _describe(exc), exc_info=True)
                return None

        found = await asyncio.gather(*(one(q) for q in queues))
        return [d for d in found if d is not None]

    async def _scan(self, queue: str, limit: int) -> _Scan:
        """Peek up to ``limit + 1`` messages (one past the limit tells whether there may be more), counting
        the active ones (a peek also shows scheduled messages) up to ``limit``."""
        counted, peeked, start = 0, 0, 0
        oldest: datetime | None = None
        more = False
        async with self._client.get_queue_receiver(queue, prefetch_count=0) as receiver:
            while True:
                wanted = min(self._page, limit + 1 - peeked)
                found: list[ServiceBusReceivedMessage] = await receiver.peek_messages(
                    max_message_count=wanted, sequence_number=start
                )
                if not found:
                    break
                for message in found:
                    peeked += 1
                    if peeked > limit:
                        more = True
                        break
                    if message.state == ServiceBusMessageState.ACTIVE:
                        counted += 1
                        enqueued = message.enqueued_time_utc
                        if enqueued is not None and (oldest is None or enqueued < oldest):
                            oldest = enqueued
                if more:
                    break
                start = (found[-1].sequence_number or 0) + 1
        return _Scan(counted=counted, at_least=more, oldest=oldest)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
