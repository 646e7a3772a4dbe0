"""The history table (``<state table>history``): finished tasks (Processed, Compensated), moved there by
the Supervisor when it drops their watch entry, kept for the retention period, then purged by the
clean-up. Same shards as the live records: ``order|<id>`` - the whole task in one entity (state, steps,
input: one point read); ``index|<ProcessState>|<finished>|<id>|`` - its listing entry, keyed by the time it
finished, so the clean-up finds what expired with one range query; ``audit|<id>|...`` - its audit entries;
``count`` - the shard's tally (:mod:`.tallies`). A purged task leaves a tombstone (``order|<id>``, a few
properties) and a ``gone|<until>|<id>|`` entry; both go once ``<until>`` passes, and until then the id is
refused. The parked tasks wait in this table too (:mod:`.parking`).

The live table holds live work only (in flight, in Error, finished in the last sweep interval), so what
reads it costs in proportion to live work on Azure and on Azurite alike (Azurite runs every query as a
scan of the whole table); the history is read by key (one order's GET, the counts, the submission's
check), and by range only for a listing of a finished state and by the clean-up.

``order|<id>`` is the id's one row in the history, whatever the task's lifecycle: the mark a submission
inserts (``Kind`` returned: the task is in the live records; see :mod:`.live` for why that lets a
submission write its task with no read of the history), the finished task written over it by the move
to the history, then its tombstone, until that goes. A parked task's copy, and the marker it leaves when
it comes back, take the same key.

A finished task leaves the live table only after its history copy is written (:meth:`History.archive`
writes the copy, then deletes the live records conditional on the ETags read), and before its watch entry
is deleted; a copy written again by a second attempt is rewritten only if unchanged since read, and a
tombstone of the same task is taken as done.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import TableEntity, TableTransactionError, UpdateMode

from engine import ConcurrencyError, PurgeReport, TaskRecord, TaskState

from .codec import (
    _RETURNED,
    _TALLY,
    _WAITING_TALLY,
    _WHOLE,
    FINISHED,
    Codec,
    _archive_key,
    _etag,
    _gone_key,
    _input_key,
    _leftover,
    _listing_range,
    _marker,
    _stamp,
    readable_state,
)
from .search import Search
from .tables import (
    _BATCH,
    _IF_MATCH,
    _RACES,
    _RANGE,
    HISTORY,
    STATE,
    Tables,
    Unit,
    _conflict,
    _delete_unchanged,
    _empty_page,
    _insert,
)
from .tallies import Tallies

log = logging.getLogger("adapters.table_store")


class History(Unit):
    """The history table's rows of a task (its mark, its finished copy, its tombstone), the move of a finished
    task there, and the clean-up."""

    def __init__(self, tables: Tables, codec: Codec, tallies: Tallies, searches: Search) -> None:
        super().__init__(tables, codec)
        self.tallies = tallies
        self.searches = searches

    async def read_kept(self, order_id: str) -> TableEntity | None:
        """The history table's entity for the id, unless it only says the task is live again."""
        found = await self.read_archive(order_id)
        return None if found is not None and found.get("Kind") == _RETURNED else found

    async def read_archive(self, order_id: str) -> TableEntity | None:
        """The history's entity for the id: the finished task, its tombstone, or None."""
        self.counter.add(table=HISTORY, entities=1)
        try:
            return await self._history().get_entity(self._pk(order_id), _archive_key(order_id))
        except ResourceNotFoundError:
            return None

    async def mark(self, state: TaskState) -> str | None:
        """Insert the id's row in the history, saying its task is in the live records; its ETag, or None if
        the history has a row for the id already (a task's, a tombstone, or a mark)."""
        self.counter.add(table=HISTORY, entities=1)
        mark = _marker(self._pk(state.order_id), state.order_id, state.created_at)
        return await _insert(self._history(), mark)

    async def unmark(self, order_id: str, etag: str) -> None:
        """Delete the mark this store inserted, unless it changed since."""
        self.counter.add(table=HISTORY, entities=1)
        await _delete_unchanged(self._history(), self._pk(order_id), _archive_key(order_id), etag)

    async def append_archived_audit(self, order_id: str, entity: dict[str, Any]) -> bool:
        """Add an audit entry to a task in the history, marking the task and its listing entry (so a purge
        that read them before is refused and reads the trail again). False: no such task there."""
        history = self._history()
        for _ in range(_RACES):
            found = await self.read_archive(order_id)
            if found is None or found.get("Kind") not in _WHOLE:
                return False
            mark = {"PartitionKey": entity["PartitionKey"], "Audited": True}
            operations = [
                ("create", entity),
                (
                    "update",
                    {**mark, "RowKey": found["RowKey"]},
                    {"mode": UpdateMode.MERGE, "etag": _etag(found), **_IF_MATCH},
                ),
                ("update", {**mark, "RowKey": found["IndexKey"]}, {"mode": UpdateMode.MERGE}),
            ]
            try:
                self.counter.add(table=HISTORY, entities=len(operations))
                await self._transact(history, operations)
                return True
            except TableTransactionError as exc:
                if not _conflict(exc):
                    raise
        return False

    async def archive(self, record: TaskRecord) -> bool:
        """Move a finished task to the history (see :meth:`engine.ports.StateStore.archive`).

        Its audit entries are copied with their keys (upserts, so a second attempt writes the same rows),
        then the task and its listing entry are inserted with the shard's tally counting it, in one
        transaction; if the task is there already (an earlier attempt), it is written again instead,
        uncounted and only if unchanged since read, and if the history holds it as a tombstone (purged
        since), nothing is written. Then the live records (state, input, steps, listing entry, audit
        entries) are deleted in one transaction conditional on the ETags read; audit entries beyond what
        fits go first.
        """
        if record.archived:
            return True
        state = record.state
        if not state.process_state.finished:
            raise ValueError(f"task {record.order_id} is {state.process_state.value}, not finished")
        order_id, pk = record.order_id, self._pk(record.order_id)
        trail = await self._audit_rows(self.table, order_id, STATE)
        archive, listing = self.codec.archive_entities(record, audited=bool(trail))
        copies = [("upsert", dict(e), {"mode": UpdateMode.REPLACE}) for e in trail]
        room = _BATCH - 3  # the task, its listing entry and the tally
        for i in range(0, max(len(copies) - room, 0), _BATCH):
            batch = copies[i : min(i + _BATCH, len(copies) - room)]
            self.counter.add(table=HISTORY, entities=len(batch))
            await self._transact(self._history(), batch)
        tail = copies[max(len(copies) - room, 0) :]
        if not await self._write_archive(pk, order_id, archive, listing, tail):
            return False
        return await self.delete_live(record, trail)

    async def take_back(self, record: TaskRecord) -> bool:
        """Delete a never-started live task whose id the history holds (see
        :meth:`engine.ports.StateStore.take_back`): one point read of the history and, if it has the id, the
        live records deleted in one transaction conditional on the ETags read."""
        if self.history is None or record.archived:
            return False
        if await self.read_kept(record.order_id) is None:
            return False
        if not await self.delete_live(record, await self._audit_rows(self.table, record.order_id, STATE)):
            raise ConcurrencyError(record.order_id)
        log.warning(
            "order %s: a submission of an id in the history left its task behind; taken back",
            record.order_id,
        )
        return True

    async def _write_archive(
        self, pk: str, order_id: str, archive: dict[str, Any], listing: dict[str, Any], copies: list[Any]
    ) -> bool:
        change = {archive["ProcessState"]: 1}
        # The task's mark, from its submission (or its return from parking), is written over at once.
        found = await self.read_archive(order_id) if self.marks else None
        if found is not None and _leftover(found, archive):
            written = await self.write_over(pk, found, archive, listing, copies, {_TALLY: change}, False)
            if written is not None:
                return True
        for fresh in (False, *([True] * (_RACES - 1))):
            tally = await self.tallies.tally(pk, fresh)
            try:
                await self.tallies.submit_counted(
                    pk,
                    [("create", archive), ("upsert", listing, {"mode": UpdateMode.REPLACE}), *copies],
                    tally,
                    change,
                )
                return True
            except TableTransactionError as exc:
                if exc.status_code == 412:
                    continue  # the tally moved: read it again
                if exc.status_code != 409:
                    raise
            found = await self.read_archive(order_id)
            if found is None:
                continue  # not the task: the tally appeared meanwhile
            if found.get("Kind") == "tombstone" and found.get("FinishedAt") == archive["UpdatedAt"]:
                return True  # moved and purged since the first attempt: only the live records are left
            if _leftover(found, archive):
                # A parked copy of this task, left by a park or a return that did not finish (the live
                # task is the task), or the marker of one that came back: the history's copy takes its place.
                if await self.write_over(pk, found, archive, listing, copies, {_TALLY: change}, fresh):
                    return True
                continue
            if found.get("Kind") != "archive" or found.get("CreatedAt") != archive["CreatedAt"]:
                # Cannot happen while the task is live: its id is refused as long as the history has it.
                log.error("order %s: the history holds another task with its id; not archived", order_id)
                return False
            # An earlier attempt wrote it: write it again (the trail may have grown), uncounted, only if it
            # is still as read (purged meanwhile, it would come back uncounted: look again instead).
            operations = [
                ("update", archive, {"mode": UpdateMode.REPLACE, "etag": _etag(found), **_IF_MATCH}),
                ("upsert", listing, {"mode": UpdateMode.REPLACE}),
                *copies,
            ]
            self.counter.add(table=HISTORY, entities=len(operations))
            try:
                await self._transact(self._history(), operations)
            except TableTransactionError as exc:
                if exc.status_code != 412:
                    raise
                continue  # purged (or rewritten) since it was read
            return True
        return False

    async def delete_live(self, record: TaskRecord, trail: list[TableEntity]) -> bool:
        order_id, pk = record.order_id, self._pk(record.order_id)
        guarded: list[Any] = [
            ("delete", {"PartitionKey": pk, "RowKey": key}, {"etag": etag, **_IF_MATCH})
            for key, etag in record.etags.items()
        ]
        if _input_key(order_id) not in record.etags:  # a copy from before inputs had their ETag kept
            guarded.append(("delete", {"PartitionKey": pk, "RowKey": _input_key(order_id)}))
        if record.listed is not None:
            guarded.append(("delete", {"PartitionKey": pk, "RowKey": record.listed}))
        audits = [
            ("delete", {"PartitionKey": pk, "RowKey": e["RowKey"]}, {"etag": _etag(e), **_IF_MATCH})
            for e in trail
        ]
        room = _BATCH - len(guarded)
        try:
            for i in range(0, max(len(audits) - room, 0), _BATCH):
                batch = audits[i : min(i + _BATCH, len(audits) - room)]
                self.counter.add(table=STATE, entities=len(batch))
                await self._transact(self.table, batch)
            operations = [*guarded, *audits[max(len(audits) - room, 0) :]]
            self.counter.add(table=STATE, entities=len(operations))
            await self._transact(self.table, operations)
        except TableTransactionError as exc:
            if _conflict(exc):
                return False  # changed since it was read (a new audit entry): the next attempt copies it
            raise
        return True

    async def purge(self, finished_before: datetime, tombstone_until: datetime, limit: int) -> PurgeReport:
        """Delete finished tasks of the history that finished before ``finished_before``, shard by shard,
        oldest first, at most ``limit``: one range query per shard and state, then transactions of up to
        100 entities that replace each task by its tombstone, delete its listing entry (conditional on the
        ETag the query read) and its audit entries, add its ``gone`` entry and lower the shard's tally.
        A transaction refused because one task changed is retried one task at a time."""
        history = self._history()
        purged = lost = 0
        for shard in range(self.shards):
            pk = f"s{shard:02d}"
            due: list[TableEntity] = []
            for state in FINISHED:
                if purged + len(due) >= limit:
                    break
                lo, hi = _listing_range(state, finished_before)
                query = history.query_entities(
                    _RANGE,
                    parameters={"pk": pk, "lo": lo, "hi": hi},
                    select=[
                        "RowKey",
                        "OrderID",
                        "ProcessState",
                        "UpdatedAt",
                        "Audited",
                        "Search",
                        "CreatedAt",
                        "Workflow",
                        "WorkflowVersion",
                        "Submitter",
                    ],
                    results_per_page=min(limit - purged - len(due), 1000),
                ).by_page()
                page = [entity async for entity in await anext(query, _empty_page())]
                self.counter.add(table=HISTORY, entities=len(page))
                due += page[: limit - purged - len(due)]
            if not due:
                continue
            groups: list[list[tuple[TableEntity, list[Any]]]] = [[]]
            size = 0
            for entry in due:
                operations = await self._purge_operations(pk, entry, tombstone_until)
                if size + len(operations) > _BATCH - 1 and groups[-1]:
                    groups.append([])
                    size = 0
                groups[-1].append((entry, operations))
                size += len(operations)
            gone: list[TableEntity] = []
            for group in groups:
                done = await self._purge_group(pk, group)
                if done is None:  # one of them changed: one at a time, so the others still go
                    for one in group:
                        if await self._purge_group(pk, [one]) is None:
                            lost += 1
                        else:
                            purged += 1
                            gone.append(one[0])
                else:
                    purged += done
                    gone += [entry for entry, _ in group]
            # Its search entries go after the task: one left by a crash between finds no task.
            readable = [task for e in gone if (task := readable_state(e)) is not None]
            await self.searches.delete_entries(
                pk, [key for task in readable for key in self.searches.entry_keys(task)]
            )
            if purged + lost >= limit:
                break
        return PurgeReport(purged=purged, lost_races=lost, more=purged + lost >= limit)

    async def _purge_operations(self, pk: str, entry: TableEntity, tombstone_until: datetime) -> list[Any]:
        order_id = entry["OrderID"]
        tombstone = {
            "PartitionKey": pk,
            "RowKey": _archive_key(order_id),
            "Kind": "tombstone",
            "OrderID": order_id,
            "ProcessState": entry["ProcessState"],
            "FinishedAt": entry["UpdatedAt"],
            "Until": tombstone_until,
            "GoneKey": _gone_key(tombstone_until, order_id),
        }
        operations: list[Any] = [
            ("upsert", tombstone, {"mode": UpdateMode.REPLACE}),
            ("delete", {"PartitionKey": pk, "RowKey": entry["RowKey"]}, {"etag": _etag(entry), **_IF_MATCH}),
            ("create", {"PartitionKey": pk, "RowKey": tombstone["GoneKey"], "OrderID": order_id}),
        ]
        if entry.get("Audited"):
            trail = await self._audit_rows(self._history(), order_id, HISTORY)
            for i in range(0, max(len(trail) - (_BATCH - 4), 0), _BATCH):
                batch = trail[i : min(i + _BATCH, len(trail) - (_BATCH - 4))]
                deletes = [("delete", {"PartitionKey": pk, "RowKey": e["RowKey"]}) for e in batch]
                self.counter.add(table=HISTORY, entities=len(deletes))
                await self._transact(self._history(), deletes)
            operations += [
                ("delete", {"PartitionKey": pk, "RowKey": e["RowKey"]})
                for e in trail[max(len(trail) - (_BATCH - 4), 0) :]
            ]
        return operations

    async def _purge_group(self, pk: str, group: list[tuple[TableEntity, list[Any]]]) -> int | None:
        """Purge a group of tasks in one transaction; how many, or None if one of them changed."""
        change: dict[str, int] = {}
        for entry, _ in group:
            change[entry["ProcessState"]] = change.get(entry["ProcessState"], 0) - 1
        operations = [op for _, ops in group for op in ops]
        for fresh in (False, *([True] * (_RACES - 1))):
            tally = await self.tallies.tally(pk, fresh)
            try:
                await self.tallies.submit_counted(pk, operations, tally, change)
                return len(group)
            except TableTransactionError as exc:
                if not _conflict(exc):
                    raise
                if not await self.tallies.moved(pk, tally):
                    return None  # not the tally: a task changed (or went) since the query read it
        return None

    async def drop_tombstones(self, before: datetime, limit: int) -> int:
        """Delete tombstones whose time is up: one range query of ``gone`` entries per shard, then
        transactions deleting each tombstone with its entry."""
        history = self._history()
        dropped = 0
        for shard in range(self.shards):
            if dropped >= limit:
                break
            pk = f"s{shard:02d}"
            query = history.query_entities(
                _RANGE,
                parameters={"pk": pk, "lo": "gone|", "hi": f"gone|{_stamp(before)}"},
                select=["RowKey", "OrderID"],
                results_per_page=min(limit - dropped, 1000),
            ).by_page()
            page = [entity async for entity in await anext(query, _empty_page())][: limit - dropped]
            self.counter.add(table=HISTORY, entities=len(page))
            for i in range(0, len(page), _BATCH // 2):
                keys = [
                    key
                    for entity in page[i : i + _BATCH // 2]
                    for key in (entity["RowKey"], _archive_key(entity["OrderID"]))
                ]
                operations = [("delete", {"PartitionKey": pk, "RowKey": key}) for key in keys]
                self.counter.add(table=HISTORY, entities=len(operations))
                try:
                    await self._transact(history, operations)
                except TableTransactionError as exc:
                    if not _conflict(exc):
                        raise
                    for key in keys:  # one went meanwhile (a run beside this one): the rest one by one
                        self.counter.add(table=HISTORY, entities=1)
                        with contextlib.suppress(ResourceNotFoundError):
                            await history.delete_entity(pk, key)
                dropped += len(keys) // 2
        return dropped

    async def write_over(
        self,
        pk: str,
        found: TableEntity,
        whole: dict[str, Any],
        listing: dict[str, Any],
        copies: list[Any],
        changes: Mapping[str, Mapping[str, int]],
        fresh: bool,
    ) -> list[Mapping[str, Any]] | None:
        """Write a task in one entity (finished, or parked) with its listing entry over what its key holds
        (:func:`_leftover`), conditional on it, changing the tallies by ``changes`` (by row) and, for a
        parked copy written over, taking it out of the waiting tally; the transaction's results, or None if
        a tally or what was written over changed meanwhile."""
        operations: list[Any] = [
            ("update", whole, {"mode": UpdateMode.REPLACE, "etag": _etag(found), **_IF_MATCH}),
            ("upsert", listing, {"mode": UpdateMode.REPLACE}),
            *copies,
        ]
        counted = {row: dict(change) for row, change in changes.items()}
        if found.get("Kind") == "parked":
            if found.get("IndexKey") and found["IndexKey"] != listing["RowKey"]:
                operations.append(("delete", {"PartitionKey": pk, "RowKey": found["IndexKey"]}))
            waiting = counted.setdefault(_WAITING_TALLY, {})
            kind = str(found.get("WaitingFor"))
            waiting[kind] = waiting.get(kind, 0) - 1
        try:
            return await self.tallies.submit_tallied(
                pk,
                operations,
                {row: (await self.tallies.tally(pk, fresh, row), change) for row, change in counted.items()},
            )
        except TableTransactionError as exc:
            if not _conflict(exc):
                raise
            return None
