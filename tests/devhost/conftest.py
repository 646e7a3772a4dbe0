"""Fixtures for the devhost tests: the real emulator with the toy app's queues, and worker processes.

Every process is started here and stopped by its PID in teardown (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.servicebus_emulator.conftest import RunningEmulator, start_emulator, write_config
from tests.support import free_port, stop_process, wait_for

TOY_APP = Path(__file__).parent / "toy_app"
SETTINGS_QUEUE = "queue-from-setting"
TOY_QUEUES: dict[str, dict[str, Any]] = {
    "work": {},
    "poison": {"MaxDeliveryCount": 2},
    SETTINGS_QUEUE: {},
    "parallel": {},
    "slow": {"LockDuration": "PT2S"},
    "hold": {},
}
# Variables a worker must not inherit from the test process: the tests set them deliberately.
_OWNED_VARIABLES = (
    "ServiceBusConnection",
    "AzureWebJobsServiceBusConnection",
    "QUEUE_FROM_SETTING",
    "PYTHON_THREADPOOL_THREAD_COUNT",
)


@dataclass
class RunningWorker:
    """A ``python -m devhost.worker`` process started for a test."""

    process: subprocess.Popen[bytes]
    log_path: Path
    http_port: int | None
    files: dict[str, Path] = field(default_factory=dict)

    def log(self) -> str:
        """Everything the worker wrote to stderr/stdout so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def url(self, path: str) -> str:
        """An URL on the worker's HTTP port."""
        assert self.http_port is not None, "this worker serves no HTTP"
        return f"http://127.0.0.1:{self.http_port}{path}"

    def records(self, name: str) -> list[dict[str, Any]]:
        """The JSON lines a toy function appended to its file (``name`` as in :data:`RECORD_FILES`)."""
        path = self.files[name]
        if not path.exists():
            return []
        lines = path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]


RECORD_FILES = {
    "work": "TOY_WORK_FILE",
    "poison": "TOY_POISON_FILE",
    "setting": "TOY_SETTING_FILE",
    "parallel": "TOY_PARALLEL_FILE",
    "slow": "TOY_SLOW_FILE",
    "slow_http": "TOY_SLOW_HTTP_FILE",
    "hold": "TOY_HOLD_FILE",
    "timer": "TOY_TIMER_FILE",
}


def toy_environment(
    emulator: RunningEmulator | None, directory: Path, **overrides: str | None
) -> dict[str, str]:
    """Environment for a toy-app worker: app settings plus one record file per function under ``directory``.

    ``overrides`` set variables; None removes one (to test a missing setting).
    """
    directory.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOY_") and k not in _OWNED_VARIABLES}
    if emulator is not None:
        env["ServiceBusConnection"] = emulator.connection_string
    env["QUEUE_FROM_SETTING"] = SETTINGS_QUEUE
    env["TOY_SCHEDULE"] = "*/1 * * * * *"
    env["TOY_BARRIER_PARTIES"] = "4"
    for name, variable in RECORD_FILES.items():
        env[variable] = str(directory / f"{name}.jsonl")
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def start_worker(
    env: dict[str, str],
    log_path: Path,
    *,
    http: bool = True,
    worker_id: str = "1",
    app_dir: Path = TOY_APP,
    extra_args: tuple[str, ...] = (),
) -> RunningWorker:
    """Start a worker process (not waiting for it to be ready)."""
    port = free_port() if http else None
    command = [
        sys.executable,
        "-m",
        "devhost.worker",
        "--app-dir",
        str(app_dir),
        "--worker-id",
        worker_id,
        "--log-level",
        "DEBUG",
        *extra_args,
    ]
    if port is not None:
        command += ["--http-port", str(port)]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(command, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    files = {name: Path(env[variable]) for name, variable in RECORD_FILES.items() if variable in env}
    return RunningWorker(process, log_path, port, files)


def wait_ready(worker: RunningWorker, timeout: float = 20.0) -> None:
    """Wait until the worker logs that it serves its triggers; fail with its log if it exits first."""

    def ready() -> bool:
        if worker.process.poll() is not None:
            raise AssertionError(f"worker exited with {worker.process.returncode}:\n{worker.log()}")
        return "ready:" in worker.log()

    wait_for(ready, timeout=timeout, what="the worker to be ready")


WorkerFactory = Callable[..., RunningWorker]


@pytest.fixture(scope="session")
def toy_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningEmulator]:
    """One emulator with the toy app's queues for the whole session."""
    directory = tmp_path_factory.mktemp("toy-emulator")
    config = write_config(directory / "config.json", TOY_QUEUES)
    running = start_emulator(config, directory / "emulator.log")
    yield running
    stop_process(running.process)


@pytest.fixture
def worker_factory(tmp_path: Path) -> Iterator[WorkerFactory]:
    """Start workers for one test: ``worker_factory(env, http=True)``; all are stopped afterwards."""
    started: list[RunningWorker] = []

    def factory(env: dict[str, str], **kwargs: Any) -> RunningWorker:
        worker = start_worker(env, tmp_path / f"worker-{len(started)}.log", **kwargs)
        started.append(worker)
        return worker

    yield factory
    for worker in started:
        stop_process(worker.process)
