"""Queue rules with a controlled clock: no broker, no network."""

from __future__ import annotations

from datetime import timedelta

import pytest

from servicebus_emulator.codec import MessageSections
from servicebus_emulator.config import QueueProperties
from servicebus_emulator.entity import (
    MAX_DELIVERY_COUNT_EXCEEDED,
    TTL_EXPIRED,
    BrokerMessage,
    LockLost,
    Outcome,
    Queue,
    State,
)


def props(**overrides: object) -> QueueProperties:
    base = {
        "LockDuration": "PT10S",
        "MaxDeliveryCount": 3,
        "DefaultMessageTimeToLive": "PT1H",
        "DuplicateDetectionHistoryTimeWindow": "PT1M",
    }
    base.update(overrides)
    return QueueProperties.model_validate(base)


def message(
    message_id: str | None = None, ttl_ms: int | None = None, scheduled_ms: int | None = None
) -> MessageSections:
    annotations = {"x-opt-scheduled-enqueue-time": scheduled_ms} if scheduled_ms is not None else {}
    return MessageSections(
        header=[True, None, ttl_ms],
        annotations=annotations,
        properties=[message_id] if message_id is not None else [],
        body_raw=b"\x00Su\xa0\x01x",
    )


def sent(queue: Queue, sections: MessageSections, now: float) -> BrokerMessage:
    result = queue.main.send(sections, now)
    assert isinstance(result, BrokerMessage)
    return result


def test_sequence_numbers_are_per_queue_and_increase() -> None:
    a, b = Queue("a", props()), Queue("b", props())
    assert [sent(a, message(), 0).sequence_number for _ in range(3)] == [1, 2, 3]
    assert sent(b, message(), 0).sequence_number == 1


def test_a_locked_message_goes_to_one_receiver_only() -> None:
    queue = Queue("q", props())
    sent(queue, message(), 0)
    first = queue.main.acquire(0, lock=True)
    assert first is not None and first.state is State.LOCKED
    assert queue.main.acquire(1, lock=True) is None


def test_lock_expiry_redelivers_with_a_higher_delivery_count_and_a_new_token() -> None:
    queue = Queue("q", props())
    sent(queue, message(), 0)
    first = queue.main.acquire(0, lock=True)
    assert first is not None
    old_token = first.lock_token
    assert queue.main.tick(9.9) is False
    assert queue.main.tick(10.0) is True
    again = queue.main.acquire(10.0, lock=True)
    assert again is first and again.delivery_count == 1 and again.lock_token != old_token
    with pytest.raises(LockLost):
        queue.main.settle(old_token, Outcome.COMPLETE, 10.1)  # type: ignore[arg-type]


def test_renew_extends_the_lock() -> None:
    queue = Queue("q", props())
    sent(queue, message(), 0)
    held = queue.main.acquire(0, lock=True)
    assert held is not None and held.lock_token is not None
    assert queue.main.renew(held.lock_token, 8) == 18
    queue.main.tick(12)
    assert queue.main.acquire(12, lock=True) is None
    queue.main.settle(held.lock_token, Outcome.COMPLETE, 17)
    assert queue.main.messages == {}


def test_abandon_past_max_delivery_count_dead_letters() -> None:
    queue = Queue("q", props(MaxDeliveryCount=2))
    sent(queue, message(), 0)
    for expected in (1, 2):
        held = queue.main.acquire(0, lock=True)
        assert held is not None and held.lock_token is not None
        queue.main.settle(held.lock_token, Outcome.ABANDON, 0)
        assert held.delivery_count == expected
    assert queue.main.acquire(0, lock=True) is None
    dead = queue.dead_letter.acquire(0, lock=True)
    assert dead is not None
    assert dead.dead_letter_properties["DeadLetterReason"] == MAX_DELIVERY_COUNT_EXCEEDED


def test_explicit_dead_letter_keeps_reason_and_description() -> None:
    queue = Queue("q", props())
    sent(queue, message("m"), 0)
    held = queue.main.acquire(0, lock=True)
    assert held is not None and held.lock_token is not None
    queue.main.settle(held.lock_token, Outcome.DEAD_LETTER, 0, "bad", "really bad")
    dead = queue.dead_letter.acquire(0, lock=False)
    assert dead is not None and dead.sections.message_id == "m"
    assert dead.dead_letter_properties == {
        "DeadLetterReason": "bad",
        "DeadLetterErrorDescription": "really bad",
    }


@pytest.mark.parametrize("dead_letter_on_expiry", [True, False])
def test_ttl_expiry(dead_letter_on_expiry: bool) -> None:
    queue = Queue("q", props(DeadLetteringOnMessageExpiration=dead_letter_on_expiry))
    sent(queue, message(ttl_ms=1000), 0)
    queue.main.tick(1.0)
    assert queue.main.acquire(1.0, lock=True) is None
    assert queue.dead_letter.has_available is dead_letter_on_expiry
    if dead_letter_on_expiry:
        dead = queue.dead_letter.acquire(1.0, lock=False)
        assert dead is not None and dead.dead_letter_properties["DeadLetterReason"] == TTL_EXPIRED


def test_queue_default_ttl_caps_a_longer_message_ttl() -> None:
    queue = Queue("q", props(DefaultMessageTimeToLive="PT5S"))
    assert sent(queue, message(ttl_ms=60_000), 0).expires_at == 5


def test_scheduled_messages_wait_and_can_be_cancelled() -> None:
    queue = Queue("q", props())
    kept = sent(queue, message(scheduled_ms=5000), 0)
    cancelled = sent(queue, message(scheduled_ms=5000), 0)
    assert queue.main.acquire(1, lock=True) is None
    assert queue.main.cancel_scheduled([cancelled.sequence_number, 999]) == [999]
    queue.main.tick(5)
    got = queue.main.acquire(5, lock=True)
    assert got is kept and got.enqueued_time == 5
    assert queue.main.acquire(5, lock=True) is None


def test_duplicate_detection_within_the_window_only() -> None:
    queue = Queue("q", props(RequiresDuplicateDetection=True, DuplicateDetectionHistoryTimeWindow="PT10S"))
    original = sent(queue, message("same"), 0)
    assert queue.main.send(message("same"), 5) == original.sequence_number
    queue.main.tick(10)
    assert isinstance(queue.main.send(message("same"), 10), BrokerMessage)


def test_duplicates_are_kept_without_duplicate_detection() -> None:
    queue = Queue("q", props())
    sent(queue, message("same"), 0)
    sent(queue, message("same"), 0)
    assert len(queue.main.messages) == 2


def test_peek_returns_every_state_in_sequence_order_without_locking() -> None:
    queue = Queue("q", props())
    for _ in range(3):
        sent(queue, message(), 0)
    queue.main.acquire(0, lock=True)
    assert [m.sequence_number for m in queue.main.peek(2, 5)] == [2, 3]
    assert [m.sequence_number for m in queue.main.peek(1, 2)] == [1, 2]
    assert queue.main.acquire(0, lock=True) is not None


def test_deferred_messages_are_taken_by_sequence_number() -> None:
    queue = Queue("q", props())
    original = sent(queue, message(), 0)
    held = queue.main.acquire(0, lock=True)
    assert held is not None and held.lock_token is not None
    queue.main.settle(held.lock_token, Outcome.DEFER, 0)
    assert queue.main.acquire(0, lock=True) is None
    taken = queue.main.take_deferred([original.sequence_number], 0, lock=True)
    assert taken == [original] and original.lock_token is not None


def test_abandoned_message_returns_before_later_ones() -> None:
    queue = Queue("q", props())
    sent(queue, message("first"), 0)
    sent(queue, message("second"), 0)
    held = queue.main.acquire(0, lock=True)
    assert held is not None and held.lock_token is not None
    queue.main.settle(held.lock_token, Outcome.ABANDON, 0)
    again = queue.main.acquire(0, lock=True)
    assert again is not None and again.sections.message_id == "first"


def test_lock_duration_comes_from_the_config() -> None:
    assert props(LockDuration="PT2S").lock_duration == timedelta(seconds=2)
