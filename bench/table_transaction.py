"""Cost of one state save: the SDK's ``TableClient.submit_transaction`` next to ``adapters.table_batch``.

Starts a throwaway Azurite, then saves a typical task the way ``TableStateStore.save`` does (one
ETag-conditional transaction replacing the state entity and two step entities, mapped by the store)
a few hundred times with each implementation, alternating, one transaction at a time. Prints, per
transaction, the mean and median wall time and the mean CPU time of this process (Azurite's own CPU is
not in it).

    .venv/bin/python bench/table_transaction.py [--count 300]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from azure.core import MatchConditions
from azure.data.tables import UpdateMode
from azure.data.tables.aio import TableClient, TableServiceClient

from adapters.table_batch import submit_transaction
from adapters.table_store import TableStateStore, env_settings_in_use
from devhost import azurite
from engine.state import ProcessState, StepState, StepStatus, TaskRecord, TaskState
from servicebus_emulator.launcher import free_port, stop

Submit = Callable[[TableClient, list[Any]], Awaitable[list[Mapping[str, Any]]]]
CONDITIONAL = {"mode": UpdateMode.REPLACE, "match_condition": MatchConditions.IfNotModified}
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def record(order_id: str, n: int) -> TaskRecord:
    """A task in the middle of its workflow, a little different each time ``n`` changes."""
    return TaskRecord(
        state=TaskState(
            order_id=order_id,
            workflow="fulfilment",
            process_state=ProcessState.PROCESSING,
            locked_by="scheduler-7f3a",
            current_step=n % 2,
            attempt=1,
            complete_by=NOW + timedelta(seconds=30 + n),
            created_at=NOW,
            updated_at=NOW + timedelta(seconds=n),
        ),
        steps=[
            StepState(
                index=index,
                name=name,
                status=StepStatus.RUNNING if n % 2 else StepStatus.COMPLETED,
                attempts=1 + n % 3,
                complete_by=NOW + timedelta(seconds=30 + n),
                result={"reference": f"R-{n:06d}", "amount": 42.5},
            )
            for index, name in enumerate(["reserve-stock", "charge-payment"])
        ],
        input={},
        input_hash="",
    )


async def sdk(table: TableClient, operations: list[Any]) -> list[Mapping[str, Any]]:
    """The SDK's own transaction."""
    return await table.submit_transaction(operations)


async def ours(table: TableClient, operations: list[Any]) -> list[Mapping[str, Any]]:
    """The adapter's transaction."""
    return await submit_transaction(table, operations)


class Saver:
    """One task of its own, saved again and again with one implementation."""

    def __init__(self, table: TableClient, submit: Submit, order_id: str) -> None:
        self.table, self.submit, self.order_id = table, submit, order_id
        self.etags: list[str] = []
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def entities(self, n: int) -> list[dict[str, Any]]:
        """The state entity and the two step entities, mapped as the store maps them."""
        task = record(self.order_id, n)
        store = TableStateStore(self.table, self.table)  # only its entity mapping is used
        return [
            store.codec.state_entity(task),
            *(store.codec.step_entity(self.order_id, s) for s in task.steps),
        ]

    async def create(self) -> None:
        results = await self.table.submit_transaction([("create", e) for e in self.entities(0)])
        self.etags = [r["etag"] for r in results]

    async def save(self, n: int, record: bool) -> None:
        operations = [
            ("update", entity, {**CONDITIONAL, "etag": etag})
            for entity, etag in zip(self.entities(n), self.etags, strict=True)
        ]
        wall, cpu = time.perf_counter(), time.process_time()
        results = await self.submit(self.table, operations)
        if record:
            self.wall.append(time.perf_counter() - wall)
            self.cpu.append(time.process_time() - cpu)
        self.etags = [r["etag"] for r in results]


async def measure(connection: str, count: int, warmup: int) -> list[Saver]:
    async with TableServiceClient.from_connection_string(
        connection, use_env_settings=env_settings_in_use()
    ) as service:
        await service.create_table("benchtransactions")
        table = service.get_table_client("benchtransactions")
        savers = [Saver(table, sdk, "sdk-1"), Saver(table, ours, "ours-1")]
        for saver in savers:
            await saver.create()
        for n in range(warmup + count):
            first, second = savers if n % 2 else savers[::-1]  # alternate which goes first
            await first.save(n, n >= warmup)
            await second.save(n, n >= warmup)
        return savers


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=300, help="transactions measured per implementation")
    parser.add_argument("--warmup", type=int, default=30, help="transactions per implementation not measured")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        process = azurite.launch(Path(tmp) / "azurite", port, in_memory=True)
        try:
            savers = asyncio.run(measure(azurite.table_connection_string(port), args.count, args.warmup))
        finally:
            stop(process)
    print(f"state save (3 entities, ETag-conditional), {args.count} transactions each, alternating:")
    for name, saver in zip(("SDK submit_transaction", "adapters.table_batch"), savers, strict=True):
        print(
            f"  {name:<24} wall mean {statistics.fmean(saver.wall) * 1000:6.2f} ms, "
            f"p50 {statistics.median(saver.wall) * 1000:6.2f} ms; "
            f"CPU mean {statistics.fmean(saver.cpu) * 1000:6.2f} ms"
        )
    theirs, mine = savers
    print(
        f"  ours / SDK: wall {statistics.fmean(mine.wall) / statistics.fmean(theirs.wall):.2f}, "
        f"CPU {statistics.fmean(mine.cpu) / statistics.fmean(theirs.cpu):.2f}"
    )


if __name__ == "__main__":
    main()
