"""Fixtures shared by every suite (Azurite's Table service, started once per test session), and where the
suite's time went."""

from __future__ import annotations

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
