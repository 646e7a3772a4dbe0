"""Competing consumers: two receivers on separate connections share one queue without overlap."""

from __future__ import annotations

import threading

from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage

from tests.servicebus_emulator.conftest import RunningEmulator
from tests.servicebus_emulator.helpers import client_for, drain, peek_all, receive_exactly

COUNT = 20
EXPECTED = {f"m{i:02d}" for i in range(COUNT)}


def send_numbered(running: RunningEmulator) -> None:
    """Send messages m00..m19 to queue ``q``."""
    with client_for(running) as client, client.get_queue_sender("q") as sender:
        sender.send_messages(
            [ServiceBusMessage(f"body {i}".encode(), message_id=f"m{i:02d}") for i in range(COUNT)]
        )


def ids(messages: list[ServiceBusReceivedMessage]) -> list[str]:
    """Message ids, which every test message has."""
    return [str(m.message_id) for m in messages]


def test_competing_receivers_in_threads(emulator: RunningEmulator) -> None:
    send_numbered(emulator)
    started = threading.Barrier(2, timeout=30)
    first = threading.Barrier(2, timeout=30)
    finished = threading.Barrier(2, timeout=60)
    results: dict[str, list[ServiceBusReceivedMessage]] = {}
    errors: list[BaseException] = []

    def consume(name: str) -> None:
        try:
            with client_for(emulator) as client, client.get_queue_receiver("q") as receiver:
                started.wait()
                # Each takes its first batch before either goes on: a link attaches on its first receive,
                # and on a loaded machine one receiver could otherwise take all twenty before the other's
                # link is up. The locks held, the second competes for what the first left.
                received = receiver.receive_messages(max_message_count=3, max_wait_time=10)
                first.wait()
                while True:
                    # Small batches, locks held: the other receiver competes for what is left.
                    batch = receiver.receive_messages(max_message_count=3, max_wait_time=0.5)
                    if not batch:
                        break
                    received.extend(batch)
                results[name] = received
                finished.wait()  # nobody completes before both have stopped receiving
                for message in received:
                    receiver.complete_message(message)
        except BaseException as exc:
            errors.append(exc)
            started.abort()
            finished.abort()

    threads = [threading.Thread(target=consume, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    assert not errors, errors
    a, b = ids(results["a"]), ids(results["b"])

    assert a and b, "both receivers should get some of the messages"
    assert len(a) == len(set(a)) and len(b) == len(set(b)), "a receiver got a message twice"
    assert not set(a) & set(b), f"both receivers got {sorted(set(a) & set(b))}"
    assert set(a) | set(b) == EXPECTED
    assert all(m.delivery_count == 0 for m in results["a"] + results["b"])
    with client_for(emulator) as client, client.get_queue_receiver("q") as receiver:
        assert peek_all(receiver) == []


def test_competing_receivers_sequential_with_prefetch(emulator: RunningEmulator) -> None:
    send_numbered(emulator)
    with (
        client_for(emulator) as client_a,
        client_for(emulator) as client_b,
        client_a.get_queue_receiver("q", prefetch_count=5) as receiver_a,
        client_b.get_queue_receiver("q", prefetch_count=5) as receiver_b,
    ):
        first_a = receive_exactly(receiver_a, 5)
        # Receiver A holds five locks (and may have more prefetched): B competes for the rest.
        got_b = drain(receiver_b, idle=0.5, complete=False)
        got_a = first_a + drain(receiver_a, idle=0.5, complete=False)
        a, b = ids(got_a), ids(got_b)
        for message in got_a:
            receiver_a.complete_message(message)
        for message in got_b:
            receiver_b.complete_message(message)
        remaining = peek_all(receiver_a)

    assert a and b, "both receivers should get some of the messages"
    assert len(a) == len(set(a)) and len(b) == len(set(b)), "a receiver got a message twice"
    assert not set(a) & set(b), f"both receivers got {sorted(set(a) & set(b))}"
    assert set(a) | set(b) == EXPECTED
    assert remaining == []
