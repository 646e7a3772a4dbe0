"""The composition root: builds the engine for the order workflow from the app settings, once per process.

The clients inside (Table Storage, Service Bus, HTTP) are asynchronous and belong to the event loop they
were made on, so the runtime is built once per event loop: in the Functions worker (and the devhost)
that is once per process, since asynchronous functions all run on the worker's one loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from azure.data.tables.aio import TableServiceClient

from adapters.backfills import TableBackfillProgress
from adapters.backfills import declared as declared_backfills
from adapters.breaker_store import TableBreakerStore
from adapters.deadletters import ServiceBusDeadLetters
from adapters.queue_depth import ServiceBusQueueDepth
from adapters.servicebus import ServiceBusSender, client_from_settings
from adapters.table_store import TableStateStore, env_settings_in_use
from engine import (
    BEFORE_SWITCH,
    Agent,
    Backfills,
    BreakerStore,
    EngineParts,
    Formats,
    Retention,
    Scheduler,
    Supervisor,
    SystemClock,
    TaskService,
    WorkflowCatalog,
    WorkflowDefinition,
    instance_id,
    queues,
)

from . import release, released
from .catalog import CATALOG, SERVICES
from .deadletters import DeadLetterParts
from .gauges import Gauges
from .services.client import RemoteServices
from .settings import Settings, load_settings

log = logging.getLogger("orders.runtime")

Closer = Callable[[], Awaitable[None]]


@dataclass
class Runtime:
    """Everything the functions call into."""

    tasks: TaskService
    scheduler: Scheduler
    supervisor: Supervisor
    retention: Retention
    agents: dict[str, Agent]
    dead_letters: DeadLetterParts
    breakers: BreakerStore
    gauges: Gauges
    closers: list[Closer] = field(default_factory=list, repr=False)

    async def close(self) -> None:
        """Close every client (connections, sessions), in order; the runtime is unusable afterwards."""
        for close in self.closers:
            try:
                await close()
            except asyncio.CancelledError:
                # The loop is ending and cancelled the client's own tasks (the Service Bus client's
                # keep-alive) under it: nothing is left to close cleanly.
                log.debug("closing a client was cut short", exc_info=True)
            except Exception:  # best effort: one failure must not keep the others open
                log.warning("closing a client failed", exc_info=True)
        self.closers.clear()


async def _store(settings: Settings, closers: list[Closer]) -> TableStateStore:
    if settings.state_store_connection:
        service = TableServiceClient.from_connection_string(
            settings.state_store_connection, use_env_settings=env_settings_in_use()
        )
    else:
        from azure.identity.aio import DefaultAzureCredential  # only needed in Azure

        credential = DefaultAzureCredential(managed_identity_client_id=settings.azure_client_id)
        service = TableServiceClient(
            endpoint=str(settings.state_store_endpoint),
            credential=credential,
            use_env_settings=env_settings_in_use(),
        )
        closers.append(credential.close)
    closers.insert(0, service.close)
    return await TableStateStore.from_service(
        service, settings.state_table_name, shards=settings.state_shards
    )


def catalog(settings: Settings) -> WorkflowCatalog:
    """The declared workflows, with BREAKER_RESET_SECONDS (when set) as every step's breaker open interval."""
    reset = settings.breaker_reset_seconds
    if reset is None:
        return CATALOG

    def reset_breakers(workflow: WorkflowDefinition) -> WorkflowDefinition:
        steps = [
            step.model_copy(update={"retry": step.retry.model_copy(update={"breaker_reset_seconds": reset})})
            for step in workflow.steps
        ]
        return workflow.model_copy(update={"steps": tuple(steps)})

    return WorkflowCatalog(workflows=tuple(reset_breakers(w) for w in CATALOG.workflows))


async def build(settings: Settings) -> Runtime:
    """Wire the engine to Table Storage, Service Bus and the remote services."""
    clock = SystemClock()
    engine_settings = settings.engine()
    closers: list[Closer] = []
    store = await _store(settings, closers)
    closers.insert(0, store.close)  # the table clients, then their service (and its credential)
    # A service that answers later is sent this app's callback route: under PUBLIC_BASE_URL.
    services = RemoteServices(
        SERVICES,
        settings.service_urls,
        keys=settings.service_keys,
        callback_base=settings.public_base_url,
        input_keys=engine_settings.input_keys,  # opens the sealed input fields as each body is built
    )
    closers.append(services.client.aclose)
    sender = ServiceBusSender(client_from_settings(dict(os.environ)))
    # The dead-letter tools' own client: their receivers open per call and must not share the
    # sender's links. The gauges peek through it too (their receivers also open per call).
    dead_letter_client = client_from_settings(dict(os.environ))
    closers.append(sender.close)  # last: its AMQP links may take a while to close
    closers.append(dead_letter_client.close)
    actions = services.actions()
    workflows = catalog(settings)
    # The agents' circuit breakers live in the state table, so every instance sees the same ones.
    breakers = TableBreakerStore(store.table, counter=store.counter)
    instance = instance_id()
    agents = {
        name: Agent.for_catalog(
            workflows, name, actions[name], sender, clock, breakers=breakers, instance_id=instance
        )
        for name in workflows.agents
    }
    # Every queue this process may send to, opened in the background while the first message is handled.
    opening = asyncio.create_task(sender.open(queues.all_queues(workflows.agents)))
    closers.insert(0, functools.partial(_cancel, opening))
    # What it writes: the previous release's formats until the switch says otherwise (engine.formats).
    # Which versions new orders may take: those every instance serves, the release before's included.
    formats = Formats(
        BEFORE_SWITCH, store, instance, release.VERSION, workflows.keys, released.previous_release()
    )
    store.formats = formats
    closers.insert(0, formats.withdraw)  # before the store closes: it says it has gone
    await formats.refresh(clock.now())
    # What this release adds to orders stored before it: written by the backfill function's runs; runtime()
    # reads their progress right after the build, and now and then until they have finished.
    backfills = Backfills(declared_backfills(store), TableBackfillProgress(store))
    parts = EngineParts(
        workflows, store, sender, clock, engine_settings, breakers, formats=formats, backfills=backfills
    )
    scheduler = Scheduler(parts, instance)
    # A submission writes its new task claimed here and dispatches the first step: no kick, no second write.
    tasks = TaskService(parts, scheduler)
    every_queue = tuple(queues.all_queues(workflows.agents))
    dead_letters = DeadLetterParts(ServiceBusDeadLetters(dead_letter_client), store, tasks, every_queue)
    gauges = Gauges(
        ServiceBusQueueDepth(dead_letter_client), tasks, every_queue, clock, settings.metrics_gauge_seconds
    )
    return Runtime(
        tasks=tasks,
        scheduler=scheduler,
        supervisor=Supervisor(parts),
        retention=Retention(store, clock, settings.retention()),
        agents=agents,
        dead_letters=dead_letters,
        breakers=breakers,
        gauges=gauges,
        closers=closers,
    )


async def _cancel(task: asyncio.Task[None]) -> None:
    """Stop ``task`` if it still runs and wait for it to end (its outcome is not wanted)."""
    task.cancel()
    await asyncio.wait([task])


async def _close_when_cancelled(runtime: Runtime) -> None:
    """Wait for ever; when cancelled (``asyncio.run`` cancels what is left as its loop ends), close the
    runtime's clients, so a worker that stops leaves no connection or session unclosed."""
    try:
        await asyncio.Event().wait()
    finally:
        await runtime.close()


_runtimes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[Runtime]] = (
    weakref.WeakKeyDictionary()
)


async def runtime() -> Runtime:
    """The running event loop's runtime, built on first use from the environment.

    Concurrent first calls share one build; a build that failed is tried again by the next call.
    """
    loop = asyncio.get_running_loop()
    building = _runtimes.get(loop)
    if building is None or (building.done() and (building.cancelled() or building.exception() is not None)):
        building = loop.create_task(_build_and_keep(), name="orders-runtime")
        _runtimes[loop] = building
    built = await asyncio.shield(building)
    parts = built.tasks.parts
    now = parts.clock.now()
    await parts.formats.refresh(now)  # now and then: the switch
    await parts.backfills.refresh(now)  # until every backfill has finished
    return built


_keepers: set[asyncio.Task[None]] = set()


async def _build_and_keep() -> Runtime:
    built = await build(load_settings())
    keeper = asyncio.create_task(_close_when_cancelled(built), name="orders-runtime-closer")
    _keepers.add(keeper)  # a reference, so the task is not collected while it waits
    keeper.add_done_callback(_keepers.discard)
    return built
