"""``run_under_load.py``: the hogs run while the command runs, and are gone afterwards whatever happened."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

RUNNER = Path(__file__).with_name("run_under_load.py")

# The command under load: checks that each hog is alive and busy, writes their PIDs, then exits with the
# code it is given (or waits to be interrupted).
PROBE = """
import os, sys, time
from pathlib import Path
pids = [int(p) for p in os.environ["LOAD_HOG_PIDS"].split()]
for pid in pids:
    assert "while True" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(), pid
Path(sys.argv[1]).write_text(" ".join(map(str, pids)))
if sys.argv[2] == "wait":
    time.sleep(120)  # until the test interrupts the runner
sys.exit(int(sys.argv[2]))
"""


def reap_leftovers(pids: list[int]) -> list[int]:
    """The PIDs still alive; SIGKILLs them so that a failing test leaves no hog behind."""
    left = [p for p in pids if alive(p)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def start(tmp_path: Path, code: str, hogs: int = 2) -> tuple[subprocess.Popen[bytes], Path]:
    pids_file = tmp_path / "pids"
    command = [sys.executable, "-c", PROBE, str(pids_file), code]
    runner = subprocess.Popen([sys.executable, str(RUNNER), "--hogs", str(hogs), "--", *command])
    return runner, pids_file


def wait_for(path: Path, runner: subprocess.Popen[bytes], timeout: float = 30) -> list[int]:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text()):
        assert runner.poll() is None or path.exists(), f"runner exited with {runner.returncode}"
        assert time.monotonic() < deadline, "the command never ran"
        time.sleep(0.05)  # polling for a file the command writes
    return [int(p) for p in path.read_text().split()]


@pytest.mark.parametrize("code", [0, 3])
def test_runs_the_command_beside_busy_hogs_and_stops_them(tmp_path: Path, code: int) -> None:
    runner, pids_file = start(tmp_path, str(code))
    assert runner.wait(60) == code  # the command's own exit code, failure included
    pids = wait_for(pids_file, runner)
    assert len(pids) == 2
    assert not reap_leftovers(pids)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_run_stops_the_command_and_the_hogs(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    runner, pids_file = start(tmp_path, "wait")
    try:
        pids = wait_for(pids_file, runner)
        os.kill(runner.pid, sig)
        assert runner.wait(60) == code
    finally:
        if runner.poll() is None:
            runner.kill()
    assert not reap_leftovers(pids)


def test_bad_hog_count_is_refused(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(RUNNER), "--hogs", "-1", "--", sys.executable, "-c", "pass"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "--hogs must be 0 or more" in result.stderr
