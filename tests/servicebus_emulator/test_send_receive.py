"""Sending in every form the SDK offers, the two receive modes, properties, sequence numbers, duplicates."""

from __future__ import annotations

import os
from datetime import timedelta

from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode

from tests.servicebus_emulator.conftest import EmulatorFactory, RunningEmulator
from tests.servicebus_emulator.helpers import (
    app_properties,
    body_bytes,
    client_for,
    drain,
    peek_all,
    peek_ids,
    receive_exactly,
    utc_now,
)


def test_send_single_list_and_batch(emulator: RunningEmulator) -> None:
    with client_for(emulator) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage(b"single", message_id="m0"))
            sender.send_messages(
                [ServiceBusMessage(b"list-1", message_id="m1"), ServiceBusMessage(b"list-2")]
            )
            batch = sender.create_message_batch()
            for i in range(3):
                batch.add_message(ServiceBusMessage(f"batch-{i}".encode(), message_id=f"b{i}"))
            assert len(batch) == 3
            sender.send_messages(batch)
        with client.get_queue_receiver("q") as receiver:
            received = receive_exactly(receiver, 6)
            for message in received:
                receiver.complete_message(message)
            remaining = peek_all(receiver)

    assert [body_bytes(m) for m in received] == [
        b"single",
        b"list-1",
        b"list-2",
        b"batch-0",
        b"batch-1",
        b"batch-2",
    ]
    assert [m.sequence_number for m in received] == [1, 2, 3, 4, 5, 6]
    assert [m.message_id for m in received][:2] == ["m0", "m1"]
    assert [m.message_id for m in received][3:] == ["b0", "b1", "b2"]
    assert remaining == []


def test_receive_and_delete_removes_message_on_delivery(emulator: RunningEmulator) -> None:
    with client_for(emulator) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(
                [ServiceBusMessage(b"1", message_id="one"), ServiceBusMessage(b"2", message_id="two")]
            )
        with client.get_queue_receiver(
            "q", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
        ) as receiver:
            assert peek_ids(receiver) == ["one", "two"]
            received = receive_exactly(receiver, 2)
            # Nothing to settle and nothing left: the messages were removed when they were handed out.
            remaining = peek_all(receiver)

    assert [m.message_id for m in received] == ["one", "two"]
    assert all(m.lock_token is None for m in received)
    assert remaining == []


def test_properties_round_trip(emulator_factory: EmulatorFactory) -> None:
    running = emulator_factory(queues={"q": {"LockDuration": "PT30S"}})
    binary = bytes(range(256)) + b"\xff\xfe\x00\x80\xc3\x28"
    large = os.urandom(200 * 1024)
    sent = ServiceBusMessage(
        binary,
        message_id="id-1",
        correlation_id="corr-1",
        reply_to="replies",
        subject="order.created",
        content_type="application/octet-stream",
        application_properties={"text": "héllo", "count": 42, "ratio": 0.25, "flag": True, "off": False},
        time_to_live=timedelta(minutes=5),
    )
    with client_for(running) as client:
        before = utc_now()
        with client.get_queue_sender("q") as sender:
            sender.send_messages([sent, ServiceBusMessage(large, message_id="big")])
        with client.get_queue_receiver("q") as receiver:
            first, second = receive_exactly(receiver, 2)
            received_at = utc_now()
            locked_until = first.locked_until_utc  # the SDK reports None once a message is settled
            for message in (first, second):
                receiver.complete_message(message)

    assert body_bytes(first) == binary
    assert first.message_id == "id-1"
    assert first.correlation_id == "corr-1"
    assert first.reply_to == "replies"
    assert first.subject == "order.created"
    assert first.content_type == "application/octet-stream"
    props = app_properties(first)
    assert props == {"text": "héllo", "count": 42, "ratio": 0.25, "flag": True, "off": False}
    assert type(props["count"]) is int
    assert type(props["ratio"]) is float
    assert type(props["flag"]) is bool
    assert first.time_to_live == timedelta(minutes=5)
    assert first.enqueued_time_utc is not None
    assert before - timedelta(seconds=2) <= first.enqueued_time_utc <= received_at + timedelta(seconds=2)
    assert locked_until is not None
    assert abs((locked_until - (received_at + timedelta(seconds=30))).total_seconds()) < 3
    assert first.delivery_count == 0

    assert second.message_id == "big"
    assert len(body_bytes(second)) == 200 * 1024
    assert body_bytes(second) == large


def test_sequence_numbers_are_per_queue(emulator_factory: EmulatorFactory) -> None:
    running = emulator_factory(queues={"alpha": {}, "beta": {}})
    received: dict[str, list[tuple[bytes, int | None]]] = {}
    with client_for(running) as client:
        with client.get_queue_sender("alpha") as alpha, client.get_queue_sender("beta") as beta:
            for i in (1, 2, 3):
                alpha.send_messages(ServiceBusMessage(f"a{i}".encode()))
                beta.send_messages(ServiceBusMessage(f"b{i}".encode()))
        for queue in ("alpha", "beta"):
            with client.get_queue_receiver(
                queue, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
            ) as receiver:
                received[queue] = [(body_bytes(m), m.sequence_number) for m in receive_exactly(receiver, 3)]

    assert received["alpha"] == [(b"a1", 1), (b"a2", 2), (b"a3", 3)]
    assert received["beta"] == [(b"b1", 1), (b"b2", 2), (b"b3", 3)]


def test_duplicate_detection(emulator_factory: EmulatorFactory) -> None:
    running = emulator_factory(queues={"dedup": {"RequiresDuplicateDetection": True}, "plain": {}})
    received: dict[str, list[tuple[str | None, bytes]]] = {}
    with client_for(running) as client:
        for queue in ("dedup", "plain"):
            with client.get_queue_sender(queue) as sender:
                sender.send_messages(ServiceBusMessage(b"first", message_id="same"))
                sender.send_messages(ServiceBusMessage(b"second", message_id="same"))
                sender.send_messages(ServiceBusMessage(b"other", message_id="different"))
            with client.get_queue_receiver(queue) as receiver:
                received[queue] = [(m.message_id, body_bytes(m)) for m in drain(receiver, idle=0.5)]

    # The duplicate is dropped (the first one is kept); a different id is accepted.
    assert received["dedup"] == [("same", b"first"), ("different", b"other")]
    assert received["plain"] == [("same", b"first"), ("same", b"second"), ("different", b"other")]
