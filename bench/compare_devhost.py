"""`make bench`'s figures on this tree and on another revision, side by side in one run.

For comparing the devhost across a change of its Python or its worker code: ``--base`` (default
``main``) is written out with ``git archive`` into a temporary directory and run with its own virtual
environment (``--base-venv``, default ``.venv-base``, made with ``--base-python`` from the base's
``requirements-dev.txt`` the first time, and again when those change), this tree with ``.venv``. Both
use this tree's ``node_modules`` (Azurite). Every round runs, on each side in turn (which goes first
alternates), the three parts of ``make bench`` that time the stack:

- the per-step overhead (``bench/latency.py``): p50 from submission to Processed, lower is better;
- end to end (``end_to_end`` of ``bench/orders_throughput.py``): orders/s with 2 workers, higher is better;
- the demo (``python -m devhost.demo``): p50 from submission to the terminal state under faults, lower
  is better.

Each side runs its own revision's scripts and code (``PYTHONPATH`` is its ``src``). Prints every run and
the medians with the change, and exits 1 if a median is worse than the base's by more than
``--tolerance`` (default 10%).

    .venv/bin/python bench/compare_devhost.py --base 7c4b05e --base-python python3.11 --rounds 3
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

from devhost.releases import package_path, protos_folder

ROOT = Path(__file__).resolve().parents[1]
# A measure's name, whether higher is better, and how to take it on one side.
Measure = tuple[str, bool, Callable[["Side"], float]]
LATENCY = re.compile(r"submission to Processed .*?: p50 (?P<ms>\d+) ms")
# The demo's p50 row ends with the column of all its orders.
DEMO = re.compile(r"latency p50.*?(?P<s>\d+\.\d+) s\W*$", re.MULTILINE)
END_TO_END = (
    "import sys, tempfile; from pathlib import Path; sys.path.insert(0, 'bench');"
    "from orders_throughput import end_to_end\n"
    "with tempfile.TemporaryDirectory() as tmp:\n"
    "    rate, _, _ = end_to_end({orders}, 2, Path(tmp) / 'stack')\n"
    "print(f'END_TO_END {{rate:.3f}}')"
)


class Side:
    """One tree and the interpreter that runs it."""

    def __init__(self, name: str, root: Path, python: Path) -> None:
        self.name = name
        self.root = root
        self.python = python

    def run(self, *args: str) -> str:
        """Run ``python ARGS`` in this tree; its stdout (raises with the output if it fails)."""
        env = {**os.environ, "PYTHONPATH": package_path(self.root), "COLUMNS": "200"}
        result = subprocess.run(
            [str(self.python), *args], cwd=self.root, env=env, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            command = " ".join(args[:2])
            output = f"{result.stdout}\n{result.stderr}"
            raise RuntimeError(f"{self.name}: {command} exited {result.returncode}:\n{output}")
        return result.stdout


def _number(pattern: re.Pattern[str], text: str, group: str, what: str) -> float:
    match = pattern.search(text)
    if match is None:
        raise RuntimeError(f"no {what} in the output:\n{text}")
    return float(match[group])


def measures(latency_orders: int, end_to_end_orders: int) -> list[Measure]:
    """What a round takes on each side."""
    return [
        (
            "per-step overhead p50 (ms)",
            False,
            lambda side: _number(
                LATENCY, side.run("bench/latency.py", "--orders", str(latency_orders)), "ms", "latency"
            ),
        ),
        (
            "end to end (orders/s)",
            True,
            lambda side: _number(
                re.compile(r"END_TO_END (?P<rate>[\d.]+)"),
                side.run("-c", END_TO_END.format(orders=end_to_end_orders)),
                "rate",
                "rate",
            ),
        ),
        (
            "demo p50 under faults (s)",
            False,
            lambda side: _number(DEMO, side.run("-m", "devhost.demo"), "s", "demo p50"),
        ),
    ]


def extract(ref: str, into: Path) -> Path:
    """The tree at ``ref`` under ``into``, with this tree's node_modules."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", ref], cwd=ROOT, check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    (into / "node_modules").symlink_to(ROOT / "node_modules", target_is_directory=True)
    return into


def base_venv(tree: Path, venv: Path, python: str) -> Path:
    """``venv`` with the base's pinned packages, made (again) when its requirements changed."""
    requirements = b"".join(
        (tree / name).read_bytes() for name in ("requirements.txt", "requirements-dev.txt")
    )
    stamp = venv / ".requirements-sha256"
    digest = hashlib.sha256(requirements).hexdigest()
    interpreter = venv / "bin" / "python"
    if interpreter.exists() and stamp.exists() and stamp.read_text() == digest:
        return interpreter
    shutil.rmtree(venv, ignore_errors=True)
    # pyenv picks the interpreter from .python-version; PYENV_VERSION names the base's instead.
    version = re.sub(r"^python", "", Path(python).name)
    env = {**os.environ, "PYENV_VERSION": os.environ.get("PYENV_VERSION", version)}
    subprocess.run([python, "-m", "venv", str(venv)], check=True, env=env, cwd=tree)
    subprocess.run([str(interpreter), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
    subprocess.run(
        [str(interpreter), "-m", "pip", "install", "--quiet", "-r", "requirements-dev.txt"],
        check=True,
        cwd=tree,
    )
    stamp.write_text(digest)
    return interpreter


def generate_protos(tree: Path, python: Path) -> None:
    """The message classes the base's devhost imports, made from its .proto as ``make install`` does (a
    revision from before azure-functions-runtime has none)."""
    protos = tree / protos_folder(tree)
    if (protos / "function_rpc.proto").exists():
        subprocess.run(
            [
                str(python),
                "-m",
                "grpc_tools.protoc",
                "-I",
                str(protos),
                f"--python_out={protos}",
                "function_rpc.proto",
            ],
            check=True,
            cwd=protos,
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", default="main", help="git revision to compare with (default: main)")
    parser.add_argument(
        "--base-python", default="python3.11", help="Python for the base (default python3.11)"
    )
    parser.add_argument("--base-venv", type=Path, default=ROOT / ".venv-base", help="the base's virtual env")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side (default 3)")
    parser.add_argument("--latency-orders", type=int, default=30, help="per-step orders (default 30)")
    parser.add_argument("--orders", type=int, default=200, help="end-to-end orders (default 200)")
    parser.add_argument("--no-demo", action="store_true", help="leave the demo out (the other two only)")
    parser.add_argument("--tolerance", type=float, default=0.10, help="allowed change for the worse (0.10)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="devhost-base-") as tmp:
        tree = extract(args.base, Path(tmp) / "base")
        base_python = base_venv(tree, args.base_venv.resolve(), args.base_python)
        generate_protos(tree, base_python)
        sides = [
            Side(f"base ({args.base})", tree, base_python),
            Side("this tree", ROOT, ROOT / ".venv" / "bin" / "python"),
        ]
        for side in sides:
            version = side.run("-c", "import sys; print(sys.version.split()[0])").strip()
            print(f"{side.name}: Python {version}", flush=True)
        taken = measures(args.latency_orders, args.orders)
        if args.no_demo:
            taken = [m for m in taken if not m[0].startswith("demo")]
        results: dict[str, dict[str, list[float]]] = {s.name: {m[0]: [] for m in taken} for s in sides}
        for round_number in range(1, args.rounds + 1):
            order = sides if round_number % 2 else sides[::-1]
            for name, _, take in taken:
                for side in order:
                    value = take(side)
                    results[side.name][name].append(value)
                    print(f"round {round_number}  {side.name:<20} {name:<28} {value:.2f}", flush=True)

    base, this = sides[0].name, sides[1].name
    worse = []
    print(f"\nmedians of {args.rounds} rounds")
    print(f"{'measure':<28} {'base':>10} {'this tree':>10} {'change':>8}")
    for name, higher_is_better, _ in taken:
        before = statistics.median(results[base][name])
        after = statistics.median(results[this][name])
        change = (after - before) / before
        print(f"{name:<28} {before:>10.2f} {after:>10.2f} {change:>+8.1%}")
        if (-change if higher_is_better else change) > args.tolerance:
            worse.append(name)
    if worse:
        print(f"worse than the base by more than {args.tolerance:.0%}: {', '.join(worse)}")
        return 1
    print(f"every median within {args.tolerance:.0%} of the base, or better")
    return 0


if __name__ == "__main__":
    sys.exit(main())
