"""The remote services, as the Agents' actions, over a ledger that is the simulation's ground truth.

Each declared service applies an effect once per idempotency key and undoes it at most once, like the
remote-service simulators, and each call may meet a fault drawn from the seed: latency, a transient
error (503), a permanent one (422), a hang until the caller's timeout, a lost reply (applied, but the
answer never arrives), a slow call that lands after its caller gave up, or an outage of the whole service.

Two modelling choices, both of real idempotent services (see docs/simulation.md):

- A key's fate is decided when its first call lands: a key that was rejected is rejected on every later
  call with it, and one that was applied answers "applied" (the simulators decide per call; a real
  service replays what it answered to that key). An undo the service refuses stays refused until an
  operator fixes the cause (:meth:`Services.fix`).
- A call that outlasts its caller's timeout still lands, at most ``late_apply_seconds`` after the
  caller gave up (the network's bound), which the engine's cancel grace covers.

A resource declared ``asynchronous`` (``Resource(asynchronous=True)``) may answer an apply or an undo 202
Accepted (``Profile.async_rate`` of the calls that reach it undecided), as the real client raises
:class:`~engine.errors.Accepted` for it. Its fate is still decided when its first call lands (a rejection is
drawn then), but the service makes the effect, or refuses it, only when it has finished deciding, a while
later (``Profile.decide_seconds``; under faults sometimes one to three budgets), and then posts the outcome
once to every dispatch it answered 202 (each call's ``Callback-Context``): the callbacks
(:mod:`simulation.callbacks`) go through the app's own callback route. While it decides, a call with the
same key (a retry, the Supervisor's re-dispatch) is answered 202 again and its dispatch is called back too;
once it has decided, a call with the same key is answered the decided outcome at once (an idempotent service
replays what it decided for the key), so a lost callback costs a re-dispatch, never a second effect. An undo
that lands while the apply is still being decided withdraws it: the apply is never made, and its callbacks say
it was refused (a payment provider voids an authorisation it has not captured).

Where the services are declared (``orders.catalog.SERVICES``, or the declarations a run is given), each
call carries the body the real client (:mod:`orders.services.client`) builds from its request, and an
apply answers with the declared result values of its resource (:meth:`ServiceResult.simulated`: the same
for every replay of a key, different for every key): the oracle holds every value a call carries to what
the producing step's service returned. An action no declaration names (a catalog run without its
services) carries no body and returns nothing, as a resource without results does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.agent import Action
from engine.errors import Accepted, PermanentError, TransientError
from engine.messages import AgentRequest, callback_context
from engine.workflow import WorkflowCatalog
from orders.services.client import request_body
from orders.services.declaration import Resource, ServiceDefinition

from .loop import at_seconds
from .world import StoreUnavailable, World


@dataclass(slots=True)
class Effect:
    """The ledger's entry of one idempotency key at one service."""

    service: str
    key: str
    order_id: str
    step: str
    step_index: int
    rejected: bool | None = None  # decided when the first forward call lands
    applied_at: float | None = None
    applies: int = 0  # effects actually made: more than one would be a double charge
    compensated_at: float | None = None
    undo_refused: bool | None = None  # decided when the first undo lands
    fixed: bool = False  # an operator fixed what made the undo fail
    undone_before_applied: int = 0  # undos that found nothing to undo
    late_landings: int = 0
    calls: int = 0
    returned: dict[str, Any] | None = None  # the result values an answer carried back (None: none yet)
    # A service that answers later (asynchronous resources only)
    landings: int = 0  # forward calls that reached the service
    accepted: int = 0  # calls answered 202
    pending: Pending | None = None  # an apply answered 202 and not decided yet
    undo_pending: Pending | None = None  # an undo answered 202 and not decided yet
    withdrawn: bool = False  # an undo landed while the apply was being decided: never made


@dataclass(slots=True, eq=False)
class Pending:
    """A call a service answered 202 and is still deciding: when it took it, when it will have decided (by
    the CompleteBy of the dispatch it took, unless ``slow``: ``due``), and the dispatches
    (``Callback-Context``) it owes a callback, in the order it answered them."""

    taken_at: float
    decide_at: float
    due: float
    slow: bool
    contexts: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Later:
    """What a call to a resource that may be answered later carries: its action, the dispatch to call
    back (the client's ``Callback-Context``) and the dispatch's CompleteBy (virtual seconds)."""

    action: str
    context: str
    due: float


class LedgerObserver(Protocol):
    """Told of every effect the services make, and of what every call carried (the simulation's checks)."""

    def effect_applied(self, effect: Effect, late: bool) -> None: ...

    def effect_undone(self, effect: Effect) -> None: ...

    def called(
        self, effect: Effect, compensating: bool, carried: Mapping[str, Any], given: Mapping[str, Any]
    ) -> None: ...

    def withdrawn(
        self, effect: Effect, taken_at: float, decide_at: float, due: float, slow: bool
    ) -> None: ...


class Declarations:
    """The declared services' resources by action: what each call's body is and what its apply returns."""

    def __init__(self, services: Iterable[ServiceDefinition] = (), keys: Any = None) -> None:
        # What opens the sealed input fields, as the app's client opens them (engine.sealing.Keyring).
        self.keys = keys
        self.actions: dict[tuple[str, str], tuple[Resource, bool]] = {}
        for service in services:
            for resource in service.resources:
                self.actions[(service.name, resource.apply)] = (resource, False)
                if resource.undo is not None:
                    self.actions[(service.name, resource.undo)] = (resource, True)

    def returns(self, service: str, action: str) -> list[str]:
        """The result values an apply of ``action`` answers with (none for an undeclared action)."""
        found = self.actions.get((service, action))
        return found[0].result_names if found is not None and not found[1] else []

    def body(self, service: str, request: AgentRequest) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The call's body as the real client builds it from the request, and the result values it carries
        by name (None: one it reads and goes without); None for an undeclared action. Raises
        PermanentError, as the client does, when the order cannot make the body."""
        found = self.actions.get((service, request.action))
        if found is None:
            return None
        resource, undoes = found
        body = request_body(service, resource, undoes, request, self.keys)
        model = resource.undo_body if undoes else resource.body
        if model is None:  # the order's id and the apply's own values, those known
            return body, {n: body.get(n) for n in resource.result_names}
        # A value is told apart by its name on the wire: one a body renames is not checked.
        return body, {n: body[n] for n in (*model.needs, *model.may_use) if n in body}

    def result(self, service: str, request: AgentRequest) -> dict[str, Any]:
        """What an applied call answers: the resource's declared result values for the request's key."""
        return self.result_of(service, request.action, request.idempotency_key)

    def result_of(self, service: str, action: str, key: str) -> dict[str, Any]:
        """The declared result values an apply of ``action`` answers for ``key`` (none for an undo)."""
        found = self.actions.get((service, action))
        if found is None or found[1]:
            return {}
        return found[0].simulated(key)

    def asynchronous(self, service: str, action: str) -> bool:
        """Whether the service may answer ``action`` 202 and call back later (its resource's declaration)."""
        found = self.actions.get((service, action))
        return found is not None and found[0].asynchronous

    def rejection(self, service: str, action: str) -> str:
        """The reason the service gives when it refuses ``action``."""
        found = self.actions.get((service, action))
        return found[0].rejection if found is not None else "refused"


@dataclass
class ServiceSpec:
    """A declared service's actions: which undo which, from the catalog."""

    name: str
    forward: set[str] = field(default_factory=set)
    undo: set[str] = field(default_factory=set)


def specs(catalog: WorkflowCatalog) -> dict[str, ServiceSpec]:
    """Every agent of the catalog, with its forward and undo actions."""
    found: dict[str, ServiceSpec] = {}
    for workflow in catalog.workflows:
        for step in workflow.steps:
            if not step.calls:
                continue
            spec = found.setdefault(step.call_agent, ServiceSpec(step.call_agent))
            spec.forward.add(step.action or "")
            if step.compensation:
                spec.undo.add(step.compensation)
    return found


class Services:
    """Every remote service and the ledger of what they did."""

    def __init__(
        self,
        world: World,
        catalog: WorkflowCatalog,
        observer: LedgerObserver,
        declarations: Declarations | None = None,
    ) -> None:
        self.world = world
        self.loop = world.loop
        self.observer = observer
        self.specs = specs(catalog)
        self.declarations = declarations or Declarations()
        self.ledger: dict[tuple[str, str], Effect] = {}
        self.calls = 0
        self.bodies_refused = 0  # calls the client could not build a body for (never sent)
        self.counts: dict[str, int] = {}  # what the services that answer later did (the run's statistics)
        # Posts a decided outcome to one dispatch: (service, Callback-Context, the callback's fields); set by
        # the simulation to its services' webhook sender (simulation.callbacks).
        self.call_back: Callable[[str, str, dict[str, Any]], None] = lambda service, context, fields: None

    def actions(self) -> dict[str, dict[str, Action]]:
        """The actions of each service's agent (the Agent's ``actions``)."""
        made: dict[str, dict[str, Action]] = {}
        for name, spec in self.specs.items():
            actions: dict[str, Action] = {}
            for action in sorted(spec.forward):
                actions[action] = self._action(name, compensating=False)
            for action in sorted(spec.undo):
                actions[action] = self._action(name, compensating=True)
            made[name] = actions
        return made

    def _action(
        self, service: str, compensating: bool
    ) -> Callable[[AgentRequest, float], Awaitable[dict[str, Any]]]:
        async def call(request: AgentRequest, timeout: float) -> dict[str, Any]:
            return await self.call(service, compensating, request, timeout)

        return call

    def effect(self, service: str, request: AgentRequest) -> Effect:
        """The ledger entry of a request's key (created on first use)."""
        key = (service, request.idempotency_key)
        found = self.ledger.get(key)
        if found is None:
            found = self.ledger[key] = Effect(
                service, request.idempotency_key, request.order_id, request.step, request.step_index
            )
        return found

    def fix(self, order_id: str, step_index: int) -> None:
        """An operator fixes what made a step's undo fail (so a retry of the undo can succeed)."""
        for effect in self.ledger.values():
            if effect.order_id == order_id and effect.step_index == step_index:
                effect.fixed = True

    def _outage(self, service: str, now: float) -> bool | None:
        """None if the service is up; else whether its calls hang."""
        if not self.world.faults:
            return None
        for outage in self.world.profile.outages:
            if outage.service == service and outage.start <= now < outage.end:
                return outage.hangs
        return None

    async def call(
        self, service: str, compensating: bool, request: AgentRequest, timeout: float
    ) -> dict[str, Any]:
        """One call of an Agent's action, with the faults the seed draws for it."""
        world, profile = self.world, self.world.profile
        try:
            built = self.declarations.body(service, request)  # built before the call leaves, as the client
        except PermanentError:
            self.bodies_refused += 1
            raise
        try:
            await world.before("service.call")  # leaving the process: it may die first
        except StoreUnavailable as exc:
            raise TransientError(f"{service}: connection failed") from exc
        self.calls += 1
        effect = self.effect(service, request)
        effect.calls += 1
        # A service that may answer later is sent the dispatch to call back (the client's Callback-Context).
        later = None
        if self.declarations.asynchronous(service, request.action):
            later = Later(request.action, callback_context(request), at_seconds(request.complete_by))
        given = request.payload.get("input") or {}  # the order's input the request carried
        self.observer.called(effect, compensating, built[1] if built is not None else {}, given)
        rng = world.rng
        outage = self._outage(service, self.loop.time())
        if outage is not None:
            if outage:
                await asyncio.sleep(timeout)
                raise TransientError(f"{service}: timed out after {timeout:.2f}s (outage)")
            await asyncio.sleep(min(rng.uniform(0.001, 0.01), timeout))
            raise TransientError(f"{service}: HTTP 503 (outage)")
        draw = rng.random() if world.faults else 1.0
        latency = rng.expovariate(1.0 / profile.latency_seconds)
        bands = (profile.transient_rate, profile.hang_rate, profile.lost_reply_rate, profile.slow_rate)
        if draw < bands[0]:
            await asyncio.sleep(min(latency, timeout))
            if latency >= timeout:
                raise TransientError(f"{service}: timed out after {timeout:.2f}s")
            raise TransientError(f"{service}: HTTP 503")
        draw -= bands[0]
        if draw < bands[1]:
            await asyncio.sleep(timeout)
            raise TransientError(f"{service}: timed out after {timeout:.2f}s (hang)")
        draw -= bands[1]
        lost = draw < bands[2]
        if not lost and draw - bands[2] < bands[3]:
            latency = timeout + rng.uniform(0.0, profile.late_apply_seconds)
        if latency > timeout:
            # The caller gives up at its timeout; the call still lands at the service, a little later.
            landing = min(latency, timeout + profile.late_apply_seconds)
            self.loop.call_later(landing, self._land, effect, compensating, True, later)
            await asyncio.sleep(timeout)
            raise TransientError(f"{service}: timed out after {timeout:.2f}s")
        await asyncio.sleep(latency)
        outcome = self._land(effect, compensating, False, later)
        if lost:
            raise TransientError(f"{service}: the reply was lost")
        if outcome == "accepted":
            raise Accepted(service)  # 202: the client's answer for a service that answers later
        if outcome == "rejected":
            raise PermanentError(f"{service}: rejected {request.idempotency_key}")
        if compensating:
            return {}
        # The client passes on the declared result values of the answer, nothing else.
        values = self.declarations.result(service, request)
        effect.returned = values
        return values

    def _land(self, effect: Effect, compensating: bool, late: bool, later: Later | None = None) -> str:
        """A call arrives at the service and takes effect (or is refused, or, to a resource that may answer
        later, is taken to be answered later: "accepted")."""
        rng, profile = self.world.rng, self.world.profile
        if late:
            effect.late_landings += 1
        if compensating:
            if effect.pending is not None:
                self._withdraw(effect)
            if effect.undo_refused is None:
                effect.undo_refused = self.world.faults and rng.random() < profile.compensation_reject_rate
            if later is not None and self._answers_later(effect, True, later):
                return "accepted"
            return self._undo(effect)
        if effect.rejected is None:
            effect.rejected = self.world.faults and rng.random() < profile.permanent_rate
        if later is not None:
            if effect.withdrawn:
                return "rejected"  # the key's call was withdrawn by its undo: so it stays
            if self._answers_later(effect, False, later):
                return "accepted"
        if effect.rejected:
            return "rejected"
        self._apply(effect, late)
        return "applied"

    def _apply(self, effect: Effect, late: bool) -> None:
        if effect.applied_at is None:
            effect.applied_at = self.loop.time()
            effect.applies += 1
            self.observer.effect_applied(effect, late)

    def _undo(self, effect: Effect) -> str:
        """An undo takes effect now (or is refused, or finds nothing to undo)."""
        if effect.undo_refused and not effect.fixed:
            return "rejected"
        if effect.applied_at is None:
            effect.undone_before_applied += 1
            return "not-found"
        if effect.compensated_at is None:
            effect.compensated_at = self.loop.time()
            self.observer.effect_undone(effect)
        return "undone"

    # ---- services that answer later ------------------------------------------------------------------
    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def _answers_later(self, effect: Effect, compensating: bool, later: Later) -> bool:
        """Whether the service answers this call of an asynchronous resource 202: one it is still deciding
        (the dispatch is called back too), or one that reaches it undecided, as often as the run says. A
        call whose key it has decided is answered at once, with what it decided (False)."""
        world, profile = self.world, self.world.profile
        context = later.context
        pending = effect.undo_pending if compensating else effect.pending
        if pending is not None:
            if context not in pending.contexts:
                pending.contexts.append(context)
            effect.accepted += 1
            self._count("calls answered 202 again while deciding")
            return True
        if compensating:  # an undo stays decided once made, or refused until an operator fixes the cause
            decided = effect.compensated_at is not None or bool(effect.undo_refused and not effect.fixed)
        else:  # an apply's fate is decided when its first call lands
            effect.landings += 1
            decided = effect.landings > 1
        if decided:
            if effect.accepted:
                self._count("calls answered at once with what was decided after a 202")
            return False
        if world.rng.random() >= profile.async_rate:
            return False
        # It decides within the budget (what the step's CompleteBy is given for: docs/customizing.md), at
        # once for a call that landed after it; under faults some decisions take one to three budgets.
        now = self.loop.time()
        delay = min(world.rng.uniform(0.0, profile.decide_seconds), max(0.0, later.due - now))
        slow = world.faults and world.rng.random() < profile.slow_decision_rate
        if slow:
            delay = profile.complete_by_seconds * world.rng.uniform(1.0, 3.0)
            self._count("decisions that took longer than the budget")
        effect.accepted += 1
        made = Pending(now, now + delay, later.due, slow, [context])
        if compensating:
            effect.undo_pending = made
        else:
            effect.pending = made
        self._count("undos answered 202" if compensating else "applies answered 202")
        self.loop.call_at(made.decide_at, self._decided, effect, compensating, later.action, made)
        return True

    def _decided(self, effect: Effect, compensating: bool, action: str, pending: Pending) -> None:
        """The service has decided a call it answered 202: it makes the effect (or refuses it) and calls
        back every dispatch it answered 202 meanwhile."""
        if (effect.undo_pending if compensating else effect.pending) is not pending:
            return  # withdrawn meanwhile
        fields: dict[str, Any]
        if compensating:
            effect.undo_pending = None
            outcome = self._undo(effect)
            fields = {"outcome": "done"}
            if outcome == "rejected":
                fields = {"outcome": "refused", "reason": self.declarations.rejection(effect.service, action)}
        else:
            effect.pending = None
            if effect.rejected:
                fields = {"outcome": "refused", "reason": self.declarations.rejection(effect.service, action)}
            else:
                self._apply(effect, False)
                values = self.declarations.result_of(effect.service, action, effect.key)
                effect.returned = values
                fields = {"outcome": "done", "result": values}
        for context in pending.contexts:
            self.call_back(effect.service, context, fields)

    def _withdraw(self, effect: Effect) -> None:
        """An undo reached the service while it was still deciding the apply: the apply is withdrawn (never
        made, its key refused from now on), and its dispatches are told so."""
        pending = effect.pending
        assert pending is not None
        effect.pending = None
        effect.withdrawn = True
        self._count("applies withdrawn by their undo while deciding")
        self.observer.withdrawn(effect, pending.taken_at, pending.decide_at, pending.due, pending.slow)
        for context in pending.contexts:
            self.call_back(effect.service, context, {"outcome": "refused", "reason": "withdrawn by its undo"})
