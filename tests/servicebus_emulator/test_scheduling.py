"""Scheduled messages: schedule_messages, cancel_scheduled_messages, and scheduled_enqueue_time_utc."""

from __future__ import annotations

from datetime import timedelta

from azure.servicebus import ServiceBusMessage

from tests.servicebus_emulator.conftest import RunningEmulator
from tests.servicebus_emulator.helpers import client_for, peek_all, receive_one, utc_now

DELAY = timedelta(seconds=2)
CLOCK_SLACK = timedelta(milliseconds=100)  # the broker's timer runs every 50 ms


def test_scheduled_message_arrives_only_after_its_time(emulator: RunningEmulator) -> None:
    with client_for(emulator) as client:
        with client.get_queue_sender("q") as sender:
            at = utc_now() + DELAY
            sequence_numbers = sender.schedule_messages(ServiceBusMessage(b"later", message_id="later"), at)
        with client.get_queue_receiver("q") as receiver:
            early = receiver.receive_messages(max_message_count=1, max_wait_time=0.5)
            checked_early_at = utc_now()
            message = receive_one(receiver, timeout=8)
            received_at = utc_now()
            receiver.complete_message(message)

    assert len(sequence_numbers) == 1
    assert isinstance(sequence_numbers[0], int) and sequence_numbers[0] >= 1
    assert checked_early_at < at, "the early receive must finish before the scheduled time"
    assert early == []
    assert message.message_id == "later"
    assert message.sequence_number == sequence_numbers[0]
    assert received_at >= at - CLOCK_SLACK
    assert message.scheduled_enqueue_time_utc is not None
    assert abs((message.scheduled_enqueue_time_utc - at).total_seconds()) < 0.01


def test_cancelled_scheduled_message_is_never_delivered(emulator: RunningEmulator) -> None:
    with client_for(emulator) as client:
        with client.get_queue_sender("q") as sender:
            at = utc_now() + DELAY
            kept, cancelled = sender.schedule_messages(
                [
                    ServiceBusMessage(b"kept", message_id="kept"),
                    ServiceBusMessage(b"gone", message_id="gone"),
                ],
                at,
            )
            sender.cancel_scheduled_messages(cancelled)
        with client.get_queue_receiver("q") as receiver:
            # Both were due at the same time: once the kept one arrives, the cancelled one would have too.
            message = receive_one(receiver, timeout=8)
            receiver.complete_message(message)
            later = receiver.receive_messages(max_message_count=5, max_wait_time=0.5)
            remaining = peek_all(receiver)

    assert kept != cancelled
    assert message.message_id == "kept"
    assert later == []
    assert remaining == []


def test_scheduled_enqueue_time_on_a_sent_message(emulator: RunningEmulator) -> None:
    with client_for(emulator) as client:
        with client.get_queue_sender("q") as sender:
            at = utc_now() + DELAY
            sender.send_messages(
                ServiceBusMessage(b"later", message_id="later", scheduled_enqueue_time_utc=at)
            )
            sender.send_messages(ServiceBusMessage(b"now", message_id="now"))
        with client.get_queue_receiver("q") as receiver:
            first = receive_one(receiver)
            receiver.complete_message(first)
            early = receiver.receive_messages(max_message_count=1, max_wait_time=0.5)
            checked_early_at = utc_now()
            second = receive_one(receiver, timeout=8)
            received_at = utc_now()
            receiver.complete_message(second)

    assert first.message_id == "now"
    assert checked_early_at < at, "the early receive must finish before the scheduled time"
    assert early == []
    assert second.message_id == "later"
    assert received_at >= at - CLOCK_SLACK
