"""orders-devhost itself: devhost.json, worker restarts, clean stop, and state that survives a restart."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx

from devhost import launch
from tests.e2e.conftest import DEFAULT_WORKFLOW, FAST_SETTINGS, new_order, runs
from tests.support import wait_for


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_stop_ends_every_component_and_state_survives_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "stack"
    first = launch.start(data_dir, workers=2, env=FAST_SETTINGS)
    try:
        state = json.loads((data_dir / "devhost.json").read_text())
        assert set(state) >= {"azurite", "servicebus", "simulators", "workers"}
        assert state["ready"] is True, "launch.start returns only once the devhost has seen worker 1 answer"
        assert [set(w) >= {"pid"} for w in state["workers"]] == [True, True]
        assert state["servicebus"]["port"] == first.sb_port and state["azurite"]["port"] == first.azurite_port
        api = httpx.Client(base_url=first.api_url, timeout=10)
        assert api.post("/api/orders", json=new_order("survivor")).status_code == 202
        wait_for(lambda: api.get("/api/orders/survivor").json()["processState"] == "Processed", timeout=60)
        api.close()
    finally:
        first.stop()
    assert first.process.returncode == 0
    pids = [state[k]["pid"] for k in ("azurite", "servicebus", "simulators")] + [
        w["pid"] for w in state["workers"]
    ]
    wait_for(lambda: not any(alive(p) for p in pids), timeout=10, what="every component to stop")
    assert not (data_dir / "devhost.json").exists()

    second = launch.start(data_dir, workers=1, env=FAST_SETTINGS)
    try:
        with httpx.Client(base_url=second.api_url, timeout=10) as api:
            assert api.get("/api/orders/survivor").json()["processState"] == "Processed"
        with httpx.Client(base_url=second.simulators_url, timeout=10) as sims:
            ledger = sims.get("/ledger").json()
        # Every service the order called keeps its effect across the restart.
        called = {step.agent for step in runs(DEFAULT_WORKFLOW, "survivor")}
        assert {s for s in ledger if any(e["orderId"] == "survivor" for e in ledger[s].values())} == called
    finally:
        second.stop()


def test_a_dead_worker_is_restarted_and_devhost_json_follows(tmp_path: Path) -> None:
    data_dir = tmp_path / "stack"
    running = launch.start(data_dir, workers=1, env=FAST_SETTINGS)
    try:
        before = json.loads((data_dir / "devhost.json").read_text())["workers"][0]["pid"]
        os.kill(before, signal.SIGKILL)

        def restarted() -> int | None:
            pid = json.loads((data_dir / "devhost.json").read_text())["workers"][0]["pid"]
            return pid if pid != before else None

        after = wait_for(restarted, timeout=30, what="the worker to be restarted")
        assert alive(after)

        def healthy() -> bool:
            try:
                return httpx.get(f"{running.api_url}/api/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(healthy, timeout=60, what="the restarted worker to serve HTTP")
    finally:
        running.stop()
