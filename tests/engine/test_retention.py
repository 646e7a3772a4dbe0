"""Retention on the real engine over the in-memory store: the Supervisor moves finished orders to the
history, the clean-up purges them in bounded batches, and the idempotency window holds."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from engine import telemetry
from engine.errors import Conflict
from engine.ports import StateCounts
from engine.retention import Purged, Retention, RetentionPolicy, parse_retention
from engine.state import ProcessState
from tests.engine.test_state_machine import World

pytestmark = pytest.mark.anyio

RETENTION = RetentionPolicy(retention=timedelta(seconds=20), batch=2)


def finished_counts(counts: StateCounts) -> tuple[int, int]:
    return counts.counts[ProcessState.PROCESSED], counts.counts[ProcessState.COMPENSATED]


async def processed(world: World, order_id: str) -> None:
    """Submit an order and run it to Processed."""
    await world.submit(order_id)
    await world.kick()
    while world.store.state(order_id).state.process_state is ProcessState.PROCESSING:
        assert await world.reply(world.take_request())
    assert world.store.state(order_id).state.process_state is ProcessState.PROCESSED


async def test_the_supervisor_moves_a_finished_order_to_the_history_and_then_stops_watching_it() -> None:
    world = World()
    await processed(world, "o-1")
    world.clock.advance(11)  # the submission's watch entry comes due
    report = await world.supervisor.sweep()
    assert (report.archived, report.unwatched, report.expired) == (1, 1, 0)
    assert world.store.state("o-1").archived and "o-1" not in world.store.records
    assert (await world.tasks.get("o-1")).state.process_state is ProcessState.PROCESSED  # still readable
    assert (await world.supervisor.sweep()).archived == 0 and world.store.watched == {}


async def test_an_order_in_error_stays_live_and_is_never_purged() -> None:
    world = World()
    await world.submit("o-1")
    await world.kick()
    for _ in range(3):  # SUPERVISOR_MAX_FAILURES timeouts of the first step
        world.clock.advance(10)
        await world.supervisor.sweep()
        world.clock.advance(5)  # past the backoff
        await world.kick()
    assert world.store.state("o-1").state.process_state is ProcessState.ERROR
    world.clock.advance(3600)
    await world.supervisor.sweep()
    retention = Retention(world.store, world.clock, RETENTION)
    assert (await retention.run()).purged == 0
    assert not world.store.state("o-1").archived and "o-1" in world.store.records


async def test_the_clean_up_purges_in_batches_and_the_idempotency_window_refuses_then_frees_the_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World()
    for i in range(5):
        await processed(world, f"o-{i}")
    world.clock.advance(11)
    assert (await world.supervisor.sweep()).archived == 5
    retention = Retention(world.store, world.clock, RETENTION)
    assert (await retention.run()).purged == 0  # finished 11 s ago: kept
    assert finished_counts(await world.tasks.count_by_state(100)) == (5, 0)
    # Within the retention period the same submission gets the order back, another one a conflict.
    created, again = await world.tasks.submit("o-0", {"n": 1}, "hash-1")
    assert not created and again.state.process_state is ProcessState.PROCESSED
    with pytest.raises(Conflict) as conflict:
        await world.tasks.submit("o-0", {"n": 2}, "hash-2")
    assert not isinstance(conflict.value, Purged)
    world.clock.advance(10)  # 21 s after they finished
    with caplog.at_level(logging.INFO, logger="engine"):
        report = await retention.run()
    assert (report.purged, report.batches) == (5, 4)  # three batches of at most 2, one of tombstones
    assert f"event {telemetry.SUPERVISOR_SWEEP_COMPLETED}" not in caplog.text
    assert "event RetentionCompleted purged=5" in caplog.text
    assert finished_counts(await world.tasks.count_by_state(100)) == (0, 0)
    for body, digest in (({"n": 1}, "hash-1"), ({"n": 2}, "hash-2")):  # refused whatever the body
        with pytest.raises(Purged, match="retention period"):
            await world.tasks.submit("o-0", body, digest)
    assert "o-0" not in world.store.records and "o-0" not in world.store.history
    assert world.commands() == []
    world.clock.advance(21)  # the tombstones' time is up too
    assert (await retention.run()).tombstones_dropped == 5
    created, record = await world.tasks.submit("o-0", {"n": 2}, "hash-2")
    assert created and record.state.process_state is ProcessState.PENDING


async def test_a_run_that_found_nothing_rests_for_a_while() -> None:
    world = World()
    retention = Retention(world.store, world.clock, RETENTION)
    assert not (await retention.run()).idle
    operations = world.store.operations
    assert (await retention.run()).idle and world.store.operations == operations
    world.clock.advance(RETENTION.idle_period.total_seconds())
    assert not (await retention.run()).idle


@pytest.mark.parametrize(
    ("text", "seconds"), [("P30D", 30 * 86400), ("PT20S", 20), ("P1DT2H", 93600), ("P2W", 14 * 86400)]
)
def test_a_retention_is_an_iso_8601_duration(text: str, seconds: int) -> None:
    assert parse_retention(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["30", "P1M", "P1Y", "PT0S", "-P1D", ""])
def test_a_retention_that_is_not_a_fixed_positive_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_retention(text)
