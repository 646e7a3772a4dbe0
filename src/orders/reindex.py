"""``orders-reindex``: build the listing by state for a store written before it existed.

Run once after deploying the version that lists and counts orders from listing entries (see
``adapters.table_store``). Page by page, shard by shard, it gives every live order without a listing entry
its entry (in one transaction with the order's state record, conditional on that record's ETag), and moves
every finished order that the earlier version left in the live table to the history, where the retention
clean-up finds it. It is:

- idempotent: an order that has its entry is skipped, so a second run changes nothing;
- resumable: with ``--checkpoint FILE`` it writes where it is after every page and starts from there;
- safe beside the running app: an order saved meanwhile got its entry from that save, and is skipped.

It reads the same settings as the app (``STATE_STORE_CONNECTION`` or ``STATE_STORE_ENDPOINT`` with
``AZURE_CLIENT_ID``, ``STATE_TABLE_NAME``, ``STATE_SHARDS``) from the environment.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from adapters.table_store import TableStateStore

from .runtime import _store
from .settings import Settings, store_settings


@dataclass
class Totals:
    """What a run did, over every page."""

    read: int = 0
    indexed: int = 0
    archived: int = 0
    skipped: int = 0


def _load_checkpoint(path: Path | None) -> tuple[int, str | None]:
    if path is None or not path.exists():
        return 0, None
    data = json.loads(path.read_text())
    return int(data["shard"]), data.get("continuation")


def _save_checkpoint(path: Path | None, shard: int, continuation: str | None) -> None:
    if path is None:
        return
    partial = path.with_suffix(path.suffix + ".tmp")
    partial.write_text(json.dumps({"shard": shard, "continuation": continuation}))
    partial.replace(path)  # a crash leaves the previous checkpoint or this one, never half of one


async def reindex(
    store: TableStateStore,
    checkpoint: Path | None = None,
    page_size: int = 100,
    progress: Callable[[int, Totals], None] | None = None,
) -> Totals:
    """Every shard, from the checkpoint (if any) on; returns what was done."""
    shard, continuation = _load_checkpoint(checkpoint)
    totals = Totals()
    while shard < store.shards:
        report = await store.index_page(shard, continuation, page_size)
        totals.read += report.read
        totals.indexed += report.indexed
        totals.archived += report.archived
        totals.skipped += report.skipped
        continuation = report.continuation
        if continuation is None:
            shard += 1
        _save_checkpoint(checkpoint, shard, continuation)
        if progress is not None:
            progress(shard, totals)
    return totals


async def _run(settings: Settings, checkpoint: Path | None, page_size: int) -> Totals:
    closers: list[Callable[[], Awaitable[None]]] = []
    store = await _store(settings, closers)
    try:
        return await reindex(
            store,
            checkpoint,
            page_size,
            lambda shard, t: print(
                f"shards done {shard}/{store.shards}: read {t.read}, indexed {t.indexed}, "
                f"moved to the history {t.archived}, skipped {t.skipped}",
                flush=True,
            ),
        )
    finally:
        await store.close()
        for close in closers:
            await close()


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, read the settings from the environment, run."""
    parser = argparse.ArgumentParser(
        prog="orders-reindex", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", type=Path, help="file that records progress, to resume from")
    parser.add_argument("--page-size", type=int, default=100, help="orders read per request (1-1000)")
    args = parser.parse_args(argv)
    if not 1 <= args.page_size <= 1000:
        parser.error("--page-size must be from 1 to 1000")
    try:
        settings = store_settings()
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2
    totals = asyncio.run(_run(settings, args.checkpoint, args.page_size))
    print(
        f"done: read {totals.read}, indexed {totals.indexed}, moved to the history {totals.archived}, "
        f"skipped {totals.skipped} (run again to pick up skipped orders that were not saved meanwhile)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
