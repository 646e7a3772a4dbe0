"""The backfills' progress in the state table, and the backfills of the table store (engine.backfill).

Each backfill's progress is one entity beside the formats switch, outside the shards:
``release`` / ``backfill|<name>``, replaced conditional on its ETag.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import UpdateMode
from pydantic import ValidationError

from engine import Answer, Backfill, BackfillPage, Progress

from .table_store import STATE, SWITCH_PARTITION, TableStateStore

BACKFILL_ROW = "backfill|"
_FIELDS = {
    "shard": "Shard",
    "continuation": "Continuation",
    "read": "Read",
    "changed": "Changed",
    "skipped": "Skipped",
    "started_at": "StartedAt",
    "updated_at": "UpdatedAt",
    "finished_at": "FinishedAt",
}


class TableBackfillProgress:
    """:class:`engine.backfill.ProgressStore` on the state table of ``store``."""

    def __init__(self, store: TableStateStore) -> None:
        self._store = store

    @property
    def shards(self) -> int:
        return self._store.shards

    async def holds_tasks(self) -> bool:
        return await self._store.holds_tasks()

    async def read_progress(self, name: str) -> Progress | None:
        try:
            entity = await self._store.table.get_entity(SWITCH_PARTITION, f"{BACKFILL_ROW}{name}")
        except ResourceNotFoundError:
            return None
        self._store.counter.add(table=STATE, entities=1)
        values = {field: entity[prop] for field, prop in _FIELDS.items() if entity.get(prop) is not None}
        etag = entity.metadata.get("etag")
        try:
            return Progress.model_validate({"name": name, **values, "etag": etag})
        except ValidationError:  # not a progress this release reads: from the start (it is idempotent)
            now = datetime.now(UTC)
            return Progress(name=name, started_at=now, updated_at=now, etag=etag)

    async def write_progress(self, progress: Progress) -> Progress | None:
        entity: dict[str, Any] = {
            "PartitionKey": SWITCH_PARTITION,
            "RowKey": f"{BACKFILL_ROW}{progress.name}",
        }
        for field, prop in _FIELDS.items():
            value = getattr(progress, field)
            if value is not None:
                entity[prop] = value
        table = self._store.table
        self._store.counter.add(table=STATE, entities=1)
        try:
            if progress.etag is None:
                written = await table.create_entity(entity)
            else:
                written = await table.update_entity(
                    entity,
                    mode=UpdateMode.REPLACE,
                    etag=progress.etag,
                    match_condition=MatchConditions.IfNotModified,
                )
        except (ResourceExistsError, ResourceModifiedError):
            return None
        return progress.model_copy(update={"etag": written.get("etag")})


class ListingEntries:
    """Gives every live order without a listing entry its entry, and moves every finished order an
    earlier release left in the live table to the history (:meth:`TableStateStore.index_page`)."""

    name = "listing-entries"
    answers: frozenset[Answer] = frozenset({"listing"})

    def __init__(self, store: TableStateStore) -> None:
        self._store = store

    async def page(self, shard: int, continuation: str | None, size: int) -> BackfillPage:
        report = await self._store.index_page(shard, continuation, size)
        return BackfillPage(
            report.read, report.indexed + report.archived, report.skipped, report.continuation
        )


def declared(store: TableStateStore) -> list[Backfill]:
    """Every backfill of the table store, oldest first (names are never reused)."""
    return [ListingEntries(store)]
