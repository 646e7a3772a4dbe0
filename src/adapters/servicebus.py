"""The engine's message sender on Service Bus: the asynchronous SDK, one client per process (and event
loop), one sender per queue."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from pydantic import BaseModel


def client_from_settings(
    settings: dict[str, str], connection: str = "ServiceBusConnection"
) -> ServiceBusClient:
    """An asynchronous client from app settings, the way the Functions host reads the same connection.

    Locally ``<connection>`` holds a connection string. In Azure it is identity-based:
    ``<connection>__fullyQualifiedNamespace`` and, for a user-assigned identity, ``<connection>__clientId``.
    The client connects on first use, on the event loop that uses it.
    """
    if settings.get(connection):
        return ServiceBusClient.from_connection_string(settings[connection])
    namespace = settings.get(f"{connection}__fullyQualifiedNamespace")
    if not namespace:
        raise RuntimeError(f"set {connection} (connection string) or {connection}__fullyQualifiedNamespace")
    from azure.identity.aio import DefaultAzureCredential  # only needed in Azure

    credential = DefaultAzureCredential(managed_identity_client_id=settings.get(f"{connection}__clientId"))
    return ServiceBusClient(namespace, credential)


class ServiceBusSender:
    """Sends JSON messages from coroutines of one event loop.

    An SDK sender's links are not safe for overlapping requests (scheduling uses its management link), so
    each queue's sender has an ``asyncio.Lock``: sends to one queue take turns, which costs a round trip
    each and holds no thread. ``counts`` holds the operations sent per queue (``send``, ``schedule``),
    counted once the SDK has returned: the figures a capacity estimate needs.
    """

    def __init__(self, client: ServiceBusClient) -> None:
        self._client = client
        self.counts: dict[str, dict[str, int]] = {}
        self._senders: dict[str, Any] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def _sender(self, queue: str) -> tuple[Any, asyncio.Lock]:
        # No await between the check and the insert: coroutines cannot interleave here.
        if queue not in self._senders:
            self._senders[queue] = self._client.get_queue_sender(queue)
            self._locks[queue] = asyncio.Lock()
            self.counts[queue] = {}
        return self._senders[queue], self._locks[queue]

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
        """Send (or schedule, when ``scheduled_at`` is given) one message."""
        message = ServiceBusMessage(
            body.model_dump_json(by_alias=True),
            content_type="application/json",
            message_id=message_id,
            correlation_id=correlation_id,
            reply_to=reply_to,
            subject=type(body).__name__,
        )
        if time_to_live_seconds is not None:
            message.time_to_live = timedelta(seconds=time_to_live_seconds)
        sender, lock = self._sender(queue)
        async with lock:
            if scheduled_at is not None:
                await sender.schedule_messages(message, scheduled_at)
                operation = "schedule"
            else:
                await sender.send_messages(message)
                operation = "send"
            per_queue = self.counts[queue]
            per_queue[operation] = per_queue.get(operation, 0) + 1

    async def close(self) -> None:
        """Close every sender and the client."""
        senders = list(self._senders.values())
        self._senders.clear()
        for sender in senders:
            await sender.close()
        await self._client.close()
