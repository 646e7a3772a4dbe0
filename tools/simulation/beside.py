"""The previous release's processes beside this release's in one run (``Simulation(beside="1.0.0")``,
``python -m simulation --beside 1.0.0``): requirement 8 of issue 53, the simulation's side of
docs/upgrading.md's "Two releases side by side".

Half the processes (slots drawn from the seed, kept across restarts: a process restarts on the code it ran)
build their host from the release's own modules (:mod:`simulation.previous`): its ``EngineParts``,
``Scheduler``, ``Agent``, ``Supervisor``, ``Retention``, ``TaskService``, callback route and breakers, its
``TableStateStore`` on the same simulated tables, its catalog and settings. The others run this release,
holding the formats switch at the previous formats (as ``orders-devhost --hold-formats`` and a deployment
under way do), so they write records and messages the previous release reads, and seal nothing. Messages
cross between them as the JSON the sending release's adapter wrote, each process parsing it with its own
release's models.

What is the harness's, not a release's: the simulated services, the broker and the tables, the oracle
(which reads every record and message with this release's models: what this release reads of the other's).
Where the harness hands a release's object to its own code (a failure, a callback's answer, a request to a
service), it is translated by name or through its JSON.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from azure.servicebus.aio import ServiceBusClient
from opentelemetry.trace import SpanKind

from engine import errors, queues, sealing, tracing
from engine.formats import BEFORE_SWITCH, FORMAT_PROPERTY
from engine.messages import AgentReply, AgentRequest
from engine.workflow import WorkflowCatalog
from orders.callbacks import Refused, Taken

from . import previous
from .actors import THIS, Host
from .bus import Message
from .profile import with_breakers
from .servicebus_client import SimServiceBusClient
from .tables import Change, Table

if TYPE_CHECKING:
    from .run import Simulation
    from .storage import Requests
    from .world import Worker

# The span a function of each queue opens (as actors._SPANS: the host's, whichever release it runs).
_SPANS = {queues.SCHEDULER_QUEUE: tracing.SCHEDULER_COMMAND, queues.REPLY_QUEUE: tracing.SCHEDULER_REPLY}


def _translated(exc: BaseException, module: Any) -> BaseException:
    """``exc`` as the class of the same name in ``module`` (one release's errors as the other's), its
    arguments and attributes kept; ``exc`` itself if ``module`` has no such class."""
    cls = getattr(module, type(exc).__name__, None)
    if not isinstance(cls, type) or not issubclass(cls, BaseException):
        return exc
    made = cls.__new__(cls)
    made.args = exc.args
    made.__dict__.update(exc.__dict__)
    return made


def _dump(model: Any) -> Any:
    """A declaration's part as data (the two releases' classes are not one another's)."""
    return model.model_dump(mode="json") if model is not None else None


def _sealed(value: Any, path: str = "payload") -> list[str]:
    """Where ``value`` holds a sealed value (engine.sealing), by path."""
    if sealing.is_sealed(value):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _sealed(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _sealed(v, f"{path}[{i}]")]
    return []


def _structure(workflow: Any) -> list[tuple[Any, ...]]:
    """What both releases must declare alike for one run to hold orders of either."""
    return [
        (s.name, s.agent, s.action, s.compensation, type(s.wait).__name__ if s.wait else None, _dump(s.when))
        for s in workflow.steps
    ]


def declared_by_both(catalog: WorkflowCatalog, version: str) -> WorkflowCatalog:
    """The workflows of ``catalog`` that release ``version`` declares too (the same name and version): one
    declared since (a workflow of its own, a new version) is not the release's to run, and is left out.
    One it declares otherwise is kept, for :class:`Beside` to refuse."""
    theirs = {(w.name, w.version) for w in previous.load(version, "orders.catalog").CATALOG.workflows}
    kept = tuple(w for w in catalog.workflows if (w.name, w.version) in theirs)
    if not kept:
        raise ValueError(f"beside {version}: the release declares none of the run's workflows")
    return catalog if len(kept) == len(catalog.workflows) else WorkflowCatalog(workflows=kept)


class PreviousTasks:
    """The previous release's ``TaskService`` as the simulation's actors call it: its refusals raised as
    this release's (the actors tell a refusal from a fault by class), a search asked with its own query."""

    def __init__(self, tasks: Any, release: Any) -> None:
        self._tasks = tasks
        self._release = release
        self.parts = tasks.parts

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        method = getattr(self._tasks, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return await method(*args, **kwargs)
            except self._release.errors.EngineError as exc:
                raise _translated(exc, errors) from None

        return call

    async def search(self, query: Any, page_size: int, continuation: str | None) -> Any:
        asked = self._release.search.SearchQuery.model_validate(query.model_dump())
        return await self.__getattr__("search")(asked, page_size, continuation)


class PreviousCallbacks:
    """The previous release's callback route, answering as this release's does (``Taken`` with the reply
    read as this release reads it, or ``Refused``), for the oracle."""

    def __init__(self, callbacks: Any) -> None:
        self._callbacks = callbacks

    async def receive(self, service: str, headers: dict[str, str], body: bytes) -> Taken | Refused:
        answer = await self._callbacks.receive(service, headers, body)
        if hasattr(answer, "reply"):
            return Taken(AgentReply.model_validate_json(answer.reply.model_dump_json(by_alias=True)))
        return Refused(answer.status, answer.code, answer.message)


class Release:
    """The previous release's modules, under their own names."""

    def __init__(self, version: str) -> None:
        def load(name: str) -> Any:
            return previous.load(version, name)

        self.version = version
        self.parts, self.scheduler, self.supervisor = (
            load("engine.parts"),
            load("engine.scheduler"),
            load("engine.supervisor"),
        )
        self.retention, self.tasks, self.agent = (
            load("engine.retention"),
            load("engine.tasks"),
            load("engine.agent"),
        )
        self.errors, self.messages, self.inbound = (
            load("engine.errors"),
            load("engine.messages"),
            load("engine.inbound"),
        )
        self.settings, self.search = load("engine.settings"), load("engine.search")
        self.table_store, self.breaker_store = load("adapters.table_store"), load("adapters.breaker_store")
        self.servicebus = load("adapters.servicebus")
        self.catalog, self.callbacks = load("orders.catalog"), load("orders.callbacks")


class Beside:
    """Which processes of a run are the previous release's, and how each builds its host."""

    def __init__(self, sim: Simulation, version: str, breaker_io: Requests) -> None:
        if not sim.servicebus:
            raise ValueError("beside: messages cross releases as JSON, through the Service Bus adapter")
        self.sim = sim
        self.release = release = Release(version)
        self.version = version
        # The run's catalog must be one both releases declare alike (the same workflows and versions).
        theirs = {(w.name, w.version): w for w in release.catalog.CATALOG.workflows}
        for workflow in sim.catalog.workflows:
            found = theirs.get((workflow.name, workflow.version))
            if found is None or _structure(found) != _structure(workflow):
                raise ValueError(
                    f"beside {version}: {workflow.name} v{workflow.version} is not declared alike by both"
                )
        self.catalog = _with_profile(release.catalog.CATALOG, sim)
        names = {f.name for f in dataclasses.fields(release.settings.EngineSettings)}
        self.settings = release.settings.EngineSettings(
            **{n: getattr(sim.settings, n) for n in names if hasattr(sim.settings, n)}
        )
        self.services = release.catalog.SERVICES
        self.breakers = release.breaker_store.TableBreakerStore(sim.storage.breaker_client(breaker_io))
        # Half the slots, at least one of each release; from the seed, without drawing from the run's own
        # generator (what the rest of the run draws stays as it would be).
        slots = sim.profile.workers
        self.slots = frozenset(random.Random(f"beside:{sim.seed}").sample(range(slots), slots // 2))
        self.work: dict[str, Counter[str]] = {version: Counter(), THIS: Counter()}
        storage = sim.storage
        for table in (storage.live, storage.watch, storage.history, storage.search):
            table.observers.append(self._written)

    def _written(self, table: Table, pk: str, changes: list[Change]) -> None:
        """Before the switch every record is written in a format the release before reads: format 1, nothing
        sealed (docs/upgrading.md, "The formats switch")."""
        for change in changes:
            row = change.after
            if row is None:
                continue
            written = row.props.get(FORMAT_PROPERTY)
            sealed = [n for n, v in row.props.items() if isinstance(v, str) and sealing.PREFIX in v]
            if (written is not None and written != BEFORE_SWITCH) or sealed:
                where = f"{table.name}: {pk}|{change.row_key}"
                self.sim.oracle.violation("", f"{where} written in format {written}, sealed {sealed}")

    def runs(self, worker: Worker) -> bool:
        """Whether ``worker`` runs the previous release."""
        return worker.slot in self.slots

    def build_host(self, worker: Worker) -> Host:
        """The previous release's engine as its Function App builds it (its ``orders.runtime``), on the
        simulated ports: as 1.0.0's own simulation built it."""
        sim, release = self.sim, self.release
        store = release.table_store.TableStateStore(
            **sim.storage.store_arguments(sim.world, marks=sim.submit_as_app, search=sim.storefronts)
        )
        sender = release.servicebus.ServiceBusSender(cast(ServiceBusClient, SimServiceBusClient(sim.bus)))
        parts = release.parts.EngineParts(
            self.catalog, store, sender, sim.clock, self.settings, self.breakers, new_id=sim.world.new_id
        )
        agents = {
            name: release.agent.Agent.for_catalog(
                self.catalog,
                name,
                {action: self._action(call) for action, call in sim.actions[name].items()},
                sender,
                sim.clock,
                breakers=self.breakers,
                instance_id=worker.name,
            )
            for name in self.catalog.agents
        }
        policy = release.retention.RetentionPolicy(
            retention=timedelta(seconds=sim.profile.retention_seconds),
            batch=sim.world.rng.choice((3, 20, 200)),
            max_seconds=1e12,
            idle=timedelta(seconds=sim.profile.sweep_seconds * 3),
        )
        scheduler = release.scheduler.Scheduler(parts, worker.name)
        tasks = release.tasks.TaskService(parts, scheduler if sim.submit_as_app else None)

        async def task_service() -> Any:
            return tasks

        callbacks = release.callbacks.Callbacks(
            self.services, sim.webhooks.secrets, task_service, sim.webhooks.now
        )
        return Host(
            tasks=cast(Any, PreviousTasks(tasks, release)),
            scheduler=scheduler,
            supervisor=release.supervisor.Supervisor(parts),
            retention=release.retention.Retention(store, sim.clock, policy),
            agents=agents,
            callbacks=cast(Any, PreviousCallbacks(callbacks)),
            release=self.version,
            work=self.work[self.version],
            consume=self._consume,
        )

    def _action(self, call: Callable[[AgentRequest, float], Awaitable[Any]]) -> Any:
        """A simulated service's action as the previous release's Agent calls it: the request read as this
        release reads it (the services are the harness's), the service's failures as the release's own."""
        release, oracle = self.release, self.sim.oracle

        async def action(request: Any, timeout: float) -> Any:
            read = AgentRequest.model_validate_json(request.model_dump_json(by_alias=True))
            sealed = _sealed(read.payload)
            if sealed:  # before the switch nothing is sealed: the release before could not open it
                oracle.violation(
                    read.order_id, f"a {self.version} process was to send {sealed} sealed to its service"
                )
            try:
                return await call(read, timeout)
            except (errors.CallError, errors.Accepted) as exc:
                raise _translated(exc, release.errors) from None

        return action

    async def _consume(self, worker: Worker, message: Message) -> None:
        """A Service Bus-triggered function of the previous release (its ``function_app.py``): the body its
        sender wrote, parsed by its own models."""
        host: Host = worker.host
        release, queue = self.release, message.queue
        wire = message.wire if message.wire is not None else message.body
        if not isinstance(wire, bytes):
            raise TypeError(f"beside: a message without its JSON on {queue}")
        with tracing.span(
            _SPANS.get(queue, tracing.AGENT_CALL),
            SpanKind.CONSUMER,
            parent=message.traceparent,
            attributes={tracing.QUEUE: queue},
        ):
            models = {
                queues.SCHEDULER_QUEUE: release.messages.SchedulerCommand,
                queues.REPLY_QUEUE: release.messages.AgentReply,
            }
            model = models.get(queue, release.messages.AgentRequest)
            body = release.inbound.parse(model, wire, queue, message.message_id, message.deliveries)
            await host.dispatch(queue, body)

    def stats(self) -> dict[str, int]:
        """What each release's processes did (``<release> processes: <what>``)."""
        return {
            f"{release} processes: {what}": n
            for release, work in self.work.items()
            for what, n in work.items()
        }


def _with_profile(base: Any, sim: Simulation) -> Any:
    """The release's catalog with the run's breaker settings, as :func:`simulation.profile.with_breakers`."""
    return with_breakers(cast(WorkflowCatalog, base), sim.profile)
