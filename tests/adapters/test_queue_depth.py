"""Queue depths by peeking, through the real azure-servicebus SDK against the bundled emulator."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient

from adapters.queue_depth import QueueDepth, ServiceBusQueueDepth
from adapters.servicebus import client_from_settings
from tests.servicebus_emulator.conftest import RunningEmulator, start_emulator, write_config
from tests.support import stop_process

pytestmark = pytest.mark.anyio
QUEUES = ("busy", "idle", "full")
# The broker stamps enqueued times in whole milliseconds.
STAMP = timedelta(milliseconds=1)


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    folder = tmp_path_factory.mktemp("queue-depth")
    running = start_emulator(
        write_config(folder / "config.json", {queue: {} for queue in QUEUES}), folder / "emulator.log"
    )
    yield running
    stop_process(running.process)


@pytest.fixture
async def client(emulator: RunningEmulator) -> AsyncIterator[ServiceBusClient]:
    client = client_from_settings({"ServiceBusConnection": emulator.connection_string})
    yield client
    await client.close()


async def send_one_at_a_time(
    client: ServiceBusClient, queue: str, n: int, scheduled: int = 0
) -> list[tuple[datetime, datetime]]:
    """Send ``n`` messages one by one (the time before and after each send), then schedule ``scheduled``
    messages an hour off."""
    times = []
    async with client.get_queue_sender(queue) as sender:
        for i in range(n):
            before = datetime.now(UTC)
            await sender.send_messages(ServiceBusMessage(f"m-{i}"))
            times.append((before, datetime.now(UTC)))
        for _ in range(scheduled):
            await sender.schedule_messages(ServiceBusMessage("later"), datetime.now(UTC) + timedelta(hours=1))
    return times


async def dead_letter_first(client: ServiceBusClient, queue: str, m: int) -> None:
    async with client.get_queue_receiver(queue, prefetch_count=0) as receiver:
        received = await receiver.receive_messages(max_message_count=m, max_wait_time=5)
        assert len(received) == m
        for message in received:
            await receiver.dead_letter_message(message, reason="Broken")


async def test_counts_the_active_and_dead_lettered_messages_and_dates_the_oldest_active_one(
    client: ServiceBusClient,
) -> None:
    n, m = 7, 3
    # A scheduled message is on the queue but not active: not counted, and not the oldest.
    sent = await send_one_at_a_time(client, "busy", n, scheduled=1)
    await dead_letter_first(client, "busy", m)
    port = ServiceBusQueueDepth(client, page=2)  # several pages per count

    # Bounded: up to the limit, then "at least" (the scheduled message counts towards the scan's bound).
    depth, capped, exact, short = await asyncio.gather(
        port.depth("busy", 100),
        port.depth("busy", n - m - 1),
        port.depth("busy", m),
        port.depth("busy", m - 1),
    )
    measured = datetime.now(UTC)
    assert (depth.queue, depth.active, depth.active_at_least) == ("busy", n - m, False)
    assert (depth.dead_letters, depth.dead_letters_at_least) == (m, False)
    # The oldest active message is the first one not dead-lettered: enqueued while it was being sent.
    first_left_before, first_left_after = sent[m]
    assert depth.oldest_enqueued_at is not None
    assert first_left_before - STAMP <= depth.oldest_enqueued_at <= first_left_after + STAMP
    age = (measured - depth.oldest_enqueued_at).total_seconds()
    assert age >= (measured - first_left_after).total_seconds() - STAMP.total_seconds()

    assert (capped.active, capped.active_at_least) == (n - m - 1, True)
    assert (capped.dead_letters, capped.dead_letters_at_least) == (m, False)
    assert (exact.dead_letters, exact.dead_letters_at_least) == (m, False)
    assert (short.dead_letters, short.dead_letters_at_least) == (m - 1, True)


async def test_a_queue_that_fails_or_takes_too_long_leaves_the_others_measured(
    emulator: RunningEmulator, client: ServiceBusClient, caplog: pytest.LogCaptureFixture
) -> None:
    await send_one_at_a_time(client, "full", 2)
    caplog.set_level(logging.WARNING, logger="adapters.queue_depth")
    idle = QueueDepth(
        queue="idle",
        active=0,
        active_at_least=False,
        oldest_enqueued_at=None,
        dead_letters=0,
        dead_letters_at_least=False,
    )
    # The emulator refuses an unknown queue's link with an error the SDK tries again for 15 s or so: without
    # retries it fails at once; with them it outlasts the timeout.
    async with ServiceBusClient.from_connection_string(emulator.connection_string, retry_total=0) as once:
        started = time.monotonic()
        failed, slow = await asyncio.gather(
            ServiceBusQueueDepth(once).depths(["full", "no-such-queue", "idle"], 10),
            ServiceBusQueueDepth(client, timeout_seconds=3).depths(["no-such-queue", "idle"], 10),
        )
        assert time.monotonic() - started < 10
    assert [(d.queue, d.active, d.dead_letters) for d in failed] == [("full", 2, 0), ("idle", 0, 0)]
    assert failed[1] == idle and slow == [idle]
    assert "could not measure queue no-such-queue: ServiceBus" in caplog.text
    assert "could not measure queue no-such-queue: TimeoutError" in caplog.text
