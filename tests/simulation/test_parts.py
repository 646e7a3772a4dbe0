"""The simulation's parts on their own: virtual time, the tables, the broker, the services."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from typing import Any

import pytest

from engine import queues
from engine.messages import SchedulerCommand
from simulation.bus import Bus, Message
from simulation.loop import VirtualLoop
from simulation.profile import draw
from simulation.tables import TableError, Tables
from simulation.world import Crash, Worker, World


def test_virtual_time_jumps_to_the_next_timer() -> None:
    loop = VirtualLoop()

    async def main() -> float:
        await asyncio.sleep(3600)
        try:
            async with asyncio.timeout(5):
                await asyncio.sleep(10)
        except TimeoutError:
            return loop.time()
        raise AssertionError("the timeout did not fire")

    try:
        assert loop.run_until_complete(main()) == 3605.0
    finally:
        loop.close()


def test_a_transaction_is_all_or_nothing_and_conditional_on_etags() -> None:
    table = Tables().table("t")
    first = table.one("p", ("create", "a|1", "one", None))
    assert first is not None
    with pytest.raises(TableError) as refused:
        table.transact("p", [("create", "a|2", "two", None), ("update", "a|1", "uno", "W/stale")])
    assert refused.value.status == 412
    assert table.get("p", "a|2") is None
    assert table.transact("p", [("create", "a|2", "two", None), ("update", "a|1", "uno", first)])[1] != first
    with pytest.raises(TableError):
        table.one("p", ("create", "a|1", "again", None))
    assert [key for key, _ in table.range("p", "a|", "a|2")] == ["a|1"]


def _bus(consume: Any, *, faults: bool = True) -> tuple[VirtualLoop, World, Bus]:
    loop = VirtualLoop()
    profile = replace(
        draw(0, ["x"]), crash_rate=0.0, store_error_rate=0.0, settle_loss_rate=0.0, lock_loss_rate=0.0
    )
    world = World(profile, random.Random(0), loop)
    world.faults = faults
    world.workers = [Worker(0, 0), Worker(1, 0)]
    world.on_restart = lambda worker: None
    bus = Bus(world, _Quiet(), consume, {queues.SCHEDULER_QUEUE})
    return loop, world, bus


class _Quiet:
    def sent(self, message: Message) -> None:
        pass

    def settled(self, message: Message) -> None:
        pass


def _command() -> SchedulerCommand:
    return SchedulerCommand(order_id="o1", kind="start")


def test_duplicate_detection_and_dead_lettering_after_the_delivery_count() -> None:
    deliveries: list[int] = []

    async def failing(worker: Worker, message: Message) -> None:
        deliveries.append(message.deliveries)
        raise RuntimeError("always")

    loop, _, bus = _bus(failing)
    first = bus.enqueue(queues.SCHEDULER_QUEUE, _command(), "m1", "o1")
    assert bus.enqueue(queues.SCHEDULER_QUEUE, _command(), "m1", "o1") is None
    loop.run_until_complete(asyncio.sleep(60))
    loop.close()
    assert first is not None
    limit = queues.queue_properties(queues.SCHEDULER_QUEUE).max_delivery_count
    assert deliveries == list(range(1, limit + 1))
    assert (first.state, first.reason) == ("dead-lettered", "MaxDeliveryCountExceeded")


def test_a_message_of_a_process_that_died_comes_back_when_its_lock_expires() -> None:
    seen: list[tuple[str, float]] = []

    async def dies_once(worker: Worker, message: Message) -> None:
        seen.append((worker.name, loop.time()))
        if len(seen) == 1:
            world.kill(worker)
            raise Crash("simulated")

    loop, world, bus = _bus(dies_once)
    message = bus.enqueue(queues.SCHEDULER_QUEUE, _command(), "m1", "o1")
    loop.run_until_complete(asyncio.sleep(120))
    loop.close()
    assert message is not None and message.state == "completed"
    assert len(seen) == 2
    assert seen[1][1] - seen[0][1] >= 50  # after the lock period, not at once
