"""The watch table (``<state table>watch``): one small entry per in-flight task, keyed by shard and
OrderID, holding a CompleteBy that is never later than the task's own. The Supervisor's sweep reads only
this table, one range query per shard, so its cost follows the in-flight work however much completed
history there is (even on an emulator that scans a whole table per query).

The watch entry is written before the task first becomes in flight (submission, resubmission) and is
otherwise maintained by the Supervisor: an entry whose time has come but whose task is still running
is moved to the task's current CompleteBy, and one whose task has finished is removed, after the task is
moved to the history. Because every transition sets CompleteBy later than the previous one, the entry
stays a lower bound, and a step transition costs at most two table operations: the load (one query) and
the save (one transaction); the Scheduler skips the load when its message carries the task as saved (see
``engine.saved_task``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import datetime

from azure.core import MatchConditions
from azure.core.exceptions import ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import UpdateMode

from engine import ExpiredEntry, TaskState

from .codec import _etag
from .tables import WATCH, Unit, _delete_unchanged, _insert


class Watches(Unit):
    """The watch entries: put by a submission (and a save that puts a task in flight again), swept by the
    Supervisor."""

    async def add(self, state: TaskState) -> str | None:
        """Insert the task's watch entry; its ETag, or None if an entry is already there."""
        self.counter.add(table=WATCH, entities=1)
        return await _insert(self.watch, self.codec.watch_entity(state))

    async def remove(self, order_id: str, etag: str) -> None:
        """Delete the watch entry this store inserted, unless it changed since."""
        self.counter.add(table=WATCH, entities=1)
        await _delete_unchanged(self.watch, self._pk(order_id), order_id, etag)

    async def put(self, state: TaskState) -> None:
        self.counter.add(table=WATCH, entities=1)
        await self.watch.upsert_entity(self.codec.watch_entity(state), mode=UpdateMode.REPLACE)

    async def expired(self, now: datetime) -> AsyncIterator[ExpiredEntry]:
        """Watch entries due at ``now``: one range query per shard of the watch table."""
        for shard in range(self.shards):
            pages = self.watch.query_entities(
                "PartitionKey eq @pk and CompleteBy le @now",
                parameters={"pk": f"s{shard:02d}", "now": now},
                results_per_page=1000,
            ).by_page()
            async for page in pages:
                entities = [entity async for entity in page]
                self.counter.add(table=WATCH, entities=len(entities))
                for entity in entities:
                    yield ExpiredEntry(
                        order_id=entity["RowKey"],
                        complete_by=entity["CompleteBy"],
                        token=_etag(entity),
                    )

    async def rewatch(self, entry: ExpiredEntry, complete_by: datetime) -> None:
        """Move a watch entry to the task's current CompleteBy, unless it changed since it was read."""
        entity = {
            "PartitionKey": self._pk(entry.order_id),
            "RowKey": entry.order_id,
            "CompleteBy": complete_by,
        }
        with contextlib.suppress(ResourceNotFoundError, ResourceModifiedError):
            self.counter.add(table=WATCH, entities=1)
            await self.watch.update_entity(
                entity,
                mode=UpdateMode.REPLACE,
                etag=entry.token,
                match_condition=MatchConditions.IfNotModified,
            )

    async def unwatch(self, entry: ExpiredEntry) -> None:
        """Remove the watch entry of a finished task, unless it changed since it was read (resubmitted)."""
        with contextlib.suppress(ResourceNotFoundError, ResourceModifiedError):
            self.counter.add(table=WATCH, entities=1)
            await self.watch.delete_entity(
                self._pk(entry.order_id),
                entry.order_id,
                etag=entry.token,
                match_condition=MatchConditions.IfNotModified,
            )
