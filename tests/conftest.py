"""Fixtures shared by every suite (Azurite's Table service, started once per test process), how the suite
spreads over processes (pytest-xdist), and where its time went."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from azure.data.tables import TableServiceClient

from devhost import azurite
from servicebus_emulator.launcher import free_port
from tests.support import stop_process

# The simulation's runs are CPU-bound and go to a pool of processes of their own, one per core
# (tests/simulation/pool.py): every module of it is one unit of work, so that one process holds that pool.
# The rest waits on its stacks far more than it computes, and shares the cores with it. A module is a unit
# too: its stack, a module fixture, starts once. The longest units go first (the simulation, then the
# walk-through), so that neither ends the run alone.
SIMULATION = "tests/simulation/"
_FIRST = (SIMULATION, "tests/e2e/test_customizing.py")


# A module's runs of the simulation happen in its first test's setup (a module fixture), beside the rest of
# the suite: minutes, not the seconds pyproject.toml's timeout is for.
SIMULATION_TIMEOUT = 1800


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not item.nodeid.startswith(_FIRST))  # stable: the rest as collected
    for item in items:
        if item.nodeid.startswith(SIMULATION) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SIMULATION_TIMEOUT))


def unit_of_work(nodeid: str) -> str:
    """The unit of work of a test, by its id: the simulation, or the test's module."""
    return SIMULATION if nodeid.startswith(SIMULATION) else nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)  # optional: a run with ``-p no:xdist`` has no such hook
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a process per core."""
    return len(os.sched_getaffinity(0))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    # xdist's own grouping (``--dist loadgroup``) marks a group by suffixing an item's id, which pytest 9
    # no longer reads; its module scheduling keeps a class apart from the rest of its module. This one
    # groups by unit_of_work, in the order collected.
    from xdist.scheduler import LoadScopeScheduling

    class ByUnitOfWork(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of_work(nodeid)

    config.option.loadscopereorder = False
    return ByUnitOfWork(config, log)


_started = time.monotonic()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """After the 15 slowest tests (``--durations``): the wall time and the 15 files that took longest."""
    per_file: dict[str, float] = defaultdict(float)
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                per_file[report.nodeid.split("::", 1)[0]] += report.duration
    if not per_file:
        return
    terminalreporter.section("slowest 15 files (seconds in their tests, summed)")
    for path, seconds in sorted(per_file.items(), key=lambda kv: -kv[1])[:15]:
        terminalreporter.write_line(f"{seconds:8.1f}s  {path}")
    terminalreporter.write_line(f"wall time: {time.monotonic() - _started:.0f}s")


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """Async tests (``pytest.mark.anyio``) run on asyncio, as the Functions worker does."""
    return "asyncio"


@pytest.fixture(scope="session")
def azurite_connection_string(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Azurite Table service on a free port, for the whole session."""
    data_dir: Path = tmp_path_factory.mktemp("azurite")
    port = free_port()
    with (data_dir / "azurite.log").open("wb") as log:
        process: subprocess.Popen[bytes] = azurite.launch(data_dir, port, in_memory=True, log=log)
    try:
        yield azurite.table_connection_string(port)
    finally:
        stop_process(process)


@pytest.fixture
def new_table(azurite_connection_string: str) -> Callable[[], str]:
    """Create a fresh, uniquely named table and return its name."""
    service = TableServiceClient.from_connection_string(azurite_connection_string)

    def create() -> str:
        name = "t" + uuid.uuid4().hex[:20]
        service.create_table(name)
        return name

    return create
