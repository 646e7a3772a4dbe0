"""Fixtures that serve the real simulators app on a free port, with its data directory per test.

Most tests get the app served by uvicorn in a thread of the test's process (``simulators``): a real HTTP
server with a fresh ledger, started in milliseconds. The tests of the process itself (its command line, a
restart, a signal, a fault seed given on the command line) start ``python -m simulators``
(``simulators_factory``), which takes a second or more each.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import uvicorn

from simulators.app import create_app
from simulators.cli import Server
from tests.support import free_port, stop_process, wait_for


class _Listening:
    """What simulators listening on ``port`` answer to, in a process or in a thread."""

    port: int
    log_path: Path

    @property
    def base_url(self) -> str:
        """The root URL of the HTTP API."""
        return f"http://127.0.0.1:{self.port}"

    def client(self, timeout: float = 10.0) -> httpx.Client:
        """A new client of these simulators (the caller closes it)."""
        return httpx.Client(base_url=self.base_url, timeout=timeout)

    def log(self) -> str:
        """Everything they have logged so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")


@dataclass
class RunningSimulators(_Listening):
    """A simulators process started for one test."""

    process: subprocess.Popen[bytes]
    port: int
    data_dir: Path
    log_path: Path

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


@dataclass
class ServedSimulators(_Listening):
    """The simulators app served by uvicorn in a thread of this process, logging to ``log_path``."""

    server: Server
    thread: threading.Thread
    port: int
    data_dir: Path
    log_path: Path
    handler: logging.Handler = field(repr=False)
    level: int = logging.NOTSET  # the simulators' logger's level before, given back at the stop

    def log(self) -> str:
        """Everything the app has logged so far."""
        self.handler.flush()
        return super().log()

    def stop(self) -> None:
        """Shut the server down as the process does (simulators.cli.Server: hangs end at once), and close
        the ledger."""
        self.server.should_exit = True
        self.thread.join(10)
        self.server.config.app.state.simulators.ledger.close()
        logger = logging.getLogger("simulators")
        logger.removeHandler(self.handler)
        logger.setLevel(self.level)
        self.handler.close()


def serve_simulators(data_dir: Path, log_path: Path) -> ServedSimulators:
    """Serve a fresh simulators app over HTTP on a free port in a thread; return once it listens."""
    handler = logging.FileHandler(log_path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("simulators")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)  # as the process runs in these tests (--log-level DEBUG)
    app = create_app(data_dir)
    port = free_port()
    # The same settings as the process's (simulators.cli), on asyncio: uvicorn's "auto" loop would set
    # uvloop's policy for the whole test process.
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_config=None, lifespan="off", http="httptools", loop="asyncio"
    )
    server = Server(config, app.state.simulators)
    thread = threading.Thread(target=server.run, name=f"simulators-{port}", daemon=True)
    thread.start()
    served = ServedSimulators(server, thread, port, data_dir, log_path, handler, level)
    try:
        wait_for(lambda: server.started or not thread.is_alive(), timeout=20, what="the simulators to listen")
        if not server.started:
            raise AssertionError(f"the simulators did not start:\n{served.log()}")
    except BaseException:
        served.stop()
        raise
    return served


@pytest.fixture
def simulators(tmp_path: Path) -> Iterator[ServedSimulators]:
    """A simulators app with an empty ledger and no faults, served in a thread of this process."""
    served = serve_simulators(tmp_path / "data", tmp_path / "simulators.log")
    yield served
    served.stop()


@pytest.fixture
def client(simulators: ServedSimulators) -> Iterator[httpx.Client]:
    """An HTTP client of ``simulators`` with a 10 s timeout."""
    with simulators.client() as http:
        yield http


@pytest.fixture(scope="module")
def shared_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A client of one process shared by a module's tests, for checks that need no fresh state.

    Tests using it must not leave faults set, and must use keys of their own.
    """
    directory = tmp_path_factory.mktemp("shared")
    served = serve_simulators(directory / "data", directory / "simulators.log")
    try:
        with served.client() as http:
            yield http
    finally:
        served.stop()
