"""Small helpers for the integration tests: the real azure-servicebus SDK against the running emulator."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from azure.servicebus import (
    ServiceBusClient,
    ServiceBusReceivedMessage,
    ServiceBusReceiver,
    ServiceBusSender,
)

from tests.servicebus_emulator.conftest import RunningEmulator


def utc_now() -> datetime:
    """The current time, timezone-aware, as the SDK reports times."""
    return datetime.now(UTC)


class FastCloseClient(ServiceBusClient):
    """The SDK client, with each sender created with ``keep_alive=0``.

    A sender's keep-alive thread wakes once a second and closing the sender waits for it: about half a
    second per sender. Its 30 s ping never fires in these short tests, so turning it off changes nothing
    the emulator sees. (Receivers without prefetch always run that thread; the SDK ignores the option.)
    """

    def get_queue_sender(self, queue_name: str, **kwargs: Any) -> ServiceBusSender:
        return super().get_queue_sender(queue_name, **{"keep_alive": 0, **kwargs})


def client_for(running: RunningEmulator, **kwargs: Any) -> ServiceBusClient:
    """A sync SDK client for the emulator (use it as a context manager)."""
    return FastCloseClient.from_connection_string(running.connection_string, **kwargs)


def body_bytes(message: ServiceBusReceivedMessage) -> bytes:
    """The data body of a received message, joined into one bytes object."""
    body = message.body
    if isinstance(body, bytes | bytearray):
        return bytes(body)
    return b"".join(body)


def text(value: Any) -> Any:
    """Decode bytes the SDK hands back for application properties; other values unchanged."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def app_properties(message: ServiceBusReceivedMessage) -> dict[str, Any]:
    """Application properties with str keys and str (not bytes) string values."""
    return {text(k): text(v) for k, v in (message.application_properties or {}).items()}


def peek_all(receiver: ServiceBusReceiver, max_count: int = 250) -> list[ServiceBusReceivedMessage]:
    """Everything in the receiver's queue (or sub-queue) from sequence number 1 on, without locking it."""
    return list(receiver.peek_messages(max_message_count=max_count, sequence_number=1))


def peek_ids(receiver: ServiceBusReceiver) -> list[str | None]:
    """The message ids :func:`peek_all` finds, in sequence order."""
    return [m.message_id for m in peek_all(receiver)]


def receive_exactly(
    receiver: ServiceBusReceiver, count: int, timeout: float = 10.0
) -> list[ServiceBusReceivedMessage]:
    """Receive until ``count`` messages have arrived; fail if they do not come within ``timeout``."""
    received: list[ServiceBusReceivedMessage] = []
    deadline = time.monotonic() + timeout
    while len(received) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"received {len(received)} of {count} messages within {timeout}s")
        received.extend(
            receiver.receive_messages(
                max_message_count=count - len(received), max_wait_time=min(remaining, 5)
            )
        )
    return received


def receive_one(receiver: ServiceBusReceiver, timeout: float = 10.0) -> ServiceBusReceivedMessage:
    """Receive exactly one message, polling with the SDK's max_wait_time."""
    (message,) = receive_exactly(receiver, 1, timeout)
    return message


def drain(
    receiver: ServiceBusReceiver, idle: float = 1.0, complete: bool = True
) -> list[ServiceBusReceivedMessage]:
    """Receive until a receive call of ``idle`` seconds returns nothing; complete what arrived if asked."""
    received: list[ServiceBusReceivedMessage] = []
    while True:
        batch = receiver.receive_messages(max_message_count=50, max_wait_time=idle)
        if not batch:
            return received
        if complete:
            for message in batch:
                receiver.complete_message(message)
        received.extend(batch)
