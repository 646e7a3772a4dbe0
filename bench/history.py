"""What operator reads, the Supervisor and a submission cost as the history of finished orders grows.

Run with ``make bench-history`` (or ``python bench/history.py --sizes 1000 10000 100000``). It starts a
throwaway Azurite and, in this process, the engine over the Table Storage store with the API's own
handlers (``orders.api.OrdersApi``; no HTTP host, and a sender that drops messages). It keeps a constant
set of live orders (Pending, Processing, Error), then fills the history with finished orders (Processed,
and one in ten Compensated) written directly through the store's own mapping, in steps up to each size,
and at each size times, alternating one sample of each in turn:

- one order's GET: a finished order (in the history) and an order in flight;
- the listing of orders in Error and of orders in Processing (a page of 50);
- the counts by state;
- a Supervisor sweep that finds ten just-finished orders due and moves them to the history;
- a submission (the watch entry, the order's transaction and the check of the history).

It prints the median (and the 90th percentile) of each at each size, and each median at the largest size
over its median at the smallest, against the target (at most 1.2).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from azure.data.tables import UpdateMode
from azure.data.tables.aio import TableServiceClient
from pydantic import BaseModel

from adapters.table_batch import submit_transaction
from adapters.table_store import TableStateStore, shard_of
from devhost import azurite
from engine import transitions
from engine.parts import EngineParts
from engine.settings import EngineSettings
from engine.state import ProcessState, StepState, StepStatus, TaskRecord, TaskState
from engine.supervisor import Supervisor
from engine.tasks import TaskService
from engine.workflow import StepDefinition, WorkflowCatalog
from orders.api import OrdersApi
from orders.catalog import FULFILMENT, SERVICES
from orders.models import body_hash, order_document, order_input
from servicebus_emulator.launcher import free_port

TARGET_RATIO = 1.2
SHARDS = 8
LIVE = {ProcessState.PENDING: 50, ProcessState.PROCESSING: 100, ProcessState.ERROR: 50}
DUE_PER_SWEEP = 10
# What each order carries: the workflow's first declared example.
ORDER = FULFILMENT.examples()[0]
CATALOG = WorkflowCatalog.of(FULFILMENT)
SETTINGS = EngineSettings(step_complete_by_seconds=3600)
FIGURES = (
    "GET a finished order",
    "GET an order in flight",
    "list in Error (page of 50)",
    "list in Processing (page of 50)",
    "counts by state",
    f"Supervisor sweep ({DUE_PER_SWEEP} finished orders due)",
    "submission",
)


class DropSender:
    """Sends nothing: the figures are the store's and the engine's, not the broker's."""

    async def send(self, queue: str, body: BaseModel, **kwargs: Any) -> None:
        return None


class FixedClock:
    """A clock the bench moves: sweeps see what is due."""

    def __init__(self) -> None:
        self.at = datetime.now(UTC)

    def now(self) -> datetime:
        return self.at


def document(order_id: str) -> tuple[dict[str, Any], str]:
    body = order_document(order_id, order_input(FULFILMENT, ORDER))
    return body, body_hash(body)


def declared_result(step: StepDefinition, key: str) -> dict[str, Any] | None:
    """What the simulators return for a step's effect under ``key``: its service's declared result values
    (None for a wait, which calls nothing)."""
    if not step.calls:
        return None
    service = next(s for s in SERVICES if s.name == step.agent)
    resource, _ = service.resource(step.action)
    return None if resource.result is None else resource.result.simulated(key).model_dump(by_alias=True)


def finished_record(order_id: str, at: datetime, compensated: bool) -> TaskRecord:
    """A finished order as the engine leaves it: three steps done (or undone), their results kept."""
    body, digest = document(order_id)
    done = StepStatus.COMPENSATED if compensated else StepStatus.COMPLETED
    return TaskRecord(
        state=TaskState(
            order_id=order_id,
            workflow=FULFILMENT.name,
            workflow_version=FULFILMENT.version,
            process_state=ProcessState.COMPENSATED if compensated else ProcessState.PROCESSED,
            current_step=len(FULFILMENT.steps) - 1,
            attempt=1,
            created_at=at - timedelta(seconds=1),
            updated_at=at,
        ),
        steps=[
            StepState(
                index=i,
                name=step.name,
                status=done,
                attempts=1,
                result=declared_result(step, f"{order_id}:{step.name}"),
            )
            for i, step in enumerate(FULFILMENT.steps)
        ],
        input=body,
        input_hash=digest,
    )


async def fill_history(store: TableStateStore, count: int, start: datetime) -> list[str]:
    """Write ``count`` finished orders into the history with the store's own mapping, 50 per transaction
    (the order and its listing entry), and raise each shard's tally by what it got. Returns the ids."""
    assert store.history is not None
    by_shard: dict[str, list[dict[str, Any]]] = {}
    added: dict[str, dict[str, int]] = {}
    ids = []
    for n in range(count):
        order_id = f"h-{uuid.uuid4().hex[:20]}"
        ids.append(order_id)
        record = finished_record(order_id, start + timedelta(milliseconds=n), compensated=n % 10 == 9)
        pk = shard_of(order_id, store.shards)
        by_shard.setdefault(pk, []).extend(store.archive_entities(record))
        tally = added.setdefault(pk, {})
        tally[record.state.process_state.value] = tally.get(record.state.process_state.value, 0) + 1
    batches = [rows[i : i + 100] for rows in by_shard.values() for i in range(0, len(rows), 100)]
    semaphore = asyncio.Semaphore(2)  # Azurite resets connections under more

    async def write(batch: list[dict[str, Any]]) -> None:
        async with semaphore:
            await submit_transaction(
                store.history, [("upsert", e, {"mode": UpdateMode.REPLACE}) for e in batch]
            )

    await asyncio.gather(*(write(b) for b in batches))
    for pk, counts in added.items():
        current = await store._tally(pk, fresh=True)
        total = {k: current[1].get(k, 0) + counts.get(k, 0) for k in current[1]}
        await store.history.upsert_entity(store.tally_entity(pk, total), mode=UpdateMode.REPLACE)
        await store._tally(pk, fresh=True)
    return ids


class Bench:
    """The engine over one store, with the live orders every size shares."""

    def __init__(self, store: TableStateStore) -> None:
        self.store = store
        self.clock = FixedClock()
        self.parts = EngineParts(CATALOG, store, DropSender(), self.clock, SETTINGS)
        self.tasks = TaskService(self.parts)
        self.api = OrdersApi(self._tasks)
        self.supervisor = Supervisor(self.parts)
        self.in_flight: list[str] = []
        self.submitted: list[str] = []

    async def _tasks(self) -> TaskService:
        return self.tasks

    async def live_orders(self) -> None:
        """Pending, Processing (claimed) and Error orders, through the engine, due in an hour."""
        for state, count in LIVE.items():
            for _ in range(count):
                order_id = f"l-{uuid.uuid4().hex[:20]}"
                body, digest = document(order_id)
                _, record = await self.tasks.submit(order_id, body, digest)
                if state is not ProcessState.PENDING:
                    ctx = self.parts.context("bench", record)
                    transitions.claim(record, ctx)
                    if state is ProcessState.ERROR:
                        transitions.workflow_not_deployed(record, ctx, "supervisor")  # any way into Error
                    await self.store.save(record)
                    assert record.state.process_state is state
                if state.in_flight:
                    self.in_flight.append(order_id)

    async def just_finished(self, count: int) -> None:
        """Orders that finished a moment ago and whose watch entries are due: the next sweep moves them."""
        for _ in range(count):
            order_id = f"f-{uuid.uuid4().hex[:20]}"
            body, digest = document(order_id)
            _, record = await self.tasks.submit(order_id, body, digest)
            ctx = self.parts.context("bench", record)
            transitions.claim(record, ctx)
            while not record.state.process_state.finished:
                state = record.state
                if state.process_state is ProcessState.WAITING:
                    # The workflow's own path: a wait (its cancellation window) ends with its wake-up.
                    due = record.steps[state.current_step].complete_by
                    assert due is not None
                    ctx = replace(ctx, now=due)
                    decision = transitions.wake(record, ctx, state.current_step, state.attempt)
                else:
                    step = FULFILMENT.steps[state.current_step]
                    result = declared_result(step, f"{order_id}:{step.name}") or {}
                    decision = transitions.step_succeeded(record, ctx, result)
                assert decision.changed, (order_id, state)
            await self.store.save(record)
            # Its watch entry due now, as it is a step's budget after the order finished.
            entry = {
                "PartitionKey": shard_of(order_id, SHARDS),
                "RowKey": order_id,
                "CompleteBy": self.clock.at,
            }
            await self.store.watch.upsert_entity(entry, mode=UpdateMode.REPLACE)

    async def forget_submitted(self) -> None:
        """Delete the orders the submission samples wrote, so every size starts with the same live set."""
        for order_id in self.submitted:
            record = await self.store.load(order_id)
            if record is None:
                continue
            pk = shard_of(order_id, self.store.shards)
            keys = [*record.etags, record.listed]
            await submit_transaction(
                self.store.table, [("delete", {"PartitionKey": pk, "RowKey": k}) for k in keys]
            )
            await self.store.watch.delete_entity(pk, order_id)
        self.submitted.clear()

    async def samples(self, finished: list[str], rounds: int) -> dict[str, list[float]]:
        """``rounds`` samples of each figure, one of each in turn."""
        times: dict[str, list[float]] = {name: [] for name in FIGURES}
        api = self.api

        async def sweep() -> None:
            report = await self.supervisor.sweep()
            assert report.archived == DUE_PER_SWEEP, report

        async def submit() -> None:
            order_id = f"s-{uuid.uuid4().hex[:20]}"
            self.submitted.append(order_id)
            body = {**ORDER, "orderId": order_id}
            reply = await api.submit(json.dumps(body).encode(), "application/json")
            assert reply.status == 202, reply.body

        async def get(order_id: str) -> None:
            assert (await api.get(order_id)).status == 200

        async def listing(state: str) -> None:
            reply = await api.list_by_state({"processState": state, "pageSize": "50"})
            assert reply.status == 200 and len(reply.body["items"]) == 50, reply.body

        async def counts() -> None:
            reply = await api.counts()
            assert reply.status == 200 and not reply.body["atLeast"]

        for _ in range(rounds):
            await self.just_finished(DUE_PER_SWEEP)  # untimed: what the timed sweep will find
            actions: list[tuple[str, Callable[[], Awaitable[None]]]] = [
                (FIGURES[0], lambda: get(random.choice(finished))),
                (FIGURES[1], lambda: get(random.choice(self.in_flight))),
                (FIGURES[2], lambda: listing("Error")),
                (FIGURES[3], lambda: listing("Processing")),
                (FIGURES[4], counts),
                (FIGURES[5], sweep),
                (FIGURES[6], submit),
            ]
            for name, action in actions:
                started = time.perf_counter()
                await action()
                times[name].append(time.perf_counter() - started)
        await self.forget_submitted()
        return times


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(0.9 * len(ordered)) - 1))]


async def run(connection: str, sizes: list[int], rounds: int) -> dict[int, dict[str, list[float]]]:
    async with TableServiceClient.from_connection_string(connection) as service:
        store = await TableStateStore.from_service(service, "hist" + uuid.uuid4().hex[:10], shards=SHARDS)
        try:
            bench = Bench(store)
            await bench.live_orders()
            results: dict[int, dict[str, list[float]]] = {}
            finished: list[str] = []
            start = datetime.now(UTC) - timedelta(days=20)
            for size in sizes:
                started = time.perf_counter()
                finished += await fill_history(
                    store, size - len(finished), start + timedelta(seconds=len(finished))
                )
                print(
                    f"history filled to {size:,} finished orders in {time.perf_counter() - started:.0f} s",
                    flush=True,
                )
                await bench.samples(finished, 5)  # warm-up
                results[size] = await bench.samples(finished, rounds)
            return results
        finally:
            await store.close()


def table(results: dict[int, dict[str, list[float]]]) -> str:
    sizes = sorted(results)
    first, last = sizes[0], sizes[-1]
    head = "| figure | " + " | ".join(f"{s:,} finished" for s in sizes) + f" | {last:,} / {first:,} |"
    lines = [head, "|" + "---|" * (len(sizes) + 2)]
    worst = 0.0
    for name in FIGURES:
        cells = [
            f"{statistics.median(results[s][name]) * 1000:.1f} ms (p90 {p90(results[s][name]) * 1000:.1f})"
            for s in sizes
        ]
        ratio = statistics.median(results[last][name]) / statistics.median(results[first][name])
        worst = max(worst, ratio)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {ratio:.2f} |")
    verdict = "meets" if worst <= TARGET_RATIO else "misses"
    lines.append(f"\nlargest ratio {worst:.2f} (target <= {TARGET_RATIO}: {verdict})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=60, help="samples of each figure at each size")
    args = parser.parse_args()
    sizes = sorted(args.sizes)
    if sizes[0] < 1 or args.rounds < 1:
        parser.error("sizes and rounds must be at least 1")
    with tempfile.TemporaryDirectory(prefix="orders-history-") as tmp:
        port = free_port()
        process = azurite.launch(Path(tmp) / "azurite", port, in_memory=True)
        try:
            results = asyncio.run(run(azurite.table_connection_string(port), sizes, args.rounds))
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)
    print(f"\n{args.rounds} samples of each figure per size, medians (p90), on Azurite in memory:")
    print(table(results))


if __name__ == "__main__":
    main()
