"""Run a command (the test suite, by default) while other processes keep every core busy.

``make test-under-load`` runs ``pytest`` this way; ``PYTEST_ARGS`` picks the tests, e.g.
``make test-under-load PYTEST_ARGS=tests/e2e``. Directly::

    python tests/load/run_under_load.py [--hogs 2] [-- command ...]

It starts ``--hogs`` CPU hogs (separate Python processes spinning in a loop, at the same priority as the
command), runs the command, and stops the hogs by PID whatever happens: the command passing, failing,
Ctrl+C or SIGTERM. The hogs run in their own session so that a Ctrl+C in the terminal reaches the command
but not them, and the runner stops them itself. The command gets their PIDs in ``LOAD_HOG_PIDS``. The
exit code is the command's (130 after Ctrl+C, 143 after SIGTERM).

The point: timing margins that hold only on an idle machine are defects, and a machine that runs the
tests is rarely idle.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from types import FrameType

HOG = "while True: pass"


class Stopped(Exception):
    """SIGTERM arrived: unwind so that the hogs are stopped."""


def start_hogs(count: int, into: list[subprocess.Popen[bytes]]) -> None:
    """Append ``count`` busy-looping processes to ``into``, each in its own session (a terminal's Ctrl+C
    does not reach them); appended one by one so that an interruption midway leaves none unknown."""
    for _ in range(count):
        into.append(
            subprocess.Popen([sys.executable, "-c", HOG], start_new_session=True, stdin=subprocess.DEVNULL)
        )


def stop_hogs(hogs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each hog by PID, then SIGKILL any that does not exit within 5 s; reap them all."""
    for hog in hogs:
        if hog.poll() is None:
            hog.terminate()
    for hog in hogs:
        try:
            hog.wait(5)
        except subprocess.TimeoutExpired:
            hog.kill()
            hog.wait()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Stopped


def run(command: list[str], hogs: int) -> int:
    """Run ``command`` with ``hogs`` CPU hogs beside it; return its exit code."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    # Ctrl+C must reach us even when our parent ran us with SIGINT ignored or blocked (both inherited across
    # exec, e.g. from a background job): Python then leaves SIGINT as it found it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    started: list[subprocess.Popen[bytes]] = []
    child: subprocess.Popen[bytes] | None = None
    try:
        start_hogs(hogs, started)
        pids = [h.pid for h in started]
        print(f"run_under_load: {hogs} CPU hogs, pids {pids}; running: {' '.join(command)}", flush=True)
        child = subprocess.Popen(command, env={**os.environ, "LOAD_HOG_PIDS": " ".join(map(str, pids))})
        return child.wait()
    except KeyboardInterrupt:
        return 130
    except Stopped:
        return 143
    finally:
        if child is not None and child.poll() is None:
            # Ctrl+C reached it too (same process group); SIGTERM did not: pass it on, then insist.
            child.terminate()
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        stop_hogs(started)
        print(f"run_under_load: stopped the hogs {[h.pid for h in started]}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        usage="%(prog)s [--hogs N] [-- command ...]",
    )
    parser.add_argument("--hogs", type=int, default=2, help="CPU hogs to run (default 2)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command (default: python -m pytest)")
    args = parser.parse_args(argv)
    if args.hogs < 0:
        parser.error("--hogs must be 0 or more")
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return run(command or [sys.executable, "-m", "pytest"], args.hogs)


if __name__ == "__main__":
    sys.exit(main())
