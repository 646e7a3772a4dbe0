"""Time to live: the message's own and the queue's default, with and without dead-lettering on expiry."""

from __future__ import annotations

from datetime import timedelta

from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue

from tests.servicebus_emulator.conftest import EmulatorFactory
from tests.servicebus_emulator.helpers import client_for, peek_all, peek_ids, receive_one
from tests.support import wait_for

ONE_SECOND = timedelta(seconds=1)


def test_expired_message_is_dead_lettered(emulator_factory: EmulatorFactory) -> None:
    running = emulator_factory(queues={"q": {"DeadLetteringOnMessageExpiration": True}})
    with client_for(running) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(
                [
                    ServiceBusMessage(b"stale", message_id="stale", time_to_live=ONE_SECOND),
                    ServiceBusMessage(b"fresh", message_id="fresh"),
                ]
            )
        with client.get_queue_receiver("q", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            dead = receive_one(dlq, timeout=8)
            dlq.complete_message(dead)
        with client.get_queue_receiver("q") as receiver:
            main = peek_ids(receiver)

    assert dead.message_id == "stale"
    assert dead.dead_letter_reason == "TTLExpiredException"
    assert main == ["fresh"]


def test_expired_message_without_dead_lettering_is_dropped(emulator_factory: EmulatorFactory) -> None:
    running = emulator_factory(queues={"q": {"DeadLetteringOnMessageExpiration": False}})
    with client_for(running) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(
                [
                    ServiceBusMessage(b"stale", message_id="stale", time_to_live=ONE_SECOND),
                    ServiceBusMessage(b"fresh", message_id="fresh"),
                ]
            )
        with client.get_queue_receiver("q") as receiver:
            assert peek_ids(receiver) == ["stale", "fresh"]
            wait_for(
                lambda: peek_ids(receiver) == ["fresh"], timeout=8, interval=0.2, what="the message to expire"
            )
        with client.get_queue_receiver("q", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            dead_letters = peek_all(dlq)

    assert dead_letters == []


def test_queue_default_time_to_live_applies(emulator_factory: EmulatorFactory) -> None:
    running = emulator_factory(
        queues={"q": {"DefaultMessageTimeToLive": "PT1S", "DeadLetteringOnMessageExpiration": True}}
    )
    with client_for(running) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage(b"no ttl of its own", message_id="plain"))
        with client.get_queue_receiver("q", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            dead = receive_one(dlq, timeout=8)
            dlq.complete_message(dead)
        with client.get_queue_receiver("q") as receiver:
            main = peek_all(receiver)

    assert dead.message_id == "plain"
    assert dead.dead_letter_reason == "TTLExpiredException"
    assert main == []
