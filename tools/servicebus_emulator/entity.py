"""Queue semantics, free of any protocol: locks, delivery counts, dead-lettering, scheduling, TTL.

Every method takes the current time (epoch seconds) so the rules can be exercised with a controlled
clock. Messages live in memory only, like the official emulator's.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from . import stats
from .codec import MessageSections
from .config import QueueProperties

log = logging.getLogger("servicebus_emulator.queue")

DEAD_LETTER_SUFFIX = "$deadletterqueue"
MAX_DELIVERY_COUNT_EXCEEDED = "MaxDeliveryCountExceeded"
TTL_EXPIRED = "TTLExpiredException"


class State(Enum):
    """Where a message is in its life in one subqueue."""

    ACTIVE = "active"
    LOCKED = "locked"
    SCHEDULED = "scheduled"
    DEFERRED = "deferred"


class Outcome(Enum):
    """What a receiver asked for when it settled a locked message."""

    COMPLETE = "complete"
    ABANDON = "abandon"
    RELEASE = "release"  # abandon without counting a delivery attempt
    DEFER = "defer"
    DEAD_LETTER = "dead-letter"

    @property
    def stat(self) -> str:
        """The operation's name in the emulator's stats file."""
        return _OUTCOME_STATS[self]


_OUTCOME_STATS = {
    Outcome.COMPLETE: stats.COMPLETE,
    Outcome.ABANDON: stats.ABANDON,
    Outcome.RELEASE: stats.RELEASE,
    Outcome.DEFER: stats.DEFER,
    Outcome.DEAD_LETTER: stats.DEAD_LETTER,
}


@dataclass(eq=False)
class BrokerMessage:
    """A message held by a subqueue, with the broker's bookkeeping."""

    sequence_number: int
    sections: MessageSections
    enqueued_time: float
    expires_at: float | None
    state: State
    scheduled_time: float | None = None
    delivery_count: int = 0
    lock_token: uuid.UUID | None = None
    locked_until: float | None = None
    dead_letter_properties: dict[str, Any] = field(default_factory=dict)
    deferred: bool = False  # deferred once: it stays deferred until it is settled otherwise


class LockLost(Exception):
    """The lock token is unknown or its lock has expired."""


class Subqueue:
    """One queue or its dead-letter sub-queue."""

    def __init__(self, path: str, properties: QueueProperties, dead_letter: Subqueue | None) -> None:
        self.path = path
        self.properties = properties
        self.dead_letter = dead_letter  # None for the dead-letter sub-queue itself
        self.messages: dict[int, BrokerMessage] = {}
        self.locks: dict[uuid.UUID, BrokerMessage] = {}
        self._sequence = itertools.count(1)
        self._available: list[int] = []  # heap of sequence numbers
        self._lock_expiries: list[tuple[float, uuid.UUID]] = []
        self._schedule: list[tuple[float, int]] = []
        self._expiries: list[tuple[float, int]] = []
        self._seen_ids: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self.active_count = 0

    # ---- arrival -------------------------------------------------------------------------------
    def send(
        self, sections: MessageSections, now: float, scheduled_time: float | None = None
    ) -> BrokerMessage | int:
        """Accept a message; return it, or the sequence number of the original if it is a duplicate."""
        duplicate = self._duplicate_of(sections, now)
        if duplicate is not None:
            log.debug("%s: dropped duplicate message_id=%r", self.path, sections.message_id)
            return duplicate
        if scheduled_time is None:
            scheduled_time = scheduled_enqueue_time(sections)
        seq = next(self._sequence)
        scheduled = scheduled_time is not None and scheduled_time > now
        enqueued = scheduled_time if scheduled and scheduled_time is not None else now
        message = BrokerMessage(
            sequence_number=seq,
            sections=sections,
            enqueued_time=enqueued,
            expires_at=self._expiry(sections, enqueued),
            state=State.SCHEDULED if scheduled else State.ACTIVE,
            scheduled_time=scheduled_time if scheduled else None,
        )
        self.messages[seq] = message
        if sections.message_id is not None and self.properties.requires_duplicate_detection:
            self._seen_ids[_id_key(sections.message_id)] = (now, seq)
        if scheduled:
            heapq.heappush(self._schedule, (message.scheduled_time or now, seq))
            log.debug("%s: scheduled seq=%d for %.3f", self.path, seq, message.scheduled_time)
        else:
            self._make_available(message)
            log.debug("%s: enqueued seq=%d message_id=%r", self.path, seq, sections.message_id)
        return message

    def dead_letter_copy(self, source: BrokerMessage, reason: str, description: str, now: float) -> None:
        """Put a message dead-lettered from the parent queue here, keeping its bare message."""
        seq = next(self._sequence)
        message = BrokerMessage(
            sequence_number=seq,
            sections=source.sections,
            enqueued_time=source.enqueued_time,
            expires_at=None,  # dead-lettered messages do not expire
            state=State.ACTIVE,
            delivery_count=source.delivery_count,
            dead_letter_properties={"DeadLetterReason": reason, "DeadLetterErrorDescription": description},
        )
        self.messages[seq] = message
        self._make_available(message)
        log.debug("%s: dead-lettered seq=%d reason=%s: %s", self.path, seq, reason, description)

    # ---- delivery ------------------------------------------------------------------------------
    @property
    def has_available(self) -> bool:
        """True if a receiver could be given a message now."""
        return self.active_count > 0

    def acquire(self, now: float, lock: bool) -> BrokerMessage | None:
        """Take the next active message: lock it (peek-lock) or remove it (receive-and-delete)."""
        while self._available:
            seq = heapq.heappop(self._available)
            message = self.messages.get(seq)
            if message is None or message.state is not State.ACTIVE:
                continue
            self.active_count -= 1
            if message.expires_at is not None and message.expires_at <= now:
                self._expire(message, now)
                continue
            if lock:
                self._lock(message, now)
            else:
                del self.messages[seq]
                log.debug("%s: received and deleted seq=%d", self.path, seq)
            return message
        return None

    def _lock(self, message: BrokerMessage, now: float) -> None:
        message.state = State.LOCKED
        message.lock_token = uuid.uuid4()
        message.locked_until = now + self.properties.lock_duration.total_seconds()
        self.locks[message.lock_token] = message
        heapq.heappush(self._lock_expiries, (message.locked_until, message.lock_token))
        log.debug(
            "%s: locked seq=%d token=%s delivery_count=%d",
            self.path,
            message.sequence_number,
            message.lock_token,
            message.delivery_count,
        )

    # ---- settlement ----------------------------------------------------------------------------
    def settle(
        self,
        token: uuid.UUID,
        outcome: Outcome,
        now: float,
        reason: str | None = None,
        description: str | None = None,
    ) -> BrokerMessage:
        """Apply a receiver's outcome to a locked message; raise :class:`LockLost` if it is not held."""
        message = self._held(token, now)
        self._unlock(message)
        seq = message.sequence_number
        if outcome is Outcome.COMPLETE:
            del self.messages[seq]
            log.debug("%s: completed seq=%d", self.path, seq)
        elif outcome is Outcome.DEAD_LETTER:
            self._move_to_dead_letter(message, reason or "", description or "", now)
        elif outcome is Outcome.DEFER:
            message.state = State.DEFERRED
            message.deferred = True
            log.debug("%s: deferred seq=%d", self.path, seq)
        else:
            self._return(message, now, count_attempt=outcome is Outcome.ABANDON, why="abandoned")
        return message

    def renew(self, token: uuid.UUID, now: float) -> float:
        """Extend a held lock by the lock duration; return the new locked-until time."""
        message = self._held(token, now)
        message.locked_until = now + self.properties.lock_duration.total_seconds()
        heapq.heappush(self._lock_expiries, (message.locked_until, token))
        log.debug(
            "%s: renewed lock seq=%d until %.3f", self.path, message.sequence_number, message.locked_until
        )
        return message.locked_until

    def _held(self, token: uuid.UUID, now: float) -> BrokerMessage:
        message = self.locks.get(token)
        if message is None or message.locked_until is None or message.locked_until <= now:
            raise LockLost(f"the lock {token} on {self.path} is lost or has expired")
        return message

    def _unlock(self, message: BrokerMessage) -> None:
        if message.lock_token is not None:
            self.locks.pop(message.lock_token, None)
        message.lock_token = None
        message.locked_until = None

    def _return(self, message: BrokerMessage, now: float, *, count_attempt: bool, why: str) -> None:
        """Make a message that was locked available again, or dead-letter it past max delivery count."""
        if count_attempt:
            message.delivery_count += 1
        limit = self.properties.max_delivery_count
        if self.dead_letter is not None and message.delivery_count >= limit:
            self._move_to_dead_letter(
                message,
                MAX_DELIVERY_COUNT_EXCEEDED,
                f"Message could not be consumed after {limit} delivery attempts.",
                now,
            )
            return
        if message.expires_at is not None and message.expires_at <= now:
            self._expire(message, now)
            return
        if message.deferred:
            # Received by sequence number, then abandoned or its lock lost: deferred again, not active.
            message.state = State.DEFERRED
            log.debug("%s: %s deferred seq=%d", self.path, why, message.sequence_number)
            return
        self._make_available(message)
        log.debug(
            "%s: %s seq=%d delivery_count=%d", self.path, why, message.sequence_number, message.delivery_count
        )

    def _make_available(self, message: BrokerMessage) -> None:
        message.state = State.ACTIVE
        self.active_count += 1
        heapq.heappush(self._available, message.sequence_number)
        if message.expires_at is not None:
            heapq.heappush(self._expiries, (message.expires_at, message.sequence_number))

    def _move_to_dead_letter(self, message: BrokerMessage, reason: str, description: str, now: float) -> None:
        del self.messages[message.sequence_number]
        if self.dead_letter is None:
            # Service Bus does not dead-letter from a dead-letter queue; the message stays put.
            self.messages[message.sequence_number] = message
            self._make_available(message)
            return
        self.dead_letter.dead_letter_copy(message, reason, description, now)

    def _expire(self, message: BrokerMessage, now: float) -> None:
        if self.properties.dead_lettering_on_message_expiration and self.dead_letter is not None:
            self._move_to_dead_letter(message, TTL_EXPIRED, "The message expired and was dead lettered.", now)
        else:
            del self.messages[message.sequence_number]
            log.debug("%s: expired seq=%d and dropped", self.path, message.sequence_number)

    # ---- scheduling, peek, deferral --------------------------------------------------------------
    def cancel_scheduled(self, sequence_numbers: Iterable[int]) -> list[int]:
        """Cancel scheduled messages; return the sequence numbers that were not scheduled here."""
        missing = []
        for seq in sequence_numbers:
            message = self.messages.get(seq)
            if message is None or message.state is not State.SCHEDULED:
                missing.append(seq)
                continue
            del self.messages[seq]
            log.debug("%s: cancelled scheduled seq=%d", self.path, seq)
        return missing

    def peek(self, from_sequence_number: int, count: int) -> list[BrokerMessage]:
        """Messages of any state from a sequence number on, in order, without locking them."""
        found = sorted(s for s in self.messages if s >= from_sequence_number)[:count]
        return [self.messages[s] for s in found]

    def missing_deferred(self, sequence_numbers: Iterable[int]) -> list[int]:
        """The sequence numbers that are not deferred messages here (locked ones included)."""
        missing = []
        for seq in sequence_numbers:
            message = self.messages.get(seq)
            if message is None or message.state is not State.DEFERRED:
                missing.append(seq)
        return missing

    def take_deferred(self, sequence_numbers: Iterable[int], now: float, lock: bool) -> list[BrokerMessage]:
        """Lock (or remove) deferred messages by sequence number."""
        taken = []
        for seq in sequence_numbers:
            message = self.messages.get(seq)
            if message is None or message.state is not State.DEFERRED:
                continue
            if lock:
                self._lock(message, now)
            else:
                del self.messages[seq]
            taken.append(message)
        return taken

    # ---- time ----------------------------------------------------------------------------------
    def tick(self, now: float) -> bool:
        """Apply everything that became due: lock expiry, scheduled enqueue, TTL, duplicate window.

        Returns True if messages are available.
        """
        while self._lock_expiries and self._lock_expiries[0][0] <= now:
            until, token = heapq.heappop(self._lock_expiries)
            message = self.locks.get(token)
            if message is None or message.locked_until != until:
                continue  # settled or renewed since
            self._unlock(message)
            self._return(message, now, count_attempt=True, why="lock expired for")
        while self._schedule and self._schedule[0][0] <= now:
            _, seq = heapq.heappop(self._schedule)
            message = self.messages.get(seq)
            if message is not None and message.state is State.SCHEDULED:
                message.scheduled_time = None
                self._make_available(message)
                log.debug("%s: scheduled seq=%d is now active", self.path, seq)
        while self._expiries and self._expiries[0][0] <= now:
            _, seq = heapq.heappop(self._expiries)
            message = self.messages.get(seq)
            expired = message is not None and message.expires_at is not None and message.expires_at <= now
            if expired and message is not None and message.state is State.ACTIVE:
                self.active_count -= 1
                self._expire(message, now)
        window = self.properties.duplicate_detection_history_time_window.total_seconds()
        while self._seen_ids:
            key, (seen, _) = next(iter(self._seen_ids.items()))
            if seen + window > now:
                break
            del self._seen_ids[key]
        return self.active_count > 0

    # ---- helpers -------------------------------------------------------------------------------
    def _duplicate_of(self, sections: MessageSections, now: float) -> int | None:
        if not self.properties.requires_duplicate_detection or sections.message_id is None:
            return None
        seen = self._seen_ids.get(_id_key(sections.message_id))
        window = self.properties.duplicate_detection_history_time_window.total_seconds()
        if seen is not None and seen[0] + window > now:
            return seen[1]
        return None

    def _expiry(self, sections: MessageSections, enqueued: float) -> float | None:
        if self.dead_letter is None:
            return None
        ttl = self.properties.default_message_time_to_live.total_seconds()
        if sections.header_ttl_ms is not None:
            ttl = min(ttl, sections.header_ttl_ms / 1000.0)
        return enqueued + ttl


class Queue:
    """A configured queue and its dead-letter sub-queue."""

    def __init__(self, name: str, properties: QueueProperties) -> None:
        self.name = name
        self.dead_letter = Subqueue(f"{name}/$DeadLetterQueue", properties, None)
        self.main = Subqueue(name, properties, self.dead_letter)

    def subqueue(self, dead_letter: bool) -> Subqueue:
        """The main queue or its dead-letter sub-queue."""
        return self.dead_letter if dead_letter else self.main

    def tick(self, now: float) -> list[Subqueue]:
        """Apply due timers to both sub-queues; return those with messages available."""
        return [s for s in (self.main, self.dead_letter) if s.tick(now)]


def _id_key(message_id: Any) -> str:
    return f"{type(message_id).__name__}:{message_id}"


def scheduled_enqueue_time(sections: MessageSections) -> float | None:
    """The scheduled enqueue time a sender set on a message (epoch seconds), or None."""
    for key, value in sections.annotations.items():
        if str(key) == "x-opt-scheduled-enqueue-time" and value is not None:
            return int(value) / 1000.0
    return None
