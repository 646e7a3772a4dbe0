"""Settling peek-locked messages: complete, abandon, dead-letter, and MaxDeliveryCount."""

from __future__ import annotations

from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue

from tests.servicebus_emulator.conftest import EmulatorFactory, RunningEmulator
from tests.servicebus_emulator.helpers import body_bytes, client_for, peek_all, receive_one


def test_complete_removes_message(emulator: RunningEmulator) -> None:
    with client_for(emulator) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(
                [ServiceBusMessage(b"a", message_id="a"), ServiceBusMessage(b"b", message_id="b")]
            )
        with client.get_queue_receiver("q") as receiver:
            first = receive_one(receiver)
            receiver.complete_message(first)
            second = receive_one(receiver)
            remaining = [m.message_id for m in peek_all(receiver)]
            receiver.complete_message(second)
            after = peek_all(receiver)

    assert (first.message_id, second.message_id) == ("a", "b")
    assert remaining == ["b"]
    assert after == []


def test_abandon_redelivers_with_incremented_delivery_count(emulator: RunningEmulator) -> None:
    with client_for(emulator) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage(b"retry me", message_id="retry"))
        with client.get_queue_receiver("q") as receiver:
            first = receive_one(receiver)
            first_delivery_count, first_token = first.delivery_count, first.lock_token
            receiver.abandon_message(first)
            again = receive_one(receiver)
            again_token = again.lock_token  # the SDK reports None once a message is settled
            receiver.complete_message(again)
            remaining = peek_all(receiver)

    assert first_delivery_count == 0
    assert again.message_id == "retry"
    assert body_bytes(again) == b"retry me"
    assert again.sequence_number == first.sequence_number
    assert again.delivery_count == 1
    assert again_token is not None and first_token is not None
    assert again_token != first_token
    assert remaining == []


def test_dead_letter_with_reason_and_description(emulator: RunningEmulator) -> None:
    with client_for(emulator) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(
                ServiceBusMessage(b"poison", message_id="poison", application_properties={"kind": "order"})
            )
        with client.get_queue_receiver("q") as receiver:
            message = receive_one(receiver)
            receiver.dead_letter_message(
                message, reason="BadOrder", error_description="the total is negative"
            )
            main_after = peek_all(receiver)
        with client.get_queue_receiver("q", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            dead = receive_one(dlq)
            dlq.complete_message(dead)
            dlq_after = peek_all(dlq)

    assert main_after == []
    assert dead.message_id == "poison"
    assert body_bytes(dead) == b"poison"
    assert dead.dead_letter_reason == "BadOrder"
    assert dead.dead_letter_error_description == "the total is negative"
    assert dead.application_properties is not None
    assert dead.application_properties.get(b"kind") == b"order"
    assert dlq_after == []


def test_max_delivery_count_moves_message_to_dead_letter_queue(emulator_factory: EmulatorFactory) -> None:
    running = emulator_factory(queues={"q": {"MaxDeliveryCount": 2}})
    with client_for(running) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage(b"fails", message_id="fails"))
        with client.get_queue_receiver("q") as receiver:
            first = receive_one(receiver)
            receiver.abandon_message(first)
            second = receive_one(receiver)
            receiver.abandon_message(second)
            # Two delivery attempts used up: no third delivery from the main queue.
            third = receiver.receive_messages(max_message_count=1, max_wait_time=0.5)
            main_after = peek_all(receiver)
        with client.get_queue_receiver("q", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            dead = receive_one(dlq)
            dlq.complete_message(dead)

    assert [first.delivery_count, second.delivery_count] == [0, 1]
    assert third == []
    assert main_after == []
    assert dead.message_id == "fails"
    assert dead.dead_letter_reason == "MaxDeliveryCountExceeded"
    assert dead.dead_letter_error_description
