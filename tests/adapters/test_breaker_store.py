"""The shared circuit breakers on a real Azurite: two clients of one table stand for two instances."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from azure.data.tables.aio import TableServiceClient

from adapters.breaker_store import BREAKER, TableBreakerStore
from adapters.table_store import TableStateStore
from engine.breaker import BreakerRecord, BreakerState, CircuitOpenError, Permit, opened
from engine.clock import ManualClock
from engine.errors import BreakerConflict
from tests.engine.test_breaker import FAIL_MAX, PROBE, RESET, breaker, fail

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


Stores = tuple[TableBreakerStore, TableBreakerStore]


@pytest.fixture
async def stores(azurite_connection_string: str) -> AsyncIterator[Stores]:
    """Two instances' breaker stores on one fresh state table, each with its own client and counter."""
    name = "t" + uuid.uuid4().hex[:16]
    async with (
        TableServiceClient.from_connection_string(azurite_connection_string) as one,
        TableServiceClient.from_connection_string(azurite_connection_string) as two,
    ):
        state = await TableStateStore.from_service(one, name)  # creates the state table, as the app does
        yield TableBreakerStore(state.table), TableBreakerStore(two.get_table_client(name))
        await state.close()


async def test_records_round_trip_and_every_write_is_etag_guarded(
    stores: Stores,
) -> None:
    one, two = stores
    assert await one.load("alpha") is None and await one.load_all() == []
    record = opened(BreakerRecord("alpha"), NOW, FAIL_MAX, FAIL_MAX, RESET)
    assert record is not None
    saved = await one.save(record)
    assert saved.etag
    with pytest.raises(BreakerConflict):
        await two.save(record)  # no ETag: only the first insert wins
    loaded = await two.load("alpha")
    assert loaded == saved and loaded.open_until == NOW + timedelta(seconds=RESET)
    assert loaded.open_until.tzinfo is not None and loaded.probe_holder is None
    newer = await two.save(replace(loaded, consecutive_failures=9))
    with pytest.raises(BreakerConflict):
        await one.save(replace(saved, consecutive_failures=7))  # a stale ETag loses
    assert await one.load_all() == [newer]


async def test_one_instance_opens_and_the_other_sees_it_open_after_its_cache_refresh(
    stores: Stores,
) -> None:
    clock = ManualClock(NOW)
    a, b = breaker(stores[0], clock, "a", "alpha"), breaker(stores[1], clock, "b", "alpha")
    await b.on_success(await b.before_call())  # b's view: closed, fresh
    await fail(a, FAIL_MAX)
    assert a.state is BreakerState.OPEN
    await b.before_call()  # within the refresh interval b still trusts its view
    clock.advance(1)
    await b.before_call()  # stale: re-read in the background
    await asyncio.wait_for(b.refresh(), 10)  # (or wait for that one; the result is the same)
    with pytest.raises(CircuitOpenError):
        await b.before_call()
    stored = await stores[1].load("alpha")
    assert stored is not None and stored.state is BreakerState.OPEN
    assert stored.consecutive_failures == FAIL_MAX


async def test_only_one_of_two_concurrent_probe_claims_wins(
    stores: Stores,
) -> None:
    clock = ManualClock(NOW)
    a, b = breaker(stores[0], clock, "a", "alpha"), breaker(stores[1], clock, "b", "alpha")
    await fail(a, FAIL_MAX)
    await b.refresh()
    clock.advance(RESET)
    results = await asyncio.gather(a.before_call(), b.before_call(), return_exceptions=True)
    permits = [r for r in results if isinstance(r, Permit)]
    assert len(permits) == 1 and permits[0].probe, results
    assert sum(isinstance(r, CircuitOpenError) for r in results) == 1, results
    stored = await stores[0].load("alpha")
    winner = "a" if isinstance(results[0], Permit) else "b"
    assert stored is not None and stored.state is BreakerState.HALF_OPEN and stored.probe_holder == winner
    assert stored.probe_by == clock.now() + timedelta(seconds=PROBE)
    prober = a if winner == "a" else b
    await prober.on_success(permits[0])  # the service is back: closed for everyone
    stored = await stores[1].load("alpha")
    assert stored is not None and stored.state is BreakerState.CLOSED and stored.open_until is None


async def test_a_closed_healthy_service_costs_no_table_request_per_call_once_warm(
    stores: Stores,
) -> None:
    clock = ManualClock(NOW)
    store = stores[0]
    a = breaker(store, clock, "a", "alpha")
    await a.on_success(await a.before_call())  # cold: one read
    assert store.counter.requests.get(BREAKER) == 1
    for _ in range(200):
        await a.on_success(await a.before_call())
        await asyncio.sleep(0.001)  # calls spread over time: a background re-read would finish and count
    await a.on_failure(await a.before_call())  # below fail_max: counted in memory only
    assert store.counter.requests.get(BREAKER) == 1
