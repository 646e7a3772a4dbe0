"""Where the local pipeline spends its CPU under load. Run with ``make profile`` (Linux, py-spy).

It starts orders-devhost (2 workers by default) on free ports, drives the same load as ``make bench``'s
end-to-end run (batches of orders submitted by 8 threads, each waited on through ``GET
/api/order-counts``, over and over), and once the load is running records every Python process of the
stack for ``--seconds`` with py-spy: each function worker, the Service Bus emulator and the remote-service
simulators. py-spy samples from outside the process without pausing it (``--nonblocking``: pausing a
worker with a hundred threads 100 times a second halves its throughput) and, by default, only the thread
holding the GIL (``--gil``): py-spy takes threads parked in a lock or a socket read for running, so
without it idle pool threads swamp the profile. A function's share of samples is then its share of the
process's Python CPU time (C code that releases the GIL, such as TLS, is left out). Azurite runs on
Node.js: only its CPU time is shown.

For each process it prints the CPU it used during the window (from ``/proc``), then the top entries by
module and by function (self samples: the frame that was running), and by the innermost frame in the
project's own code (which of our functions the time is spent under, libraries included). The raw
collapsed stacks stay in ``--out``, one file per process, ready for flamegraph.pl or speedscope.

py-spy reads other processes' memory with ptrace: run as root, or allow it (``kernel.yama.ptrace_scope``
0, or the ``SYS_PTRACE`` capability in a container).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from pydantic import BaseModel

from devhost import launch
from orders_throughput import COUNTS_POLL_SECONDS, ORDER, processed_count
from stack_cpu import cpu_seconds, stack_processes

OWN_PACKAGES = {
    "engine",
    "orders",
    "adapters",
    "devhost",
    "simulators",
    "servicebus_emulator",
    "function_app",
}
NAMESPACE_PACKAGES = {"azure", "opentelemetry"}  # named by their first two path parts
STACK_ENV = {"SUPERVISOR_SCHEDULE": "*/5 * * * * *", "STEP_COMPLETE_BY_SECONDS": "60"}  # as make bench


class ProcessProfile(BaseModel):
    """One process's share of the CPU and where its samples fall."""

    name: str
    pid: int
    cpu_seconds: float
    window_seconds: float
    samples: int
    by_module: list[tuple[str, float]]  # (module, percent of samples), self
    by_function: list[tuple[str, float]]  # (function, percent of samples), self
    by_own_frame: list[tuple[str, float]]  # (innermost own-code function, percent of samples)


# ---- parsing py-spy's raw (collapsed) output ----------------------------------------------------------
def split_frame(frame: str) -> tuple[str, str]:
    """``"func (path/file.py:12)"`` -> ``("func", "path/file.py")``; frames without a location keep ""."""
    name, _, location = frame.rpartition(" (")
    if not name:
        return frame, ""
    return name, location.rstrip(")").rpartition(":")[0]


def module_of(path: str) -> str:
    """The package of a file path as py-spy shortens it: ``azure/servicebus/x.py`` -> ``azure.servicebus``."""
    if not path:
        return "<native>"
    parts = [p for p in Path(path).with_suffix("").parts if p not in ("/", "")]
    if "site-packages" in parts:
        parts = parts[parts.index("site-packages") + 1 :]
    elif "src" in parts:
        parts = parts[parts.index("src") + 1 :]
    if not parts:
        return path
    if parts[0] in NAMESPACE_PACKAGES and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def parse_collapsed(text: str) -> list[tuple[list[str], int]]:
    """Lines of ``frame;frame;...;leaf count`` -> [(frames, count)]; blank or malformed lines are skipped."""
    stacks = []
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def summarise(stacks: list[tuple[list[str], int]], top: int) -> tuple[int, list[list[tuple[str, float]]]]:
    """Total samples and the top entries by module, by function and by innermost own-code frame."""
    total = sum(n for _, n in stacks)
    modules: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for frames, n in stacks:
        name, path = split_frame(frames[-1])
        module = module_of(path)
        modules[module] += n
        functions[f"{name} ({module})"] += n
        inner = "(none: library or interpreter only)"
        for frame in reversed(frames):
            fname, fpath = split_frame(frame)
            fmodule = module_of(fpath)
            if fmodule in OWN_PACKAGES:
                inner = f"{fname} ({Path(fpath).with_suffix('').as_posix().replace('/', '.')})"
                break
        own[inner] += n

    def share(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(k, 100 * v / total) for k, v in counter.most_common(top)] if total else []

    return total, [share(modules), share(functions), share(own)]


# ---- the stack and its load -------------------------------------------------------------------------
def drive(api_url: str, batch: int, stop: threading.Event, done: list[int]) -> None:
    """``make bench``'s end-to-end load, batch after batch, until ``stop`` is set."""
    with httpx.Client(base_url=api_url, timeout=30) as api, ThreadPoolExecutor(8) as pool:
        while not stop.is_set():
            ids = [f"prof-{uuid.uuid4().hex[:12]}" for _ in range(batch)]
            list(pool.map(lambda i: api.post("/api/orders", json={"orderId": i, **ORDER}), ids))
            target = done[0] + len(ids)
            while done[0] < target and not stop.is_set():
                # One request for all orders, as make bench waits: polling each order would load the
                # worker that serves HTTP and Azurite with the benchmark's own reads.
                done[0] = max(done[0], processed_count(api))
                time.sleep(COUNTS_POLL_SECONDS)  # polling the stack over HTTP, as make bench does


def py_spy() -> str:
    """The py-spy executable: next to this interpreter (the project's venv), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if not found:
        raise SystemExit("py-spy not found: run make install (it is pinned in requirements-dev.txt)")
    return found


def record(
    processes: dict[str, int], seconds: float, rate: int, out: Path, top: int, modes: list[str]
) -> tuple[list[ProcessProfile], dict[str, float]]:
    """Record every Python process at once; return their profiles and the CPU seconds of all processes."""
    executable = py_spy()
    python = {k: v for k, v in processes.items() if k != "azurite"}
    before = {name: cpu_seconds(pid) for name, pid in processes.items()}
    start = time.monotonic()
    running = {
        name: subprocess.Popen(
            [
                *(executable, "record", "--pid", str(pid), "--duration", str(int(seconds))),
                *("--rate", str(rate), "--format", "raw", *modes),
                *("--output", str(out / f"{name}.txt")),
            ],
            stdout=subprocess.DEVNULL,
            stderr=(out / f"{name}.py-spy.log").open("wb"),
        )
        for name, pid in python.items()
    }
    for name, process in running.items():
        if process.wait(seconds + 60) != 0:
            log = (out / f"{name}.py-spy.log").read_text(errors="replace")
            raise SystemExit(f"py-spy failed on {name} (pid {python[name]}): {log.strip()[-500:]}")
    window = time.monotonic() - start
    used = {name: cpu_seconds(pid) - before[name] for name, pid in processes.items()}
    profiles = []
    for name, pid in python.items():
        total, (modules, functions, own) = summarise(parse_collapsed((out / f"{name}.txt").read_text()), top)
        profiles.append(
            ProcessProfile(
                name=name,
                pid=pid,
                cpu_seconds=used[name],
                window_seconds=window,
                samples=total,
                by_module=modules,
                by_function=functions,
                by_own_frame=own,
            )
        )
    return profiles, used


def print_report(profiles: list[ProcessProfile], used: dict[str, float], window: float, rate: int) -> None:
    """CPU per process, then each Python process's top entries."""
    print(f"CPU during the {window:.0f} s window (percent of one core; the machine has {os.cpu_count()}):")
    for name, seconds in sorted(used.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<12}{100 * seconds / window:6.0f} %")
    print(f"  {'all':<12}{100 * sum(used.values()) / window:6.0f} %")
    for p in sorted(profiles, key=lambda p: -p.cpu_seconds):
        print(
            f"\n== {p.name} (pid {p.pid}): {100 * p.cpu_seconds / p.window_seconds:.0f} % of a core, "
            f"{p.samples} samples at {rate} Hz"
        )
        for title, rows in (
            ("by module (self)", p.by_module),
            ("by function (self)", p.by_function),
            ("by innermost own-code function (inclusive of libraries below it)", p.by_own_frame),
        ):
            print(f"  {title}:")
            for label, percent in rows:
                print(f"    {percent:5.1f} %  {label}")


def main() -> None:
    """Start the stack, drive load, record, print, stop."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=20, help="recording window (default 20)")
    parser.add_argument("--rate", type=int, default=100, help="samples per second (default 100)")
    parser.add_argument("--workers", type=int, default=2, help="function workers (default 2)")
    parser.add_argument("--batch", type=int, default=100, help="orders per submitted batch (default 100)")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of load before recording")
    parser.add_argument("--top", type=int, default=10, help="entries per table (default 10)")
    parser.add_argument("--out", type=Path, default=None, help="folder for the raw stacks (default: temp)")
    parser.add_argument(
        "--all-threads",
        action="store_true",
        help="sample every thread py-spy takes for running, not only the one holding the GIL (py-spy "
        "then counts many threads that wait in a lock or a socket as running)",
    )
    args = parser.parse_args()
    if min(args.seconds, args.rate, args.workers, args.batch, args.top) < 1 or args.warmup < 0:
        parser.error("--seconds, --rate, --workers, --batch and --top must be at least 1, --warmup >= 0")
    out = args.out or Path(tempfile.mkdtemp(prefix="orders-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="orders-profile-stack-") as tmp:
        devhost = launch.start(Path(tmp) / "stack", workers=args.workers, env=STACK_ENV)
        stop = threading.Event()
        done = [0]
        load = threading.Thread(target=drive, args=(devhost.api_url, args.batch, stop, done), daemon=True)
        try:
            processes = stack_processes(devhost)
            load.start()
            time.sleep(args.warmup)  # let the queues fill before the window opens
            before = done[0]
            started = time.monotonic()
            modes = ["--nonblocking"] + ([] if args.all_threads else ["--gil"])
            profiles, used = record(processes, args.seconds, args.rate, out, args.top, modes)
            window = time.monotonic() - started
            throughput = (done[0] - before) / window
        finally:
            stop.set()
            load.join(60)
            devhost.stop()
    print(
        f"load: {throughput:.1f} orders/s seen Processed by the load's poller during the window "
        f"({args.workers} workers; counted from the order counts every 0.25 s)"
    )
    print_report(profiles, used, window, args.rate)
    print(f"\nraw collapsed stacks (flamegraph.pl, speedscope): {out}")


if __name__ == "__main__":
    main()
