"""The asynchronous ``ServiceBusClient`` of azure-servicebus, as far as ``adapters.servicebus`` uses it, on
the simulated broker of :mod:`simulation.bus`: so the simulation sends every message through the adapter's
own :class:`~adapters.servicebus.ServiceBusSender`, with its logic (one request at a time per queue, sends
that arrive meanwhile coalesced into one batch, a batch accepted or refused as a whole, each caller answered
for its own message).

A send or a schedule is one request to the broker (``bus.send``): the process may die before it arrives or
after it took effect, or the request fail, as for every request of the world; a batch arrives whole or not
at all. The broker keeps each message's body as the engine's model, validated from the JSON the adapter
sent (by the message's ``subject``, the model's name, as the adapter sets it), so a message that does not
survive the wire fails here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from azure.servicebus import ServiceBusMessage
from azure.servicebus.exceptions import MessageSizeExceededError
from pydantic import BaseModel

from engine import tracing
from engine.messages import AgentReply, AgentRequest, SchedulerCommand, StatusMessage

from .bus import Bus
from .world import CURRENT

# Service Bus Standard: a message, and a batch, of at most 256 KB.
MAX_BATCH_BYTES = 256 * 1024
_MODELS: dict[str, type[BaseModel]] = {
    model.__name__: model for model in (SchedulerCommand, AgentRequest, AgentReply, StatusMessage)
}


def _body(message: ServiceBusMessage) -> bytes:
    return b"".join(message.body)


class SimMessageBatch:
    """``ServiceBusMessageBatch``: messages up to the size of one request."""

    def __init__(self, limit: int = MAX_BATCH_BYTES) -> None:
        self.limit = limit
        self.messages: list[ServiceBusMessage] = []
        self.size_in_bytes = 0

    def add_message(self, message: ServiceBusMessage) -> None:
        size = len(_body(message)) + 64  # the properties' share, roughly
        if self.size_in_bytes + size > self.limit:
            raise MessageSizeExceededError(message=f"the batch is full at {self.size_in_bytes} bytes")
        self.messages.append(message)
        self.size_in_bytes += size


class SimQueueSender:
    """``ServiceBusSender`` of one queue."""

    def __init__(self, bus: Bus, queue: str) -> None:
        self.bus = bus
        self.queue = queue

    async def __aenter__(self) -> SimQueueSender:
        return self

    async def create_message_batch(self, max_size_in_bytes: int | None = None) -> SimMessageBatch:
        return SimMessageBatch(max_size_in_bytes or MAX_BATCH_BYTES)

    async def send_messages(
        self, message: ServiceBusMessage | SimMessageBatch | list[ServiceBusMessage]
    ) -> None:
        messages = (
            message.messages
            if isinstance(message, SimMessageBatch)
            else list(message)
            if isinstance(message, list)
            else [message]
        )
        await self._request(messages, None)

    async def schedule_messages(self, message: ServiceBusMessage, schedule_time_utc: datetime) -> list[int]:
        await self._request([message], schedule_time_utc)
        return [0]

    async def _request(self, messages: list[ServiceBusMessage], scheduled_at: datetime | None) -> None:
        world = self.bus.world
        await world.before("bus.send")
        worker = CURRENT.get()
        origin = str(getattr(worker.host, "release", "")) if worker is not None else ""
        for message in messages:
            body = _body(message)
            if len(body) > MAX_BATCH_BYTES:
                raise MessageSizeExceededError(message=f"a message of {len(body)} bytes")
            model = _MODELS.get(str(message.subject))
            ttl = message.time_to_live
            self.bus.enqueue(
                self.queue,
                model.model_validate_json(body) if model is not None else body,
                str(message.message_id),
                str(message.correlation_id),
                ttl.total_seconds() if ttl is not None else None,
                scheduled_at,
                tracing.from_properties(message.application_properties),
                wire=body,
                origin=origin,
            )
        world.after("bus.send")

    async def close(self) -> None:
        """Nothing to release."""


class SimServiceBusClient:
    """``ServiceBusClient``: one per process, as the adapter keeps one."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    def get_queue_sender(self, queue_name: str, **_: Any) -> SimQueueSender:
        return SimQueueSender(self.bus, queue_name)

    async def close(self) -> None:
        """Nothing to release."""
