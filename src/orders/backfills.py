"""The deployment's backfills (engine.backfill), for whoever deploys (docs/upgrading.md).

    python -m orders.backfills          # each backfill: where it is, what it did
    python -m orders.backfills --run    # run the unfinished ones to the end now, from where they are

The function app's ``backfill`` timer runs them by itself after a deployment; ``--run`` is for not waiting.
Reads the state store's settings from the environment, as the function app does (STATE_STORE_CONNECTION
or STATE_STORE_ENDPOINT, STATE_TABLE_NAME, STATE_SHARDS).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from adapters.backfills import TableBackfillProgress, declared
from engine import Backfills, Progress

from .runtime import Closer, _store
from .settings import Settings, store_settings


async def run(settings: Settings, to_the_end: bool) -> list[tuple[str, Progress | None]]:
    """Each declared backfill's progress, after running the unfinished ones to the end if asked."""
    closers: list[Closer] = []
    store = await _store(settings, closers)
    try:
        progress = TableBackfillProgress(store)
        backfills = Backfills(declared(store), progress, max_seconds=float("inf"))
        if to_the_end:
            await backfills.advance(datetime.now(UTC))
        return [(b.name, await progress.read_progress(b.name)) for b in backfills.declared]
    finally:
        await store.close()
        for close in closers:
            await close()


def describe(name: str, progress: Progress | None, shards: int) -> str:
    if progress is None:
        return f"{name}: not started (the backfill function starts it)"
    done = f"read {progress.read}, changed {progress.changed}, skipped {progress.skipped}"
    if progress.finished_at is not None:
        return f"{name}: finished {progress.finished_at:%Y-%m-%d %H:%M} UTC ({done})"
    return f"{name}: shard {progress.shard} of {shards} ({done})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orders.backfills", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="store_true", help="run the unfinished backfills to the end now")
    args = parser.parse_args(argv)
    try:
        settings = store_settings()
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2
    for name, progress in asyncio.run(run(settings, args.run)):
        print(describe(name, progress, settings.state_shards))
    return 0


if __name__ == "__main__":
    sys.exit(main())
