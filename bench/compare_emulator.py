"""The emulator's throughput against another revision's, side by side in one run.

Checks out ``src/servicebus_emulator`` of ``--base`` (default ``main``) into a temporary directory with
``git archive``, then runs ``bench/servicebus_emulator_throughput.py`` (this tree's) alternately against
that emulator and this tree's, ``--rounds`` times each (which goes first alternates too), so both see
the same machine load. Each run starts
its own emulator process; ``PYTHONPATH`` picks which emulator's code that process runs. Prints the median
rate of every operation for both and the change, and exits 1 if any operation is slower than the base by
more than ``--tolerance`` (default 10%).

    .venv/bin/python bench/compare_emulator.py --base main --rounds 4 --messages 5000
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "servicebus_emulator_throughput.py"
LINE = re.compile(r"^(?P<label>.+?)\s+(?P<count>\d+) msgs\s+(?P<seconds>[\d.]+) s\s+(?P<rate>\d+) msgs/s$")


def extract(ref: str, into: Path) -> Path:
    """Write the emulator as it is at ``ref`` under ``into``; return the folder that holds its package
    (``tools``, or ``src`` before the tools had a folder of their own)."""
    for folder in ("tools", "src"):
        archive = subprocess.run(
            ["git", "archive", "--format=tar", ref, f"{folder}/servicebus_emulator"],
            cwd=ROOT,
            check=False,
            capture_output=True,
        )
        if archive.returncode == 0:
            with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
                tar.extractall(into, filter="data")
            return into / folder
    raise SystemExit(f"{ref} holds no servicebus_emulator")


def run_bench(src: Path, messages: int) -> dict[str, float]:
    """One benchmark run with the emulator code under ``src``; rates by operation."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    result = subprocess.run(
        [sys.executable, str(BENCH), "--messages", str(messages)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    rates = {}
    for line in result.stdout.splitlines():
        match = LINE.match(line.strip())
        if match:
            rates[match["label"]] = float(match["rate"])
    if not rates:
        raise RuntimeError(f"no rates in the benchmark's output:\n{result.stdout}\n{result.stderr}")
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", default="main", help="git revision to compare with (default: main)")
    parser.add_argument("--rounds", type=int, default=4, help="runs of each emulator (default 4)")
    parser.add_argument("--messages", type=int, default=5000, help="messages per phase (default 5000)")
    parser.add_argument("--tolerance", type=float, default=0.10, help="allowed slowdown (default 0.10)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="emulator-base-") as tmp:
        sides = {"base": extract(args.base, Path(tmp)), "this tree": ROOT / "tools"}
        runs: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
        for round_number in range(1, args.rounds + 1):
            order = list(sides.items())
            if round_number % 2 == 0:  # base first, then this tree first: neither always runs second
                order.reverse()
            for side, src in order:
                runs[side].append(run_bench(src, args.messages))
                rates = ", ".join(f"{rate:.0f}" for rate in runs[side][-1].values())
                print(f"round {round_number}: {side}: {rates}", file=sys.stderr)

    labels = list(runs["base"][0])
    print(f"median msgs/s over {args.rounds} alternating runs each, {args.messages} messages per phase")
    print(f"{'operation':<34} {'base':>9} {'this tree':>10} {'change':>8}")
    slower = []
    for label in labels:
        base = statistics.median(run[label] for run in runs["base"])
        new = statistics.median(run[label] for run in runs["this tree"])
        change = new / base - 1
        print(f"{label:<34} {base:>9.0f} {new:>10.0f} {change:>+8.1%}")
        if change < -args.tolerance:
            slower.append(label)
    if slower:
        print(f"slower than {args.base} by more than {args.tolerance:.0%}: {', '.join(slower)}")
        return 1
    print(f"every operation within {args.tolerance:.0%} of {args.base} or faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
