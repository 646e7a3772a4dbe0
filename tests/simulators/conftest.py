"""Fixtures that start the real simulators process on a free port, with its data directory per test."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support import free_port, stop_process, wait_for


@dataclass
class RunningSimulators:
    """A simulators process started for one test."""

    process: subprocess.Popen[bytes]
    port: int
    data_dir: Path
    log_path: Path

    @property
    def base_url(self) -> str:
        """The root URL of the HTTP API."""
        return f"http://127.0.0.1:{self.port}"

    def client(self, timeout: float = 10.0) -> httpx.Client:
        """A new client of this process (the caller closes it)."""
        return httpx.Client(base_url=self.base_url, timeout=timeout)

    def log(self) -> str:
        """Everything the process has logged so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> int | None:
        """SIGTERM the process by its PID and return its exit status."""
        return stop_process(self.process)


def simulators_command(port: int, data_dir: Path, seed: int | None = None) -> list[str]:
    """The command line that starts the simulators."""
    command = [sys.executable, "-m", "simulators", "--port", str(port), "--data-dir", str(data_dir)]
    command += ["--log-level", "DEBUG"]
    if seed is not None:
        command += ["--seed", str(seed)]
    return command


def _healthy(process: subprocess.Popen[bytes], url: str, log_path: Path) -> bool:
    if process.poll() is not None:
        log = log_path.read_text(errors="replace")
        raise AssertionError(f"the simulators exited with code {process.returncode}:\n{log}")
    try:
        return httpx.get(url, timeout=0.5).status_code == 200
    except httpx.TransportError:
        return False


def start_simulators(data_dir: Path, log_path: Path, seed: int | None = None) -> RunningSimulators:
    """Start ``python -m simulators`` on a free port and return once ``GET /health`` answers."""
    port = free_port()
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            simulators_command(port, data_dir, seed), stdout=log_file, stderr=subprocess.STDOUT
        )
    running = RunningSimulators(process, port, data_dir, log_path)
    try:
        wait_for(
            lambda: _healthy(process, f"{running.base_url}/health", log_path),
            timeout=20,
            what="the simulators to answer /health",
        )
    except BaseException:
        stop_process(process)
        raise
    return running


SimulatorsFactory = Callable[..., RunningSimulators]


@pytest.fixture
def simulators_factory(tmp_path: Path) -> Iterator[SimulatorsFactory]:
    """Start simulators processes: ``simulators_factory(data_dir=..., seed=...)``; all stopped at the end.

    Without ``data_dir`` each process gets a directory of its own under the test's tmp_path.
    """
    started: list[RunningSimulators] = []

    def factory(data_dir: Path | None = None, seed: int | None = None) -> RunningSimulators:
        index = len(started)
        running = start_simulators(
            data_dir or tmp_path / f"data-{index}", tmp_path / f"simulators-{index}.log", seed
        )
        started.append(running)
        return running

    yield factory
    for running in started:
        stop_process(running.process)


@pytest.fixture
def simulators(simulators_factory: SimulatorsFactory) -> RunningSimulators:
    """One simulators process with an empty ledger and no faults."""
    return simulators_factory()


@pytest.fixture
def client(simulators: RunningSimulators) -> Iterator[httpx.Client]:
    """An HTTP client of ``simulators`` with a 10 s timeout."""
    with simulators.client() as http:
        yield http


@pytest.fixture(scope="module")
def shared_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A client of one process shared by a module's tests, for checks that need no fresh state.

    Tests using it must not leave faults set, and must use keys of their own.
    """
    directory = tmp_path_factory.mktemp("shared")
    running = start_simulators(directory / "data", directory / "simulators.log")
    try:
        with running.client() as http:
            yield http
    finally:
        stop_process(running.process)
