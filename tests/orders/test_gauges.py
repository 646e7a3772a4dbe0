"""The gauges an operator charts, measured on the bundled emulator and Azurite, read back through a real
OpenTelemetry SDK meter provider."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.data.tables.aio import TableServiceClient
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from opentelemetry import metrics as otel_metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from adapters.queue_depth import ServiceBusQueueDepth
from adapters.servicebus import ServiceBusSender
from adapters.table_store import TableStateStore
from engine import metrics
from engine.clock import ManualClock
from engine.parts import EngineParts
from engine.tasks import TaskService
from orders.gauges import Gauges
from orders.settings import load_settings
from tests.adapters.test_parking import CATALOG, REVIEW, SETTINGS, WINDOW, waiting
from tests.servicebus_emulator.conftest import RunningEmulator, start_emulator, write_config
from tests.support import INPUT_KEY, service_urls, stop_process

pytestmark = pytest.mark.anyio
QUEUES = ("orders-a", "orders-b")
STAMP = timedelta(milliseconds=1)  # enqueued times are whole milliseconds


@pytest.fixture(scope="session")
def metric_reader() -> InMemoryMetricReader:
    """The global meter provider, a real SDK one read in memory: engine.metrics made its instruments at
    import from the global provider's proxy, which forwards to the provider once set (only once a
    process)."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    otel_metrics.set_meter_provider(provider)
    assert otel_metrics.get_meter_provider() is provider, "another meter provider was set first"
    return reader


@pytest.fixture
def metrics_on(metric_reader: InMemoryMetricReader, monkeypatch: pytest.MonkeyPatch) -> InMemoryMetricReader:
    """Metrics enabled for this test only (the other tests keep skipping the work)."""
    monkeypatch.setattr(metrics, "_enabled", metrics.enabled())  # put back afterwards
    metrics.enable()
    return metric_reader


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    folder = tmp_path_factory.mktemp("gauges")
    running = start_emulator(
        write_config(folder / "config.json", {queue: {} for queue in QUEUES}), folder / "emulator.log"
    )
    yield running
    stop_process(running.process)


@pytest.fixture
async def client(emulator: RunningEmulator) -> AsyncIterator[ServiceBusClient]:
    # No retries: the emulator refuses an unknown queue with an error the SDK would try again for 15 s.
    async with ServiceBusClient.from_connection_string(emulator.connection_string, retry_total=0) as client:
        yield client


@pytest.fixture
async def store(azurite_connection_string: str) -> AsyncIterator[TableStateStore]:
    async with TableServiceClient.from_connection_string(azurite_connection_string) as service:
        store = await TableStateStore.from_service(service, "g" + uuid.uuid4().hex[:16], shards=2)
        yield store
        await store.close()


def gauges(client: ServiceBusClient, store: TableStateStore, clock: ManualClock, queues: list[str]) -> Gauges:
    tasks = TaskService(EngineParts(CATALOG, store, ServiceBusSender(client), clock, SETTINGS))
    return Gauges(ServiceBusQueueDepth(client), tasks, queues, clock, interval_seconds=30)


def collect(reader: InMemoryMetricReader) -> dict[str, dict[tuple[tuple[str, Any], ...], float]]:
    """One collection: each gauge's series measured since the last, by metric and attributes (a gauge
    reports a series only in the collection after it was measured)."""
    found: dict[str, dict[tuple[tuple[str, Any], ...], float]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            if scope.scope.name != metrics.METER_NAME:
                continue
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    if isinstance(point, NumberDataPoint):  # the gauges (the histograms have no one value)
                        key = tuple(sorted((point.attributes or {}).items()))
                        found.setdefault(metric.name, {})[key] = point.value
    return found


def queue_values(
    collected: dict[str, dict[tuple[tuple[str, Any], ...], float]], queue: str
) -> tuple[float, ...]:
    """The queue's messages, oldest age and dead letters, as one collection found them."""
    key = (("queue", queue),)
    return tuple(
        collected[name][key]
        for name in (metrics.QUEUE_MESSAGES, metrics.QUEUE_AGE, metrics.QUEUE_DEAD_LETTERS)
    )


async def test_measures_every_queue_and_the_waiting_orders_once_per_interval(
    metrics_on: InMemoryMetricReader, client: ServiceBusClient, store: TableStateStore
) -> None:
    reader = metrics_on
    busy, idle = QUEUES
    await waiting(store, "o-approve", REVIEW)
    await waiting(store, "o-timer-1", WINDOW)
    await waiting(store, "o-timer-2", WINDOW)
    async with client.get_queue_sender(busy) as sender:
        await sender.send_messages(ServiceBusMessage("dead"))
        await sender.send_messages(ServiceBusMessage("first"))
        first_sent = datetime.now(UTC)
        await sender.send_messages(ServiceBusMessage("second"))
    async with client.get_queue_receiver(busy, prefetch_count=0) as receiver:
        (dead,) = await receiver.receive_messages(max_message_count=1, max_wait_time=5)
        await receiver.dead_letter_message(dead, reason="Broken")
    clock = ManualClock(datetime.now(UTC))
    # An unknown queue is left out (a warning), the others measured all the same.
    measuring = gauges(client, store, clock, [busy, "no-such-queue", idle])

    assert await measuring.measure()
    collected = collect(reader)
    messages, age, dead_letters = queue_values(collected, busy)
    assert (messages, dead_letters) == (2, 1)
    assert age >= (clock.now() - first_sent - STAMP).total_seconds()
    assert queue_values(collected, idle) == (0, 0, 0)
    assert "no-such-queue" not in str(collected[metrics.QUEUE_MESSAGES])
    # Every kind the store counts, and callback at 0: nothing waits for one.
    by_kind = {dict(k)["waiting.for"]: v for k, v in collected[metrics.WAITING].items()}
    assert by_kind == {"approval": 1, "callback": 0, "timer": 2}

    # Not again before the interval has passed, whatever changed meanwhile: nothing measured, nothing
    # reported (a stale figure is not repeated as if it were new).
    async with client.get_queue_sender(idle) as sender:
        await sender.send_messages(ServiceBusMessage("new"))
    clock.advance(29.9)
    assert not await measuring.measure()
    assert metrics.QUEUE_MESSAGES not in collect(reader)
    clock.advance(0.1)
    assert await measuring.measure()
    collected = collect(reader)
    assert queue_values(collected, idle)[0] == 1
    assert queue_values(collected, busy)[1] >= age + 30  # the clock moved on; the same message is the oldest


async def test_does_nothing_while_metrics_are_off(
    metric_reader: InMemoryMetricReader,
    client: ServiceBusClient,
    store: TableStateStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics, "_enabled", False)
    assert not await gauges(client, store, ManualClock(), ["queue-never-measured"]).measure()
    assert (("queue", "queue-never-measured"),) not in collect(metric_reader).get(metrics.QUEUE_MESSAGES, {})


def test_the_interval_is_an_app_setting_of_seconds() -> None:
    base = {
        **service_urls("http://127.0.0.1:1"),
        "STATE_STORE_CONNECTION": "UseDevelopmentStorage=true",
        **INPUT_KEY,
    }
    assert load_settings(base).metrics_gauge_seconds == 30
    assert load_settings({**base, "METRICS_GAUGE_SECONDS": "0"}).metrics_gauge_seconds == 0
    for bad in ("-1", "soon", "inf"):
        with pytest.raises(RuntimeError, match="METRICS_GAUGE_SECONDS"):
            load_settings({**base, "METRICS_GAUGE_SECONDS": bad})
