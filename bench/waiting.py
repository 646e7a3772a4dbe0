"""What the Supervisor, operator reads and a submission cost as the number of orders waiting grows.

Run with ``make bench-waiting`` (or ``python bench/waiting.py --sizes 1000 10000 100000``; about two
minutes on a 2-core machine, most of it filling the tables to 100,000; ``--sizes 1000 10000`` takes about
twenty seconds). Built on ``bench/history.py`` (its engine over the Table Storage store with the API's own
handlers, its live orders, its clock and its figures' arithmetic): a throwaway Azurite, the engine in this
process, a sender that drops messages. It keeps the same live orders as that bench (Pending, Processing,
Error), then adds fulfilment orders that wait, as the Supervisor leaves them once it has parked them
(``WAIT_PARK_HORIZON_SECONDS``, here 600): written directly through the store's own mapping into the
history table (the task in one entity, its listing entry ``index|Waiting|<kind>|<time>|<id>|``, the
left-out step's audit entry for a timer, the shard's waiting tally) and the calendar (an entry at the
task's CompleteBy), nothing in the live or watch tables; half of them at the approval "fraud-review" (a
day's deadline) and half in the timer "cancellation-window", none due while the bench runs. It fills in
steps up to each size and at each size times, alternating one sample of each in turn:

- a Supervisor sweep that finds ten just-finished orders due (and reads the calendar's cursor);
- the listing of orders in Error and of orders in Processing (a page of 50);
- the listing of orders waiting for an approval (``processState=Waiting&waitingFor=approval``, 50);
- the counts by state (with the Waiting ones by what they wait for);
- one order's GET (an order in flight) and one parked order's GET;
- a submission;
- a reading of the calendar (done once per half horizon, not per sweep), nothing due.

It prints the median (and the 90th percentile) of each at each size, and each median at the largest size
over its median at the smallest against the target (at most 1.2), marking those that exceed it; then the
table entities each figure read (what Table Storage bills and times a query by: Azurite scans a whole
table per query whatever it returns).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import UpdateMode
from azure.data.tables.aio import TableServiceClient

from adapters.table_batch import submit_transaction
from adapters.table_store import CALENDAR, WAITING_TALLY, TableStateStore, shard_of
from devhost import azurite
from engine import transitions
from engine.state import ProcessState, StepState, TaskRecord, TaskState
from engine.supervisor import Supervisor
from engine.tasks import TaskService
from history import (
    DUE_PER_SWEEP,
    FULFILMENT,
    LIVE,
    ORDER,
    SETTINGS,
    SHARDS,
    TARGET_RATIO,
    Bench,
    declared_result,
    p90,
)
from orders.api import COUNT_LIMIT
from orders.models import body_hash, order_document, order_input
from servicebus_emulator.launcher import free_port

APPROVAL, TIMER = "approval", "timer"
# An order over 1,000 waits at the fraud review; the others are past the payment, in the cancellation window.
LARGE = next(e for e in FULFILMENT.examples() if order_input(FULFILMENT, e)["total"] > 1000)
FILL_CHUNK = 5_000  # waiting orders built and written at a time
FIGURES = (
    f"Supervisor sweep ({DUE_PER_SWEEP} finished orders due)",
    "list in Error (page of 50)",
    "list in Processing (page of 50)",
    "list Waiting for approval (page of 50)",
    "counts by state",
    "GET an order in flight",
    "GET a parked order",
    "submission",
    "a reading of the calendar (once per half horizon)",
)
HORIZON = 600.0  # WAIT_PARK_HORIZON_SECONDS: waits due more than 20 minutes off are parked


def waiting_record(order_id: str, kind: str, at: datetime) -> TaskRecord:
    """An order as the engine leaves it when it starts waiting at ``at``: submitted, claimed, and moved on
    by the steps before the wait (their services' declared results), all in memory."""
    body = order_document(order_id, order_input(FULFILMENT, LARGE if kind == APPROVAL else ORDER))
    record = TaskRecord(
        state=TaskState(
            order_id=order_id,
            workflow=FULFILMENT.name,
            workflow_version=FULFILMENT.version,
            created_at=at,
            updated_at=at,
        ),
        steps=[StepState(index=i, name=s.name) for i, s in enumerate(FULFILMENT.steps)],
        input=body,
        input_hash=body_hash(body),
    )
    ctx = transitions.Context(FULFILMENT, SETTINGS, at, "bench")
    transitions.new_record_state(record, ctx)
    transitions.claim(record, ctx)
    while record.state.process_state is not ProcessState.WAITING:
        step = FULFILMENT.steps[record.state.current_step]
        decision = transitions.step_succeeded(record, ctx, declared_result(step, f"{order_id}:{step.name}"))
        assert decision.changed, (order_id, step.name)
    assert record.state.waiting_for == kind, (order_id, record.state.waiting_for)
    return record


def parked_entities(
    store: TableStateStore, record: TaskRecord
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """What parking a Waiting task leaves, with the store's own mapping: the history table's entities of
    its shard (the task, its listing entry, copies of its audit entries) and its calendar entry."""
    audits = [store.codec.audit_entity(record.order_id, e, n) for n, e in enumerate(record.pending_audit())]
    parked, listing = store.parked_entities(record, audited=bool(audits))
    assert parked["Kind"] == "parked" and listing["RowKey"].startswith(
        f"index|Waiting|{record.state.waiting_for}|"
    )
    return [parked, listing, *audits], store.calendar_entity(record.state)


async def fill_waiting(
    store: TableStateStore, start: int, count: int, at: datetime, tallies: dict[str, dict[str, int]]
) -> int:
    """Write ``count`` parked orders (the ``start``-th on: even ones at the approval, odd ones in the
    timer) into the history table and the calendar, 100 entities per transaction, and each shard's waiting
    tally (``tallies``, kept up to date). Returns how many history-table entities that wrote."""
    history = store.history
    assert history is not None
    written = 0
    semaphore = asyncio.Semaphore(2)  # Azurite resets connections under more (as bench/history.py)

    async def write(batch: list[dict[str, Any]]) -> None:
        async with semaphore:
            await submit_transaction(history, [("upsert", e, {"mode": UpdateMode.REPLACE}) for e in batch])

    for first in range(start, start + count, FILL_CHUNK):
        rows: dict[str, list[dict[str, Any]]] = {}
        for n in range(first, min(first + FILL_CHUNK, start + count)):
            order_id = f"w-{uuid.uuid4().hex[:20]}"
            kind = APPROVAL if n % 2 == 0 else TIMER
            record = waiting_record(order_id, kind, at + timedelta(milliseconds=n))
            entities, entry = parked_entities(store, record)
            pk = shard_of(order_id, store.shards)
            rows.setdefault(pk, []).extend(entities)
            rows.setdefault(CALENDAR, []).append(entry)
            tallies.setdefault(pk, dict.fromkeys((APPROVAL, TIMER), 0))[kind] += 1
            written += len(entities)
        await asyncio.gather(
            *(write(batch[i : i + 100]) for batch in rows.values() for i in range(0, len(batch), 100))
        )
    await asyncio.gather(
        *(write([TableStateStore.tally_entity(pk, counts, WAITING_TALLY)]) for pk, counts in tallies.items())
    )
    return written


class WaitingBench(Bench):
    """bench/history.py's engine and live orders, with parked waiting orders beside them."""

    def __init__(self, store: TableStateStore) -> None:
        super().__init__(store)
        self.parts = replace(self.parts, settings=replace(SETTINGS, park_horizon_seconds=HORIZON))
        self.tasks = TaskService(self.parts)
        self.supervisor = Supervisor(self.parts)
        self.waiting: dict[str, int] = {APPROVAL: 0, TIMER: 0}
        self.parked: list[str] = []
        self.tallies: dict[str, dict[str, int]] = {}
        self.at_least: dict[int, bool] = {}

    async def measure(self, size: int, rounds: int) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
        """``rounds`` samples of each figure, one of each in turn: times, and table entities read."""
        times: dict[str, list[float]] = {name: [] for name in FIGURES}
        reads: dict[str, list[int]] = {name: [] for name in FIGURES}
        api = self.api
        approvals = self.waiting[APPROVAL]
        assert self.store.history is not None
        history = self.store.history

        async def sweep() -> None:
            report = await self.supervisor.sweep()
            assert report.archived == DUE_PER_SWEEP and report.expired == 0, report
            assert report.promoted == 0 and report.parked == 0, report

        async def listing(query: dict[str, str], expected: int) -> None:
            reply = await api.list_by_state({**query, "pageSize": "50"})
            assert reply.status == 200 and len(reply.body["items"]) == min(50, expected), reply.body

        async def counts() -> None:
            reply = await api.counts()
            assert reply.status == 200, reply.body
            self.at_least[size] = bool(reply.body["atLeast"])
            if not reply.body["atLeast"]:
                found = {c["waitingFor"]: c["count"] for c in reply.body["waiting"]}
                assert found.get(APPROVAL) == approvals and found.get(TIMER) == self.waiting[TIMER], found

        async def get(order_id: str) -> None:
            assert (await api.get(order_id)).status == 200

        async def submit() -> None:
            order_id = f"s-{uuid.uuid4().hex[:20]}"
            self.submitted.append(order_id)
            reply = await api.submit(json.dumps({**ORDER, "orderId": order_id}).encode(), "application/json")
            assert reply.status == 202, reply.body

        async def calendar() -> None:
            with contextlib.suppress(ResourceNotFoundError):
                await history.delete_entity(CALENDAR, "cursor")  # as when its time comes
            assert await self.store.promote(self.clock.at, HORIZON) == 0

        actions: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            (FIGURES[0], sweep),
            (FIGURES[1], lambda: listing({"processState": "Error"}, LIVE[ProcessState.ERROR])),
            (FIGURES[2], lambda: listing({"processState": "Processing"}, LIVE[ProcessState.PROCESSING])),
            (FIGURES[3], lambda: listing({"processState": "Waiting", "waitingFor": APPROVAL}, approvals)),
            (FIGURES[4], counts),
            (FIGURES[5], lambda: get(random.choice(self.in_flight))),
            (FIGURES[6], lambda: get(random.choice(self.parked))),
            (FIGURES[7], submit),
            (FIGURES[8], calendar),
        ]
        for _ in range(rounds):
            await self.just_finished(DUE_PER_SWEEP)  # untimed: what the timed sweep will find
            for name, action in actions:
                before = sum(self.store.counter.entities.values())
                started = time.perf_counter()
                await action()
                times[name].append(time.perf_counter() - started)
                reads[name].append(sum(self.store.counter.entities.values()) - before)
        await self.forget_submitted()
        return times, reads


Samples = dict[int, tuple[dict[str, list[float]], dict[str, list[int]]]]


async def run(connection: str, sizes: list[int], rounds: int, warmup: int) -> tuple[Samples, dict[int, bool]]:
    """The samples (times, entities read) at each size, and whether the counts said "at least" there."""
    async with TableServiceClient.from_connection_string(connection) as service:
        store = await TableStateStore.from_service(service, "wait" + uuid.uuid4().hex[:10], shards=SHARDS)
        try:
            bench = WaitingBench(store)
            await bench.live_orders()
            results: Samples = {}
            filled = entities = 0
            filling = 0.0
            for size in sizes:
                started = time.perf_counter()
                written = await fill_waiting(store, filled, size - filled, bench.clock.at, bench.tallies)
                filling += time.perf_counter() - started
                entities += written
                for n in range(filled, size):
                    bench.waiting[APPROVAL if n % 2 == 0 else TIMER] += 1
                filled = size
                bench.parked = await parked_ids(store, 200)
                print(
                    f"waiting orders parked to {size:,} ({entities:,} history-table entities, {size:,} "
                    f"calendar entries) in {time.perf_counter() - started:.0f} s",
                    flush=True,
                )
                await bench.measure(size, warmup)
                started = time.perf_counter()
                results[size] = await bench.measure(size, rounds)
                print(f"  sampled in {time.perf_counter() - started:.0f} s", flush=True)
            print(f"filling took {filling:.0f} s in all", flush=True)
            return results, bench.at_least
        finally:
            await store.close()


async def parked_ids(store: TableStateStore, count: int) -> list[str]:
    """Some parked orders' ids (from the listing of those waiting for an approval)."""
    page = await store.list_by_state(ProcessState.WAITING, count, None, APPROVAL)
    return [state.order_id for state in page.states]


def table(results: Samples, at_least: dict[int, bool]) -> str:
    sizes = sorted(results)
    first, last = sizes[0], sizes[-1]
    head = (
        "| figure | "
        + " | ".join(f"{s:,} waiting" for s in sizes)
        + f" | {last:,} / {first:,} (target <= {TARGET_RATIO}) |"
    )
    lines = [head, "|" + "---|" * (len(sizes) + 2)]
    over = []
    for name in FIGURES:
        times = {s: results[s][0][name] for s in sizes}
        cells = [
            f"{statistics.median(times[s]) * 1000:.1f} ms (p90 {p90(times[s]) * 1000:.1f})" for s in sizes
        ]
        ratio = statistics.median(times[last]) / statistics.median(times[first])
        mark = "meets" if ratio <= TARGET_RATIO else "**EXCEEDS**"
        if ratio > TARGET_RATIO:
            over.append(name)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {ratio:.2f}: {mark} |")
    capped = [f"{s:,}" for s in sizes if at_least.get(s)]
    if capped:
        lines.append(
            f'\nthe counts said "at least" at {", ".join(capped)} waiting: a shard holds more than '
            f"{COUNT_LIMIT:,} listing entries and its count stops there"
        )
    verdict = f"{len(over)} of {len(FIGURES)} exceed it: {', '.join(over)}" if over else "all meet it"
    lines.append(f"\ntarget: each ratio <= {TARGET_RATIO}; {verdict}")
    lines += [
        "",
        "table entities read (median per sample):",
        "",
        "| figure | " + " | ".join(f"{s:,}" for s in sizes) + " |",
    ]
    lines.append("|" + "---|" * (len(sizes) + 1))
    for name in FIGURES:
        lines.append(
            f"| {name} | " + " | ".join(f"{statistics.median(results[s][1][name]):.0f}" for s in sizes) + " |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=20, help="samples of each figure at each size")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured rounds at each size first")
    args = parser.parse_args()
    sizes = sorted(set(args.sizes))
    if sizes[0] < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("sizes and rounds must be at least 1, warm-up rounds at least 0")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="orders-waiting-") as tmp:
        port = free_port()
        process = azurite.launch(Path(tmp) / "azurite", port, in_memory=True)
        try:
            results, at_least = asyncio.run(
                run(azurite.table_connection_string(port), sizes, args.rounds, args.warmup)
            )
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)
    print(
        f"\n{args.rounds} samples of each figure per size after {args.warmup} unmeasured rounds, medians "
        f"(p90), on Azurite in memory; the whole run took {time.perf_counter() - started:.0f} s:"
    )
    print(table(results, at_least))


if __name__ == "__main__":
    main()
