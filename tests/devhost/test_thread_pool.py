"""The worker's concurrency model: synchronous functions share a pool of PYTHON_THREADPOOL_THREAD_COUNT
threads (by default the Python worker's ``min(32, cores + 4)``), asynchronous ones run on the event loop."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from devhost.errors import ConfigurationError
from devhost.worker import default_thread_count, thread_pool_size
from tests.devhost.conftest import WorkerFactory, toy_environment, wait_ready
from tests.servicebus_emulator.conftest import RunningEmulator
from tests.support import wait_for


def test_the_default_is_the_python_workers_and_the_setting_overrides_it() -> None:
    assert [default_thread_count(cores) for cores in (1, 2, 4, 28, 64)] == [5, 6, 8, 32, 32]
    assert thread_pool_size({}) == min(32, (os.cpu_count() or 1) + 4)
    assert thread_pool_size({"PYTHON_THREADPOOL_THREAD_COUNT": " 3 "}) == 3
    for bad in ("0", "33", "many"):
        with pytest.raises(ConfigurationError, match="PYTHON_THREADPOOL_THREAD_COUNT"):
            thread_pool_size({"PYTHON_THREADPOOL_THREAD_COUNT": bad})


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
        assert current["peak"] == threads and not current["thread"].startswith("devhost-invocation")
        assert client.post(worker.url("/api/pool/release")).status_code == 200
        assert [future.result().status_code for future in held] == [200] * calls
    assert state_after(worker.url("/api/pool/state"))["peak"] == threads
    assert f"synchronous functions run in {threads} thread(s)" in worker.log()


def state_after(url: str) -> dict[str, Any]:
    """The pool counters once every call returned."""
    return dict(httpx.get(url, timeout=10).json())
