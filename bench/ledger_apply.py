"""Micro-benchmark of the simulators' file ledger: applies per second with a ledger already holding entries.

``python bench/ledger_apply.py --entries 10000 --calls 2000`` writes a ledger file of ``--entries``
applied keys into a fresh directory (under ``--dir``, default the system's temporary directory), loads
it as the simulators do at start-up, then times ``--calls`` applies of new keys one after another, each
awaited before the next (as one caller at a time sees it; every apply is on disk before it returns).
It prints applies per second and the mean time of one apply. The disk decides most of the figure:
run it on the disk the simulators' data directory lives on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from simulators.ledger import LEDGER_FILE_NAME, Ledger
from simulators.models import SERVICES


def seed_ledger(data_dir: Path, entries: int) -> None:
    """A ledger file of ``entries`` applied keys spread over the services (the first file format)."""
    services: dict[str, dict[str, dict[str, str | int]]] = {service: {} for service in SERVICES}
    for index in range(entries):
        service = SERVICES[index % len(SERVICES)]
        services[service][f"seed-{index:07d}"] = {"orderId": f"order-{index}", "applied": 1, "compensated": 0}
    body = {"version": 1, "services": services}
    (data_dir / LEDGER_FILE_NAME).write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")


async def time_applies(ledger: Ledger, calls: int) -> float:
    """Seconds taken by ``calls`` applies of new keys, one after another."""
    started = time.perf_counter()
    for index in range(calls):
        change = await ledger.apply(SERVICES[index % len(SERVICES)], f"bench-{index:07d}", f"bench-{index}")
        assert change.changed
    return time.perf_counter() - started


def main() -> None:
    """Seed, load, time, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=10_000, help="entries in the ledger before timing")
    parser.add_argument("--calls", type=int, default=2_000, help="applies timed")
    parser.add_argument("--dir", type=Path, default=None, help="where to create the data directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="ledger-bench-") as directory:
        data_dir = Path(directory)
        seed_ledger(data_dir, args.entries)
        ledger = Ledger.load(data_dir)
        elapsed = asyncio.run(time_applies(ledger, args.calls))
        close = getattr(ledger, "close", None)
        if close is not None:
            close()
    print(
        f"{args.calls} applies with {args.entries} entries already in the ledger: "
        f"{args.calls / elapsed:.0f} applies/s, {elapsed / args.calls * 1000:.2f} ms per apply"
    )


if __name__ == "__main__":
    main()
