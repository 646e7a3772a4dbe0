"""Fixtures shared by every suite (Azurite's Table service, started once per test process), how the suite
spreads over processes (pytest-xdist), and where its time went."""

from __future__ import annotations

import multiprocessing
import os
import resource
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

# The simulation's runs are CPU-bound and go to a pool of processes of their own, one per core, at a lower
# priority (tests/simulation/pool.py): every module of it is one unit of work, so that one process holds
# that pool, and that process gets a worker beside one per core. The rest waits on its stacks far more
# than it computes (a load of about 1 on two cores without the simulation), and has the cores first. A
# module is a unit too: its stack, a module fixture, starts once. The longest units go first (the
# simulation, then the walk-through), so that neither ends the run alone.
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
    """``-n auto``: a process per core, and one for the simulation, which mostly waits on its pool."""
    return len(os.sched_getaffinity(0)) + 1


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
_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds() -> float:
    """The CPU this process and its children have used so far: its own, its reaped children's (a module's
    stack, stopped at the module's end), and the live ones of multiprocessing (the simulation's pool, which
    lives for the session)."""
    used = sum(
        usage.ru_utime + usage.ru_stime
        for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    )
    for child in multiprocessing.active_children():
        try:
            fields = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile: counted with the reaped ones
        used += (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime
    return used


_cpu_mark = [0.0]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slowest-files", type=int, default=15, help="how many files the summary of where time went lists"
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    _cpu_mark[0] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Each report carries the CPU its phase used in its process and that process's children (a module's
    first setup starts its stack, its last teardown stops it), so the summary can say where the CPU went."""
    outcome = yield
    now = _cpu_seconds()
    outcome.get_result().user_properties.append(("cpu", now - _cpu_mark[0]))
    _cpu_mark[0] = now


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """After the 15 slowest tests (``--durations``): the wall time and the 15 files that took longest
    (``--slowest-files``), with the CPU each used (its processes' and their children's)."""
    per_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                seconds = per_file[report.nodeid.split("::", 1)[0]]
                seconds[0] += report.duration
                seconds[1] += sum(v for k, v in report.user_properties if k == "cpu" and isinstance(v, float))
    if not per_file:
        return
    count = terminalreporter.config.getoption("slowest_files")
    terminalreporter.section(f"slowest {count} files (seconds in their tests, summed; CPU seconds)")
    for path, (seconds, cpu) in sorted(per_file.items(), key=lambda kv: -kv[1][0])[:count]:
        terminalreporter.write_line(f"{seconds:8.1f}s  {cpu:8.1f} CPU s  {path}")
    total = sum(cpu for _, cpu in per_file.values())
    terminalreporter.write_line(f"wall time: {time.monotonic() - _started:.0f}s; CPU in tests: {total:.0f}s")


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
