"""The dead-letter port on Service Bus (asynchronous SDK): peek, count, replay and purge.

Finding one message by sequence number. ``receive_deferred_messages`` works only for deferred
messages, in Azure and in the bundled emulator alike, so it cannot take a message from a dead-letter
sub-queue. Instead: peek from the sequence number (no lock) to learn whether the message is there at
all (404 if not), then receive with peek-lock in batches and compare sequence numbers. Every other
message received on the way is abandoned at once (its delivery count goes up by one; a dead-letter
sub-queue never dead-letters again). The scan is bounded by :data:`SCAN_LIMIT` messages: a message
deeper than that behind older ones, or locked by another receiver, is reported as unreachable (the
operator handles the older ones first, or tries again once the other lock expires). Both the
emulator and Azure support every call used here (peek with ``sequence_number``, peek-lock receive,
complete, abandon on ``$DeadLetterQueue``), and they need only the Data Receiver and Sender roles.

Replay sends the copy first, then completes the dead-lettered message: a crash in between leaves the
copy and the original, so a second replay sends a second copy. Its ``message_id`` is derived from the
dead-lettered message (:func:`replay_message_id`), so on a queue with duplicate detection the broker
drops that second copy within the detection window; after it, the engine's fencing (order, step,
attempt) and the remote services' idempotency keys absorb the duplicate. Nothing is lost: the
original stays dead-lettered until its copy is on the queue.
"""

from __future__ import annotations

import hashlib
from typing import Any

from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage, ServiceBusSubQueue
from azure.servicebus.aio import ServiceBusClient

from engine import (
    DeadLetter,
    DeadLetterCount,
    DeadLetterNotFound,
    DeadLetterPage,
    DeadLetterUnreachable,
    order_id_of,
)

SCAN_LIMIT = 100  # messages a replay or purge may lock on its way to the one it wants
BATCH = 20
PEEK_PAGE = 100
WAIT_SECONDS = 1.0  # how long one receive waits for messages before the scan gives up
# Broker properties of a dead-lettered message that a replayed copy must not carry.
_DEAD_LETTER_PROPERTIES = {"DeadLetterReason", "DeadLetterErrorDescription"}


def replay_message_id(message: ServiceBusReceivedMessage) -> str:
    """The copy's ``message_id``: the same for every replay of one dead-lettered message, different from
    the original's (which duplicate detection may still remember) and at most 128 characters."""
    original = message.message_id or ""
    suffix = f":replay:{message.sequence_number}"
    if len(original) + len(suffix) > 128:
        original = hashlib.sha256(original.encode()).hexdigest()[:64]
    return f"{original}{suffix}"


def _body(message: ServiceBusReceivedMessage) -> bytes:
    return b"".join(bytes(part) for part in message.body)


def describe(message: ServiceBusReceivedMessage) -> DeadLetter:
    """What the API shows of a dead-lettered message."""
    return DeadLetter(
        sequence_number=message.sequence_number or 0,
        message_id=message.message_id,
        reason=message.dead_letter_reason,
        description=message.dead_letter_error_description,
        enqueued_at=message.enqueued_time_utc,
        delivery_count=message.delivery_count,
        order_id=order_id_of(_body(message)),
    )


def _copy(message: ServiceBusReceivedMessage) -> ServiceBusMessage:
    properties: dict[Any, Any] = {
        (k.decode() if isinstance(k, bytes) else k): v
        for k, v in (message.application_properties or {}).items()
    }
    return ServiceBusMessage(
        _body(message),
        content_type=message.content_type,
        correlation_id=message.correlation_id,
        subject=message.subject,
        reply_to=message.reply_to,
        message_id=replay_message_id(message),
        application_properties={k: v for k, v in properties.items() if k not in _DEAD_LETTER_PROPERTIES}
        or None,
    )


class ServiceBusDeadLetters:
    """:class:`engine.deadletters.DeadLetters` on Service Bus; a receiver per call (operator actions
    are rare, and a receiver left open would hold prefetched locks)."""

    def __init__(self, client: ServiceBusClient) -> None:
        self._client = client

    def _receiver(self, queue: str) -> Any:
        return self._client.get_queue_receiver(
            queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER, prefetch_count=0
        )

    async def peek(self, queue: str, from_sequence_number: int, max_count: int) -> DeadLetterPage:
        """Up to ``max_count`` messages from a sequence number on, oldest first, locking nothing."""
        async with self._receiver(queue) as receiver:
            found = await receiver.peek_messages(
                max_message_count=max_count + 1, sequence_number=from_sequence_number
            )
        items = [describe(m) for m in found[:max_count]]
        following = found[max_count].sequence_number if len(found) > max_count else None
        return DeadLetterPage(items=items, next_sequence_number=following)

    async def count(self, queue: str, limit: int) -> DeadLetterCount:
        """Count by peeking, a page at a time, up to ``limit``: runtime properties would need the
        Manage right, which the app does not hold."""
        total, start = 0, 0
        async with self._receiver(queue) as receiver:
            while total <= limit:  # one past the limit tells whether there are more
                found = await receiver.peek_messages(
                    max_message_count=min(PEEK_PAGE, limit + 1 - total), sequence_number=start
                )
                if not found:
                    break
                total += len(found)
                start = (found[-1].sequence_number or 0) + 1
        return DeadLetterCount(queue=queue, count=min(total, limit), at_least=total > limit)

    async def replay(self, queue: str, sequence_number: int) -> DeadLetter:
        """Send a copy to ``queue``, then complete the dead-lettered message."""
        async with self._receiver(queue) as receiver:
            message = await self._take(receiver, sequence_number)
            try:
                async with self._client.get_queue_sender(queue) as sender:
                    await sender.send_messages(_copy(message))
            except BaseException:
                await receiver.abandon_message(message)  # not sent: leave it dead-lettered
                raise
            await receiver.complete_message(message)
        return describe(message)

    async def purge(self, queue: str, sequence_number: int) -> DeadLetter:
        """Complete (drop) one dead-lettered message."""
        async with self._receiver(queue) as receiver:
            message = await self._take(receiver, sequence_number)
            await receiver.complete_message(message)
        return describe(message)

    async def _take(self, receiver: Any, sequence_number: int) -> ServiceBusReceivedMessage:
        """Peek to see that the message exists, then lock it by receiving and comparing, bounded."""
        peeked = await receiver.peek_messages(max_message_count=1, sequence_number=sequence_number)
        if not peeked or peeked[0].sequence_number != sequence_number:
            raise DeadLetterNotFound(sequence_number)
        held: list[ServiceBusReceivedMessage] = []  # locked on the way; released before returning
        try:
            while len(held) < SCAN_LIMIT:
                batch = await receiver.receive_messages(
                    max_message_count=min(BATCH, SCAN_LIMIT - len(held)), max_wait_time=WAIT_SECONDS
                )
                if not batch:
                    break
                wanted = next((m for m in batch if m.sequence_number == sequence_number), None)
                held.extend(m for m in batch if m is not wanted)
                if wanted is not None:
                    return wanted
        finally:
            for message in held:
                await receiver.abandon_message(message)
        raise DeadLetterUnreachable(
            f"message {sequence_number} was not among the {len(held)} messages that could be locked"
        )
