"""The dead-letter port through the real azure-servicebus SDK against the bundled emulator."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue

from adapters import deadletters
from adapters.deadletters import ServiceBusDeadLetters
from adapters.servicebus import client_from_settings
from engine.deadletters import DeadLetterNotFound, DeadLetterUnreachable
from tests.servicebus_emulator.conftest import RunningEmulator, start_emulator, write_config
from tests.support import stop_process

pytestmark = pytest.mark.anyio
QUEUE = "q"


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[RunningEmulator]:
    config = write_config(tmp_path / "config.json", {QUEUE: {"RequiresDuplicateDetection": True}})
    running = start_emulator(config, tmp_path / "emulator.log")
    yield running
    stop_process(running.process)


@pytest.fixture
async def port(emulator: RunningEmulator) -> AsyncIterator[ServiceBusDeadLetters]:
    client = client_from_settings({"ServiceBusConnection": emulator.connection_string})
    yield ServiceBusDeadLetters(client)
    await client.close()


def dead_letter(emulator: RunningEmulator, bodies: list[dict[str, object]]) -> list[int]:
    """Send the bodies and dead-letter each by hand; their sequence numbers in the dead-letter queue."""
    with ServiceBusClient.from_connection_string(emulator.connection_string) as client:
        with client.get_queue_sender(QUEUE) as sender:
            for n, body in enumerate(bodies):
                sender.send_messages(
                    ServiceBusMessage(json.dumps(body), message_id=f"m-{n}", application_properties={"p": n})
                )
        with client.get_queue_receiver(QUEUE) as receiver:
            for message in receiver.receive_messages(max_message_count=len(bodies), max_wait_time=5):
                receiver.dead_letter_message(message, reason="Broken", error_description="cannot parse")
        with client.get_queue_receiver(QUEUE, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
            return [m.sequence_number or 0 for m in dlq.peek_messages(max_message_count=100)]


def active(emulator: RunningEmulator) -> list[tuple[str | None, str, dict[object, object]]]:
    with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_receiver(QUEUE) as receiver,
    ):
        return [
            (m.message_id, str(m), dict(m.application_properties or {}))
            for m in receiver.peek_messages(max_message_count=100)
        ]


async def test_peek_describes_dead_letters_a_page_at_a_time(
    emulator: RunningEmulator, port: ServiceBusDeadLetters
) -> None:
    seqs = dead_letter(emulator, [{"orderId": "o-1"}, {"x": 1}, {"orderId": "o-3"}])
    first = await port.peek(QUEUE, 0, 2)
    assert [m.sequence_number for m in first.items] == seqs[:2]
    assert first.next_sequence_number == seqs[2]
    m = first.items[0]
    assert (m.message_id, m.reason, m.description, m.order_id) == ("m-0", "Broken", "cannot parse", "o-1")
    assert m.enqueued_at is not None and m.delivery_count is not None
    assert first.items[1].order_id is None
    rest = await port.peek(QUEUE, seqs[2], 2)
    assert [m.sequence_number for m in rest.items] == seqs[2:] and rest.next_sequence_number is None
    assert (await port.count(QUEUE, 10)).model_dump() == {"queue": QUEUE, "count": 3, "at_least": False}
    assert (await port.count(QUEUE, 2)).model_dump() == {"queue": QUEUE, "count": 2, "at_least": True}


async def test_replay_sends_a_copy_then_completes_and_purge_drops(
    emulator: RunningEmulator, port: ServiceBusDeadLetters
) -> None:
    seqs = dead_letter(emulator, [{"orderId": "o-1"}, {"orderId": "o-2"}, {"orderId": "o-3"}])
    replayed = await port.replay(QUEUE, seqs[1])  # behind another: the scan passes it and lets it go
    assert replayed.message_id == "m-1"
    [(message_id, body, properties)] = active(emulator)
    assert message_id == f"m-1:replay:{seqs[1]}" and json.loads(body) == {"orderId": "o-2"}
    assert properties == {b"p": 1}  # the broker's dead-letter reason is not copied
    await port.purge(QUEUE, seqs[0])
    assert [m.sequence_number for m in (await port.peek(QUEUE, 0, 10)).items] == [seqs[2]]
    assert len(active(emulator)) == 1
    with pytest.raises(DeadLetterNotFound):
        await port.purge(QUEUE, seqs[0])


async def test_a_message_beyond_the_scan_bound_is_unreachable_and_nothing_changes(
    emulator: RunningEmulator, port: ServiceBusDeadLetters, monkeypatch: pytest.MonkeyPatch
) -> None:
    seqs = dead_letter(emulator, [{"n": n} for n in range(4)])
    monkeypatch.setattr(deadletters, "SCAN_LIMIT", 2)
    with pytest.raises(DeadLetterUnreachable):
        await port.replay(QUEUE, seqs[3])
    assert [m.sequence_number for m in (await port.peek(QUEUE, 0, 10)).items] == seqs
    assert active(emulator) == []
    await port.replay(QUEUE, seqs[1])  # within the bound, and the held ones were released
    assert [m.sequence_number for m in (await port.peek(QUEUE, 0, 10)).items] == [seqs[0], *seqs[2:]]
