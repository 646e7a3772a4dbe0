"""The dead-letter port: what an operator needs from each queue's dead-letter sub-queue.

Business-agnostic: a dead-lettered message is described by what the broker knows about it, plus the
task id when its JSON body names one (``orderId``, the field every engine message carries).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field


class DeadLetter(BaseModel):
    """One message in a dead-letter sub-queue, as peeked (nothing is locked or changed)."""

    model_config = ConfigDict(populate_by_name=True)

    sequence_number: int = Field(alias="sequenceNumber", ge=0)
    message_id: str | None = Field(alias="messageId")
    reason: str | None
    description: str | None
    enqueued_at: datetime | None = Field(alias="enqueuedAt")
    delivery_count: int | None = Field(alias="deliveryCount")
    order_id: str | None = Field(alias="orderId", description="the task the body names, when it parses")


class DeadLetterCount(BaseModel):
    """How many messages one queue's dead-letter sub-queue holds, counted by peeking up to a limit."""

    model_config = ConfigDict(populate_by_name=True)

    queue: str
    count: int = Field(ge=0)
    at_least: bool = Field(alias="atLeast", description="the count stopped at the limit: there may be more")


class DeadLetterPage(BaseModel):
    """Some dead-lettered messages, oldest first, and where the next page starts (None at the end)."""

    items: list[DeadLetter]
    next_sequence_number: int | None


class DeadLetterNotFound(LookupError):
    """No message with that sequence number is in the dead-letter sub-queue."""


class DeadLetterUnreachable(RuntimeError):
    """The message is there but could not be locked within the scan's bound (others hold it, or too
    many older messages are in front of it)."""


def order_id_of(body: bytes) -> str | None:
    """The ``orderId`` a JSON body names, or None if the body is not a JSON object that names one."""
    try:
        data: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        # RecursionError: nested about 10,000 levels deep. Any message can be dead-lettered, so a
        # listing must not fail on one.
        return None
    value = data.get("orderId") if isinstance(data, dict) else None
    return value if isinstance(value, str) and value else None


class DeadLetters(Protocol):
    """Reads and settles dead-lettered messages of the engine's queues."""

    async def count(self, queue: str, limit: int) -> DeadLetterCount:
        """How many messages the queue's dead-letter sub-queue holds, up to ``limit``."""
        ...

    async def peek(self, queue: str, from_sequence_number: int, max_count: int) -> DeadLetterPage:
        """Up to ``max_count`` messages from a sequence number on, oldest first, without locking."""
        ...

    async def replay(self, queue: str, sequence_number: int) -> DeadLetter:
        """Send a copy to the queue itself, then complete the dead-lettered one.

        Raises :class:`DeadLetterNotFound` or :class:`DeadLetterUnreachable`."""
        ...

    async def purge(self, queue: str, sequence_number: int) -> DeadLetter:
        """Complete (drop) one dead-lettered message. Raises like :meth:`replay`."""
        ...


class DeadLetterAction(BaseModel):
    """An operator's replay or purge of a dead-lettered message, as audited."""

    model_config = ConfigDict(populate_by_name=True)

    at: datetime = Field(alias="At")
    actor: str = Field(alias="Actor", max_length=512)
    action: str = Field(alias="Action", max_length=64, description="replay or purge")
    queue: str = Field(alias="Queue")
    sequence_number: int = Field(alias="SequenceNumber")
    message_id: str | None = Field(default=None, alias="MessageId")
    order_id: str | None = Field(default=None, alias="OrderID")
    note: str | None = Field(default=None, alias="Note", max_length=2000)
