"""The composition root: builds the engine for the order workflow from the app settings, once per process.

The clients inside (Table Storage, Service Bus, HTTP) are asynchronous and belong to the event loop they
were made on, so the runtime is built once per event loop: in the Functions worker (and the devhost)
that is once per process, since asynchronous functions all run on the worker's one loop.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from dataclasses import dataclass

from azure.data.tables.aio import TableServiceClient

from adapters.servicebus import ServiceBusSender, client_from_settings
from adapters.table_store import TableStateStore
from engine.agent import Agent
from engine.clock import SystemClock
from engine.parts import EngineParts
from engine.scheduler import Scheduler
from engine.supervisor import Supervisor
from engine.tasks import TaskService

from .services import RemoteServices
from .settings import Settings, load_settings
from .workflow import FULFILMENT


@dataclass
class Runtime:
    """Everything the functions call into."""

    tasks: TaskService
    scheduler: Scheduler
    supervisor: Supervisor
    agents: dict[str, Agent]


async def _store(settings: Settings) -> TableStateStore:
    if settings.state_store_connection:
        service = TableServiceClient.from_connection_string(settings.state_store_connection)
    else:
        from azure.identity.aio import DefaultAzureCredential  # only needed in Azure

        credential = DefaultAzureCredential(managed_identity_client_id=settings.azure_client_id)
        service = TableServiceClient(endpoint=str(settings.state_store_endpoint), credential=credential)
    return await TableStateStore.from_service(
        service, settings.state_table_name, shards=settings.state_shards
    )


async def build(settings: Settings) -> Runtime:
    """Wire the engine to Table Storage, Service Bus and the remote services."""
    clock = SystemClock()
    engine_settings = settings.engine()
    store = await _store(settings)
    sender = ServiceBusSender(client_from_settings(dict(os.environ)))
    services = RemoteServices(settings.service_urls, keys=settings.service_keys)
    actions = services.actions()
    agents = {
        name: Agent.for_workflow(FULFILMENT, name, actions[name], sender, clock) for name in FULFILMENT.agents
    }
    parts = EngineParts(FULFILMENT, store, sender, clock, engine_settings)
    return Runtime(
        tasks=TaskService(parts),
        scheduler=Scheduler(parts),
        supervisor=Supervisor(parts),
        agents=agents,
    )


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
        building = loop.create_task(build(load_settings()), name="orders-runtime")
        _runtimes[loop] = building
    return await asyncio.shield(building)
