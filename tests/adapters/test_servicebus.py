"""The Service Bus sender through the real azure-servicebus SDK against the bundled emulator."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient
from pydantic import BaseModel

from adapters.servicebus import ServiceBusSender, client_from_settings
from engine.messages import CommandKind, SchedulerCommand
from tests.servicebus_emulator.conftest import RunningEmulator, start_emulator, write_config
from tests.support import stop_process


class Blob(BaseModel):
    """A body of any size."""

    data: str


COMMAND = SchedulerCommand(order_id="o-1", kind=CommandKind.START, reason="test")


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[RunningEmulator]:
    running = start_emulator(write_config(tmp_path / "config.json", {"q": {}}), tmp_path / "emulator.log")
    yield running
    stop_process(running.process)


@pytest.fixture
async def sender(emulator: RunningEmulator) -> AsyncIterator[ServiceBusSender]:
    sender = ServiceBusSender(client_from_settings({"ServiceBusConnection": emulator.connection_string}))
    yield sender
    await sender.close()


@pytest.mark.anyio
async def test_a_message_carries_its_json_body_ids_and_time_to_live(
    emulator: RunningEmulator, sender: ServiceBusSender
) -> None:
    await sender.send(
        "q", COMMAND, message_id="m-1", correlation_id="o-1", reply_to="replies", time_to_live_seconds=60
    )
    with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_receiver("q", max_wait_time=10) as receiver,
    ):
        (message,) = receiver.receive_messages(max_message_count=1, max_wait_time=10)
        assert json.loads(str(message)) == {"orderId": "o-1", "kind": "start", "reason": "test"}
        assert (message.message_id, message.correlation_id, message.reply_to) == ("m-1", "o-1", "replies")
        assert message.content_type == "application/json" and message.subject == "SchedulerCommand"
        assert message.time_to_live == timedelta(seconds=60)
        receiver.complete_message(message)


@pytest.mark.anyio
async def test_a_scheduled_message_arrives_at_its_time(
    emulator: RunningEmulator, sender: ServiceBusSender
) -> None:
    at = datetime.now(UTC) + timedelta(seconds=2)
    await sender.send("q", COMMAND, message_id="m-2", correlation_id="o-1", scheduled_at=at)
    with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_receiver("q", max_wait_time=10) as receiver,
    ):
        received = []
        deadline = datetime.now(UTC) + timedelta(seconds=15)
        while not received and datetime.now(UTC) < deadline:
            received = receiver.receive_messages(max_message_count=1, max_wait_time=5)
        (message,) = received
        assert message.message_id == "m-2" and datetime.now(UTC) >= at - timedelta(milliseconds=200)
        receiver.complete_message(message)


def test_a_client_needs_a_connection_string_or_a_namespace() -> None:
    with pytest.raises(RuntimeError, match="ServiceBusConnection__fullyQualifiedNamespace"):
        client_from_settings({})


def _drain(emulator: RunningEmulator, queue: str, expected: int) -> list[str]:
    """Receive and complete ``expected`` messages (or as many as come within the waits); their ids."""
    ids: list[str] = []
    with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_receiver(queue, max_wait_time=10) as receiver,
    ):
        while len(ids) < expected:
            batch = receiver.receive_messages(max_message_count=expected - len(ids), max_wait_time=5)
            if not batch:
                break
            for message in batch:
                ids.append(str(message.message_id))
                receiver.complete_message(message)
    return ids


@pytest.mark.anyio
async def test_concurrent_sends_to_a_queue_go_out_in_fewer_requests(
    emulator: RunningEmulator, sender: ServiceBusSender
) -> None:
    # Count the requests the SDK sender makes (a spy around the real sender, which still sends).
    await sender.send("q", COMMAND, message_id="warm-up", correlation_id="o-1")
    sdk_sender = sender._queue("q").sender
    real_send = sdk_sender.send_messages
    requests: list[int] = []

    async def counting(messages: Any, **kwargs: Any) -> None:
        requests.append(1)
        await real_send(messages, **kwargs)

    sdk_sender.send_messages = counting
    ids = [f"c-{n}" for n in range(30)]
    await asyncio.gather(*(sender.send("q", COMMAND, message_id=i, correlation_id="o-1") for i in ids))

    assert 1 <= len(requests) < len(ids)
    assert sender.counts["q"]["send"] == len(ids) + 1
    assert sorted(_drain(emulator, "q", len(ids) + 1)) == sorted([*ids, "warm-up"])


@pytest.mark.anyio
async def test_a_message_too_big_fails_its_own_send_and_the_others_go_out(
    emulator: RunningEmulator, sender: ServiceBusSender
) -> None:
    await sender.send("q", COMMAND, message_id="warm-up", correlation_id="o-1")
    big = Blob(data="x" * 300_000)  # over the 256 KiB a message (or a batch) may carry
    small = [f"s-{n}" for n in range(5)]
    results = await asyncio.gather(
        *(sender.send("q", COMMAND, message_id=i, correlation_id="o-1") for i in small[:2]),
        sender.send("q", big, message_id="big", correlation_id="o-1"),
        *(sender.send("q", COMMAND, message_id=i, correlation_id="o-1") for i in small[2:]),
        return_exceptions=True,
    )

    assert [type(r).__name__ for r in results] == ["NoneType"] * 2 + ["MessageSizeExceededError"] + [
        "NoneType"
    ] * 3
    assert sorted(_drain(emulator, "q", len(small) + 1)) == sorted([*small, "warm-up"])
    assert sender.counts["q"]["send"] == len(small) + 1


class _OpeningSender:
    """An SDK sender stand-in whose open waits until every queue's open has started."""

    def __init__(self, queue: str, started: list[str], all_started: asyncio.Event, expected: int) -> None:
        self.queue, self.started, self.all_started, self.expected = queue, started, all_started, expected

    async def close(self) -> None:
        self.closed = True

    async def __aenter__(self) -> _OpeningSender:
        self.started.append(self.queue)
        if len(self.started) == self.expected:
            self.all_started.set()
        await asyncio.wait_for(self.all_started.wait(), timeout=5)
        if self.queue == "broken":
            raise ConnectionError("refused")
        return self


@pytest.mark.anyio
async def test_open_opens_every_queue_at_once_and_leaves_failures_to_the_first_send() -> None:
    started: list[str] = []
    all_started = asyncio.Event()

    class Client:
        def get_queue_sender(self, queue: str) -> _OpeningSender:
            return _OpeningSender(queue, started, all_started, expected=3)

    sender = ServiceBusSender(Client())  # type: ignore[arg-type]
    broken = sender._queue("broken").sender
    # One after the other, the first open would wait for ever for the others (wait_for raises).
    await sender.open(["a", "b", "broken", "a"])
    assert sorted(started) == ["a", "b", "broken"]
    assert broken.closed and sender._queue("broken").sender is not broken  # a fresh one for the send


@pytest.mark.anyio
async def test_senders_opened_ahead_send_as_before(
    emulator: RunningEmulator, sender: ServiceBusSender
) -> None:
    await sender.open(["q"])
    await sender.send("q", COMMAND, message_id="after-open", correlation_id="o-1")
    assert _drain(emulator, "q", 1) == ["after-open"]
    assert sender.counts["q"] == {"send": 1}
