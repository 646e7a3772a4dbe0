"""The process: the ledger on disk survives restarts and kills, signals stop it cleanly, counters count."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx

from simulators.ledger import Ledger
from tests.simulators.conftest import ServedSimulators, SimulatorsFactory, simulators_command
from tests.simulators.helpers import (
    FIRST,
    LAST,
    NO_CALLS,
    SECOND,
    apply,
    compensate,
    empty,
    entry,
    ledger,
    needs_services,
    set_faults,
    stats,
    without_seq,
)
from tests.support import free_port, wait_for

LEDGER_FILE = "simulators-ledger.json"
JOURNAL_FILE = "simulators-ledger.journal"


def test_ledger_survives_a_restart(simulators_factory: SimulatorsFactory, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = simulators_factory(data_dir=data_dir)
    with first.client() as http:
        apply(http, FIRST, "key-1")
        compensate(http, FIRST, "key-1")
        apply(http, SECOND, "key-2")
        before = ledger(http)
    assert first.stop() == 0

    second = simulators_factory(data_dir=data_dir)
    with second.client() as http:
        assert ledger(http) == before
        # The restarted process still knows the keys: replays apply and compensate nothing again, and a
        # replay answers the values the first apply answered.
        replay = apply(http, SECOND, "key-2")
        assert (replay.status_code, replay.json()) == (200, SECOND.answer("key-2"))
        assert compensate(http, FIRST, "key-1").json()["status"] == FIRST.compensated
        assert ledger(http) == before


def on_disk(data_dir: Path, scratch: Path) -> dict[str, Any]:
    """The ledger a restart would find in ``data_dir`` now (read from a copy: the process holds the files)."""
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(data_dir, scratch)
    ledger = Ledger.load(scratch)
    ledger.close()
    return ledger.snapshot()


def test_the_files_hold_every_change_once_answered(
    simulators: ServedSimulators, client: httpx.Client, tmp_path: Path
) -> None:
    apply(client, LAST, "key-1")
    assert on_disk(simulators.data_dir, tmp_path / "copy")[LAST.name]["key-1"]["applied"] == 1

    compensate(client, LAST, "key-1")

    assert on_disk(simulators.data_dir, tmp_path / "copy")[LAST.name]["key-1"]["compensated"] == 1
    # Appended to the journal; no temporary file is left behind.
    assert sorted(entry.name for entry in simulators.data_dir.iterdir()) == [JOURNAL_FILE]


def test_data_dir_is_created(simulators_factory: SimulatorsFactory, tmp_path: Path) -> None:
    running = simulators_factory(data_dir=tmp_path / "a" / "b")
    with running.client() as http:
        apply(http, FIRST, "key-1")
    assert (tmp_path / "a" / "b" / JOURNAL_FILE).is_file()


def test_a_killed_process_keeps_every_answered_change(
    simulators_factory: SimulatorsFactory, tmp_path: Path
) -> None:
    """SIGKILL in the middle of a stream of applies: every apply answered 201 is there after a restart."""
    data_dir = tmp_path / "data"
    first = simulators_factory(data_dir=data_dir)
    sent: list[str] = []
    answered: list[str] = []
    stop = threading.Event()

    def caller(prefix: str) -> None:
        with first.client(timeout=5) as http:
            for index in itertools.count():
                if stop.is_set():
                    return
                key = f"{prefix}-{index}"
                sent.append(key)
                try:
                    if apply(http, SECOND, key).status_code == 201:
                        answered.append(key)
                except httpx.TransportError:
                    return

    callers = [threading.Thread(target=caller, args=(f"c{n}",)) for n in range(4)]
    for thread in callers:
        thread.start()
    try:
        wait_for(lambda: len(answered) >= 200, timeout=30, what="200 applies answered")
        os.kill(first.process.pid, signal.SIGKILL)
        assert first.process.wait(10) == -signal.SIGKILL
    finally:
        stop.set()
        for thread in callers:
            thread.join(10)

    second = simulators_factory(data_dir=data_dir)
    with second.client() as http:
        entries = ledger(http)[SECOND.name]
        assert set(answered) <= set(entries) <= set(sent)
        assert all(found == entry(SECOND, key) for key, found in without_seq(entries).items())
        # Every change has its own number.
        assert len({found["appliedSeq"] for found in entries.values()}) == len(entries)
        replay = apply(http, SECOND, answered[-1])
        assert (replay.status_code, replay.json()) == (200, SECOND.answer(answered[-1]))
    # The start compacted everything into the snapshot.
    assert (data_dir / JOURNAL_FILE).read_bytes() == b""
    assert set(json.loads((data_dir / LEDGER_FILE).read_text())["services"][SECOND.name]) == set(entries)


def test_a_torn_last_line_is_ignored_at_start(simulators_factory: SimulatorsFactory, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = simulators_factory(data_dir=data_dir)
    with first.client() as http:
        apply(http, FIRST, "key-1")
        before = ledger(http)
    assert first.stop() == 0
    # What a crash in the middle of appending the next change leaves: a line without its end.
    with (data_dir / JOURNAL_FILE).open("ab") as journal:
        journal.write(f'{{"seq":2,"service":"{FIRST.name}","key":"key-2","entry":{{"orderId":"o'.encode())

    second = simulators_factory(data_dir=data_dir)
    with second.client() as http:
        assert ledger(http) == before
        assert apply(http, FIRST, "key-2").status_code == 201
    assert "ignoring an incomplete last line" in second.log()


def test_sigterm_stops_cleanly(simulators_factory: SimulatorsFactory) -> None:
    simulators = simulators_factory()
    with simulators.client() as client:
        apply(client, FIRST, "key-1")
    os.kill(simulators.process.pid, signal.SIGTERM)
    assert simulators.process.wait(10) == 0
    assert "Shutting down" in simulators.log()


def test_sigint_stops_cleanly(simulators_factory: SimulatorsFactory) -> None:
    simulators = simulators_factory()
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


@needs_services(3)
def test_stats_count_calls_and_faults(client: httpx.Client) -> None:
    apply(client, FIRST, "key-1")
    apply(client, FIRST, "key-1")
    compensate(client, FIRST, "key-1")
    set_faults(client, {SECOND.name: {"transientRate": 1}})
    apply(client, SECOND, "key-2")
    compensate(client, SECOND, "key-2")
    set_faults(client, {SECOND.name: {"permanentRate": 1}})
    apply(client, SECOND, "key-3")
    set_faults(client, {SECOND.name: {}, LAST.name: {"lostReplyRate": 1}})
    apply(client, LAST, "key-4")
    set_faults(client, {LAST.name: {"hangRate": 1, "hangMs": 10}})
    apply(client, LAST, "key-5")

    assert stats(client) == {
        **empty(NO_CALLS),
        FIRST.name: {**NO_CALLS, "calls": 3},
        SECOND.name: {**NO_CALLS, "calls": 3, "transient": 2, "permanent": 1},
        LAST.name: {**NO_CALLS, "calls": 2, "hang": 1, "lostReply": 1},
    }


def test_help_names_the_flags() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "simulators", "--help"], capture_output=True, text=True, timeout=30, check=True
    )
    for flag in ("--host", "--port", "--data-dir", "--seed", "--log-level"):
        assert flag in result.stdout
