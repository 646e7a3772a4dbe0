"""One seeded run: build the world from the seed, let the orders arrive under faults, stop the faults, wait
for everything to settle, check the invariants.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import importlib
import importlib.util
import logging
import random
import time
from collections.abc import Awaitable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine import queues
from engine.settings import EngineSettings
from engine.workflow import Approval, Timer, WorkflowCatalog, WorkflowDefinition
from orders.services.declaration import ServiceDefinition

from . import checks
from .actors import Approver, Client, Operator, Timers, build_host, consume
from .beside import Beside, declared_by_both
from .bus import Bus
from .callbacks import Webhooks
from .liveness import Limits
from .loop import VirtualClock, VirtualLoop
from .oracle import AlertHandler, Oracle
from .profile import Profile, draw, with_breakers
from .search import SearchModel
from .services import Declarations, Services
from .storage import HISTORY, LIVE, WATCH, Storage
from .traces import RunSpans
from .world import StoreUnavailable, Worker, World

# Storefronts (where the run has them): the two that submit beside orders of no storefront, the share of
# orders that reuse the id of the order before them from another one, and the share support staff search for.
_STOREFRONTS: tuple[str | None, ...] = ("web", "kiosk", None)
_SAME_ID = 0.1
_SEARCHED = 0.05
_UPDATED = 0.5  # the share of orders whose customer corrects them, where a workflow lets them
# The cyclic garbage collector's youngest generation while a run lasts: a run makes garbage in reference
# cycles (tasks and their coroutines, exceptions and their tracebacks) at a high rate, and at Python's
# default of 2,000 allocations the collector ran about 350 times a run of 300 orders, 7% of its CPU, mostly
# walking objects that were about to die anyway. The other generations' thresholds are left as they are.
_GC_YOUNG = 20_000


def _input_keys(seed: int) -> dict[str, Any]:
    """The key that seals the declared sensitive input fields (``INPUT_ENCRYPTION_KEY``), as the app settings
    give one, its nonces drawn from the seed so that a run is reproduced exactly (none where the engine
    seals nothing)."""
    if importlib.util.find_spec("engine.sealing") is None:
        return {}
    sealing = importlib.import_module("engine.sealing")
    nonces = random.Random(f"nonces:{seed}").randbytes
    return {"input_keys": sealing.Keyring(sealing.InputKey("simulation", bytes(32)), nonces=nonces)}


def _task_id(client_id: str, storefront: str | None) -> str:
    """The task of a storefront's order: ``<storefront>.<id>`` (docs/operating.md, "Storefronts")."""
    return f"{storefront}.{client_id}" if storefront else client_id


def _wait_seconds(catalog: WorkflowCatalog, profile: Profile) -> dict[str, float]:
    """The waits' durations, by the setting each names (as the app settings give them): a timer's is the
    run's timer, an approval's deadline the run's. A wait that names no setting keeps its declared one."""
    found: dict[str, float] = {}
    for workflow in catalog.workflows:
        for step in workflow.steps:
            if isinstance(step.wait, Timer) and step.wait.setting:
                found[step.wait.setting] = profile.timer_seconds
            elif isinstance(step.wait, Approval) and step.wait.setting:
                found[step.wait.setting] = profile.approval_seconds
    return found


def _has_waits(catalog: WorkflowCatalog) -> bool:
    """Whether a workflow of the catalog has a step that waits for a timer or an approval (what parks)."""
    return any(isinstance(step.wait, Timer | Approval) for w in catalog.workflows for step in w.steps)


@dataclass(frozen=True)
class ApprovalPlan:
    """What the approver does with one approval once it waits: ``verdict`` (approve or reject), ``when``
    (``soon``: within the deadline; ``deadline``: about when it passes, racing the Supervisor; ``late``:
    after the Supervisor applied it; ``never``), ``at`` (where in that span, 0 to 1), ``versioned`` (with
    the version read first, as a person who looked at the order does) and ``cancel`` (the application
    cancels the order at the same moment)."""

    verdict: str
    when: str
    at: float
    versioned: bool
    cancel: bool


@dataclass
class Result:
    """What a run found."""

    seed: int
    profile: Profile
    violations: list[tuple[str, str]]
    states: dict[str, int]
    virtual_seconds: float
    wall_seconds: float
    cpu_seconds: float  # the process's CPU time: what a run costs on one core, whatever else runs beside
    digest: str
    stats: dict[str, Any] = field(default_factory=dict)
    traces: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    beside: str | None = None  # the earlier release half the processes ran (Simulation's ``beside``)

    @property
    def ok(self) -> bool:
        """No invariant broken."""
        return not self.violations

    @property
    def orders(self) -> int:
        return self.profile.orders

    def report(self, traces: int = 2) -> str:
        """The run in a few lines; with violations, the first ones and the trace of their orders."""
        lines = [
            f"seed {self.seed}: {'ok' if self.ok else 'FAILED'} - {self.orders} orders "
            f"{' '.join(f'{k}={v}' for k, v in sorted(self.states.items()))}; "
            f"{self.virtual_seconds:.0f} simulated s in {self.cpu_seconds:.2f} s of CPU; "
            f"digest {self.digest}",
            f"  profile: {self.profile.describe()}",
        ]
        if self.violations:
            lines.append(f"  {len(self.violations)} violation(s):")
            lines += [f"    {order or '-'}: {what}" for order, what in self.violations[:20]]
            shown = 0
            for order, _ in self.violations:
                if order in self.traces and shown < traces:
                    shown += 1
                    lines.append(f"  trace of {order}:")
                    lines += [f"    {t:10.3f} {what}" for t, what in self.traces[order][-60:]]
            beside = f" BESIDE={self.beside}" if self.beside else ""
            lines.append(f"  reproduce: make simulate SEED={self.seed} ORDERS={self.orders}{beside}")
        return "\n".join(lines)


def default_catalog() -> WorkflowCatalog:
    """The declared workflows (the simulation is local tooling: it reads the declaration)."""
    from orders.catalog import CATALOG

    return CATALOG


def default_services() -> tuple[ServiceDefinition, ...]:
    """The declared services: the bodies their calls carry and the values their applies return."""
    from orders.catalog import SERVICES

    return SERVICES


class Simulation:
    """The world of one seed."""

    def __init__(
        self,
        seed: int,
        orders: int | None = None,
        catalog: WorkflowCatalog | None = None,
        max_orders: int | None = None,
        servicebus: bool = True,
        services: Sequence[ServiceDefinition] | None = None,
        submit_as_app: bool = True,
        storefronts: bool | None = None,
        first_violation: bool = False,
        beside: str | None = None,
    ) -> None:
        """``beside``: a previous release (``"1.0.0"``) whose engine and adapters run half the processes,
        beside this release's (:mod:`simulation.beside`; on the declared workflows the release declares too,
        through the Service Bus adapter). Raises ``devhost.releases.ReleaseUnavailable`` where this clone's
        history lacks it.

        ``first_violation``: end the run at its first violation, unchecked further (what a planted
        bug's test needs: the run up to it is the same).

        ``servicebus``: the processes send through ``adapters.servicebus`` (False: straight to the broker,
        as the regression seeds of tests/simulation/regressions.py were found; the adapter coalesces sends,
        so the same seed explores other interleavings through it).

        ``submit_as_app``: a submission marks its id in the history and claims its new task with its
        process's Scheduler, as the app's does (False: it reads the history and kicks the Scheduler, as when
        the regression seeds were found, before marks and the claim at submission; a seed explores other
        interleavings either way).

        ``catalog`` and ``services``: the workflows and the services they run on (default: the declared
        ones). A catalog given without its services runs on services that take no body and return no
        values (the catalog the regression seeds were found on: tests/simulation/catalogs.py).

        ``storefronts``: the store keeps search entries and support staff search, and storefronts submit
        orders beside those of no storefront (default: on the declared catalog only, so that the seeds of the
        pinned catalogs explore what they explored)."""
        base = catalog or default_catalog()
        if beside is not None and catalog is None:
            base = declared_by_both(base, beside)
        self.storefronts = catalog is None if storefronts is None else storefronts
        self.first_violation = first_violation
        self._main_task: asyncio.Task[None] | None = None
        if services is None:
            services = default_services() if catalog is None else ()
        declarations = Declarations(services)
        self.service_definitions = tuple(services)
        self.declarations = declarations
        self.seed = seed
        self.servicebus = servicebus
        self.submit_as_app = submit_as_app
        self.profile = profile = draw(seed, base.agents, orders, max_orders)
        self.loop = VirtualLoop()
        self.clock = VirtualClock(self.loop)
        self.world = World(profile, random.Random(seed), self.loop)
        self.spans = RunSpans()
        self.catalog = with_breakers(base, profile)
        self.settings = EngineSettings(
            step_complete_by_seconds=profile.complete_by_seconds,
            supervisor_max_failures=profile.max_failures,
            backoff_base_seconds=profile.backoff_base_seconds,
            backoff_max_seconds=profile.backoff_max_seconds,
            cancel_grace_seconds=profile.cancel_grace_seconds,
            wait_seconds=_wait_seconds(self.catalog, profile),
            # Parking only where something waits: with a horizon the Supervisor reads the calendar's cursor
            # every sweep, which would change what the seeds of catalogs without waits explore.
            park_horizon_seconds=profile.park_horizon_seconds if _has_waits(self.catalog) else 0.0,
            **_input_keys(seed),
        )
        declarations.keys = self.settings.input_keys  # the calls' bodies open what the engine sealed
        self.oracle = Oracle(
            self.catalog,
            self.loop.time,
            profile.max_failures,
            declarations.returns,
            settings=self.settings,
            asynchronous=declarations.asynchronous,
        )
        self.oracle.dispatched = self._dispatched
        if first_violation:
            self.oracle.first_violation = self._stop_early
        self.cancel_on_dispatch: dict[str, int] = {}  # order -> the step it is cancelled at, once dispatched
        # order -> a step whose service may answer later, cancelled while its service may still be deciding
        self.cancel_while_deciding: dict[str, int] = {}
        # Waits: order -> (the wait it is cancelled in, where in it); (order, step) -> what the approver does
        # once the approval waits; (order, step) -> where in a timer an approver (wrongly) approves it.
        self.cancel_in_wait: dict[str, tuple[int, float]] = {}
        self.decisions: dict[tuple[str, int], ApprovalPlan] = {}
        self.mistakes: dict[tuple[str, int], float] = {}
        self.storage = Storage(self.oracle)
        self.searches = SearchModel(self) if self.storefronts else None
        self.storage.places = self.searches
        self.breakers = self.storage.breaker_store(_BreakerRequests(self.world, self.oracle))
        self.services = Services(self.world, self.catalog, self.oracle, declarations)
        self.actions = self.services.actions()
        # The services that answer later call back through each process's callback route.
        self.webhooks = Webhooks(self)
        self.services.call_back = self.webhooks.send
        consumed = {
            queues.SCHEDULER_QUEUE,
            queues.REPLY_QUEUE,
            *(queues.agent_queue(a) for a in self.catalog.agents),
        }
        self.bus = Bus(self.world, self.oracle, consume, consumed)
        self.client = Client(self)
        self.operator = Operator(self)
        self.approver = Approver(self)
        self.timers = Timers(self)
        self.stopped = False
        self.outstanding = 0  # client, application and operator actions not finished yet
        self.quiet_at = 0.0
        self.bound = 0.0
        self.beside: Beside | None = None
        if beside is not None:
            self.beside = Beside(self, beside, _BreakerRequests(self.world, self.oracle))
        self.world.on_restart = self._host
        self.world.workers = [self._built(Worker(slot, 0)) for slot in range(profile.workers)]

    def _stop_early(self) -> None:
        """The first violation: the run ends here (what the rest would do is not looked at). Only from now
        on does anything differ from a whole run."""
        self.stopped = True
        if self._main_task is not None:
            self.loop.call_soon(self._main_task.cancel)

    def _host(self, worker: Worker) -> None:
        worker.host = build_host(self, worker)

    def _built(self, worker: Worker) -> Worker:
        worker.host = build_host(self, worker)
        return worker

    # ---- scheduling the load ------------------------------------------------------------------------
    def later(self, at: float, make: Any, *args: Any) -> None:
        """Start ``make(*args)`` at ``at`` (virtual seconds); the run does not settle before it has ended."""
        self.outstanding += 1

        def start() -> None:
            task = self.loop.create_task(self._tracked(make(*args)))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

        self.loop.call_at(at, start)

    async def _tracked(self, action: Coroutine[Any, Any, None]) -> None:
        try:
            await action
        finally:
            self.outstanding -= 1

    def _plan(self) -> None:
        profile, rng, oracle = self.profile, self.world.rng, self.oracle
        names = self.catalog.names
        times = sorted(rng.uniform(0.0, profile.arrival_seconds) for _ in range(profile.orders))
        order_ids: list[str] = []
        client_ids: list[tuple[str, str | None]] = []
        for i, at in enumerate(times):
            order_id = f"o{self.seed}-{i:05d}"
            storefront, client_id = self._storefront(order_id, client_ids)
            order_id = _task_id(client_id, storefront)
            workflow = names[rng.randrange(len(names))]
            current = self.catalog.current(workflow)
            assert current is not None
            document = self.client.order(order_id, current, client_id)
            oracle.expect(order_id, workflow, current.version, document, storefront, client_id)
            order_ids.append(order_id)
            if self.searches is not None and rng.random() < _SEARCHED:
                # Support staff look the customer up: soon (the order live or parked), or later (in the
                # history, or purged)
                when = rng.choice((profile.complete_by_seconds * 3, profile.retention_seconds * 1.5))
                self.later(
                    at + rng.uniform(0.0, when),
                    self.searches.search,
                    order_id,
                    rng.random() < 0.5,
                    rng.random() < 0.3,
                    rng.choice((1, 2, 50)),
                )
            self.later(at, self.client.submit, order_id, workflow)
            if rng.random() < profile.resubmit_rate:
                again = at + rng.uniform(0.0, min(profile.retention_seconds, profile.arrival_seconds * 2))
                self.later(again, self.client.submit, order_id, workflow, int(rng.random() < 0.3))
            if rng.random() < profile.resubmit_rate:  # a double submission at once
                self.later(at + rng.uniform(0.0, 0.05), self.client.submit, order_id, workflow)
            if rng.random() < profile.cancel_rate:
                self.later(
                    at + rng.uniform(0.0, profile.complete_by_seconds * 3), self.operator.cancel, order_id
                )
            # Some cancels come just after a step that cannot be undone was dispatched: the moment a cancel
            # must wait for its call. Drawn only for a workflow that has such a step (a catalog without one
            # draws what it drew before).
            undo_less = [
                j for j, step in enumerate(current.steps) if step.calls and step.compensation is None
            ]
            if undo_less and rng.random() < profile.cancel_rate:
                self.cancel_on_dispatch[order_id] = undo_less[rng.randrange(len(undo_less))]
            # Some cancels come while a service that answers later may still be deciding a call of the order
            # (drawn only for a workflow that has such a step).
            deciding = [
                j
                for j, step in enumerate(current.steps)
                if step.calls and self.declarations.asynchronous(step.call_agent, step.action or "")
            ]
            if deciding and rng.random() < profile.cancel_rate * 3:
                self.cancel_while_deciding[order_id] = deciding[rng.randrange(len(deciding))]
            if any(step.wait is not None for step in current.steps):  # drawn only where there are waits
                self._plan_waits(order_id, current, at)
            if current.updates and rng.random() < _UPDATED:  # drawn only where the workflow declares updates
                # The customer corrects the order while it runs: before the step that reads the field, or
                # racing it, or after it (refused).
                when = at + rng.uniform(0.0, profile.complete_by_seconds * 4)
                self.later(when, self.operator.correct, order_id)
            if rng.random() < profile.poison_rate:
                queue = rng.choice((queues.SCHEDULER_QUEUE, queues.REPLY_QUEUE))
                self.loop.call_at(
                    at + rng.uniform(0.0, 1.0),
                    self.bus.enqueue,
                    queue,
                    b'{"orderId": 42, "not": "a message"}',
                    f"poison-{i}",
                    order_id,
                )
        for _ in range(profile.operator_actions):
            at = rng.uniform(0.0, profile.arrival_seconds * 1.5)
            known = [o for o, t in zip(order_ids, times, strict=True) if t <= at]
            if known:
                self.later(at, self.operator.act, known[rng.randrange(len(known))])

    def _storefront(self, order_id: str, client_ids: list[tuple[str, str | None]]) -> tuple[str | None, str]:
        """Who submits the order, and the id it gives: a storefront (``web``, ``kiosk``) or none; some orders
        reuse the id of the order before them from another storefront (or from none), which must be another
        order. Drawn only where the run has storefronts."""
        if not self.storefronts:
            return None, order_id
        rng = self.world.rng
        if client_ids and rng.random() < _SAME_ID:
            client_id, before = client_ids[-1]
            storefront = _STOREFRONTS[(_STOREFRONTS.index(before) + 1) % len(_STOREFRONTS)]
            if _task_id(client_id, storefront) in self.oracle.orders:  # the id came from every one already
                client_id, storefront = order_id, before
        else:
            draw = rng.random()
            client_id, storefront = order_id, "web" if draw < 0.3 else "kiosk" if draw < 0.5 else None
        client_ids.append((client_id, storefront))
        return storefront, client_id

    def _plan_waits(self, order_id: str, workflow: WorkflowDefinition, at: float) -> None:
        """What people do about the order's waits, drawn when it is planned: some orders are cancelled
        inside a wait (the cancellation window, a review); each approval whose condition holds on the input
        gets a decision (approve or reject; soon, about its deadline, late or never); an approval left out
        is sometimes decided anyway (refused), and a timer sometimes approved by mistake (refused)."""
        rng, profile = self.world.rng, self.profile
        document = self.client.documents[order_id]
        waits = [j for j, step in enumerate(workflow.steps) if step.wait is not None]
        if rng.random() < profile.cancel_rate * 3:
            self.cancel_in_wait[order_id] = (waits[rng.randrange(len(waits))], rng.random())
        for j in waits:
            step = workflow.steps[j]
            if isinstance(step.wait, Timer):
                if rng.random() < 0.05:
                    self.mistakes[(order_id, j)] = rng.random()
                continue
            if step.when is not None and not step.when.holds({"input": document, "results": {}}):
                if rng.random() < 0.05:  # an approval that never waits: refused
                    later = at + rng.uniform(0.0, profile.complete_by_seconds * 3)
                    self.later(later, self.approver.decide, order_id, step.name, "approve", False)
                continue
            draw = rng.random()
            when = "soon" if draw < 0.6 else "deadline" if draw < 0.75 else "late" if draw < 0.85 else "never"
            verdict = "approve" if rng.random() < 0.65 else "reject"
            self.decisions[(order_id, j)] = ApprovalPlan(
                verdict, when, rng.random(), rng.random() < 0.5, rng.random() < 0.1
            )

    def _dispatched(self, order_id: str, index: int) -> None:
        """A step of the order was dispatched (or a wait started) for the first time: the application cancels
        the order now if it was drawn to, after a delay within the broker's (so the call may land before or
        after); within the wait if it was drawn to be cancelled there; the approver decides an approval
        (:meth:`_decide`)."""
        if self.cancel_on_dispatch.get(order_id) == index:
            del self.cancel_on_dispatch[order_id]
            delay = self.world.rng.uniform(0.0, self.profile.delivery_delay_seconds)
            self.later(self.loop.time() + delay, self.operator.cancel, order_id)
        if self.cancel_while_deciding.get(order_id) == index:
            del self.cancel_while_deciding[order_id]
            profile = self.profile
            delay = self.world.rng.uniform(0.0, profile.delivery_delay_seconds + profile.decide_seconds)
            self.later(self.loop.time() + delay, self.operator.cancel, order_id)
        truth = self.oracle.orders.get(order_id)
        if truth is None or index >= len(truth.waits) or truth.waits[index] is None:
            return
        now, length = self.loop.time(), self.oracle.wait_length(truth, index)
        if self.cancel_in_wait.get(order_id, (-1, 0.0))[0] == index:
            where = self.cancel_in_wait.pop(order_id)[1]
            self.later(now + where * length, self.operator.cancel, order_id)
        mistake = self.mistakes.pop((order_id, index), None)
        if mistake is not None:
            name = truth.steps[index]
            self.later(now + mistake * length, self.approver.decide, order_id, name, "approve", False)
        decision = self.decisions.pop((order_id, index), None)
        if decision is not None:
            self._decide(order_id, truth.steps[index], decision, now, length)

    def _decide(self, order_id: str, step: str, decision: ApprovalPlan, now: float, deadline: float) -> None:
        """The approver's decision on an approval that started waiting at ``now``, ``deadline`` long."""
        sweep = self.profile.sweep_seconds
        if decision.when == "never":
            return
        if decision.when == "soon":
            at = now + decision.at * deadline * 0.9
        elif decision.when == "deadline":  # on either side of it: the Supervisor may come first
            at = now + deadline + (decision.at * 2 - 1) * sweep
        else:  # after the Supervisor has applied the deadline's policy
            at = now + deadline + 2 * sweep + decision.at * deadline
        at = max(at, now)
        self.later(at, self.approver.decide, order_id, step, decision.verdict, decision.versioned)
        if decision.cancel:
            self.later(at + 0.001 * decision.at, self.operator.cancel, order_id)

    def _bound(self) -> float:
        """How long after the faults stopped the run may take to settle (a failure if it does not).

        Each order has a bound of its own (:meth:`simulation.liveness.Limits.terminal`, docs/simulation.md,
        "The bounds"): from the faults stopping, or its last action saved since, the time the work left to
        it may take under the policy. The run may last until the latest of them (an order still in flight:
        its bound; one already terminal: when it became so) or of the orders' latest CompleteBy (a finished
        order's watch entry comes due no later), then one more recovery of the Supervisor, which moves the
        order to the history and removes its watch entry, and a delivery for its last message. The
        messages a process that died held come back whatever the orders do, at most a restart, a lock
        duration of the queues and a delivery after the faults stopped
        (:meth:`~simulation.liveness.Limits.redelivery`); the run waits for them too.
        """
        limits, oracle = self.limits, self.oracle
        orders = oracle.latest_due() - self.quiet_at
        return max(orders + limits.detect(oracle.slack_now()), limits.redelivery()) + limits.delivery

    def settled(self) -> bool:
        """Nothing left to do: every order terminal, no action or message pending, no watch entry."""
        if self.outstanding or self.bus.unsettled():
            return False
        if any(t.state is None or not t.state.terminal for t in self.oracle.orders.values()):
            return False
        return not self.storage.watch.rows()

    async def _main(self) -> None:
        self.limits = Limits.of(self.profile, self.settings, self.catalog)
        self.oracle.start(self.limits, self.services.ledger)
        self._plan()
        self.timers.start()
        await asyncio.sleep(self.profile.arrival_seconds * 1.5 + 1.0)
        self.world.faults = False
        self.quiet_at = self.loop.time()
        self.oracle.faults_stopped()
        self.bound = self._bound()
        step = max(self.profile.sweep_seconds, 1.0)
        while not self.settled() and self.loop.time() < self.quiet_at + self.bound:
            await asyncio.sleep(step)
            self.oracle.check_deadlines()
            self.bound = self._bound()
        # One more sweep interval, so that a last move the checks would miss has time to show.
        await asyncio.sleep(self.profile.sweep_seconds * 2)
        self.stopped = True

    def run(self) -> Result:
        """Run the seed to the end and check it."""
        started, cpu = time.perf_counter(), time.process_time()
        handler = AlertHandler(self.oracle)
        engine_log = logging.getLogger("engine")
        engine_log.addHandler(handler)
        saved_level = engine_log.level
        engine_log.setLevel(logging.ERROR)
        self.loop.set_exception_handler(lambda loop, context: None)
        state = random.getstate()
        random.seed(self.seed)  # tenacity's jitter draws from the module's generator
        thresholds = gc.get_threshold()
        gc.set_threshold(_GC_YOUNG, *thresholds[1:])
        self.spans.start()
        try:
            self._main_task = self.loop.create_task(self._main())
            with contextlib.suppress(asyncio.CancelledError):  # ended at its first violation
                self.loop.run_until_complete(self._main_task)
            self._drain()
            if not (self.first_violation and self.oracle.violations):
                checks.final(self)
        finally:
            self.spans.stop()
            gc.set_threshold(*thresholds)
            random.setstate(state)
            engine_log.removeHandler(handler)
            engine_log.setLevel(saved_level)
            self.loop.close()
        states: dict[str, int] = {}
        for truth in self.oracle.orders.values():
            name = truth.state.value if truth.state is not None else "never created"
            states[name] = states.get(name, 0) + 1
        return Result(
            seed=self.seed,
            profile=self.profile,
            violations=list(self.oracle.violations),
            states=states,
            virtual_seconds=self.loop.time(),
            wall_seconds=time.perf_counter() - started,
            cpu_seconds=time.process_time() - cpu,
            digest=self.digest(),
            stats={**checks.stats(self), **(self.beside.stats() if self.beside is not None else {})},
            traces={
                order: self.oracle.trace(order)
                for order in {o for o, _ in self.oracle.violations}
                if order in self.oracle.orders
            },
            beside=self.beside.version if self.beside is not None else None,
        )

    def _drain(self) -> None:
        """Stop what is still running (handlers of status-less work, timers' last runs)."""
        pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            with contextlib.suppress(BaseException):
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))

    def digest(self) -> str:
        """A fingerprint of the run's end state (tables, ledger, messages): equal for equal runs."""
        h = hashlib.blake2b(digest_size=8)
        for name in (LIVE, WATCH, HISTORY):
            for pk, rk, row in self.storage.tables.table(name).rows():
                h.update(f"{name}|{pk}|{rk}|{row.etag}\n".encode())
        for (service, key), effect in sorted(self.services.ledger.items()):
            h.update(f"{service}|{key}|{effect.applied_at}|{effect.compensated_at}\n".encode())
        for message in self.bus.messages:
            h.update(f"{message.message_id}|{message.state}|{message.deliveries}\n".encode())
        return h.hexdigest()


class _BreakerRequests:
    """The world's requests, noting when the Supervisor could not read the breakers (then it holds
    nothing, and the policy lets a timeout count)."""

    def __init__(self, world: World, oracle: Oracle) -> None:
        self.world = world
        self.oracle = oracle

    def before(self, kind: str) -> Awaitable[None]:
        try:
            return self.world.before(kind)
        except StoreUnavailable:
            if kind == "breaker.query":
                self.oracle.breakers_unreadable()
            raise

    def after(self, kind: str) -> None:
        try:
            self.world.after(kind)
        except StoreUnavailable:
            if kind == "breaker.query":
                self.oracle.breakers_unreadable()
            raise


def run(
    seed: int,
    orders: int | None = None,
    max_orders: int | None = None,
    servicebus: bool = True,
    catalog: WorkflowCatalog | None = None,
    services: Sequence[ServiceDefinition] | None = None,
    submit_as_app: bool = True,
    storefronts: bool | None = None,
    first_violation: bool = False,
    beside: str | None = None,
) -> Result:
    """Run one seed (``orders`` replaces the seed's number of orders, ``max_orders`` caps it; ``servicebus``,
    ``catalog``, ``services``, ``submit_as_app``, ``storefronts``, ``first_violation`` and ``beside``:
    see :class:`Simulation`)."""
    simulation = Simulation(
        seed,
        orders,
        catalog=catalog,
        max_orders=max_orders,
        servicebus=servicebus,
        services=services,
        submit_as_app=submit_as_app,
        storefronts=storefronts,
        first_violation=first_violation,
        beside=beside,
    )
    return simulation.run()
