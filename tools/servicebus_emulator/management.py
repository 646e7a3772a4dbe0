"""The ``$management`` node of a queue: request/response operations the SDK sends besides transfers."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proton import Array, Data, Message, symbol

from .codec import MessageFormatError, parse_message, to_timestamp
from .entity import BrokerMessage, LockLost, Outcome, Queue, Subqueue
from .stats import RENEW_LOCK, SCHEDULE, OperationStats

log = logging.getLogger("servicebus_emulator.management")

LOCK_LOST = "com.microsoft:message-lock-lost"
MESSAGE_NOT_FOUND = "com.microsoft:message-not-found"
ARGUMENT_ERROR = "com.microsoft:argument-error"
NOT_IMPLEMENTED = "amqp:not-implemented"
INTERNAL_ERROR = "amqp:internal-error"

_DISPOSITIONS = {
    "completed": Outcome.COMPLETE,
    "abandoned": Outcome.ABANDON,
    "suspended": Outcome.DEAD_LETTER,
    "defered": Outcome.DEFER,  # the SDK's spelling
    "deferred": Outcome.DEFER,
}


# Management operations that act on several messages are counted once per message, as Service Bus meters.
_PER_MESSAGE = {
    "com.microsoft:renew-lock",
    "com.microsoft:update-disposition",
    "com.microsoft:schedule-message",
}


@dataclass
class Reply:
    """A management response: status, description, optional error condition and AMQP-value body."""

    status: int
    description: str = "OK"
    body: dict[str, Any] = field(default_factory=dict)
    condition: str | None = None

    def to_message(self, correlation_id: Any) -> Message:
        """Build the response message, correlated with the request's ``message-id``."""
        properties: dict[str, Any] = {"statusCode": self.status, "statusDescription": self.description}
        if self.condition:
            properties["errorCondition"] = symbol(self.condition)
        return Message(correlation_id=correlation_id, properties=properties, body=self.body)


class BadRequest(Exception):
    """A request the node cannot act on; answered with status 400."""


EncodeFn = Callable[[BrokerMessage, Subqueue, bool], bytes]


class ManagementNode:
    """Runs the operations of one queue's ``$management`` node."""

    def __init__(
        self, queue: Queue, dead_letter: bool, encode: EncodeFn, stats: OperationStats | None = None
    ) -> None:
        self.queue = queue
        self.subqueue = queue.subqueue(dead_letter)
        self._encode = encode
        self._stats = stats or OperationStats()

    def handle(self, request: Message, now: float) -> Reply:
        """Answer one request; never raises for bad input."""
        properties: dict[Any, Any] = request.properties or {}
        operation = str(properties.get("operation", ""))
        if operation not in _PER_MESSAGE:  # counted per message by their handlers
            self._stats.add(self.subqueue.path, operation.removeprefix("com.microsoft:"))
        body = request.body if isinstance(request.body, dict) else {}
        body = {str(k): v for k, v in body.items()}
        handler = getattr(self, "_op_" + operation.removeprefix("com.microsoft:").replace("-", "_"), None)
        if handler is None:
            log.debug("%s: unsupported management operation %r", self.subqueue.path, operation)
            return Reply(501, f"The operation {operation!r} is not supported.", condition=NOT_IMPLEMENTED)
        try:
            reply = handler(body, now)
        except LockLost as exc:
            reply = Reply(410, str(exc), condition=LOCK_LOST)
        except (BadRequest, MessageFormatError, KeyError, TypeError, ValueError) as exc:
            reply = Reply(400, f"Bad {operation} request: {exc}", condition=ARGUMENT_ERROR)
        except Exception as exc:
            # A fault of the emulator's own: still an answer, so the client does not wait for its timeout.
            log.exception("%s: %s failed", self.subqueue.path, operation)
            reply = Reply(500, f"The emulator failed on {operation}: {exc!r}", condition=INTERNAL_ERROR)
        log.debug("%s: %s -> %d", self.subqueue.path, operation, reply.status)
        return reply

    # Operation names map to methods: com.microsoft:renew-lock -> _op_renew_lock.
    def _op_renew_lock(self, body: dict[str, Any], now: float) -> Reply:
        tokens = [_uuid(t) for t in _elements(body["lock-tokens"])]
        self._stats.add(self.subqueue.path, RENEW_LOCK, len(tokens))
        expirations = [to_timestamp(self.subqueue.renew(t, now)) for t in tokens]
        return Reply(200, body={"expirations": Array(Data.NULL, Data.TIMESTAMP, *expirations)})

    def _op_update_disposition(self, body: dict[str, Any], now: float) -> Reply:
        status = str(body["disposition-status"])
        outcome = _DISPOSITIONS.get(status)
        if outcome is None:
            raise BadRequest(f"unknown disposition-status {status!r}")
        reason = body.get("deadletter-reason")
        description = body.get("deadletter-description")
        for token in _elements(body["lock-tokens"]):
            self._stats.add(self.subqueue.path, outcome.stat)
            self.subqueue.settle(
                _uuid(token),
                outcome,
                now,
                None if reason is None else str(reason),
                None if description is None else str(description),
            )
        return Reply(200)

    def _op_schedule_message(self, body: dict[str, Any], now: float) -> Reply:
        sequence_numbers = []
        for entry in _elements(body["messages"]):
            entry = {str(k): v for k, v in entry.items()}
            sections = parse_message(bytes(entry["message"]))
            self._stats.add(self.queue.main.path, SCHEDULE)
            result = self.queue.main.send(sections, now)
            sequence_numbers.append(result if isinstance(result, int) else result.sequence_number)
        return Reply(200, body={"sequence-numbers": Array(Data.NULL, Data.LONG, *sequence_numbers)})

    def _op_cancel_scheduled_message(self, body: dict[str, Any], now: float) -> Reply:
        missing = self.queue.main.cancel_scheduled(int(s) for s in _elements(body["sequence-numbers"]))
        if missing:
            return Reply(
                404, f"No scheduled messages with sequence numbers {missing}.", condition=MESSAGE_NOT_FOUND
            )
        return Reply(200)

    def _op_peek_message(self, body: dict[str, Any], now: float) -> Reply:
        start = int(body.get("from-sequence-number", 1))
        count = int(body.get("message-count", 1))
        found = self.subqueue.peek(start, count)
        if not found:
            return Reply(204, "No messages to peek.")
        encoded = [{"message": self._encode(m, self.subqueue, False)} for m in found]
        return Reply(200, body={"messages": encoded})

    def _op_receive_by_sequence_number(self, body: dict[str, Any], now: float) -> Reply:
        lock = int(body.get("receiver-settle-mode", 1)) != 0
        wanted = [int(s) for s in _elements(body["sequence-numbers"])]
        missing = self.subqueue.missing_deferred(wanted)
        if missing:
            # Service Bus fails the whole request when any of the numbers is not a deferred message.
            return Reply(
                404, f"No deferred messages with sequence numbers {missing}.", condition=MESSAGE_NOT_FOUND
            )
        taken = self.subqueue.take_deferred(wanted, now, lock)
        entries = []
        for message in taken:
            entry: dict[str, Any] = {"message": self._encode(message, self.subqueue, lock)}
            if lock and message.lock_token is not None:
                entry["lock-token"] = message.lock_token
            entries.append(entry)
        return Reply(200, body={"messages": entries})


def _elements(value: Any) -> list[Any]:
    if isinstance(value, Array):
        return list(value.elements)
    if isinstance(value, list | tuple):
        return list(value)
    raise BadRequest(f"expected a list, got {type(value).__name__}")


def _uuid(value: Any) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, bytes | memoryview) and len(value) == 16:
        return uuid.UUID(bytes=bytes(value))
    return uuid.UUID(str(value))
