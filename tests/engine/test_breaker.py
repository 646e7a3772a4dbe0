"""The shared circuit breaker: its pure decisions with a manual clock, and two processes' breakers on one
process-local store (the Table Storage adapter is tested on Azurite in tests/adapters)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from engine.breaker import (
    Admission,
    BreakerRecord,
    BreakerState,
    BreakerStore,
    CircuitBreaker,
    CircuitOpenError,
    MemoryBreakerStore,
    Permit,
    admission,
    hold_until,
    opened,
    probe_claimed,
    probe_ended,
)
from engine.clock import ManualClock

pytestmark = pytest.mark.anyio

FAIL_MAX, RESET, PROBE = 3, 10.0, 4.0


# ---- pure decisions ---------------------------------------------------------------------------------
def test_failures_open_the_record_only_at_fail_max_and_only_when_closed() -> None:
    clock = ManualClock()
    now = clock.now()
    closed = BreakerRecord("svc")
    assert opened(closed, now, FAIL_MAX - 1, FAIL_MAX, RESET) is None
    record = opened(closed, now, FAIL_MAX, FAIL_MAX, RESET)
    assert record is not None and record.state is BreakerState.OPEN
    assert record.open_until == now + timedelta(seconds=RESET) and record.opened_at == now
    assert record.consecutive_failures == FAIL_MAX
    assert opened(record, now, FAIL_MAX + 5, FAIL_MAX, RESET) is None  # already open: adopt it


def test_open_rejects_until_open_until_then_one_probe_at_a_time() -> None:
    clock = ManualClock()
    record = opened(BreakerRecord("svc"), clock.now(), FAIL_MAX, FAIL_MAX, RESET)
    assert record is not None
    assert admission(record, clock.advance(RESET - 0.1), "a") is Admission.REJECT
    assert probe_claimed(record, clock.now(), "a", PROBE) is None
    assert admission(record, clock.advance(0.1), "a") is Admission.PROBE
    probing = probe_claimed(record, clock.now(), "a", PROBE)
    assert probing is not None and probing.state is BreakerState.HALF_OPEN
    assert probing.probe_holder == "a" and probing.probe_by == clock.now() + timedelta(seconds=PROBE)
    assert admission(probing, clock.now(), "b") is Admission.REJECT
    assert probe_claimed(probing, clock.now(), "b", PROBE) is None
    # A prober that crashed frees the probe at its deadline.
    assert probe_claimed(probing, clock.advance(PROBE), "b", PROBE) is not None


def test_a_probe_closes_or_reopens_and_only_its_holder_decides() -> None:
    clock = ManualClock()
    record = opened(BreakerRecord("svc", etag="x"), clock.now(), FAIL_MAX, FAIL_MAX, RESET)
    assert record is not None
    probing = probe_claimed(record, clock.advance(RESET), "a", PROBE)
    assert probing is not None
    assert probe_ended(probing, clock.now(), "b", True, RESET) is None
    closed = probe_ended(probing, clock.now(), "a", True, RESET)
    assert closed is not None and closed.state is BreakerState.CLOSED and closed.etag == "x"
    assert closed.open_until is None and closed.consecutive_failures == 0 and closed.probe_holder is None
    reopened = probe_ended(probing, clock.advance(1), "a", False, RESET)
    assert reopened is not None and reopened.state is BreakerState.OPEN
    assert reopened.open_until == clock.now() + timedelta(seconds=RESET) and reopened.probe_holder is None
    assert reopened.opened_at == record.opened_at  # still the same outage


def test_hold_until_is_the_open_interval_or_the_probe_under_way() -> None:
    clock = ManualClock()
    assert hold_until(None, clock.now()) is None
    assert hold_until(BreakerRecord("svc"), clock.now()) is None
    record = opened(BreakerRecord("svc"), clock.now(), FAIL_MAX, FAIL_MAX, RESET)
    assert record is not None
    assert hold_until(record, clock.now()) == record.open_until
    assert hold_until(record, clock.advance(RESET)) is None  # a trial call is due: send work again
    probing = probe_claimed(record, clock.now(), "a", PROBE)
    assert probing is not None and hold_until(probing, clock.now()) == probing.probe_by
    assert hold_until(probing, clock.advance(PROBE)) is None


# ---- two processes on one store ------------------------------------------------------------------------
def breaker(store: BreakerStore, clock: ManualClock, instance: str, service: str = "svc") -> CircuitBreaker:
    """One process's breaker of ``service`` on ``store``."""
    return CircuitBreaker(
        service,
        store,
        clock,
        fail_max=FAIL_MAX,
        reset_seconds=RESET,
        probe_seconds=PROBE,
        instance_id=instance,
    )


async def fail(b: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        await b.on_failure(await b.before_call())


async def settle() -> None:
    """Let background refreshes finish (the store answers at once)."""
    for _ in range(3):
        await asyncio.sleep(0)


async def test_one_instance_opens_and_the_other_sees_it_after_its_refresh() -> None:
    clock, store = ManualClock(), MemoryBreakerStore()
    a, b = breaker(store, clock, "a"), breaker(store, clock, "b")
    await b.on_success(await b.before_call())  # b's cache is warm: closed
    await fail(a, FAIL_MAX)
    assert a.state is BreakerState.OPEN
    with pytest.raises(CircuitOpenError):
        await a.before_call()
    await b.before_call()  # b's view is younger than the refresh interval: it still calls
    clock.advance(1)
    await b.before_call()  # stale: this starts a refresh and goes on with the cached view
    await settle()
    with pytest.raises(CircuitOpenError):
        await b.before_call()
    assert b.state is BreakerState.OPEN


async def test_a_closed_healthy_service_costs_no_table_operation_per_call_once_warm() -> None:
    clock, store = ManualClock(), MemoryBreakerStore()
    b = breaker(store, clock, "a")
    await b.on_success(await b.before_call())  # the first call reads the record once
    warm = store.operations
    for _ in range(200):
        await b.on_success(await b.before_call())
        await asyncio.sleep(0)  # give any background re-read its turn, so it would be counted
    await b.on_failure(await b.before_call())  # a single failure is only counted in memory
    await b.on_success(await b.before_call())
    assert store.operations == warm == 1
    clock.advance(1)
    for _ in range(50):
        await b.on_success(await b.before_call())
    await settle()
    assert store.operations == warm + 1  # one re-read per interval, however many calls


async def test_only_one_of_two_instances_takes_the_probe_and_its_success_closes_for_both() -> None:
    clock, store = ManualClock(), MemoryBreakerStore()
    a, b = breaker(store, clock, "a"), breaker(store, clock, "b")
    await fail(a, FAIL_MAX)
    await b.refresh()
    clock.advance(RESET)
    results = await asyncio.gather(a.before_call(), b.before_call(), return_exceptions=True)
    permits = [r for r in results if isinstance(r, Permit)]
    assert len(permits) == 1 and permits[0].probe
    assert sum(isinstance(r, CircuitOpenError) for r in results) == 1
    winner, loser = (a, b) if isinstance(results[0], Permit) else (b, a)
    with pytest.raises(CircuitOpenError):
        await winner.before_call()  # the probe's own process makes no second trial call either
    await winner.on_success(permits[0])
    assert winner.state is BreakerState.CLOSED
    stored = await store.load("svc")
    assert stored is not None and stored.state is BreakerState.CLOSED
    clock.advance(1)
    with pytest.raises(CircuitOpenError):
        await loser.before_call()  # its cached view still has the other's probe; this starts a re-read
    await settle()
    assert (await loser.before_call()) == Permit()


async def test_a_failed_probe_reopens_for_everyone() -> None:
    clock, store = ManualClock(), MemoryBreakerStore()
    a = breaker(store, clock, "a")
    await fail(a, FAIL_MAX)
    clock.advance(RESET)
    permit = await a.before_call()
    assert permit.probe
    await a.on_failure(permit)
    stored = await store.load("svc")
    assert stored is not None and stored.state is BreakerState.OPEN
    assert stored.open_until == clock.now() + timedelta(seconds=RESET)
    with pytest.raises(CircuitOpenError):
        await a.before_call()


async def test_a_crashed_prober_frees_the_probe_at_its_deadline() -> None:
    clock, store = ManualClock(), MemoryBreakerStore()
    a, b = breaker(store, clock, "a"), breaker(store, clock, "b")
    await fail(a, FAIL_MAX)
    clock.advance(RESET)
    assert (await a.before_call()).probe  # a's process dies during its trial call
    await b.refresh()
    with pytest.raises(CircuitOpenError):
        await b.before_call()
    clock.advance(PROBE)
    await b.refresh()
    assert (await b.before_call()).probe


async def test_a_stale_etag_loses_and_the_writer_adopts_what_won() -> None:
    clock, store = ManualClock(), MemoryBreakerStore()
    a, b = breaker(store, clock, "a"), breaker(store, clock, "b")
    await a.refresh()
    await b.refresh()
    await fail(a, FAIL_MAX)
    before = store.operations
    await fail(b, FAIL_MAX)  # b's view is stale: its write loses, it reloads and adopts a's record
    assert store.operations == before + 2  # the refused save and the reload
    stored = await store.load("svc")
    assert stored is not None and b.view == stored and b.state is BreakerState.OPEN


async def test_rejected_requests_and_abandoned_calls_do_not_count() -> None:
    clock, store = ManualClock(), MemoryBreakerStore()
    a = breaker(store, clock, "a")
    for _ in range(FAIL_MAX * 2):
        await a.on_neutral(await a.before_call())
        a.on_abandoned(await a.before_call())
    assert a.state is BreakerState.CLOSED and (await store.load("svc")) is None


async def test_an_abandoned_probe_is_free_again_in_its_process_and_a_neutral_probe_closes() -> None:
    clock, store = ManualClock(), MemoryBreakerStore()
    a = breaker(store, clock, "a")
    await fail(a, FAIL_MAX)
    clock.advance(RESET)
    a.on_abandoned(await a.before_call())  # cancelled: told nothing
    permit = await a.before_call()  # the same instance takes it again at once
    assert permit.probe
    await a.on_neutral(permit)  # the service answered (it rejected the request): it is up
    assert a.state is BreakerState.CLOSED
