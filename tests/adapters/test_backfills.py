"""Backfills (engine.backfill) on the table store, on Azurite: the listing entries of a store written before
them, resumed after a crash, idempotent, raced by a second instance, and said in the answers meanwhile."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.backfills import BACKFILL_ROW, ListingEntries, TableBackfillProgress
from adapters.table_store import SWITCH_PARTITION, TableStateStore
from engine import transitions
from engine.backfill import BackfillPage, Backfills
from tests.adapters.test_history import DAY, SHARDS, counts, finished, rows, store
from tests.adapters.test_table_store import NOW, ctx, new_record

pytestmark = pytest.mark.anyio


__all__ = ["store"]  # the fixture, used by name


async def _as_before_the_listing(store: TableStateStore) -> None:
    """Remove every listing entry and ``IndexKey``, as a store written before the listing has none."""
    for key, entity in (await rows(store.table)).items():
        if key.startswith("index|"):
            await store.table.delete_entity(entity["PartitionKey"], key)
        elif "IndexKey" in entity:
            del entity["IndexKey"]
            await store.table.upsert_entity(entity, mode="replace")  # type: ignore[arg-type]


class Crashing:
    """The listing backfill, crashing (as a worker does when its host stops) after ``pages`` pages."""

    def __init__(self, store: TableStateStore, pages: int) -> None:
        self._inner = ListingEntries(store)
        self.name, self.answers, self.pages = self._inner.name, self._inner.answers, pages

    async def page(self, shard: int, continuation: str | None, size: int) -> BackfillPage:
        if self.pages == 0:
            raise KeyboardInterrupt
        self.pages -= 1
        return await self._inner.page(shard, continuation, size)


def backfills(store: TableStateStore, *declared: Any) -> Backfills:
    return Backfills(list(declared) or [ListingEntries(store)], TableBackfillProgress(store), page_size=2)


async def test_the_listing_backfill_resumes_after_a_crash_and_a_second_run_changes_nothing(
    store: TableStateStore,
) -> None:
    for i in range(5):
        await store.create(new_record(f"p-{i}"))
    for i in range(3):
        await finished(store, f"done-{i}")
        (entry,) = [e async for e in store.expired(NOW + DAY) if e.order_id == f"done-{i}"]
        await store.unwatch(entry)  # an earlier release dropped finished orders' watch entries, nothing more
    await _as_before_the_listing(store)
    assert counts(await store.count_by_state(100)) == {}  # nothing listed yet
    first = backfills(store, Crashing(store, pages=1))
    await first.refresh(NOW)
    assert first.incomplete("listing") == ["listing-entries"] and first.incomplete("search") == []

    with pytest.raises(KeyboardInterrupt):
        await first.advance(NOW)
    stored = await TableBackfillProgress(store).read_progress("listing-entries")
    assert stored is not None and not stored.finished and 1 <= stored.read <= 2  # its one page, kept

    restarted = backfills(store)  # another instance, or the same after its restart
    await restarted.refresh(NOW)
    assert restarted.incomplete("listing") == ["listing-entries"]
    (progress,) = await restarted.advance(NOW)
    assert progress.finished and progress.shard == SHARDS
    assert progress.read == 8 and progress.changed == 8 and progress.skipped == 0  # each order once
    assert restarted.incomplete("listing") == []
    assert counts(await store.count_by_state(100)) == {"Pending": 5, "Processed": 3}
    for i in range(3):
        assert (await store.load(f"done-{i}")).archived  # type: ignore[union-attr]
    assert await restarted.advance(NOW) == []  # finished: nothing more, not even a read

    # Run again from the start (its record gone): idempotent, it changes nothing.
    await store.table.delete_entity(SWITCH_PARTITION, f"{BACKFILL_ROW}listing-entries")
    (again,) = await backfills(store).advance(NOW)
    assert again.finished and (again.read, again.changed) == (5, 0)
    # An order listed this way moves its entry with its next change like any other.
    record = await store.load("p-0")
    assert record is not None and record.listed is not None
    transitions.claim(record, ctx())
    await store.save(record)
    assert counts(await store.count_by_state(100)) == {"Pending": 4, "Processing": 1, "Processed": 3}


async def test_an_order_saved_before_the_backfill_reaches_it_gets_its_entry_from_that_save(
    store: TableStateStore,
) -> None:
    await store.create(new_record("o-1"))
    await _as_before_the_listing(store)
    record = await store.load("o-1")
    assert record is not None and record.listed is None
    transitions.claim(record, ctx())
    await store.save(record)
    assert counts(await store.count_by_state(100)) == {"Processing": 1}
    (progress,) = await backfills(store).advance(NOW)
    assert progress.finished and progress.changed == 0


async def test_on_a_store_that_holds_no_order_a_backfill_is_finished_at_once(store: TableStateStore) -> None:
    fresh = backfills(store, Crashing(store, pages=0))  # a page would crash: none is read
    await fresh.refresh(NOW)
    assert fresh.incomplete("listing") == []
    progress = await TableBackfillProgress(store).read_progress("listing-entries")
    assert progress is not None and progress.finished and progress.read == 0


async def test_two_instances_at_once_each_page_is_saved_by_one_and_the_other_stops(
    store: TableStateStore,
) -> None:
    for i in range(4):
        await store.create(new_record(f"p-{i}"))
    await _as_before_the_listing(store)
    progress_store = TableBackfillProgress(store)
    stored = None

    class Overtaken:
        """A page during which another instance saves its own progress first."""

        name, answers = "listing-entries", frozenset({"listing"})

        async def page(self, shard: int, continuation: str | None, size: int) -> BackfillPage:
            nonlocal stored
            page = await ListingEntries(store).page(shard, continuation, size)
            current = await progress_store.read_progress(self.name)
            assert current is not None
            stored = await progress_store.write_progress(current.model_copy(update={"read": 99}))
            return page

    assert await backfills(store, Overtaken()).advance(NOW) == []  # it lost the race: stops
    assert stored is not None and await progress_store.read_progress("listing-entries") == stored
    (progress,) = await backfills(store).advance(NOW)  # the next run goes on from the winner's record
    assert progress.finished and counts(await store.count_by_state(100)) == {"Pending": 4}


async def test_a_progress_record_it_cannot_read_starts_the_backfill_again(store: TableStateStore) -> None:
    await store.create(new_record("o-1"))
    await _as_before_the_listing(store)
    row = {"PartitionKey": SWITCH_PARTITION, "RowKey": f"{BACKFILL_ROW}listing-entries", "Shard": "two"}
    await store.table.upsert_entity(row)
    (progress,) = await backfills(store).advance(NOW)
    assert progress.finished and progress.changed == 1
