"""What the deterministic simulation costs, and where its CPU goes. Run with ``make bench-simulation``.

Prints three things, all in CPU seconds of this process (``time.process_time``), which other work on the
machine moves less than wall time:

1. The fixed seeds (what ``make test`` and ``make simulate`` run): orders per CPU second.
2. The same seeds with no fault at all (the fault phase switched off before the first order): the cost of
   an order that goes straight through, the simulation's bookkeeping included.
3. Where the CPU goes, by part, over a few of the fixed seeds under ``cProfile`` (which slows everything
   about equally): the engine's own code, the adapters it runs on, the libraries they call (pydantic,
   tenacity, the Azure SDKs' entities and messages), the event loop, and each module of the simulation.
   The part of the code that is deployed, over the orders, bounds what the simulation could reach with a
   simulated world that cost nothing.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tools")]

from simulation.run import Simulation  # noqa: E402
from simulation.seeds import FIXED_MAX_ORDERS, FIXED_SEEDS  # noqa: E402

# A part of the code by where its function is defined (first match wins).
_PARTS = (
    ("/src/engine/", "engine (its own code)"),
    ("pydantic", "pydantic (records, messages, JSON)"),
    ("tenacity", "tenacity (the Agents' retries)"),
    ("/asyncio/", "asyncio (tasks, futures, timers)"),
    ("/tools/simulation/", "simulation: "),
    ("/src/adapters/", "adapters (state store, breakers, sender)"),
    ("/azure/", "azure SDKs (entities, messages, errors)"),
)


def _part(filename: str, function: str) -> str:
    for needle, name in _PARTS:
        if needle in filename:
            return name + Path(filename).stem if name.endswith(": ") else name
    if filename == "~":  # a builtin: named after the function, which says whose it is
        if "pydantic_core" in function:
            return "pydantic (records, messages, JSON)"
        return "builtins"
    return "other standard library"


def _run(seeds: range, calm: bool) -> tuple[int, float]:
    orders, cpu = 0, 0.0
    for seed in seeds:
        simulation = Simulation(seed, max_orders=FIXED_MAX_ORDERS)
        if calm:
            simulation.world.faults = False
        result = simulation.run()
        if not result.ok:
            raise SystemExit(result.report())
        orders += result.orders
        cpu += result.cpu_seconds
    return orders, cpu


def _profile(seeds: range) -> Counter[str]:
    profiler = cProfile.Profile()
    profiler.enable()
    for seed in seeds:
        Simulation(seed, max_orders=FIXED_MAX_ORDERS).run()
    profiler.disable()
    parts: Counter[str] = Counter()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    for (filename, _, function), (_, _, own, _, _) in stats.items():
        parts[_part(filename, function)] += own
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=len(FIXED_SEEDS), help="how many of the fixed seeds")
    parser.add_argument("--profile-seeds", type=int, default=10, help="how many seeds to profile")
    args = parser.parse_args()
    seeds = range(FIXED_SEEDS.start, FIXED_SEEDS.start + args.seeds)
    started = time.strftime("%Y-%m-%d %H:%M")
    orders, cpu = _run(seeds, calm=False)
    print(f"{started}, Python {sys.version.split()[0]}")
    rate = orders / cpu
    print(f"fixed seeds ({len(seeds)}):  {orders} orders in {cpu:.1f} CPU s: {rate:.0f} orders per CPU s")
    calm_orders, calm_cpu = _run(seeds, calm=True)
    print(
        f"no faults ({len(seeds)}):    {calm_orders} orders in {calm_cpu:.1f} CPU s: "
        f"{calm_orders / calm_cpu:.0f} orders per CPU s"
    )
    parts = _profile(range(FIXED_SEEDS.start, FIXED_SEEDS.start + args.profile_seeds))
    total = sum(parts.values())
    print(f"where the CPU goes ({args.profile_seeds} fixed seeds under cProfile, {total:.1f} s):")
    for name, seconds in parts.most_common():
        if seconds / total >= 0.005:
            print(f"  {name:45s} {100 * seconds / total:5.1f}%")
    # pydantic's time is mostly the deployed code's (records, messages, the saved copy they carry), partly
    # the simulation's reading of what is stored: the bound is given without it and with it.
    deployed = ("engine", "tenacity", "adapters", "azure")
    own = sum(s for n, s in parts.items() if n.split(" ")[0] in deployed) / total
    with_pydantic = own + sum(s for n, s in parts.items() if n.startswith("pydantic")) / total
    print(
        f"the engine, its adapters and their libraries: {100 * own:.0f}% of the CPU, "
        f"{100 * with_pydantic:.0f}% with pydantic; were the simulated world free, the fixed seeds would "
        f"run at most "
        f"{orders / (cpu * own):.0f} orders per CPU s ({orders / (cpu * with_pydantic):.0f} with pydantic)"
    )


if __name__ == "__main__":
    main()
