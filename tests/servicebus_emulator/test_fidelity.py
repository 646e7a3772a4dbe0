"""Every valid message comes back intact, with the annotations Service Bus puts on it (real SDK, sync and
async): bodies of every kind and none, header, footer, delivery and message annotations, application
properties, maps with binary keys, the lock token annotation and the message state.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

from azure.servicebus import (
    ServiceBusMessage,
    ServiceBusMessageState,
    ServiceBusReceivedMessage,
)
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.amqp import AmqpAnnotatedMessage, AmqpMessageBodyType, AmqpMessageHeader

from tests.servicebus_emulator.conftest import RunningEmulator
from tests.servicebus_emulator.helpers import client_for, receive_exactly, utc_now
from tests.servicebus_emulator.test_async import receive_exactly_async

LOCK_TOKEN = b"x-opt-lock-token"


def annotated_messages() -> list[AmqpAnnotatedMessage]:
    """One message per body kind, each with every section a sender may set."""
    sections: dict[str, Any] = {
        "header": AmqpMessageHeader(durable=True, priority=7, time_to_live=600_000),
        "footer": {"footer-key": "footer-value"},
        "delivery_annotations": {"sender-da": "da-value"},
        "annotations": {"sender-ma": "ma-value", b"binary-annotation-key": 1},
        "application_properties": {"text": "v", "number": 7, b"binary-key": b"binary-value"},
    }
    return [
        AmqpAnnotatedMessage(data_body=[b"part-1", b"part-2"], **sections),
        AmqpAnnotatedMessage(sequence_body=[[1, 2, 3], ["four"]], **sections),
        AmqpAnnotatedMessage(value_body={b"binary": b"map", "nested": {b"k": [1, 2]}}, **sections),
    ]


def assert_annotated_round_trip(received: list[ServiceBusReceivedMessage]) -> None:
    kinds = [m.body_type for m in received]
    assert kinds == [AmqpMessageBodyType.DATA, AmqpMessageBodyType.SEQUENCE, AmqpMessageBodyType.VALUE]
    data, sequence, value = received
    assert list(data.body) == [b"part-1", b"part-2"]
    assert list(sequence.body) == [[1, 2, 3], [b"four"]]
    assert value.body == {b"binary": b"map", b"nested": {b"k": [1, 2]}}
    for message in received:
        raw = message.raw_amqp_message
        assert raw.header is not None
        assert (raw.header.durable, raw.header.priority, raw.header.time_to_live) == (True, 7, 600_000)
        assert raw.footer == {b"footer-key": b"footer-value"}
        assert raw.delivery_annotations is not None
        assert raw.delivery_annotations[b"sender-da"] == b"da-value"
        assert raw.annotations is not None
        assert raw.annotations[b"sender-ma"] == b"ma-value"
        assert raw.annotations[b"binary-annotation-key"] == 1
        assert message.application_properties == {
            b"text": b"v",
            b"number": 7,
            b"binary-key": b"binary-value",
        }


def assert_lock_token_annotation(message: ServiceBusReceivedMessage) -> None:
    """The ``x-opt-lock-token`` delivery annotation is the lock token (the delivery tag's UUID).

    Call it before settling: the SDK forgets a settled message's lock token.
    """
    raw = message.raw_amqp_message
    assert raw.delivery_annotations is not None
    # The SDK takes lock_token from the delivery tag, so this also checks the tag against the annotation.
    assert message.lock_token is not None
    assert raw.delivery_annotations[LOCK_TOKEN] == uuid.UUID(str(message.lock_token))


# ---- 2. every valid message is accepted and comes back intact -------------------------------------
def test_a_message_without_body_round_trips(emulator: RunningEmulator) -> None:
    with client_for(emulator) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage(body=None, message_id="empty"))
        with client.get_queue_receiver("q") as receiver:
            (message,) = receive_exactly(receiver, 1)
            receiver.complete_message(message)
    assert message.message_id == "empty"
    assert message.body is None


def test_annotated_messages_of_every_body_kind_round_trip(emulator: RunningEmulator) -> None:
    with client_for(emulator) as client:
        with client.get_queue_sender("q") as sender:
            for message in annotated_messages():
                sender.send_messages(message)
        with client.get_queue_receiver("q") as receiver:
            received = receive_exactly(receiver, 3)
            for message in received:
                assert_lock_token_annotation(message)
                receiver.complete_message(message)
    assert_annotated_round_trip(received)


def test_messages_round_trip_async(emulator: RunningEmulator) -> None:
    async def scenario() -> list[ServiceBusReceivedMessage]:
        async with AsyncServiceBusClient.from_connection_string(emulator.connection_string) as client:
            async with client.get_queue_sender("q") as sender:
                await sender.send_messages(ServiceBusMessage(body=None, message_id="empty"))
                await sender.send_messages(annotated_messages())  # one batch transfer
            async with client.get_queue_receiver("q") as receiver:
                received = await receive_exactly_async(receiver, 4)
                for message in received:
                    assert_lock_token_annotation(message)
                    await receiver.complete_message(message)
        return received

    empty, *annotated = asyncio.run(scenario())
    assert empty.body is None
    assert_annotated_round_trip(annotated)


# ---- 4. what Service Bus puts on received and peeked messages --------------------------------------
def test_peeked_messages_report_their_state(emulator: RunningEmulator) -> None:
    with client_for(emulator) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages([ServiceBusMessage(b"active"), ServiceBusMessage(b"deferred")])
            sender.schedule_messages(ServiceBusMessage(b"scheduled"), utc_now() + timedelta(hours=1))
        with client.get_queue_receiver("q") as receiver:
            active, deferred = receive_exactly(receiver, 2)
            receiver.abandon_message(active)
            receiver.defer_message(deferred)
            peeked = receiver.peek_messages(max_message_count=10, sequence_number=1)
    assert [m.state for m in peeked] == [
        ServiceBusMessageState.ACTIVE,
        ServiceBusMessageState.DEFERRED,
        ServiceBusMessageState.SCHEDULED,
    ]
    assert [m.sequence_number for m in peeked] == [1, 2, 3]


def test_deferred_messages_carry_their_lock_token_and_complete(emulator: RunningEmulator) -> None:
    with client_for(emulator) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages([ServiceBusMessage(f"m{i}".encode(), message_id=f"m{i}") for i in range(3)])
        with client.get_queue_receiver("q") as receiver:
            received = receive_exactly(receiver, 3)
            for message in received:
                receiver.defer_message(message)
            numbers = [m.sequence_number for m in received]
            deferred = receiver.receive_deferred_messages(numbers)
            tokens = [m.lock_token for m in deferred]
            states = [m.state for m in deferred]
            annotated = [m.raw_amqp_message.delivery_annotations[LOCK_TOKEN] for m in deferred]  # type: ignore[index]
            for message in deferred:
                receiver.complete_message(message)  # through the management link
            left = receiver.peek_messages(max_message_count=10, sequence_number=1)
    assert [m.message_id for m in deferred] == ["m0", "m1", "m2"]
    assert all(tokens) and annotated == [uuid.UUID(str(t)) for t in tokens]
    assert states == [ServiceBusMessageState.DEFERRED] * 3
    assert left == []


def test_deferred_messages_carry_their_lock_token_and_complete_async(emulator: RunningEmulator) -> None:
    async def scenario() -> tuple[list[Any], list[ServiceBusReceivedMessage]]:
        async with AsyncServiceBusClient.from_connection_string(emulator.connection_string) as client:
            async with client.get_queue_sender("q") as sender:
                await sender.send_messages([ServiceBusMessage(b"m0"), ServiceBusMessage(b"m1")])
            async with client.get_queue_receiver("q") as receiver:
                received = await receive_exactly_async(receiver, 2)
                for message in received:
                    await receiver.defer_message(message)
                deferred = await receiver.receive_deferred_messages([m.sequence_number for m in received])
                seen = [(m.lock_token, m.raw_amqp_message.delivery_annotations, m.state) for m in deferred]
                for message in deferred:
                    await receiver.complete_message(message)
                left = await receiver.peek_messages(max_message_count=10, sequence_number=1)
        return seen, left

    seen, left = asyncio.run(scenario())
    assert len(seen) == 2
    for token, delivery_annotations, state in seen:
        assert token and delivery_annotations[LOCK_TOKEN] == uuid.UUID(str(token))
        assert state == ServiceBusMessageState.DEFERRED
    assert left == []
