"""The DEBUG log: a line per connection and per queue event."""

from __future__ import annotations

import re

from azure.servicebus import ServiceBusMessage

from tests.servicebus_emulator.conftest import RunningEmulator
from tests.servicebus_emulator.helpers import client_for, receive_exactly
from tests.support import wait_for


def test_debug_log_has_connection_and_queue_events(emulator: RunningEmulator) -> None:
    with client_for(emulator) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(
                [ServiceBusMessage(b"done", message_id="first-id"), ServiceBusMessage(b"bad")]
            )
        with client.get_queue_receiver("q") as receiver:
            done, bad = receive_exactly(receiver, 2)
            receiver.complete_message(done)
            receiver.dead_letter_message(bad, reason="BadInput", error_description="broken")

    def lines(fragment: str) -> list[str]:
        return [line for line in emulator.log().splitlines() if fragment in line]

    # The SDK opens one connection per sender or receiver: two here, each from its own client port.
    wait_for(lambda: len(lines("connection opened from")) >= 2, timeout=5, what="two connection lines")
    opened = lines("connection opened from")
    assert all(" DEBUG " in line for line in opened)
    peers = set(re.findall(r"connection opened from (\S+)", emulator.log()))
    assert len(peers) == len(opened)

    enqueued = lines("enqueued")
    assert len(enqueued) == 2
    assert "first-id" in enqueued[0]
    assert len(lines("completed")) == 1
    dead_lettered = lines("dead-lettered")
    assert len(dead_lettered) == 1
    assert "BadInput" in dead_lettered[0] and "broken" in dead_lettered[0]
