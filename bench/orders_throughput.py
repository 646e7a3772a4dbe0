"""Performance and capacity of the order-processing system on the local stack. Run with ``make bench``.

Prints four things:

1. End-to-end orders per second through orders-devhost (no faults, no added latency), after a warm-up of
   ``WARMUP_ORDERS`` orders, next to the raw conditional-write rate of the same Azurite measured in the
   same run; over the table requests per order that part 2 counts, that is the ceiling (see
   ``ceiling_report``).
2. Table operations per order and per step transition, counted in the state-store adapter, with the
   Scheduler and Agents driven in-process against Azurite (messages handed over directly).
3. The Supervisor's sweep time over the same in-flight work with 1,000 and with 20,000 completed orders
   in the table: it must not grow with completed history (target ratio <= 1.2).
4. Operations per order, counted where they happen: Service Bus operations per queue by the emulator and
   function executions per function by the workers, during the end-to-end run (``<data-dir>/stats``),
   each queue's next to what ``engine.costs.processed_order`` predicts for the workflow the orders run;
   table requests and entities per table by the state-store adapter (in-process run, plus the
   Supervisor's clean-up sweep). From them, with the published limits and list prices in
   ``capacity.py``, the orders/s at which each limit is reached and the cost per million orders.

The orders name no workflow, so they run the catalog's default workflow in its latest version
(``orders.catalog``): the step counts and the predicted messages follow its declaration.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import statistics
import tempfile
import threading
import time
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from azure.core import MatchConditions
from azure.data.tables import TableServiceClient, UpdateMode
from azure.data.tables.aio import TableServiceClient as AsyncTableServiceClient
from pydantic import BaseModel

from adapters.table_store import TableStateStore
from capacity import OrderCounts, Setup, report
from devhost import azurite, launch
from devhost.counts import StackCounts, read_counts
from engine import queues
from engine.agent import Agent
from engine.clock import SystemClock
from engine.costs import OrderTraffic, processed_order
from engine.messages import AgentReply, AgentRequest, SchedulerCommand
from engine.parts import EngineParts
from engine.retention import Retention, RetentionPolicy
from engine.scheduler import Scheduler
from engine.supervisor import Supervisor
from engine.tasks import TaskService
from engine.transitions import EngineSettings
from engine.workflow import WorkflowCatalog, WorkflowDefinition
from history import fill_history
from orders.catalog import CATALOG
from orders.models import order_input
from servicebus_emulator.launcher import free_port
from stack_cpu import CpuMeter, per_order_report


def submitted_workflow() -> WorkflowDefinition:
    """The workflow the benchmark's orders run: they name none, so the default one, latest version."""
    workflow = CATALOG.current(CATALOG.default)
    if workflow is None:
        raise RuntimeError(f"the catalog has no workflow {CATALOG.default}")
    return workflow


# What each order carries: the first declared example of the workflow it runs (an order names none).
ORDER = submitted_workflow().examples()[0]


WORKFLOW = submitted_workflow()
# What one of its orders sends when it runs straight through: the one formula (engine.costs), less the
# steps its conditions leave out on ORDER (they read the input as the API stores it).
# The run sets no cancellation window (CANCELLATION_WINDOW_SECONDS=0): the timer passes at once, sending
# nothing, so the order's traffic is that of its calls.
NO_WINDOW = {"CANCELLATION_WINDOW_SECONDS": 0.0}  # the in-process runs' setting, as the stack's below
_CALLS = WORKFLOW.revise(steps=tuple(step for step in WORKFLOW.steps if step.calls))
TRAFFIC: OrderTraffic = processed_order(_CALLS, {"input": order_input(WORKFLOW, ORDER), "results": {}})


# ---- 1. end to end ---------------------------------------------------------------------------------
TARGET_CEILING_SHARE = 0.5  # end-to-end orders/s with 2 workers, as a share of the Azurite ceiling


def conditional_write_rate(connection_string: str, writes: int, threads: int) -> float:
    """Replace-if-unchanged updates per second against one Azurite, from ``threads`` threads."""
    service = TableServiceClient.from_connection_string(connection_string)
    name = "bench" + uuid.uuid4().hex[:10]
    service.create_table(name)
    table = service.get_table_client(name)
    per_thread = writes // threads

    def writer(n: int) -> None:
        entity: dict[str, Any] = {"PartitionKey": f"s{n:02d}", "RowKey": "row", "Value": 0}
        etag = table.create_entity(entity)["etag"]
        for i in range(per_thread):
            entity["Value"] = i
            etag = table.update_entity(
                entity, mode=UpdateMode.REPLACE, etag=etag, match_condition=MatchConditions.IfNotModified
            )["etag"]

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(writer, range(threads)))
    return per_thread * threads / (time.perf_counter() - start)


def settled_counts(data_dir: Path, before: StackCounts, orders: int, timeout: float = 60) -> StackCounts:
    """The counts once every queue the stack reads is drained and every status message is sent."""
    deadline = time.monotonic() + timeout
    while True:
        delta = read_counts(data_dir).minus(before)
        status = delta.servicebus.get(queues.STATUS_QUEUE, {}).get("send", 0)
        if delta.drained(ignore=[queues.STATUS_QUEUE]) and status >= len(TRAFFIC.status_events) * orders:
            time.sleep(1.0)  # the workers rewrite their files every 0.5 s: let the last one land
            return read_counts(data_dir).minus(before)
        if time.monotonic() > deadline:
            raise RuntimeError(f"queues not drained after {timeout}s: {delta.servicebus}")
        time.sleep(0.2)  # polling files the stack rewrites


COUNTS_POLL_SECONDS = 0.25  # how often a benchmark asks how many orders are done


def processed_count(api: httpx.Client) -> int:
    """How many orders the stack holds Processed: one request for all orders, however many there are."""
    items = api.get("/api/order-counts").json()["items"]
    return sum(int(i["count"]) for i in items if i["processState"] == "Processed")


def wait_until_processed(api: httpx.Client, orders: int, timeout: float = 300) -> None:
    """Poll the order counts until ``orders`` are Processed."""
    deadline = time.monotonic() + timeout
    while (done := processed_count(api)) < orders:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {done} of {orders} orders Processed after {timeout}s")
        time.sleep(COUNTS_POLL_SECONDS)  # polling the stack over HTTP


WARMUP_ORDERS = 20  # before the measured run: connections, links and first-use costs paid, counts settled


def _submit(api: httpx.Client, ids: list[str]) -> None:
    with ThreadPoolExecutor(8) as pool:
        submitted = pool.map(lambda i: api.post("/api/orders", json={"orderId": i, **ORDER}), ids)
        codes = [response.status_code for response in submitted]
    assert all(c == 202 for c in codes), codes


class EndToEnd(BaseModel):
    """The end-to-end run: its rate, the ceiling measured after it, its counts and its CPU per process."""

    orders: int
    rate: float  # orders/s
    ceiling: float  # Azurite's conditional writes per second
    counts: StackCounts
    cpu_seconds: dict[str, float]  # per process, over the timed orders (from submission to the last done)


def run_end_to_end(orders: int, workers: int, data_dir: Path) -> EndToEnd:
    """Start a stack, time ``orders`` orders through it after a warm-up, stop it."""
    # No cancellation window: a business wait of seconds would say nothing of the path's cost.
    env = {
        "SUPERVISOR_SCHEDULE": "*/5 * * * * *",
        "STEP_COMPLETE_BY_SECONDS": "60",
        "CANCELLATION_WINDOW_SECONDS": "0",
    }
    devhost = launch.start(data_dir, workers=workers, env=env)
    api = httpx.Client(base_url=devhost.api_url, timeout=30)
    try:
        # A warm-up first, as the per-step benchmark does: the figure is the running system's, not its
        # start (first connections to Azurite and the remote services, each queue's first link).
        started_empty = read_counts(data_dir)
        _submit(api, [f"warmup-{uuid.uuid4().hex[:12]}" for _ in range(WARMUP_ORDERS)])
        wait_until_processed(api, WARMUP_ORDERS)
        settled_counts(data_dir, started_empty, WARMUP_ORDERS)
        before = read_counts(data_dir)
        ids = [f"bench-{uuid.uuid4().hex[:12]}" for _ in range(orders)]
        cpu = CpuMeter(devhost)
        cpu.start()
        started = datetime.now(UTC)
        _submit(api, ids)
        wait_until_processed(api, WARMUP_ORDERS + orders)
        used = cpu.stop()
        # The stack's own timestamps time the run: reading each order once, after the run, keeps the
        # benchmark's polling out of what it measures (polling every order kept one worker and Azurite
        # busy answering it).
        finished = max(datetime.fromisoformat(api.get(f"/api/orders/{i}").json()["updatedAt"]) for i in ids)
        rate = orders / (finished - started).total_seconds()
        counts = settled_counts(data_dir, before, orders)
        ceiling = conditional_write_rate(azurite.table_connection_string(devhost.azurite_port), 2000, 8)
        return EndToEnd(orders=orders, rate=rate, ceiling=ceiling, counts=counts, cpu_seconds=used)
    finally:
        api.close()
        devhost.stop()


def end_to_end(orders: int, workers: int, data_dir: Path) -> tuple[float, float, StackCounts]:
    """The rate, ceiling and counts of :func:`run_end_to_end` (what ``bench/compare_devhost.py`` reads)."""
    run = run_end_to_end(orders, workers, data_dir)
    return run.rate, run.ceiling, run.counts


# ---- 2. table operations per order -------------------------------------------------------------------
class LoopbackSender:
    """Hands messages straight to the in-process Scheduler and Agents (a benchmark stand-in for queues)."""

    def __init__(self) -> None:
        self.pending: deque[tuple[str, BaseModel]] = deque()

    async def send(self, queue: str, body: BaseModel, **_: Any) -> None:
        self.pending.append((queue, body))


class ShiftedClock(SystemClock):
    """The system clock, moved forward: lets a sweep find every finished order's watch entry due."""

    def __init__(self, shift: timedelta) -> None:
        self.shift = shift

    def now(self) -> datetime:
        return super().now() + self.shift


class TableCounts(BaseModel):
    """Table figures per order from the in-process run."""

    per_order: float
    per_transition: float
    requests: dict[str, float]  # per table, per order, including the clean-up once it is done
    entities: dict[str, float]
    # of which the Supervisor's move to the history once the order is done (load, trail, history, live
    # delete, watch entry) and the retention clean-up after ORDER_RETENTION (purge, then the tombstone)
    cleanup_requests: float
    move_requests: float
    retention_requests: float
    empty_sweep_requests: int  # one sweep with nothing due
    log_records: float  # engine log records per order (INFO and up): traces in Application Insights


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


async def operations_per_order(connection_string: str, orders: int) -> TableCounts:
    async with AsyncTableServiceClient.from_connection_string(connection_string) as service:
        store = await TableStateStore.from_service(service, "ops" + uuid.uuid4().hex[:10])
        try:
            return await _operations_per_order(store, orders)
        finally:
            await store.close()


async def _operations_per_order(store: TableStateStore, orders: int) -> TableCounts:
    sender = LoopbackSender()
    clock = SystemClock()
    records = _Records()
    engine_log = logging.getLogger("engine")
    engine_log.addHandler(records)
    engine_log.setLevel(logging.INFO)
    settings = EngineSettings(step_complete_by_seconds=60, wait_seconds=NO_WINDOW)
    parts = EngineParts(WorkflowCatalog.of(WORKFLOW), store, sender, clock, settings)
    scheduler = Scheduler(parts)
    tasks = TaskService(parts, scheduler)  # as the app builds it: each task written claimed

    async def succeed(request: AgentRequest, timeout: float) -> dict[str, Any]:
        return {"id": request.idempotency_key}

    agents = {
        a: Agent(
            a,
            {s.action: succeed for s in WORKFLOW.steps if s.agent == a},
            sender,
            clock,
            WORKFLOW.steps[0].retry,
        )
        for a in WORKFLOW.agents
    }
    transitions = 0
    order_id = ""
    for _ in range(orders):
        order_id = uuid.uuid4().hex
        await tasks.submit(order_id, {"orderId": order_id, **ORDER}, order_id)
        while sender.pending:
            queue, body = sender.pending.popleft()
            if queue == queues.SCHEDULER_QUEUE and isinstance(body, SchedulerCommand):
                transitions += await scheduler.handle_command(body)
            elif queue == queues.REPLY_QUEUE and isinstance(body, AgentReply):
                transitions += await scheduler.handle_reply(body)
            elif isinstance(body, AgentRequest):
                await agents[queue.removeprefix(queues.AGENT_QUEUE_PREFIX)].handle(body)
    ops = store.counter.count
    # Per submission: the watch entry (and the search entries beside it, where the store keeps them), the
    # history's check, then one transaction that writes the task claimed (its claim is no transition of
    # its own: the transitions counted are the replies').
    submit_ops = (3 + (store.search is not None)) * orders
    assert (await store.load(order_id)).state.process_state.value == "Processed"  # type: ignore[union-attr]
    counter = store.counter
    requests, entities = dict(counter.requests), dict(counter.entities)
    requests["state"] -= 1  # that check is not the order's
    entities["state"] -= 2 + len(WORKFLOW.steps)
    log_records = records.count
    engine_log.removeHandler(records)
    # An empty sweep, then one an hour later, when every finished order's watch entry is due.
    before = counter.count
    await Supervisor(parts).sweep()
    empty_sweep = counter.count - before
    later = EngineParts(
        WorkflowCatalog.of(WORKFLOW), store, sender, ShiftedClock(timedelta(hours=1)), settings
    )
    before_requests, before_entities = dict(counter.requests), dict(counter.entities)
    before = counter.count
    await Supervisor(later).sweep()
    move = counter.count - before - empty_sweep  # the shard queries belong to every sweep
    # Then the retention clean-up, as if ORDER_RETENTION had passed, and its tombstones' time too.
    before = counter.count
    policy = RetentionPolicy(retention=timedelta(hours=1), batch=1000)
    await Retention(store, ShiftedClock(timedelta(hours=3)), policy).run()
    await Retention(store, ShiftedClock(timedelta(hours=5)), policy).run()
    retention = counter.count - before
    for table in ("state", "watch", "history"):
        added = counter.requests.get(table, 0) - before_requests.get(table, 0)
        added -= empty_sweep if table == "watch" else 0
        requests[table] = requests.get(table, 0) + added
        entities[table] = (
            entities.get(table, 0) + counter.entities.get(table, 0) - before_entities.get(table, 0)
        )
    return TableCounts(
        per_order=ops / orders,
        per_transition=(ops - submit_ops) / transitions,
        requests={t: n / orders for t, n in requests.items() if t},
        entities={t: n / orders for t, n in entities.items() if t},
        cleanup_requests=(move + retention) / orders,
        move_requests=move / orders,
        retention_requests=retention / orders,
        empty_sweep_requests=empty_sweep,
        log_records=log_records / orders,
    )


def ceiling_report(rate: float, writes_per_second: float, tables: TableCounts) -> str:
    """The ceiling and the end-to-end share of it.

    The ceiling is the orders/s at which Azurite alone would be saturated: its conditional writes per
    second over the table requests one order costs it, as counted in part 2 (the order's own, and the
    clean-up once it is done: the Supervisor's move to the history and the retention clean-up; every
    one of them reaches Azurite during a sustained run, and each costs about what a conditional write
    does).
    """
    per_order = sum(tables.requests.values())
    orders_ceiling = writes_per_second / per_order
    verdict = "meets" if rate >= TARGET_CEILING_SHARE * orders_ceiling else "misses"
    return (
        f"ceiling: {writes_per_second:.0f} writes/s / {per_order:.1f} table requests per order (the order's "
        f"{tables.per_order:.1f}, the clean-up {tables.cleanup_requests:.1f}) = "
        f"~{orders_ceiling:.0f} orders/s\n"
        f"end to end / ceiling: {rate / orders_ceiling:.0%} (target >= {TARGET_CEILING_SHARE:.0%}: {verdict})"
    )


# ---- 3. sweep time vs completed history -----------------------------------------------------------------
# The history is written directly through the store's own mapping (bench/history.py), outside the engine.
async def sweep_times(
    connection_string: str, in_flight: int, histories: list[int], shards: int = 8
) -> dict[int, float]:
    async with AsyncTableServiceClient.from_connection_string(connection_string) as service:
        store = await TableStateStore.from_service(service, "sweep" + uuid.uuid4().hex[:10], shards=shards)
        try:
            return await _sweep_times(connection_string, store, in_flight, histories, shards)
        finally:
            await store.close()


async def _sweep_times(
    connection_string: str, store: TableStateStore, in_flight: int, histories: list[int], shards: int
) -> dict[int, float]:
    sender = LoopbackSender()
    settings = EngineSettings(step_complete_by_seconds=3600, wait_seconds=NO_WINDOW)
    parts = EngineParts(WorkflowCatalog.of(WORKFLOW), store, sender, SystemClock(), settings)
    tasks = TaskService(parts)
    supervisor = Supervisor(parts)
    for _ in range(in_flight):  # Pending, complete-by an hour away: watched, not expired
        order_id = uuid.uuid4().hex
        await tasks.submit(order_id, {"orderId": order_id, **ORDER}, order_id)
    results: dict[int, float] = {}
    filled = 0
    for history in histories:
        await fill_history(store, history - filled, datetime.now(UTC) - timedelta(days=1))
        filled = history
        await supervisor.sweep()  # warm up
        samples = []
        for _ in range(7):
            start = time.perf_counter()
            report = await supervisor.sweep()
            samples.append(time.perf_counter() - start)
            assert report.expired == 0
        results[history] = statistics.median(samples)
    return results


# Status polling (the benchmark's own wait on the counts included), probes and the timers (the
# Supervisor, the retention clean-up).
NOT_PER_ORDER = {"get_order", "order_counts", "health", "supervisor", "retention"}
SB_COLUMNS = ("send", "schedule", "receive", "complete", "abandon", "deadLetter", "renewLock")


def formula_check(counted: dict[str, float], predicted: dict[str, int]) -> str:
    """``ok`` if a queue's counted operations per order are the formula's, else what differs."""
    differs = [
        f"{op} {counted.get(op, 0):.2f} != {predicted.get(op, 0)}"
        for op in sorted(set(counted) | set(predicted))
        if abs(counted.get(op, 0) - predicted.get(op, 0)) >= 0.005
    ]
    return "ok" if not differs else "differs: " + ", ".join(differs)


def print_counts(counts: StackCounts, orders: int, tables: TableCounts) -> None:
    """The per-order operation table: Service Bus per queue, counted next to the formula's prediction for
    the workflow the orders ran, executions per function, table requests."""
    steps = len(WORKFLOW.steps)
    predicted = TRAFFIC.servicebus()
    print(
        f"\nService Bus operations per order (emulator, {orders} orders end to end), next to the formula "
        f"(engine.costs.processed_order) for {WORKFLOW.name} version {WORKFLOW.version}, {steps} steps:"
    )
    print(f"  {'queue':<20}" + "".join(f"{c:>11}" for c in SB_COLUMNS) + f"{'total':>9}{'formula':>9}  check")
    for queue in sorted(set(counts.servicebus) | set(predicted)):
        ops = counts.servicebus.get(queue, {})
        per_order = {op: n / orders for op, n in ops.items()}
        row = "".join(f"{per_order.get(c, 0):>11.2f}" for c in SB_COLUMNS)
        expected = predicted.get(queue, {})
        check = formula_check(per_order, expected)
        print(f"  {queue:<20}{row}{sum(per_order.values()):>9.2f}{sum(expected.values()):>9}  {check}")
    total = counts.servicebus_total() / orders
    print(
        f"  {'all queues':<20}{'':>{11 * len(SB_COLUMNS)}}{total:>9.2f}{TRAFFIC.servicebus_total():>9}"
        f"  ({total / steps:.2f} per step)"
    )
    print("Function executions per order (workers):")
    executions = {k: v for k, v in counts.executions.items() if k not in NOT_PER_ORDER}
    for name in sorted(executions):
        mean_ms = counts.seconds.get(name, 0.0) / executions[name] * 1000
        print(f"  {name:<20}{executions[name] / orders:>8.2f}   mean {mean_ms:6.1f} ms")
    n = sum(executions.values()) / orders
    print(f"  {'all':<20}{n:>8.2f}   ({n / steps:.2f} per step)")
    print("Table requests (entities) per order (state-store adapter, Supervisor clean-up included):")
    for table in sorted(tables.requests):
        print(f"  {table:<20}{tables.requests[table]:>8.2f}   ({tables.entities[table]:.1f} entities)")
    requests = sum(tables.requests.values())
    print(f"  {'all':<20}{requests:>8.2f}   ({requests / steps:.2f} per step)")
    print(
        f"  of which the clean-up once the order is done: {tables.cleanup_requests:.2f} (the Supervisor's "
        f"move to the history {tables.move_requests:.2f}, the retention clean-up "
        f"{tables.retention_requests:.2f}); a sweep with nothing due costs {tables.empty_sweep_requests} "
        "requests (one per shard)"
    )


def order_counts(counts: StackCounts, orders: int, tables: TableCounts) -> OrderCounts:
    """The per-order figures the capacity report needs."""
    executions = {k: v for k, v in counts.executions.items() if k not in NOT_PER_ORDER}
    seconds = sum(counts.seconds.get(k, 0.0) for k in executions)
    sends = counts.servicebus_total(["send", "schedule"]) / orders
    table_requests = sum(tables.requests.values())
    executions_per_order = sum(executions.values()) / orders
    remote_calls = len(WORKFLOW.steps)
    return OrderCounts(
        servicebus_operations=counts.servicebus_total() / orders,
        status_messages=counts.servicebus.get(queues.STATUS_QUEUE, {}).get("send", 0) / orders,
        table_transactions=table_requests,
        state_entities=tables.entities.get("state", 0.0),
        watch_entities=tables.entities.get("watch", 0.0),
        history_entities=tables.entities.get("history", 0.0),
        executions=executions_per_order,
        execution_seconds=seconds / orders,
        # one request row per execution, one dependency row per table, Service Bus or remote call, and
        # the engine's own log records
        telemetry_records=executions_per_order + table_requests + sends + remote_calls + tables.log_records,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=200, help="orders for the end-to-end run (default 200)")
    parser.add_argument("--workers", type=int, default=2, help="function workers (default 2)")
    parser.add_argument(
        "--in-flight", type=int, default=200, help="in-flight orders during the sweeps (default 200)"
    )
    parser.add_argument(
        "--sweep-period", type=float, default=30.0, help="Supervisor period in Azure, seconds (default 30)"
    )
    parser.add_argument(
        "--throughput",
        type=float,
        default=10.0,
        help="orders/s over which the Supervisor's fixed cost is spread (default 10)",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="orders-bench-") as tmp:
        run = run_end_to_end(args.orders, args.workers, Path(tmp) / "e2e")
        rate, ceiling, counts = run.rate, run.ceiling, run.counts
        print(
            f"end to end: {rate:.1f} orders/s with {args.workers} workers ({args.orders} orders, no faults)"
        )
        print(
            "CPU per order in that run, per process (the stack's whole work while the orders ran, the "
            "benchmark's polling of the counts included):"
        )
        print(per_order_report(run.cpu_seconds, args.orders))
        print(f"Azurite conditional writes in the same run: {ceiling:.0f}/s (8 threads)")

        port = free_port()
        process = azurite.launch(Path(tmp) / "azurite", port, in_memory=True)
        try:
            connection = azurite.table_connection_string(port)
            tables = asyncio.run(operations_per_order(connection, 200))
            print(ceiling_report(rate, ceiling, tables))
            print(
                f"table operations: {tables.per_order:.1f} per order, {tables.per_transition:.2f} per step "
                "transition (target <= 2)"
            )
            times = asyncio.run(sweep_times(connection, args.in_flight, [1_000, 20_000]))
            for history, seconds in times.items():
                print(
                    f"Supervisor sweep, {args.in_flight} in flight, {history:>6} completed: "
                    f"{seconds * 1000:.1f} ms"
                )
            ratio = times[20_000] / times[1_000]
            print(f"sweep-time ratio 20,000 / 1,000 completed: {ratio:.2f} (target <= 1.2)")
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)

    print_counts(counts, args.orders, tables)
    setup = Setup(
        sweep_period_seconds=args.sweep_period,
        throughput=args.throughput,
        sweep_table_requests=tables.empty_sweep_requests,
    )
    print()
    print(report(order_counts(counts, args.orders, tables), setup))


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
