"""The dead-letter routes: count, list, replay and purge the engine queues' dead-lettered messages.

Replay and purge are audited after they succeed. The record goes to the order's own trail
(``GET /api/orders/{orderId}/audit``, action ``deadletter-replay`` or ``deadletter-purge``, the order's
ProcessState before and after being the same, since the order itself does not change) when the
message's body names an order the store knows; otherwise to the ``deadletters`` audit partition,
``GET /api/deadletters/{queue}/audit``. An order is the operator's unit of work, so its history is
where one looks first; a message that names no order (unparseable, or a stranger) still leaves a
trace per queue. The action comes first and its record second: if the store fails in between, the
answer is a 500 and the action, already done, is logged with its details.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from pydantic import Field

from engine import (
    AuditEntry,
    DeadLetter,
    DeadLetterAction,
    DeadLetterNotFound,
    DeadLetters,
    DeadLetterUnreachable,
    NotFound,
    TaskService,
    queues,
)

from .api import MAX_PAGE_SIZE, Call, Reply, error, parse_body
from .models import ActionRequest, _View

log = logging.getLogger("orders.deadletters")

MAX_SEQUENCE_NUMBER = 2**63 - 1
COUNT_LIMIT = 1000  # per queue: counting peeks every message, so it stops here and says "at least"
# A task's id: an order id, or a storefront's <storefront>.<id> (engine.queues.scoped_id).
_ORDER_ID = re.compile(rf"^{queues.TASK_ID_PATTERN}$")
_DIGITS = re.compile(r"^[0-9]{1,19}$")


class DeadLetterView(_View):
    """One dead-lettered message."""

    sequence_number: int = Field(alias="sequenceNumber")
    message_id: str | None = Field(alias="messageId")
    reason: str | None
    description: str | None
    enqueued_at: datetime | None = Field(alias="enqueuedAt")
    delivery_count: int | None = Field(alias="deliveryCount")
    order_id: str | None = Field(alias="orderId")


class DeadLetterCountView(_View):
    """How many dead-lettered messages one queue holds (``atLeast``: counting stopped at the limit)."""

    queue: str
    count: int
    at_least: bool = Field(alias="atLeast")


class DeadLetterCounts(_View):
    """Every engine queue's dead-letter count."""

    items: list[DeadLetterCountView]


class DeadLetterListing(_View):
    """A page of one queue's dead-lettered messages, oldest first."""

    queue: str
    items: list[DeadLetterView]
    next_sequence_number: int | None = Field(
        alias="nextSequenceNumber", description="fromSequenceNumber of the next page; null at the end"
    )


class DeadLetterOutcome(_View):
    """What a replay or purge did, and where it was audited."""

    queue: str
    action: str
    message: DeadLetterView
    audited_on: str = Field(alias="auditedOn", description="order:<id>, or deadletters:<queue>")


class DeadLetterAuditView(_View):
    """One audited dead-letter action that named no known order."""

    at: datetime
    actor: str
    action: str
    queue: str
    sequence_number: int = Field(alias="sequenceNumber")
    message_id: str | None = Field(alias="messageId")
    order_id: str | None = Field(alias="orderId")
    note: str | None


class DeadLetterAuditPage(_View):
    """A queue's audited dead-letter actions that named no known order, oldest first."""

    items: list[DeadLetterAuditView]


class DeadLetterAuditLog(Protocol):
    """Where dead-letter actions are recorded (the state store)."""

    async def append_audit(self, order_id: str, entry: AuditEntry) -> None:
        """Add an entry to an order's trail."""
        ...

    async def append_dead_letter_audit(self, entry: DeadLetterAction) -> None:
        """Record an action that names no known order."""
        ...

    async def dead_letter_audit(self, queue: str) -> list[DeadLetterAction]:
        """A queue's actions that named no known order, oldest first."""
        ...


@dataclass(frozen=True)
class DeadLetterParts:
    """What the dead-letter routes use: the broker port, the audit log, the orders, the queue names."""

    port: DeadLetters
    audit: DeadLetterAuditLog
    tasks: TaskService
    queues: tuple[str, ...]


def view(message: DeadLetter) -> DeadLetterView:
    """A dead-lettered message as the API shows it."""
    return DeadLetterView(**message.model_dump())


class DeadLettersApi:
    """The operations behind ``/api/deadletters``."""

    def __init__(self, parts: Callable[[], Awaitable[DeadLetterParts]], queues: tuple[str, ...]) -> None:
        self._parts = parts  # resolved lazily, so a bad request costs no connection
        self._queues = queues

    def _unknown_queue(self, queue: str) -> Reply | None:
        if queue in self._queues:
            return None
        return error(404, "NotFound", f"no queue {queue!r}; the queues are {', '.join(self._queues)}")

    async def counts(self) -> Reply:
        """``GET /api/deadletters``: every queue's count, counted up to :data:`COUNT_LIMIT`."""
        parts = await self._parts()
        items = []
        for queue in self._queues:
            counted = await parts.port.count(queue, COUNT_LIMIT)
            items.append(DeadLetterCountView(queue=queue, count=counted.count, at_least=counted.at_least))
        return Reply(200, DeadLetterCounts(items=items).wire())

    async def list(self, queue: str, query: Mapping[str, str]) -> Reply:
        """``GET /api/deadletters/{queue}?fromSequenceNumber=N&pageSize=M``."""
        if (unknown := self._unknown_queue(queue)) is not None:
            return unknown
        start = query.get("fromSequenceNumber", "0")
        if not _DIGITS.match(start) or int(start) > MAX_SEQUENCE_NUMBER:
            return error(400, "ValidationFailed", "fromSequenceNumber must be a whole number from 0")
        size = query.get("pageSize", "50")
        if not _DIGITS.match(size) or not 1 <= int(size) <= MAX_PAGE_SIZE:
            return error(
                400, "ValidationFailed", f"pageSize must be a whole number from 1 to {MAX_PAGE_SIZE}"
            )
        page = await (await self._parts()).port.peek(queue, int(start), int(size))
        listing = DeadLetterListing(
            queue=queue, items=[view(m) for m in page.items], next_sequence_number=page.next_sequence_number
        )
        return Reply(200, listing.wire())

    async def audit(self, queue: str) -> Reply:
        """``GET /api/deadletters/{queue}/audit``: actions on the queue that named no known order."""
        if (unknown := self._unknown_queue(queue)) is not None:
            return unknown
        entries = await (await self._parts()).audit.dead_letter_audit(queue)
        items = [DeadLetterAuditView(**e.model_dump()) for e in entries]
        return Reply(200, DeadLetterAuditPage(items=items).wire())

    async def replay(self, queue: str, sequence_number: str, call: Call) -> Reply:
        """``POST /api/deadletters/{queue}/{sequenceNumber}/replay``."""
        return await self._settle("replay", queue, sequence_number, call)

    async def purge(self, queue: str, sequence_number: str, call: Call) -> Reply:
        """``POST /api/deadletters/{queue}/{sequenceNumber}/purge``."""
        return await self._settle("purge", queue, sequence_number, call)

    async def _settle(self, action: str, queue: str, sequence_number: str, call: Call) -> Reply:
        if (unknown := self._unknown_queue(queue)) is not None:
            return unknown
        if not _DIGITS.match(sequence_number) or int(sequence_number) > MAX_SEQUENCE_NUMBER:
            return error(400, "ValidationFailed", "sequenceNumber must be a whole number from 0")
        body = parse_body(ActionRequest, call.body, call.content_type, required=False)
        if isinstance(body, Reply):
            return body
        parts = await self._parts()
        number = int(sequence_number)
        try:
            if action == "replay":
                message = await parts.port.replay(queue, number)
            else:
                message = await parts.port.purge(queue, number)
        except DeadLetterNotFound:
            return error(404, "NotFound", f"no message {number} in {queue}'s dead-letter queue")
        except DeadLetterUnreachable as exc:
            return error(409, "Unreachable", f"{exc}; try again once older messages are handled")
        actor = call.actor
        log.info("dead letter %s: %s #%d (%s) by %s", action, queue, number, message.message_id, actor)
        audited_on = await self._record(parts, action, queue, message, actor, body.note)
        outcome = DeadLetterOutcome(queue=queue, action=action, message=view(message), audited_on=audited_on)
        return Reply(200, outcome.wire())

    @staticmethod
    async def _record(
        parts: DeadLetterParts, action: str, queue: str, message: DeadLetter, actor: str, note: str | None
    ) -> str:
        """Audit the action on the order it names, if the store knows it, else on the queue."""
        now = datetime.now(UTC)
        order_id = message.order_id
        if order_id and _ORDER_ID.match(order_id):
            try:
                state = (await parts.tasks.get(order_id)).state.process_state
            except NotFound:
                state = None
            if state is not None:
                detail = f"{queue} sequence number {message.sequence_number}, message id {message.message_id}"
                entry = AuditEntry(
                    at=now,
                    actor=actor,
                    action=f"deadletter-{action}",
                    process_state_before=state,
                    process_state_after=state,
                    note=note,
                    detail=detail[:2000],
                )
                await parts.audit.append_audit(order_id, entry)
                return f"order:{order_id}"
        record = DeadLetterAction(
            at=now,
            actor=actor,
            action=action,
            queue=queue,
            sequence_number=message.sequence_number,
            message_id=message.message_id,
            order_id=order_id,
            note=note,
        )
        await parts.audit.append_dead_letter_audit(record)
        return f"deadletters:{queue}"
