"""The engine's message sender on Service Bus: one cached client per process, one sender per queue."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from pydantic import BaseModel


def client_from_settings(
    settings: dict[str, str], connection: str = "ServiceBusConnection"
) -> ServiceBusClient:
    """A client from app settings, the way the Functions host reads the same connection.

    Locally ``<connection>`` holds a connection string. In Azure it is identity-based:
    ``<connection>__fullyQualifiedNamespace`` and, for a user-assigned identity, ``<connection>__clientId``.
    """
    if settings.get(connection):
        return ServiceBusClient.from_connection_string(settings[connection])
    namespace = settings.get(f"{connection}__fullyQualifiedNamespace")
    if not namespace:
        raise RuntimeError(f"set {connection} (connection string) or {connection}__fullyQualifiedNamespace")
    from azure.identity import DefaultAzureCredential  # only needed in Azure

    credential = DefaultAzureCredential(managed_identity_client_id=settings.get(f"{connection}__clientId"))
    return ServiceBusClient(namespace, credential)


class ServiceBusSender:
    """Sends JSON messages. Thread-safe: the SDK's senders are not, so each queue's has a lock.

    ``counts`` holds the operations sent per queue (``send``, ``schedule``), counted under the queue's
    lock once the SDK has returned: the figures a capacity estimate needs, at no measurable cost.
    """

    def __init__(self, client: ServiceBusClient) -> None:
        self._client = client
        self.counts: dict[str, dict[str, int]] = {}
        self._senders: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _sender(self, queue: str) -> tuple[Any, threading.Lock]:
        with self._guard:
            if queue not in self._senders:
                self._senders[queue] = self._client.get_queue_sender(queue)
                self._locks[queue] = threading.Lock()
                self.counts[queue] = {}
            return self._senders[queue], self._locks[queue]

    def send(
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
        with lock:
            if scheduled_at is not None:
                sender.schedule_messages(message, scheduled_at)
                operation = "schedule"
            else:
                sender.send_messages(message)
                operation = "send"
            per_queue = self.counts[queue]  # created with the queue's sender, under the guard
            per_queue[operation] = per_queue.get(operation, 0) + 1

    def close(self) -> None:
        """Close every sender and the client."""
        with self._guard:
            for sender in self._senders.values():
                sender.close()
            self._senders.clear()
        self._client.close()
