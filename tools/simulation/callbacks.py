"""Callbacks: the services that answer later post their outcome to the app's own callback route.

A simulated service that answered a call 202 (:mod:`simulation.services`) posts its decision to every
dispatch it answered so, as a webhook sender does: the body ``orders.callbacks.CallbackBody`` describes,
signed as ``orders.callbacks.signed_headers`` signs it with the secret the run configures for the service,
to one running process, where the product's own :class:`orders.callbacks.Callbacks` takes it, the very
object ``function_app.py``'s route calls (its signature check, its fence on the dispatch the order waits for,
the reply it hands the Scheduler). A request whose process dies or fails gets no answer (a 5xx): the sender
posts it again, four times at most, after a webhook sender's backoff. What the route answers is held to the
invariants of callbacks (:meth:`simulation.oracle.Oracle.callback_answered`).

Under faults (``Profile``), a callback is lost (never posted), posted twice, posted late (half a budget to
two budgets: after the step's CompleteBy, after the Supervisor came and the step was dispatched again), or
followed by a forged copy (signed with another secret), which the route must refuse. A service that answered
two dispatches of one key 202 calls both back, each with its own delays, so an older attempt's callback may
come after a newer one's (out of order).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from engine.messages import parse_callback_context
from orders.callbacks import Refused, Taken, signed_headers

from .actors import Host, in_process
from .loop import EPOCH
from .world import Crash, StoreUnavailable

if TYPE_CHECKING:
    from .run import Simulation

TRIES = 4  # a webhook sender's tries for a callback the app does not answer
NETWORK_SECONDS = (0.001, 0.05)  # how long a callback takes to reach the app


def _route(
    service: str, headers: dict[str, str], body: bytes
) -> Callable[[Host], Awaitable[Taken | Refused]]:
    """One request to a process's callback route."""

    async def receive(host: Host) -> Taken | Refused:
        answer = await host.callbacks.receive(service, headers, body)
        if host.work is not None:  # beside another release: which release's route answered
            host.work["callbacks"] += 1
        return answer

    return receive


class Webhooks:
    """The services' webhook sender, and the secrets the run configures (the app's
    ``<SERVICE>_CALLBACK_SECRET`` settings)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.secrets = {
            service.name: f"simulated-secret-{sim.seed}-{service.name}"
            for service in sim.service_definitions
            if service.callback_secret_setting
        }
        self.counts: dict[str, int] = {}
        self._newest: dict[tuple[str, int, bool], int] = {}  # the latest attempt whose callback came

    def now(self) -> float:
        """The simulated time as Unix seconds (the route's clock and the senders' are one)."""
        return EPOCH.timestamp() + self.sim.loop.time()

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def send(self, service: str, context: str, fields: dict[str, Any]) -> None:
        """A service has decided: post ``fields`` (its outcome) to the dispatch ``context``, with the faults
        the seed draws for it."""
        sim = self.sim
        world, loop = sim.world, sim.loop
        profile, rng = world.profile, world.rng

        def chance(rate: float) -> bool:
            return world.faults and rate > 0 and rng.random() < rate

        lost = chance(profile.callback_lost_rate)
        twice = chance(profile.callback_duplicate_rate)
        late = chance(profile.callback_late_rate)
        forged = chance(profile.callback_forged_rate)
        self._count("callbacks sent")
        if lost:
            self._count("callbacks lost")
            return
        body = json.dumps({"context": context, **fields}, separators=(",", ":")).encode()
        at = loop.time() + rng.uniform(*NETWORK_SECONDS)
        if late:
            self._count("callbacks late")
            at += profile.complete_by_seconds * rng.uniform(0.5, 2.0)
        sim.later(at, self.post, service, context, body, False)
        if twice:
            self._count("callbacks sent twice")
            sim.later(at + rng.uniform(0.0, 0.5), self.post, service, context, body, False)
        if forged:
            self._count("callbacks forged")
            sim.later(at + rng.uniform(0.0, 0.5), self.post, service, context, body, True)

    async def post(self, service: str, context: str, body: bytes, forged: bool) -> None:
        """Post one callback to a running process's callback route, again while no answer comes."""
        sim = self.sim
        dispatch = parse_callback_context(context)
        assert dispatch is not None, context
        outcome = str(json.loads(body)["outcome"])
        secret = "not-the-secret" if forged else self.secrets[service]
        if not forged:
            self._arrived(dispatch)
        for attempt in range(TRIES):
            # The route reads its headers lower-case (function_app.py's _headers).
            headers = {
                name.lower(): value for name, value in signed_headers(secret, body, self.now()).items()
            }
            started = sim.loop.time()
            try:
                answer = await in_process(sim, _route(service, headers, body))
            except (Crash, StoreUnavailable):
                self._count("callbacks unanswered (posted again)")
                await asyncio.sleep(0.2 * 2**attempt)
                continue
            except Exception as exc:  # the route failed with no fault: a 500 the simulation reports
                sim.oracle.violation(dispatch[0], f"the callback route raised {exc!r}")
                return
            sim.oracle.callback_answered(service, dispatch, outcome, forged, answer, started, sim.loop.time())
            return
        self._count("callbacks given up unanswered")

    def _arrived(self, dispatch: tuple[str, int, bool, int]) -> None:
        """Count a callback that comes after a newer attempt's of the same step and phase (out of order)."""
        order_id, index, undoing, attempt = dispatch
        key = (order_id, index, undoing)
        newest = self._newest.get(key, 0)
        if attempt < newest:
            self._count("callbacks out of order")
        self._newest[key] = max(newest, attempt)
