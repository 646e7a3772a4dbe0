"""A queue name the config does not declare: the SDK gets an error quickly, and the emulator carries on.

The token for such a queue is refused, which the SDK treats as retryable; ``retry_total=0`` keeps its
back-off out of the timing.
"""

from __future__ import annotations

import time

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusError

from tests.servicebus_emulator.conftest import RunningEmulator
from tests.servicebus_emulator.helpers import client_for, receive_one
from tests.support import wait_for

UNKNOWN = "no-such-queue"
QUICKLY = 5.0  # seconds


def assert_still_serving(running: RunningEmulator, client: ServiceBusClient) -> None:
    """The configured queue ``q`` still works, and the emulator logged the unknown name."""
    with client.get_queue_sender("q") as sender:
        sender.send_messages(ServiceBusMessage(b"still here", message_id="ok"))
    with client.get_queue_receiver("q") as receiver:
        message = receive_one(receiver)
        receiver.complete_message(message)
    assert message.message_id == "ok"
    assert running.process.poll() is None
    wait_for(lambda: UNKNOWN in running.log(), timeout=5, what="the unknown queue in the emulator log")


def test_send_to_unknown_queue_fails_quickly(emulator: RunningEmulator) -> None:
    with client_for(emulator, retry_total=0) as client:
        started = time.monotonic()
        with pytest.raises(ServiceBusError) as error, client.get_queue_sender(UNKNOWN) as sender:
            sender.send_messages(ServiceBusMessage(b"lost"))
        took = time.monotonic() - started
        assert_still_serving(emulator, client)
    assert took < QUICKLY, f"took {took:.1f}s to fail with {error.value!r}"


def test_receive_from_unknown_queue_fails_quickly(emulator: RunningEmulator) -> None:
    with client_for(emulator, retry_total=0) as client:
        started = time.monotonic()
        with pytest.raises(ServiceBusError) as error, client.get_queue_receiver(UNKNOWN) as receiver:
            receiver.receive_messages(max_message_count=1, max_wait_time=1)
        took = time.monotonic() - started
        assert_still_serving(emulator, client)
    assert took < QUICKLY, f"took {took:.1f}s to fail with {error.value!r}"
