"""Processes, crashes and the requests they make: the part of the simulation every port goes through.

A simulated process (:class:`Worker`) hosts every function, as a Functions worker does: the HTTP API, the
Scheduler, the Agents and the timers. Whatever runs on its behalf carries it in a context variable, so a
request knows whose it is. Each request (to a table, to the broker, to a remote service) first waits its
latency, then may kill its process (before it reaches the other side, or after it took effect and before
the answer comes back) or fail; a killed process makes no request again: whatever of it is still
running dies at its next request (:class:`Crash`), and its unsettled messages come back to the queue once
their locks expire. It restarts later as a new generation: a new instance id, empty caches.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .profile import Profile


class Crash(BaseException):
    """The simulated process died here. A BaseException, so the engine's ``except Exception`` (which
    handles a failing store or a refused write) cannot swallow a crash."""


class StoreUnavailable(Exception):
    """A request to the storage or the broker failed (a 503, a timeout): it may have taken effect or not."""


@dataclass(eq=False)
class Worker:
    """One simulated process. ``host`` holds what it runs (built by :mod:`simulation.actors`)."""

    slot: int
    generation: int
    dead: bool = False
    host: Any = None
    handlers: int = 0
    held: dict[int, Any] = field(default_factory=dict)  # locked messages by sequence number

    @property
    def name(self) -> str:
        """Its instance id: the slot and the generation (a restart is a new instance)."""
        return f"w{self.slot}.{self.generation}"


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


CURRENT: contextvars.ContextVar[Worker | None] = contextvars.ContextVar("simulated_worker", default=None)


class World:
    """The simulation's one random source, its fault switch and its processes."""

    def __init__(self, profile: Profile, rng: random.Random, loop: asyncio.AbstractEventLoop) -> None:
        self.profile = profile
        self.rng = rng
        self.loop = loop
        self.faults = True  # switched off when the fault phase ends
        self.workers: list[Worker] = []
        self.on_restart: Callable[[Worker], None] = lambda worker: None
        self.on_kill: Callable[[Worker], None] = lambda worker: None
        self.crashes = 0
        self.store_errors = 0
        self._ids = 0
        self._done: asyncio.Future[None] = loop.create_future()
        self._done.set_result(None)

    # ---- ids ---------------------------------------------------------------------------------------
    def new_id(self) -> str:
        """A unique id for the engine's messages, from the seed (the engine's default is random)."""
        self._ids += 1
        return f"{self.rng.getrandbits(48):012x}{self._ids:06d}"

    # ---- processes --------------------------------------------------------------------------------------
    def alive(self) -> list[Worker]:
        """The processes running now."""
        return [w for w in self.workers if not w.dead]

    def any_alive(self) -> Worker | None:
        """A running process, chosen at random (None if all are down)."""
        alive = self.alive()
        return alive[self.rng.randrange(len(alive))] if alive else None

    def kill(self, worker: Worker) -> None:
        """Kill ``worker`` now; it restarts as a new generation after a while."""
        if worker.dead:
            return
        worker.dead = True
        self.crashes += 1
        self.on_kill(worker)
        delay = self.rng.uniform(0.05, self.profile.restart_seconds)
        self.loop.call_later(delay, self._restart, worker)

    def _restart(self, dead: Worker) -> None:
        fresh = Worker(dead.slot, dead.generation + 1)
        self.workers[self.workers.index(dead)] = fresh
        self.on_restart(fresh)

    def run_in(self, worker: Worker, coroutine: Any, name: str | None = None) -> asyncio.Task[Any]:
        """Run ``coroutine`` as ``worker``'s (its requests are made by that process)."""
        context = contextvars.copy_context()
        context.run(CURRENT.set, worker)
        return self.loop.create_task(coroutine, name=name, context=context)

    # ---- requests ---------------------------------------------------------------------------------------
    def _latency(self) -> float:
        if self.faults and self.rng.random() < self.profile.latency_spike_rate:
            return self.rng.uniform(0.2, 2.0)
        return self.rng.uniform(0.0005, 0.01)

    def before(self, kind: str) -> asyncio.Future[None]:
        """A request leaves its process: it may kill the process or fail at once; otherwise the future to
        await is its latency (a request sent just before its process dies still arrives)."""
        worker = CURRENT.get()
        if worker is not None:
            if worker.dead:
                raise Crash(kind)
            if self.faults:
                draw = self.rng.random()
                crash = self.profile.crash_rate / 2
                if draw < crash:
                    self.kill(worker)
                    raise Crash(kind)
                if draw < crash + self.profile.store_error_rate / 2:
                    self.store_errors += 1
                    raise StoreUnavailable(f"{kind}: unavailable")
        if kind.startswith("bus."):
            # The broker's own latency is modelled by the delivery delay of each message; a send or a
            # settle needs no timer of its own (the largest single cost of the simulation otherwise).
            return self._done
        return self.nap(self._latency())

    def nap(self, seconds: float) -> asyncio.Future[None]:
        """A future done after ``seconds`` of virtual time, woken on a millisecond grid (so that requests
        due in the same millisecond share a turn of the loop: fewer turns, same order of events)."""
        loop = self.loop
        future = loop.create_future()
        loop.call_at(math.ceil((loop.time() + seconds) * 1000.0) / 1000.0, _wake, future)
        return future

    def after(self, kind: str) -> None:
        """The request took effect; its answer may never reach the process (it dies, or the answer is
        lost)."""
        if not self.faults:
            return
        worker = CURRENT.get()
        if worker is None:
            return
        draw = self.rng.random()
        crash = self.profile.crash_rate / 2
        if draw < crash:
            self.kill(worker)
            raise Crash(kind)
        if draw < crash + self.profile.store_error_rate / 2:
            self.store_errors += 1
            raise StoreUnavailable(f"{kind}: the answer was lost")
