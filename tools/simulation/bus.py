"""Service Bus as the Functions host uses it: the engine's :class:`~engine.ports.MessageSender`, and the
delivery of each queue's messages to the processes.

What it models, with each queue's properties from :mod:`engine.queues`:

- peek-lock delivery to a process chosen at random, after a random delay (so messages overtake each
  other); the host completes a message when its function returns and abandons it when it raises;
- at-least-once: a completion that fails, a process that dies, or a lock renewal that fails (the host
  renews locks while the function runs; no function here runs near host.json's five-minute limit) puts
  the message back once its lock expires, so it is delivered again, possibly while the first delivery
  still runs;
- the delivery count: past the queue's ``max_delivery_count`` the message is dead-lettered;
- time to live: an expired message is dead-lettered or dropped, as the queue says;
- duplicate detection by message id within its window, on the queues that have it;
- scheduled messages, delivered at their time (their time to live counted from it), then after the same
  random delay as any other; under faults a timer's wake-up is sometimes delivered a little before its
  time (the broker's clock is not the processes') or late by up to two budgets (it then races the
  Supervisor's re-sent one). Only wake-ups: the other scheduled commands (a backoff, an undo that waits)
  the Scheduler already takes up to a second early.

Nothing is ever lost silently: every message ends completed, dead-lettered (with a reason) or expired,
and the simulation checks that (:meth:`Bus.unsettled`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import isodate
from pydantic import BaseModel

from engine import queues, tracing
from engine.messages import CommandKind, SchedulerCommand

from .loop import at_seconds
from .world import Crash, StoreUnavailable, World

DEFAULT_TTL_SECONDS = 3600.0


@dataclass(eq=False, slots=True)
class Message:
    """One message and where it is in its life."""

    seq: int
    queue: str
    body: Any  # the engine's model, or bytes for a malformed message
    message_id: str
    correlation_id: str
    sent_at: float
    expires_at: float
    state: str = "active"  # active, locked, completed, dead-lettered, expired
    deliveries: int = 0
    token: int = 0  # the current lock; a settle with an older one is refused
    delivered_at: float = 0.0
    worker: Any = None
    running: bool = False
    reason: str = ""
    traceparent: str | None = None  # the span context it was sent from (engine.tracing)
    wire: bytes | None = None  # the JSON its sender sent (through the adapter): what another release reads
    origin: str = ""  # beside another release (simulation.beside): the release of the process that sent it


class BusObserver(Protocol):
    """Told what the broker did (the simulation's checks and its trace)."""

    def sent(self, message: Message) -> None: ...

    def settled(self, message: Message) -> None: ...


Consume = Callable[[Any, Message], Awaitable[None]]


def _seconds(duration: str) -> float:
    return float(isodate.parse_duration(duration).total_seconds())


class Bus:
    """The broker: every queue of the engine, and its delivery to the simulated processes."""

    def __init__(self, world: World, observer: BusObserver, consume: Consume, consumed: set[str]) -> None:
        self.world = world
        self.loop = world.loop
        self.observer = observer
        self.consume = consume
        self.consumed = consumed  # queues a function reads; the others (status) only collect
        self.messages: list[Message] = []
        self._seen: dict[str, dict[str, float]] = {}
        self._queues: dict[str, _Queue] = {}
        self.duplicates_dropped = 0
        self.redeliveries = 0
        self.wakes_early = 0  # wake-ups delivered before their time
        self.wakes_late = 0  # wake-ups delivered late
        world.on_kill = self._killed

    def _queue(self, name: str) -> _Queue:
        found = self._queues.get(name)
        if found is None:
            found = self._queues[name] = _Queue(queues.queue_properties(name))
        return found

    # ---- the sender port ------------------------------------------------------------------------------
    async def send(
        self,
        queue: str,
        body: BaseModel,
        *,
        message_id: str,
        correlation_id: str,
        reply_to: str | None = None,
        time_to_live_seconds: float | None = None,
        scheduled_at: datetime | None = None,
    ) -> None:
        """Send (or schedule) a message: a request to the broker like any other (latency, faults)."""
        await self.world.before("bus.send")
        self.enqueue(
            queue, body, message_id, correlation_id, time_to_live_seconds, scheduled_at, tracing.traceparent()
        )
        self.world.after("bus.send")

    def enqueue(
        self,
        queue: str,
        body: Any,
        message_id: str,
        correlation_id: str,
        time_to_live_seconds: float | None = None,
        scheduled_at: datetime | None = None,
        traceparent: str | None = None,
        wire: bytes | None = None,
        origin: str = "",
    ) -> Message | None:
        """Put a message on a queue now (None: dropped as a duplicate)."""
        now = self.loop.time()
        kind = self._queue(queue)
        if kind.properties.requires_duplicate_detection:
            seen = self._seen.setdefault(queue, {})
            first = seen.get(message_id)
            if first is not None and now - first < kind.duplicate_window:
                self.duplicates_dropped += 1
                return None
            seen[message_id] = now
        ttl = time_to_live_seconds if time_to_live_seconds is not None else DEFAULT_TTL_SECONDS
        visible = max(at_seconds(scheduled_at), now) if scheduled_at is not None else now
        message = Message(len(self.messages), queue, body, message_id, correlation_id, now, visible + ttl)
        message.traceparent = traceparent
        message.wire = wire
        message.origin = origin
        self.messages.append(message)
        self.observer.sent(message)
        if queue not in self.consumed:
            return message
        if scheduled_at is not None and isinstance(body, SchedulerCommand) and body.kind is CommandKind.WAKE:
            visible = self._wake_at(visible, now)
        self._offer(message, visible)
        return message

    def _wake_at(self, due: float, now: float) -> float:
        """When a scheduled wake-up becomes receivable: at its time, or under faults a little before it or
        late."""
        world = self.world
        if not world.faults:
            return due
        profile, draw = world.profile, world.rng.random()
        if draw < profile.wake_early_rate:
            early = max(now, due - world.rng.uniform(0.0, profile.wake_early_seconds))
            self.wakes_early += early < due
            return early
        if draw < profile.wake_early_rate + profile.wake_late_rate:
            self.wakes_late += 1
            return due + world.rng.uniform(0.0, 2 * profile.complete_by_seconds)
        return due

    # ---- delivery -------------------------------------------------------------------------------------
    def _offer(self, message: Message, at: float) -> None:
        delay = self.world.rng.uniform(0.0, self.world.profile.delivery_delay_seconds)
        self.loop.call_at(at + delay, self._deliver, message, message.token)

    def _finish(self, message: Message, state: str, reason: str = "") -> None:
        message.state = state
        message.reason = reason
        message.token += 1
        if message.worker is not None:
            message.worker.held.pop(message.seq, None)
        self.observer.settled(message)

    def _deliver(self, message: Message, token: int) -> None:
        if message.state != "active" or message.token != token:
            return
        now = self.loop.time()
        kind = self._queue(message.queue)
        if message.expires_at <= now:
            if kind.properties.dead_lettering_on_message_expiration:
                self._finish(message, "dead-lettered", "TTLExpiredException")
            else:
                self._finish(message, "expired")
            return
        world = self.world
        worker = world.any_alive()
        if worker is None:  # every process is down: the message waits
            self.loop.call_at(now + 0.5, self._deliver, message, token)
            return
        message.deliveries += 1
        message.state = "locked"
        message.token += 1
        message.delivered_at = now
        message.worker = worker
        message.running = True
        worker.held[message.seq] = message
        if message.deliveries > 1:
            self.redeliveries += 1
        if world.faults and world.rng.random() < world.profile.lock_loss_rate:
            # A renewal of the lock fails while the function runs: delivered again meanwhile.
            lost = now + world.rng.uniform(0.0, kind.lock_seconds)
            self.loop.call_at(lost, self._expired, message, message.token)
        world.run_in(worker, self._handle(worker, message, message.token))

    def _expire_later(self, message: Message) -> None:
        """Nobody renews the lock any more (its process died, or its completion failed): the message
        comes back when the lock runs out."""
        if message.state != "locked":
            return
        now = self.loop.time()
        lock = self._queue(message.queue).lock_seconds
        until = message.delivered_at + lock
        if until <= now:  # the host renewed it while the function ran: it runs out within one lock period
            until = now + self.world.rng.uniform(0.0, lock)
        self.loop.call_at(until, self._expired, message, message.token)

    def _killed(self, worker: Any) -> None:
        for message in list(worker.held.values()):
            self._expire_later(message)

    def _expired(self, message: Message, token: int) -> None:
        if message.state == "locked" and message.token == token:
            self._release(message)

    def _release(self, message: Message) -> None:
        """Back on the queue (abandoned, or its lock expired), or dead-lettered past its delivery count."""
        if message.worker is not None:
            message.worker.held.pop(message.seq, None)
        if message.deliveries >= self._queue(message.queue).properties.max_delivery_count:
            self._finish(message, "dead-lettered", "MaxDeliveryCountExceeded")
            return
        message.state = "active"
        message.token += 1
        self._offer(message, self.loop.time())

    async def _handle(self, worker: Any, message: Message, token: int) -> None:
        """The host: run the function, then complete the message, or abandon it if the function raised."""
        worker.handlers += 1
        failed: str | None = None  # why, as the broker keeps it (not the exception: it would hold this frame)
        try:
            await self.consume(worker, message)
        except (Crash, asyncio.CancelledError):
            return
        except Exception as exc:
            failed = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            worker.handlers -= 1
            if message.token == token:
                message.running = False
        if message.state != "locked" or message.token != token:
            return  # the lock was lost meanwhile: the broker refuses the settle
        try:
            await self.world.before("bus.settle")
        except (Crash, StoreUnavailable):
            self._expire_later(message)  # not settled: the lock runs out and the message comes back
            return
        if message.state != "locked" or message.token != token:
            return
        world = self.world
        if failed is None:
            if world.faults and world.rng.random() < world.profile.settle_loss_rate:
                self._expire_later(message)  # the completion failed: delivered again later
                return
            self._finish(message, "completed")
        else:
            message.reason = failed
            self._release(message)

    def unsettled(self) -> list[Message]:
        """Messages of a consumed queue still active or locked."""
        return [m for m in self.messages if m.queue in self.consumed and m.state in ("active", "locked")]


class _Queue:
    """A queue's properties, with its durations in seconds."""

    def __init__(self, properties: queues.QueueProperties) -> None:
        self.properties = properties
        self.lock_seconds = _seconds(properties.lock_duration)
        self.duplicate_window = _seconds(properties.duplicate_detection_history_time_window)
