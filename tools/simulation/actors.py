"""Who acts in a simulated run: the processes that host the engine's functions, the client that submits
orders, the application that cancels some, the operator, the approver, and the two timers.

A process is built the way the composition root builds the Function App (``orders.runtime.build``): one
:class:`~engine.parts.EngineParts` over its store, the shared broker and breakers; a Scheduler, one Agent
per declared service, a Supervisor, the retention clean-up and the task service, all the engine's own
classes. The host around them does what the Functions host and ``function_app.py`` do: parse a message
(a malformed one is refused), call the function, complete the message or abandon it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from azure.servicebus.aio import ServiceBusClient
from opentelemetry.trace import SpanKind

from adapters.servicebus import ServiceBusSender
from engine import OperatorAction, operator_actions, queues, tracing
from engine.agent import Agent
from engine.errors import EngineError
from engine.formats import BEFORE_SWITCH, Formats
from engine.inbound import Inbound, receive
from engine.messages import AgentReply, AgentRequest, SchedulerCommand
from engine.parts import EngineParts
from engine.ports import MessageSender
from engine.retention import Retention, RetentionPolicy
from engine.scheduler import Scheduler
from engine.state import TaskRecord
from engine.supervisor import Supervisor
from engine.tasks import Caller, TaskService
from engine.workflow import Timer, WorkflowDefinition
from orders.callbacks import Callbacks

from .bus import Message
from .oracle import OPERATOR_NOTE
from .servicebus_client import SimServiceBusClient
from .world import Crash, StoreUnavailable, Worker

if TYPE_CHECKING:
    from .run import Simulation

# the searchable field the simulated support staff search by (declared by every workflow; simulation.search)
FIELD = "customerId"
THIS = "current"  # the name the run's statistics give this release's processes (simulation.beside)


@dataclass
class Host:
    """What one process runs."""

    tasks: TaskService
    scheduler: Scheduler
    supervisor: Supervisor
    retention: Retention
    agents: dict[str, Agent]
    callbacks: Callbacks  # the callback route's own object (function_app.py's service_callback)
    # Beside another release (simulation.beside): which one this process runs ("": this one, alone), what it
    # did, and how its functions take a message (None: this release's, :func:`consume`).
    release: str = ""
    work: Counter[str] | None = None
    consume: Callable[[Worker, Message], Awaitable[None]] | None = None

    async def dispatch(self, queue: str, body: Any) -> None:
        """Hand a parsed message to the function bound to its queue, as ``function_app.py`` binds them (the
        Scheduler's commands and replies, or the Agent of the service the queue serves)."""
        if queue == queues.SCHEDULER_QUEUE:
            await self.scheduler.handle_command(body)
        elif queue == queues.REPLY_QUEUE:
            await self.scheduler.handle_reply(body)
        else:
            await self.agents[queue.removeprefix(queues.AGENT_QUEUE_PREFIX)].handle(body)


def build_host(sim: Simulation, worker: Worker) -> Host:
    """The engine as a process of the Function App builds it, on the simulated ports (beside another
    release, the process may be one of that release's: :mod:`simulation.beside`)."""
    beside = sim.beside
    if beside is not None and beside.runs(worker):
        return beside.build_host(worker)
    store = sim.storage.state_store(sim.world, marks=sim.submit_as_app, search=sim.storefronts)
    # The adapter's sender, one per process as in the Function App; or the broker itself, as the regression
    # seeds were found (see Simulation).
    sender: MessageSender = (
        ServiceBusSender(cast(ServiceBusClient, SimServiceBusClient(sim.bus))) if sim.servicebus else sim.bus
    )
    parts = EngineParts(
        sim.catalog, store, sender, sim.clock, sim.settings, sim.breakers, new_id=sim.world.new_id
    )
    if beside is not None:
        # Beside the release before, the switch is held (orders-devhost --hold-formats): this release writes
        # the formats that release reads, and seals nothing.
        store.formats = Formats(BEFORE_SWITCH)
        parts = dataclasses.replace(parts, formats=store.formats)
    agents = {
        name: Agent.for_catalog(
            sim.catalog,
            name,
            sim.actions[name],
            sender,
            sim.clock,
            breakers=sim.breakers,
            instance_id=worker.name,
        )
        for name in sim.catalog.agents
    }
    policy = RetentionPolicy(
        retention=timedelta(seconds=sim.profile.retention_seconds),
        batch=sim.world.rng.choice((3, 20, 200)),
        max_seconds=1e12,  # bounded by batches, not the wall clock (a run must not depend on it)
        idle=timedelta(seconds=sim.profile.sweep_seconds * 3),
    )
    # As orders.runtime builds them: a submission writes its new task claimed by the submitting process.
    scheduler = Scheduler(parts, worker.name)
    tasks = TaskService(parts, scheduler if sim.submit_as_app else None)

    async def task_service() -> TaskService:
        return tasks

    return Host(
        tasks=tasks,
        scheduler=scheduler,
        supervisor=Supervisor(parts),
        retention=Retention(store, sim.clock, policy),
        agents=agents,
        # As function_app.py builds it: the declared services, the secrets the run sets, this process's tasks.
        callbacks=Callbacks(sim.service_definitions, sim.webhooks.secrets, task_service, sim.webhooks.now),
        release=THIS if beside is not None else "",
        work=beside.work[THIS] if beside is not None else None,
    )


_MODELS: dict[str, type[SchedulerCommand | AgentReply | AgentRequest]] = {
    queues.SCHEDULER_QUEUE: SchedulerCommand,
    queues.REPLY_QUEUE: AgentReply,
}


_SPANS = {queues.SCHEDULER_QUEUE: tracing.SCHEDULER_COMMAND, queues.REPLY_QUEUE: tracing.SCHEDULER_REPLY}


async def consume(worker: Worker, message: Message) -> None:
    """A Service Bus-triggered function, as ``function_app.py`` binds it (in a span, under the sender's)."""
    host: Host = worker.host
    try:
        if host.consume is not None:
            await host.consume(worker, message)
        else:
            await _consume(host, message)
    except Exception as exc:
        if host.work is not None:  # beside another release: what each release's functions raised
            host.work[f"failed: {type(exc).__name__}"] += 1
        raise
    if host.work is not None:
        host.work[_WORK.get(message.queue, "agent requests")] += 1
        if message.origin and message.origin != host.release:  # written by the other release's process
            host.work["messages the other release sent"] += 1


_WORK = {queues.SCHEDULER_QUEUE: "commands", queues.REPLY_QUEUE: "replies"}


async def _consume(host: Host, message: Message) -> None:
    body = message.body
    queue = message.queue
    with tracing.span(
        _SPANS.get(queue, tracing.AGENT_CALL),
        SpanKind.CONSUMER,
        parent=message.traceparent,
        attributes={tracing.QUEUE: queue},
    ):

        async def handle(parsed: Any) -> None:
            await host.dispatch(queue, parsed)

        async def parts() -> EngineParts:
            return host.tasks.parts

        if isinstance(body, bytes):  # what arrives off the wire: parsed, passed over, or refused as poison
            inbound = Inbound(body, queue, message.message_id, message.deliveries)
            await receive(_MODELS.get(queue, AgentRequest), inbound, handle, parts)
        else:
            await handle(body)


async def _submit(
    host: Host,
    order_id: str,
    document: dict[str, Any],
    identity: str,
    workflow: str,
    storefront: str | None = None,
) -> tuple[bool, TaskRecord]:
    """``POST /api/orders``, as ``function_app.py`` binds it: the order's trace starts here."""
    with tracing.span(tracing.ORDER_SUBMIT, SpanKind.SERVER):
        done = await host.tasks.submit(order_id, document, identity, workflow, storefront)
    if host.work is not None:
        host.work["submissions"] += 1
    return done


def _retrieve(task: asyncio.Task[Any]) -> None:
    """A function's failure is the host's to log; the simulation only needs it collected."""
    if not task.cancelled():
        task.exception()


async def in_process[T](sim: Simulation, call: Callable[[Host], Awaitable[T]]) -> T:
    """Run ``call`` as one HTTP request to a running process (raises what the request raised, or
    :class:`Crash` if the process died under it)."""
    worker = sim.world.any_alive()
    while worker is None:
        await asyncio.sleep(0.5)
        worker = sim.world.any_alive()
    host: Host = worker.host

    async def request() -> T:
        return await call(host)

    try:
        return await sim.world.run_in(worker, request())
    except asyncio.CancelledError:
        if not worker.dead:
            raise
        # The process died under the request: what waited on its other coroutines (a send the adapter's
        # flusher was making when it died) is cancelled. The caller gets no answer, as from any crash.
        raise Crash("the process died during the request") from None


# ---- the client ---------------------------------------------------------------------------------------
class Client:
    """The storefront: submits each order at its time, retries a request that failed or whose process
    died (it cannot tell whether it was written), and submits some orders again later."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.submissions: dict[str, list[str]] = {}
        self.documents: dict[str, dict[str, Any]] = {}
        self._examples: dict[tuple[str, int], list[dict[str, Any]]] = {}

    def order(
        self, order_id: str, workflow: WorkflowDefinition, client_id: str | None = None
    ) -> dict[str, Any]:
        """The order's input as the API stores it: one of its workflow's examples, chosen from the seed,
        validated and dumped by the workflow's input model (``orders.models.order_input``: camelCase,
        defaults filled in), with the id its client gave (``client_id``; a storefront's task id is
        ``order_id``). A workflow without examples gets a line of items. Where the run has storefronts,
        each id's customer is its own (``<the example's>-<id>``), so that a search for it finds the orders
        of that id only."""
        key = (workflow.name, workflow.version)
        examples = self._examples.get(key)
        if examples is None:
            examples = self._examples[key] = workflow.examples() if workflow.input is not None else []
        client_id = client_id or order_id
        if workflow.input is None or not examples:
            document: dict[str, Any] = {"orderId": client_id, "items": [{"sku": "sku-0", "quantity": 1}]}
        else:
            # Drawn only where there is a choice: a catalog of one example each draws what it drew before.
            choice = self.sim.world.rng.randrange(len(examples)) if len(examples) > 1 else 0
            example = examples[choice]
            fields = workflow.input.model_validate(example).model_dump(by_alias=True, mode="json")
            if self.sim.storefronts and isinstance(fields.get(FIELD), str):
                fields[FIELD] = f"{fields[FIELD]}-{client_id}"
            self._timers_within_the_run(workflow, fields, order_id)
            document = {"orderId": client_id, **fields}
        self.documents[order_id] = document
        return document

    def _timers_within_the_run(
        self, workflow: WorkflowDefinition, fields: dict[str, Any], order_id: str
    ) -> None:
        """An example's time for a timer ``until`` an input field is a date of the real world, which the run's
        virtual clock may be hours or months before: the order would wait that long, and every sweep of
        every process run meanwhile. As the profile shortens a declared delay (``timer_seconds``), the time
        is moved to within the run: already past, or up to two of the profile's timers from now, by the
        order's id (no draw from the seed's generator: catalogs without such a timer run as before). An
        example that leaves the field out keeps it out (the wait ends at once)."""
        for step in workflow.steps:
            if not isinstance(step.wait, Timer) or step.wait.until is None:
                continue
            name = step.wait.until.removeprefix("input.")
            if "." in name or fields.get(name) is None:
                continue  # a nested field is left as the example has it
            share = int(hashlib.sha256(order_id.encode()).hexdigest()[:4], 16) % 3  # past, one timer, two
            seconds = (-1.0, 1.0, 2.0)[share] * max(self.sim.profile.timer_seconds, 1.0)
            fields[name] = (self.sim.clock.now() + timedelta(seconds=seconds)).isoformat()

    def body(self, order_id: str, variant: int) -> tuple[dict[str, Any], str]:
        """The order's body and its hash (another variant: another hash, as for a body that differs; the
        fields stay the same, so the order's input is known whichever submission wins)."""
        return self.documents[order_id], f"{order_id}#{variant}"

    async def submit(self, order_id: str, workflow: str, variant: int = 0) -> None:
        """Submit the order as ``POST /api/orders`` does (a storefront's under its scoped id)."""
        sim = self.sim
        document, identity = self.body(order_id, variant)
        outcomes = self.submissions.setdefault(order_id, [])
        truth = sim.oracle.orders[order_id]
        storefront = truth.storefront
        task_id = queues.scoped_id(truth.client_id, storefront)
        for attempt in range(1000):
            try:
                created, _ = await in_process(
                    sim, lambda host: _submit(host, task_id, document, identity, workflow, storefront)
                )
            except (Crash, StoreUnavailable):
                sim.oracle.may_watch_until(order_id)
                await asyncio.sleep(sim.world.rng.uniform(0.1, 2.0) * (1 + min(attempt, 5)))
                continue
            except EngineError as exc:
                sim.oracle.may_watch_until(order_id)
                outcomes.append(type(exc).__name__)
                sim.oracle.note(order_id, f"submission #{variant} refused: {type(exc).__name__}")
                return
            sim.oracle.may_watch_until(order_id)
            outcomes.append("created" if created else "exists")
            sim.oracle.note(order_id, f"submission #{variant}: {'created' if created else 'exists'}")
            return
        sim.oracle.violation(order_id, "the client could not submit the order in 1000 tries")


# ---- the operator and the application ---------------------------------------------------------------
class Operator:
    """People acting on orders through the API: the application cancels some; an operator retries,
    extends, skips and resubmits, mostly on orders that need it (in Error, or in flight), sometimes on
    any (the API must refuse what the state does not allow, and change nothing)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    async def cancel(self, order_id: str) -> None:
        """The application cancels the order (no version: whatever is current)."""
        await self.send(order_id, operator_actions.CANCEL, actor="application")

    async def act(self, order_id: str) -> None:
        sim = self.sim
        rng = sim.world.rng
        try:
            record = await in_process(sim, lambda host: host.tasks.get(order_id))
        except (Crash, StoreUnavailable, EngineError):
            return
        state = record.state
        step = record.steps[state.current_step]
        version = record.version if rng.random() < 0.5 else None
        definition = sim.catalog.find(state.workflow, state.workflow_version)
        # An update of the input, where the order's workflow declares one (no draw otherwise): a customer
        # corrects the order, racing the step that reads the field.
        if definition is not None and definition.updates and rng.random() < 0.4:
            await self.update(order_id, record.input, definition, version)
            return
        action = rng.random()
        if step.status.value == "Waiting":  # a wait (only in a catalog that has waits: no draw otherwise)
            if state.process_state.value == "Error":  # an approval past its deadline, policy error
                choice = ("retry", "approve", "reject", "skip", "resubmit")[int(action * 5)]
            else:
                choice = ("extend", "skip", "cancel", "approve", "reject", "retry")[int(action * 6)]
        elif state.process_state.value == "Error":
            if (state.last_error or "").startswith("compensation of"):
                sim.services.fix(order_id, state.current_step)
            choice = ("resubmit", "retry", "skip")[int(action * 3)]
        elif state.process_state.in_flight:
            choice = ("retry", "extend", "skip", "cancel", "retry", "extend")[int(action * 6)]
        else:
            choice = ("retry", "extend", "skip", "cancel", "resubmit")[int(action * 5)]
        name = step.name
        group = definition.group_range(state.current_step) if definition is not None else range(0)
        if len(group) > 1:  # any step of the group that runs (drawn only where the order has groups)
            name = record.steps[group[rng.randrange(len(group))]].name
        if rng.random() < 0.1:  # another step than the current one: refused
            name = record.steps[rng.randrange(len(record.steps))].name
        seconds = rng.uniform(0.5, sim.profile.complete_by_seconds * 2)
        await self.send(order_id, operator_actions.BY_NAME[choice], version, name, seconds)

    async def correct(self, order_id: str) -> None:
        """The customer corrects the order (its workflow declares updates): read it, then update it, with the
        version read or without one."""
        sim = self.sim
        try:
            record = await in_process(sim, lambda host: host.tasks.get(order_id))
        except (Crash, StoreUnavailable, EngineError):
            return
        state = record.state
        workflow = sim.catalog.find(state.workflow, state.workflow_version)
        if workflow is not None and workflow.updates:
            version = record.version if sim.world.rng.random() < 0.5 else None
            await self.update(order_id, record.input, workflow, version)

    async def update(
        self, order_id: str, current: dict[str, Any], workflow: WorkflowDefinition, version: str | None
    ) -> None:
        """Change one field an update of ``workflow`` may change to another value its examples hold (valid
        for its input model), as the order's submitter would."""
        rng = self.sim.world.rng
        update = workflow.updates[rng.randrange(len(workflow.updates))]
        name = update.fields[rng.randrange(len(update.fields))]
        values = [e[name] for e in workflow.examples() if name in e and e[name] != current.get(name)]
        if not values:
            return
        changes = {name: values[rng.randrange(len(values))]}
        await self.send(order_id, operator_actions.UPDATE, version, changes=changes, actor="application")

    async def send(
        self,
        order_id: str,
        action: OperatorAction,
        version: str | None = None,
        step: str | None = None,
        seconds: float = 0.0,
        actor: str = "operator:simulated",
        changes: dict[str, Any] | None = None,
    ) -> None:
        """Send the action (on ``step`` if it acts on one; ``seconds`` if it takes them); the oracle learns
        what was asked (its token rides in the audit entry's note), and whether it was answered as done."""
        sim = self.sim
        truth = sim.oracle.orders.get(order_id)
        if truth is None:
            return
        what = action.name
        step = step if action.on_step else None
        given = seconds if action.takes_seconds else None
        token = sim.oracle.operator_asked(order_id, what, step, given)
        caller = Caller(actor=actor, note=f"{OPERATOR_NOTE}{token}", version=version)
        # An action that needs a reason is told one of its own; the audit entry keeps the token.
        note = "done by hand" if action.note_required else None
        try:
            # Only an update carries changes (an earlier release's TaskService, beside, takes none).
            more = {"changes": changes} if changes is not None else {}
            await in_process(
                sim, lambda host: host.tasks.act(order_id, action, caller, step, seconds, note, **more)
            )
        except (Crash, StoreUnavailable):
            # Not answered: it may have been saved (and audited) or not.
            truth.operator_unsure[what] = truth.operator_unsure.get(what, 0) + 1
            sim.oracle.note(order_id, f"operator {what}: no answer")
            sim.oracle.operator_answered(order_id, token, done=False)
            return
        except EngineError as exc:
            sim.oracle.note(order_id, f"operator {what}: refused ({type(exc).__name__})")
            sim.oracle.count(f"operator {what} refused")
            sim.oracle.operator_answered(order_id, token, done=False)
            return
        truth.operator_done[what] = truth.operator_done.get(what, 0) + 1
        sim.oracle.count(f"operator {what} done")
        sim.oracle.note(order_id, f"operator {what}: done")
        sim.oracle.operator_answered(order_id, token, done=True)


class Approver:
    """People who decide the approvals (the approver role): each approval an order waits for is approved or
    rejected as the run planned it (``Simulation._decide``: soon, about its deadline, late or never), with
    the version read first or without one; some decide an approval that does not wait (left out, not yet
    come, already decided or expired) or approve a timer, which the engine must refuse."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    async def decide(self, order_id: str, step: str, verdict: str, versioned: bool) -> None:
        sim = self.sim
        version: str | None = None
        if versioned:
            try:
                record = await in_process(sim, lambda host: host.tasks.get(order_id))
            except (Crash, StoreUnavailable, EngineError):
                return
            version = record.version
        action = operator_actions.BY_NAME[verdict]
        await sim.operator.send(order_id, action, version, step, actor="approver:simulated")


# ---- the timers -----------------------------------------------------------------------------------------
class Timers:
    """The Supervisor's and the clean-up's timer: each fires on one running process; a run still going
    when the next is due is skipped, unless the profile lets two overlap (two instances)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.running: dict[str, int] = {"sweep": 0, "retention": 0}
        self.sweeps = 0
        self.parked = 0  # what the sweeps that ended reported: orders parked, and promoted by the calendar
        self.promoted = 0

    def start(self) -> None:
        self.sim.loop.call_later(self.sim.profile.sweep_seconds, self._tick)

    def _tick(self) -> None:
        sim = self.sim
        if sim.stopped:
            return
        overlap = sim.world.rng.random() < sim.profile.overlapping_sweeps
        for what in ("sweep", "retention"):
            if self.running[what] and not overlap:
                continue
            worker = sim.world.any_alive()
            if worker is None:
                continue
            self.running[what] += 1
            host: Host = worker.host
            job = host.supervisor.sweep() if what == "sweep" else host.retention.run()
            task = sim.world.run_in(worker, self._run(what, job, host))
            task.add_done_callback(_retrieve)
        sim.loop.call_later(sim.profile.sweep_seconds, self._tick)

    async def _run(self, what: str, job: Awaitable[Any], host: Host) -> None:
        started = self.sim.loop.time()
        if what == "sweep":
            self.sim.oracle.sweep_started(started)
        try:
            report = await job
            if what == "sweep":
                self.sweeps += 1
                if host.work is not None:
                    host.work["sweeps"] += 1
                self.parked += report.parked
                self.promoted += report.promoted
                self.sim.oracle.swept(started, None)
            elif self.sim.searches is not None:
                self.sim.searches.cleanup_ended(started, self.sim.loop.time())
        except BaseException as exc:  # also its process's death, or the run's end
            if what == "sweep":
                self.sim.oracle.swept(started, exc)
            raise
        finally:
            self.running[what] -= 1
