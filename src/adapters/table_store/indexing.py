"""Building the listing of a store written before it: each live task without a listing entry gets one, and
each finished one is moved to the history (``engine.backfill`` runs it page by page, shard by shard)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from azure.core.async_paging import AsyncPageIterator
from azure.data.tables import TableEntity, TableTransactionError, UpdateMode

from .codec import Codec, _etag, listing_key, readable_state
from .history import History
from .live import Live
from .search import _decode_token, _encode_token
from .tables import _IF_MATCH, _STATE_ROWS, STATE, Tables, Unit, _conflict, _empty_page
from .watch import Watches


@dataclass(frozen=True)
class IndexReport:
    """What one page of :meth:`TableStateStore.index_page` did."""

    read: int = 0  # task records read
    indexed: int = 0  # live tasks given their listing entry
    archived: int = 0  # finished tasks moved to the history
    skipped: int = 0  # changed or busy meanwhile: indexed by their own next save, or by a run again
    continuation: str | None = None  # where the shard goes on; None: the shard is done


class Indexing(Unit):
    """One page of the listing's backfill at a time."""

    def __init__(self, tables: Tables, codec: Codec, live: Live, watches: Watches, archives: History) -> None:
        super().__init__(tables, codec)
        self.live = live
        self.watches = watches
        self.archives = archives

    async def index_page(self, shard: int, continuation: str | None, page_size: int = 100) -> IndexReport:
        """One page of one shard's task records: each live task without a listing entry gets one (with
        its ``IndexKey``, in one transaction conditional on the record's ETag), and each finished one is
        moved to the history, under a watch entry of its own as the Supervisor does (so a submission of
        the same id meanwhile is answered from one place or the other). Tasks that already have an entry
        are left alone, so a run can be repeated or resumed from any page."""
        pk = f"s{shard:02d}"
        pages = self.table.query_entities(
            _STATE_ROWS, parameters={"pk": pk}, results_per_page=page_size
        ).by_page(continuation_token=_decode_token(continuation)[1] if continuation else None)
        entities = [entity async for entity in await anext(pages, _empty_page())]
        self.counter.add(table=STATE, entities=len(entities))
        token = cast(AsyncPageIterator[TableEntity], pages).continuation_token
        indexed = archived = skipped = 0
        for entity in entities:
            if entity.get("IndexKey"):
                continue
            state = readable_state(entity)
            if state is None:  # a later release's record: left to it
                skipped += 1
                continue
            if state.process_state.finished:
                if await self._archive_unwatched(state.order_id):
                    archived += 1
                else:
                    skipped += 1
                continue
            key = listing_key(state.process_state, state.updated_at, state.order_id, state.waiting_for)
            listing = {k: v for k, v in entity.items() if k not in ("Watched",)}
            listing.update({"RowKey": key, "Kind": "index", "IndexKey": key})
            operations = [
                (
                    "update",
                    {"PartitionKey": pk, "RowKey": entity["RowKey"], "IndexKey": key},
                    {"mode": UpdateMode.MERGE, "etag": _etag(entity), **_IF_MATCH},
                ),
                ("upsert", listing, {"mode": UpdateMode.REPLACE}),
            ]
            try:
                self.counter.add(table=STATE, entities=2)
                await self._transact(self.table, operations)
                indexed += 1
            except TableTransactionError as exc:
                if not _conflict(exc):
                    raise
                skipped += 1  # saved meanwhile: that save wrote its listing entry
        next_token = _encode_token(shard, token) if token is not None else None
        return IndexReport(len(entities), indexed, archived, skipped, next_token)

    async def _archive_unwatched(self, order_id: str) -> bool:
        """Move a finished task that has no watch entry to the history, holding a watch entry of its own
        meanwhile; False if an entry was there (someone else is at it) or the task changed."""
        record = await self.live.load(order_id)
        if record is None or record.archived:
            return True
        if not record.state.process_state.finished:
            return False
        guard = record.state.model_copy(update={"complete_by": record.state.updated_at})
        etag = await self.watches.add(guard)
        if etag is None:
            return False
        try:
            moved = await self.archives.archive(record)
        finally:
            await self.watches.remove(order_id, etag)
        return moved
