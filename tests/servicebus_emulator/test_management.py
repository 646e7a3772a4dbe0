"""Peeking (the $management node's peek-message): order, paging, no locks, and an empty queue."""

from __future__ import annotations

from azure.servicebus import ServiceBusMessage

from tests.servicebus_emulator.conftest import RunningEmulator
from tests.servicebus_emulator.helpers import body_bytes, client_for, receive_exactly


def test_peek_pages_in_sequence_order_without_locking(emulator: RunningEmulator) -> None:
    with client_for(emulator) as client, client.get_queue_receiver("q") as receiver:
        empty = receiver.peek_messages(max_message_count=10)
        with client.get_queue_sender("q") as sender:
            sender.send_messages(
                [ServiceBusMessage(f"body-{i}".encode(), message_id=f"m{i}") for i in range(5)]
            )
        first_page = receiver.peek_messages(max_message_count=3)
        second_page = receiver.peek_messages(max_message_count=3)
        third_page = receiver.peek_messages(max_message_count=3)
        # Peeking took no locks: every message can still be received, as a first delivery.
        received = receive_exactly(receiver, 5)
        for message in received:
            receiver.complete_message(message)
        after = receiver.peek_messages(max_message_count=10, sequence_number=1)

    assert empty == []
    assert [(m.sequence_number, m.message_id) for m in first_page] == [(1, "m0"), (2, "m1"), (3, "m2")]
    assert [(m.sequence_number, m.message_id) for m in second_page] == [(4, "m3"), (5, "m4")]
    assert third_page == []
    assert [body_bytes(m) for m in first_page + second_page] == [f"body-{i}".encode() for i in range(5)]
    assert all(m.lock_token is None for m in first_page + second_page)
    assert [m.message_id for m in received] == ["m0", "m1", "m2", "m3", "m4"]
    assert [m.delivery_count for m in received] == [0, 0, 0, 0, 0]
    assert after == []
