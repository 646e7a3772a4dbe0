"""``python -m simulation``: run seeds of the simulation and report what they found.

    python -m simulation                   # the fixed seeds (what make test runs)
    python -m simulation --seed 42         # one seed, with the trace of a failure
    python -m simulation --seed 42 --orders 300   # the same seed with 300 orders (as a report names it)
    python -m simulation --seconds 600     # seeds from a random start for ten minutes
    python -m simulation --seeds 100-199   # a range of seeds
    python -m simulation --beside 1.0.0    # BESIDE_SEEDS, half the processes on release 1.0.0's code

Exits 1 if any seed broke an invariant, printing each failing seed (``make simulate SEED=n`` reproduces it).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Iterator

from .run import Result, run
from .seeds import BESIDE_SEEDS, FIXED_MAX_ORDERS, FIXED_SEEDS


def _seeds(args: argparse.Namespace) -> Iterator[int]:
    if args.seed is not None:
        yield args.seed
    elif args.seeds:
        first, _, last = args.seeds.partition("-")
        yield from range(int(first), int(last or first) + 1)
    elif args.seconds is not None:
        start = args.start if args.start is not None else random.SystemRandom().randrange(10**6, 10**9)
        print(f"seeds from {start} for {args.seconds:g} s", flush=True)
        seed = start
        while True:
            yield seed
            seed += 1
    else:
        yield from BESIDE_SEEDS if args.beside else FIXED_SEEDS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, help="run this seed only, and print its trace if it fails")
    parser.add_argument("--seeds", help="a range of seeds, e.g. 100-199")
    parser.add_argument("--seconds", type=float, help="run consecutive seeds for this long")
    parser.add_argument("--start", type=int, help="with --seconds: the first seed (default: random)")
    parser.add_argument("--orders", type=int, help="orders per seed (default: drawn from the seed)")
    parser.add_argument("--fail-fast", action="store_true", help="stop at the first failing seed")
    parser.add_argument(
        "--beside",
        metavar="VERSION",
        help="run half the processes on this earlier release's engine and adapters (simulation.beside)",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    results: list[Result] = []
    failed: list[int] = []
    for seed in _seeds(args):
        if args.seconds is not None and time.perf_counter() - started >= args.seconds:
            break
        fixed = args.seed is None and not args.seeds and args.seconds is None
        result = run(seed, args.orders, max_orders=FIXED_MAX_ORDERS if fixed else None, beside=args.beside)
        results.append(result)
        verbose = args.seed is not None or not result.ok
        print(result.report() if verbose else result.report().splitlines()[0], flush=True)
        if args.seed is not None:
            print(f"  stats: {result.stats}")
        if not result.ok:
            failed.append(seed)
            if args.fail_fast:
                break
    elapsed = time.perf_counter() - started
    orders = sum(r.orders for r in results)
    cpu = sum(r.cpu_seconds for r in results)
    print(
        f"{len(results)} seed(s), {orders} orders in {elapsed:.1f} s "
        f"({orders / cpu if cpu else 0:.0f} orders per CPU second); "
        + (f"FAILED: seeds {', '.join(map(str, failed))}" if failed else "every invariant held")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
