"""The worker's concurrency model, as azure-functions-runtime sets it: synchronous functions share a pool of
PYTHON_THREADPOOL_THREAD_COUNT threads (by default ``min(32, cores + 4)``), asynchronous ones run on the
event loop."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import azure_functions_runtime as runtime
import httpx
import pytest

from devhost.language_worker import LanguageWorker
from tests.devhost.conftest import WorkerFactory, toy_environment, wait_ready
from tests.servicebus_emulator.conftest import RunningEmulator
from tests.support import wait_for

DEFAULT_THREADS = min(32, (os.cpu_count() or 1) + 4)


@pytest.mark.parametrize(
    ("setting", "threads"),
    [(None, DEFAULT_THREADS), ("3", 3), ("40", 40), ("0", DEFAULT_THREADS), ("many", DEFAULT_THREADS)],
)
def test_the_runtime_sizes_the_pool_from_the_setting(
    setting: str | None, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The runtime's rules: any whole number from 1 up; anything else is logged and the default used.
    if setting is None:
        monkeypatch.delenv("PYTHON_THREADPOOL_THREAD_COUNT", raising=False)
    else:
        monkeypatch.setenv("PYTHON_THREADPOOL_THREAD_COUNT", setting)
    runtime.start_threadpool_executor()
    try:
        assert LanguageWorker(Path(".")).thread_count == threads
    finally:
        runtime.stop_threadpool_executor()


def _executions(stats_file: Path, name: str) -> int:
    try:
        return int(json.loads(stats_file.read_text())["executions"].get(name, 0))
    except (OSError, ValueError, KeyError):
        return 0  # not written yet


@pytest.mark.parametrize("setting", [None, "2"], ids=["default", "override"])
def test_synchronous_calls_beyond_the_pool_wait_while_async_ones_still_run(
    setting: str | None, toy_emulator: RunningEmulator, worker_factory: WorkerFactory, tmp_path: Path
) -> None:
    threads = int(setting) if setting else min(32, (os.cpu_count() or 1) + 4)
    stats_file = tmp_path / "stats.json"
    env = toy_environment(toy_emulator, tmp_path / "records", PYTHON_THREADPOOL_THREAD_COUNT=setting)
    worker = worker_factory(env, extra_args=("--stats-file", str(stats_file)))
    wait_ready(worker)
    calls = threads + 2
    with httpx.Client(timeout=60) as client, ThreadPoolExecutor(max_workers=calls) as pool:

        def state() -> dict[str, Any]:
            return dict(client.get(worker.url("/api/pool/state")).json())

        held = [pool.submit(client.get, worker.url("/api/pool/hold")) for _ in range(calls)]
        # Every call has reached the worker (it counts an execution before waiting for a thread) ...
        wait_for(lambda: _executions(stats_file, "pool_hold") == calls, timeout=30, what="every call")
        # ... and exactly the pool's threads run: the async function answers from the event loop meanwhile.
        current = wait_for(lambda: (s := state())["active"] == threads and s, timeout=30, what="a full pool")
        assert current["peak"] == threads and current["thread"] == "MainThread"
        assert client.post(worker.url("/api/pool/release")).status_code == 200
        assert [future.result().status_code for future in held] == [200] * calls
    assert state_after(worker.url("/api/pool/state"))["peak"] == threads
    assert f"synchronous functions run in {threads} thread(s)" in worker.log()


def state_after(url: str) -> dict[str, Any]:
    """The pool counters once every call returned."""
    return dict(httpx.get(url, timeout=10).json())
