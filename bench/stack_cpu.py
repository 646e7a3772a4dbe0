"""CPU time of the local stack's processes (Linux ``/proc``), for the benchmarks that print it per order."""

from __future__ import annotations

import json
import os
from pathlib import Path

from devhost.launch import RunningDevhost

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (``/proc/<pid>/stat``); 0 if it has exited."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime (fields 14 and 15)


def stack_processes(devhost: RunningDevhost) -> dict[str, int]:
    """Each process of a running stack by name (azurite, servicebus, simulators, worker-1, ...): its PID."""
    state = json.loads((devhost.data_dir / "devhost.json").read_text())
    return {
        "azurite": state["azurite"]["pid"],
        "servicebus": state["servicebus"]["pid"],
        "simulators": state["simulators"]["pid"],
        **{f"worker-{n}": w["pid"] for n, w in enumerate(state["workers"], start=1)},
    }


class CpuMeter:
    """CPU seconds each process of a stack used between ``start`` and ``stop``."""

    def __init__(self, devhost: RunningDevhost) -> None:
        self.processes = stack_processes(devhost)
        self._before: dict[str, float] = {}
        self.used: dict[str, float] = {}

    def start(self) -> None:
        """Take the processes' CPU times now."""
        self._before = {name: cpu_seconds(pid) for name, pid in self.processes.items()}

    def stop(self) -> dict[str, float]:
        """CPU seconds per process since ``start``."""
        self.used = {name: cpu_seconds(pid) - self._before[name] for name, pid in self.processes.items()}
        return self.used


def per_order_report(used: dict[str, float], orders: int, indent: str = "  ") -> str:
    """CPU ms per order per process and in all, one line each."""
    lines = [f"{indent}{name:<12} {1000 * seconds / orders:6.1f} ms" for name, seconds in used.items()]
    lines.append(f"{indent}{'all':<12} {1000 * sum(used.values()) / orders:6.1f} ms")
    return "\n".join(lines)
