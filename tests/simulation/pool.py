"""Runs of the simulation on every core: seeds are independent of each other, so the suite's runs go to a
pool of processes (as many as the machine has cores, at most four) and each test reads its result.

A job may put a bug back first (a planted bug of ``tests/simulation/planted.py`` or a regression's of
``tests/simulation/regressions.py``, by name), in the process that runs it, and run a pinned catalog
(``tests/simulation/catalogs.py``, by name) instead of the declared one.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.pool import Pool

import pytest

from simulation.run import Result, run
from tests.simulation.catalogs import PINNED


@dataclass(frozen=True)
class Job:
    """One run: a seed, its orders (``orders`` replaces the seed's number, ``max_orders`` caps it) and the
    bug to put back (``("plant", name)``, ``("regression", name)`` or None); ``servicebus``: through the
    Service Bus adapter (see :class:`simulation.run.Simulation`); ``catalog``: a pinned catalog's name
    (None: the declared one); ``submit_as_app``, ``first_violation``, ``beside``: see
    :class:`simulation.run.Simulation`."""

    seed: int
    orders: int | None = None
    max_orders: int | None = None
    bug: tuple[str, str] | None = None
    servicebus: bool = True
    catalog: str | None = None
    submit_as_app: bool = True
    first_violation: bool = False  # end the run at its first violation (a planted bug's)
    beside: str | None = None  # an earlier release running half the processes (simulation.beside)


def _run(job: Job) -> Result:
    with pytest.MonkeyPatch.context() as monkeypatch:
        if job.bug is not None:
            kind, name = job.bug
            if kind == "plant":
                from tests.simulation.planted import PLANTS

                PLANTS[name].put(monkeypatch)
            else:
                from tests.simulation.regressions import REGRESSIONS

                next(r for r in REGRESSIONS if r.name == name).put_back(monkeypatch)
        catalog, services = PINNED[job.catalog] if job.catalog is not None else (None, None)
        return run(
            job.seed,
            job.orders,
            max_orders=job.max_orders,
            servicebus=job.servicebus,
            catalog=catalog,
            services=services,
            submit_as_app=job.submit_as_app,
            first_violation=job.first_violation,
            beside=job.beside,
        )


# The pool's processes yield the cores to the rest of the suite: its tests wait on stacks against deadlines
# of wall time, and starve when the simulation holds both cores; the seeds have no deadline and take what
# the rest leaves (docs/testing.md).
NICE = 10


def _yield_the_cores() -> None:
    os.nice(NICE)


def processes() -> int:
    """How many runs go at once."""
    return max(1, min(len(os.sched_getaffinity(0)), 4))


_shared: Pool | None = None


def _pool() -> Pool:
    """The suite's pool, started on first use and kept to the end: each of its processes imports the
    simulation once (seconds of CPU) rather than once per test."""
    global _shared
    if _shared is None:
        # spawn: a fork of the test process would carry its threads and open sockets along.
        _shared = multiprocessing.get_context("spawn").Pool(processes(), initializer=_yield_the_cores)
        atexit.register(_shared.terminate)
    return _shared


def run_all(jobs: Iterable[Job]) -> list[Result]:
    """Every job's result, in order."""
    jobs = list(jobs)
    if processes() == 1 or len(jobs) == 1:
        return list(map(_run, jobs))
    return _pool().map(_run, jobs, chunksize=1)


def run_in_order(jobs: Iterable[Job]) -> Iterator[Result]:
    """The jobs' results in order, as they come; the runs still going stop when the caller stops
    reading (on a pool of their own: the shared one would go on with them)."""
    jobs = list(jobs)
    if processes() == 1 or len(jobs) == 1:
        yield from map(_run, jobs)
        return
    # spawn: a fork of the test process would carry its threads and open sockets along.
    with multiprocessing.get_context("spawn").Pool(processes(), initializer=_yield_the_cores) as pool:
        yield from pool.imap(_run, jobs)
