"""Isolation under a hung and under a slow remote service, through orders-devhost with one worker and the
Python worker's default thread pool (no PYTHON_THREADPOOL_THREAD_COUNT): what one service does must not
reach the steps and the API calls that do not use it."""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import (
    DEFAULT_WORKFLOW,
    LAST_STEP,
    LocalStack,
    position,
    runs,
    start_stack,
    stop_stack,
)
from tests.e2e.test_recovery import assert_applied_once
from tests.support import wait_for

THREADPOOL_SETTING = "PYTHON_THREADPOOL_THREAD_COUNT"
DEFAULT_THREADS = min(32, (os.cpu_count() or 1) + 4)


@pytest.fixture
def one_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[LocalStack]:
    """A stack of its own with one worker, the real default thread count and the test's settings."""
    monkeypatch.delenv(THREADPOOL_SETTING, raising=False)
    running = start_stack(tmp_path / "devhost", workers=1, extra_env=request.param)
    try:
        assert f"synchronous functions run in {DEFAULT_THREADS} thread(s)" in running.worker_log()
        yield running
    finally:
        stop_stack(running)


class StatusPoller:
    """Reads orders' status over HTTP in the background and keeps every answer's latency."""

    def __init__(self, stack: LocalStack, order_ids: list[str]) -> None:
        self.stack = stack
        self.order_ids = order_ids
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-poller", daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=str(self.stack.api.base_url), timeout=30) as client:
            n = 0
            while not self._stop.is_set():
                if self.order_ids:
                    order_id = self.order_ids[n % len(self.order_ids)]
                    n += 1
                    started = time.perf_counter()
                    response = client.get(f"/api/orders/{order_id}")
                    self.latencies.append(time.perf_counter() - started)
                    if response.status_code != 200:
                        self.failures.append(f"{response.status_code} {response.text}")
                self._stop.wait(0.05)  # the pace of a client polling its orders

    def __enter__(self) -> StatusPoller:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def p99(self) -> float:
        return statistics.quantiles(self.latencies, n=100)[98]


HUNG = {"SUPERVISOR_MAX_FAILURES": "100"}  # the hang lasts a while: no order may reach Error meanwhile


@pytest.mark.parametrize("one_worker", [HUNG], indirect=True)
def test_a_hung_service_holds_up_nothing_else(one_worker: LocalStack) -> None:
    stack = one_worker
    hung = position(LAST_STEP)  # the last step's service hangs; every step before it is unaffected
    stack.faults(**{LAST_STEP.agent: {"hangRate": 1, "hangMs": 60_000}})
    order_ids: list[str] = []
    with StatusPoller(stack, order_ids) as poller:
        for _ in range(12):  # an order every half second, all through the hang
            order_ids.append(stack.submit())
            time.sleep(0.5)

        def hung_past_recovery() -> bool:
            orders = [stack.order(order_id) for order_id in order_ids]
            forward = all(s["state"] in ("Completed", "LeftOut") for o in orders for s in o["steps"][:hung])
            return forward and orders[-1]["steps"][hung]["attempts"] >= 2  # even the last one was recovered

        wait_for(hung_past_recovery, timeout=90, interval=0.5, what="the steps before the hung one")
        stack.clear_faults()
        assert len(poller.latencies) > 100 and not poller.failures, poller.failures[:3]
        p99 = poller.p99()
        print(f"GET /api/orders/{{id}} in the hang: {len(poller.latencies)} calls, p99 {p99 * 1000:.0f} ms")
        assert p99 < 0.5, f"GET /api/orders/{{id}} p99 {p99:.3f}s during the hang"
    for order_id in order_ids:
        order = stack.wait_terminal(order_id, timeout=120)
        assert order["processState"] == "Processed", order
        # The Supervisor recovered only the hung step: the others ran once, at their first attempt.
        assert all(
            s["attempts"] == 1 for i, s in enumerate(order["steps"]) if i != hung and called(order, s)
        ), order
        assert order["steps"][hung]["attempts"] >= 2, order
        assert_applied_once(stack, order_id)


SLOW = {"STEP_COMPLETE_BY_SECONDS": "4"}


def called(order: dict[str, Any], step: dict[str, Any]) -> bool:
    """Whether the order called a service for this step (a wait, or a step left out, calls none)."""
    return step["name"] in {s.name for s in runs(DEFAULT_WORKFLOW, order["orderId"])}


@pytest.mark.parametrize("one_worker", [SLOW], indirect=True)
def test_a_slow_service_gets_one_call_per_step_and_nothing_is_recovered(one_worker: LocalStack) -> None:
    stack = one_worker
    slow = LAST_STEP.agent
    stack.faults(**{slow: {"latencyMs": 2500}})
    before = stack.simulators.get("/stats").json()[slow]["calls"]
    with ThreadPoolExecutor(30) as pool:
        order_ids = list(pool.map(lambda _: stack.submit(), range(30)))
    orders = [stack.wait_terminal(order_id, timeout=120) for order_id in order_ids]
    recovered = [o["orderId"] for o in orders if o["failureCount"] or o["processState"] != "Processed"]
    assert recovered == [], f"{len(recovered)} of 30 orders recovered or not processed"
    assert all(s["attempts"] == 1 for o in orders for s in o["steps"] if called(o, s))
    calls = stack.simulators.get("/stats").json()[slow]["calls"] - before
    print(f"{slow} calls for 30 orders' {LAST_STEP.name} at 2.5 s each: {calls}")
    assert 30 <= calls <= 32, f"{calls} calls to {slow} for 30 orders"
