"""The process: the ledger on disk survives restarts, signals stop it cleanly, counters count."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.simulators.conftest import RunningSimulators, SimulatorsFactory, simulators_command
from tests.simulators.helpers import (
    INVENTORY,
    PAYMENT,
    SHIPPING,
    apply,
    compensate,
    ledger,
    set_faults,
    stats,
)
from tests.support import free_port

LEDGER_FILE = "simulators-ledger.json"


def test_ledger_survives_a_restart(simulators_factory: SimulatorsFactory, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = simulators_factory(data_dir=data_dir)
    with first.client() as http:
        apply(http, INVENTORY, "inv-1")
        compensate(http, INVENTORY, "inv-1")
        apply(http, PAYMENT, "pay-1")
        before = ledger(http)
    assert first.stop() == 0

    second = simulators_factory(data_dir=data_dir)
    with second.client() as http:
        assert ledger(http) == before
        # The restarted process still knows the keys: replays apply and compensate nothing again.
        assert apply(http, PAYMENT, "pay-1").status_code == 200
        assert compensate(http, INVENTORY, "inv-1").json()["status"] == "released"
        assert ledger(http) == before


def test_ledger_file_is_complete_after_every_change(
    simulators: RunningSimulators, client: httpx.Client
) -> None:
    path = simulators.data_dir / LEDGER_FILE
    apply(client, SHIPPING, "ship-1")
    assert json.loads(path.read_text())["services"]["shipping"]["ship-1"]["applied"] == 1

    compensate(client, SHIPPING, "ship-1")

    assert json.loads(path.read_text())["services"]["shipping"]["ship-1"]["compensated"] == 1
    # Written through a temporary file renamed over the ledger: none is left behind.
    assert sorted(entry.name for entry in simulators.data_dir.iterdir()) == [LEDGER_FILE]


def test_data_dir_is_created(simulators_factory: SimulatorsFactory, tmp_path: Path) -> None:
    running = simulators_factory(data_dir=tmp_path / "a" / "b")
    with running.client() as http:
        apply(http, INVENTORY, "inv-1")
    assert (tmp_path / "a" / "b" / LEDGER_FILE).is_file()


def test_sigterm_stops_cleanly(simulators: RunningSimulators, client: httpx.Client) -> None:
    apply(client, INVENTORY, "inv-1")
    client.close()
    os.kill(simulators.process.pid, signal.SIGTERM)
    assert simulators.process.wait(10) == 0
    assert "Shutting down" in simulators.log()


def test_sigint_stops_cleanly(simulators: RunningSimulators) -> None:
    os.kill(simulators.process.pid, signal.SIGINT)
    assert simulators.process.wait(10) == 0
    assert "Traceback" not in simulators.log()


def test_unreadable_ledger_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / LEDGER_FILE).write_text("{not a ledger")

    result = subprocess.run(
        simulators_command(free_port(), tmp_path), capture_output=True, text=True, timeout=30, check=False
    )

    assert result.returncode == 2
    assert "is not valid" in result.stderr
    # The damaged file is left for a human to look at, not replaced by an empty ledger.
    assert (tmp_path / LEDGER_FILE).read_text() == "{not a ledger"


def test_stats_count_calls_and_faults(client: httpx.Client) -> None:
    apply(client, INVENTORY, "inv-1")
    apply(client, INVENTORY, "inv-1")
    compensate(client, INVENTORY, "inv-1")
    set_faults(client, {"payment": {"transientRate": 1}})
    apply(client, PAYMENT, "pay-1")
    compensate(client, PAYMENT, "pay-1")
    set_faults(client, {"payment": {"permanentRate": 1}})
    apply(client, PAYMENT, "pay-2")
    set_faults(client, {"payment": {}, "shipping": {"lostReplyRate": 1}})
    apply(client, SHIPPING, "ship-1")
    set_faults(client, {"shipping": {"hangRate": 1, "hangMs": 10}})
    apply(client, SHIPPING, "ship-2")

    assert stats(client) == {
        "inventory": {"calls": 3, "transient": 0, "permanent": 0, "hang": 0, "lostReply": 0},
        "payment": {"calls": 3, "transient": 2, "permanent": 1, "hang": 0, "lostReply": 0},
        "shipping": {"calls": 2, "transient": 0, "permanent": 0, "hang": 1, "lostReply": 1},
    }


def test_help_names_the_flags() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "simulators", "--help"], capture_output=True, text=True, timeout=30, check=True
    )
    for flag in ("--host", "--port", "--data-dir", "--seed", "--log-level"):
        assert flag in result.stdout
