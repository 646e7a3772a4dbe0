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
from engine.errors import PermanentError, TransientError
from engine.messages import AgentRequest
from engine.workflow import WorkflowCatalog
from orders.services.client import request_body
from orders.services.declaration import Resource, ServiceDefinition

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


class LedgerObserver(Protocol):
    """Told of every effect the services make, and of what every call carried (the simulation's checks)."""

    def effect_applied(self, effect: Effect, late: bool) -> None: ...

    def effect_undone(self, effect: Effect) -> None: ...

    def called(self, effect: Effect, compensating: bool, carried: Mapping[str, Any]) -> None: ...


class Declarations:
    """The declared services' resources by action: what each call's body is and what its apply returns."""

    def __init__(self, services: Iterable[ServiceDefinition] = ()) -> None:
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
        body = request_body(service, resource, undoes, request)
        model = resource.undo_body if undoes else resource.body
        if model is None:  # the order's id and the apply's own values, those known
            return body, {n: body.get(n) for n in resource.result_names}
        # A value is told apart by its name on the wire: one a body renames is not checked.
        return body, {n: body[n] for n in (*model.needs, *model.may_use) if n in body}

    def result(self, service: str, request: AgentRequest) -> dict[str, Any]:
        """What an applied call answers: the resource's declared result values for the request's key."""
        found = self.actions.get((service, request.action))
        if found is None or found[1] or found[0].result is None:
            return {}
        return found[0].result.simulated(request.idempotency_key).model_dump(by_alias=True, mode="json")


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
        self.observer.called(effect, compensating, built[1] if built is not None else {})
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
            self.loop.call_later(landing, self._land, effect, compensating, True)
            await asyncio.sleep(timeout)
            raise TransientError(f"{service}: timed out after {timeout:.2f}s")
        await asyncio.sleep(latency)
        outcome = self._land(effect, compensating, False)
        if lost:
            raise TransientError(f"{service}: the reply was lost")
        if outcome == "rejected":
            raise PermanentError(f"{service}: rejected {request.idempotency_key}")
        if compensating:
            return {}
        # The client passes on the declared result values of the answer, nothing else.
        values = self.declarations.result(service, request)
        effect.returned = values
        return values

    def _land(self, effect: Effect, compensating: bool, late: bool) -> str:
        """A call arrives at the service and takes effect (or is refused)."""
        now = self.loop.time()
        rng, profile = self.world.rng, self.world.profile
        if late:
            effect.late_landings += 1
        if compensating:
            if effect.undo_refused is None:
                effect.undo_refused = self.world.faults and rng.random() < profile.compensation_reject_rate
            if effect.undo_refused and not effect.fixed:
                return "rejected"
            if effect.applied_at is None:
                effect.undone_before_applied += 1
                return "not-found"
            if effect.compensated_at is None:
                effect.compensated_at = now
                self.observer.effect_undone(effect)
            return "undone"
        if effect.rejected is None:
            effect.rejected = self.world.faults and rng.random() < profile.permanent_rate
        if effect.rejected:
            return "rejected"
        if effect.applied_at is None:
            effect.applied_at = now
            effect.applies += 1
            self.observer.effect_applied(effect, late)
        return "applied"
