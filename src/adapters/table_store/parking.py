"""Parked tasks: a task waiting long for a timer or an approval, moved out of the live and watch tables by
the Supervisor (:meth:`Parking.park`) until it comes due, and brought back by any save of it
(:meth:`Parking.unpark`) or by the calendar (:meth:`Parking.promote`).

They wait in the history table, under the same ``order|<id>`` key a finished task has (``Kind`` parked),
with their listing entry ``index|Waiting|<kind>|...`` (the key they had in the live table), their audit
entries, each shard's waiting tally ``count|waiting`` (:mod:`.tallies`), and the calendar (partition
``calendar``: ``<CompleteBy>|<id>`` per parked task, and the ``cursor`` saying when it is read next). A
parked task that comes back leaves a marker under its key (``Kind`` returned) that sends readers to the
live records; a copy left stale by a park or a return that did not finish is written over when the task
moves to the history or is parked again (:func:`adapters.table_store.codec._leftover`).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from azure.core import MatchConditions
from azure.core.exceptions import ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import TableTransactionError, UpdateMode

from engine import ConcurrencyError, ExpiredEntry, TaskRecord, TaskState

from .codec import (
    _CURSOR,
    _WAITING_TALLY,
    CALENDAR,
    PARKED_KINDS,
    Codec,
    _archive_key,
    _etag,
    _leftover,
    _listed_wait,
    _marker,
    _stamp,
    _state_key,
    _step_key,
    calendar_entity,
)
from .history import History
from .live import Live
from .tables import _BATCH, _IF_MATCH, _RACES, _RANGE, HISTORY, STATE, Tables, Unit, _conflict, _empty_page
from .tallies import Tallies
from .watch import Watches

log = logging.getLogger("adapters.table_store")


class Tasks(Protocol):
    """A task's load and save, wherever it is (live, parked): what the calendar brings back with."""

    async def load(self, order_id: str) -> TaskRecord | None: ...

    async def save(self, record: TaskRecord) -> TaskRecord: ...


class Parking(Unit):
    """Parking a task, bringing it back, and the calendar."""

    def __init__(
        self,
        tables: Tables,
        codec: Codec,
        live: Live,
        watches: Watches,
        archives: History,
        tallies: Tallies,
        tasks: Tasks,
    ) -> None:
        super().__init__(tables, codec)
        self.live = live
        self.watches = watches
        self.archives = archives
        self.tallies = tallies
        self.tasks = tasks

    async def park(self, record: TaskRecord, entry: ExpiredEntry) -> bool:
        """Move a task that waits long (a timer or an approval), loaded just now, out of the live and watch
        tables until it comes due (see :meth:`engine.ports.StateStore.park`).

        Its audit entries are copied to the history table, then the task in one entity, its listing entry
        (under the same key) and the shard's waiting tally raised, in one transaction; then its calendar
        entry (at the time its wait ends); then the live records are deleted in one transaction conditional on
        every ETag read, and last its watch entry, conditional on the entry's. A task that changed
        meanwhile keeps its live records, and its parked copy is deleted again. A task already parked (its
        watch entry came back in a race) is only filed in the calendar again and unwatched.
        """
        state = record.state
        if state.waiting_for not in PARKED_KINDS or state.complete_by is None or record.archived:
            return False
        if record.parked:
            await self._file(state)
            await self.watches.unwatch(entry)
            return True
        order_id, pk = record.order_id, self._pk(record.order_id)
        if not await self._mark_parking(record):
            return False
        trail = await self._audit_rows(self.table, order_id, STATE)
        parked, listing = self.codec.parked_entities(record, audited=bool(trail))
        copies = [("upsert", dict(e), {"mode": UpdateMode.REPLACE}) for e in trail]
        for i in range(0, len(copies), _BATCH):
            batch = copies[i : i + _BATCH]
            self.counter.add(table=HISTORY, entities=len(batch))
            await self._transact(self._history(), batch)
        etag = await self._write_parked(pk, order_id, parked, listing)
        if etag is None:
            return False
        await self._file(state)
        if not await self.archives.delete_live(record, trail):
            # Changed since it was read (an approval, a cancel, an audit entry): it stays live.
            await self._remove_parked(pk, order_id, etag, parked)
            await self._delete_rows(pk, [e["RowKey"] for e in trail])
            return False
        await self.watches.unwatch(entry)
        return True

    async def _mark_parking(self, record: TaskRecord) -> bool:
        """Mark the live state record, conditional on its ETag, before anything is parked: of two that
        park the task at once only one goes on, and a parked copy found while holding the mark is never
        the task (the live records are), so it may be written over. The record is read first and one
        already marked is refused: a Supervisor that loaded the task after another marked it holds the
        marked record's ETag, and its own mark would succeed too (simulation finding 15: both parked it,
        and the one that lost replaced the other's copy by a marker, so the order was in neither place). A
        mark left by a park that died goes with the task's next save, which replaces the record. False if
        the task is being parked or changed."""
        key = _state_key(record.order_id)
        etag = record.etags.get(key)
        if etag is None:
            return False
        pk = self._pk(record.order_id)
        self.counter.add(table=STATE, entities=1)
        try:
            current = await self.table.get_entity(pk, key, select=["Parking"])
        except ResourceNotFoundError:
            return False
        if current.get("Parking") or _etag(current) != etag:
            return False
        self.counter.add(table=STATE, entities=1)
        try:
            marked = await self.table.update_entity(
                {"PartitionKey": self._pk(record.order_id), "RowKey": key, "Parking": uuid.uuid4().hex},
                mode=UpdateMode.MERGE,
                etag=etag,
                match_condition=MatchConditions.IfNotModified,
            )
        except (ResourceModifiedError, ResourceNotFoundError):
            return False
        record.etags[key] = str(marked.get("etag") or "")
        return True

    async def _write_parked(
        self, pk: str, order_id: str, parked: dict[str, Any], listing: dict[str, Any]
    ) -> str | None:
        """The parked copy and its listing entry, counted, also over a stale copy of the same task or the
        marker of its return (:func:`_leftover`). Its ETag, or None if the history table holds another
        kind of entity under its key."""
        change = {_WAITING_TALLY: {parked["WaitingFor"]: 1}}
        for fresh in (False, *([True] * (_RACES - 1))):
            tally = await self.tallies.tally(pk, fresh, _WAITING_TALLY)
            operations: list[Any] = [("create", parked), ("upsert", listing, {"mode": UpdateMode.REPLACE})]
            try:
                results = await self.tallies.submit_counted(
                    pk, operations, tally, change[_WAITING_TALLY], _WAITING_TALLY
                )
                return str(results[0].get("etag") or "")
            except TableTransactionError as exc:
                if exc.status_code == 412:
                    continue  # the tally moved: read it again
                if exc.status_code != 409:
                    raise
            found = await self.archives.read_archive(order_id)
            if found is None:
                continue
            if not _leftover(found, parked):
                log.error("order %s: the history table holds another task with its id; not parked", order_id)
                return None
            # A stale copy of another kind moves from its kind's count to this one's (simulation
            # finding 17: it left the tally wrong).
            written = await self.archives.write_over(pk, found, parked, listing, [], change, True)
            if written is not None:
                return str(written[0].get("etag") or "")
        return None

    async def _remove_parked(self, pk: str, order_id: str, etag: str, parked: Mapping[str, Any]) -> bool:
        """Replace a parked copy (conditional on ``etag``) by the marker of a task back in the live records,
        and delete its listing entry, lowering the waiting tally; False if the copy changed or went
        meanwhile."""
        marker = _marker(pk, order_id, parked.get("CreatedAt"))
        operations: list[Any] = [("update", marker, {"mode": UpdateMode.REPLACE, "etag": etag, **_IF_MATCH})]
        if parked.get("IndexKey"):
            operations.append(("delete", {"PartitionKey": pk, "RowKey": parked["IndexKey"]}))
        change = {str(parked.get("WaitingFor")): -1}
        for fresh in (False, *([True] * (_RACES - 1))):
            tally = await self.tallies.tally(pk, fresh, _WAITING_TALLY)
            try:
                await self.tallies.submit_counted(pk, operations, tally, change, _WAITING_TALLY)
                return True
            except TableTransactionError as exc:
                if exc.status_code == 404 and len(operations) > 1:
                    operations = operations[:1]  # the listing entry went already: the copy alone
                    continue
                if not _conflict(exc):
                    raise
                if not await self.tallies.moved(pk, tally, _WAITING_TALLY):
                    return False  # not the tally: the copy changed or went
        return False

    async def unpark(self, record: TaskRecord) -> TaskRecord:
        """Save a parked task back to the live records: claim its parked copy (a conditional write, so of
        two that bring it back only one goes on), put its watch entry, write its live records (state, input,
        steps, listing entry, audit entries) in one transaction that only inserts, then replace the parked
        copy by a marker that sends readers to the live records (one that missed them a moment before
        reads them again). A crash in between leaves the task live and its copy stale: the live records are
        the task, and the copy goes when the task is moved to the history (:meth:`.History.write_over`)."""
        order_id, pk = record.order_id, self._pk(record.order_id)
        key = _archive_key(order_id)
        etag = record.etags.get(key)
        if etag is None:
            raise ConcurrencyError(order_id)
        self.counter.add(table=HISTORY, entities=1)
        try:
            claimed = await self._history().update_entity(
                {"PartitionKey": pk, "RowKey": key, "Claimed": uuid.uuid4().hex},
                mode=UpdateMode.MERGE,
                etag=etag,
                match_condition=MatchConditions.IfNotModified,
            )
        except (ResourceModifiedError, ResourceNotFoundError) as exc:
            raise ConcurrencyError(order_id) from exc
        # What it waited for when it was parked is in its listing key (the state has moved on since).
        parked = {
            "IndexKey": record.listed,
            "WaitingFor": _listed_wait(record.listed or ""),
            "CreatedAt": record.state.created_at,
        }
        trail = await self._audit_rows(self._history(), order_id, HISTORY) if record.audited else []
        state_entity = self.codec.state_entity(record)
        # Only the entry: the one it had is in the history table, where the parked copy goes with it.
        entry = self.codec.listing_entry(record, state_entity)
        listed = entry["RowKey"]
        operations: list[Any] = [
            ("create", self.codec.input_entity(record)),
            ("create", state_entity),
            *(
                (
                    "create",
                    self.codec.step_entity(order_id, s, record.kept.get(_step_key(order_id, s.index), {})),
                )
                for s in record.steps
            ),
            ("create", entry),
        ]
        audits: list[dict[str, Any]] = [dict(e) for e in trail] + [
            self.codec.audit_entity(order_id, e, n) for n, e in enumerate(record.pending_audit())
        ]
        room = _BATCH - len(operations)
        operations += [("create", a) for a in audits[:room]]
        if state_entity["Watched"]:
            await self.watches.put(record.state)  # watched before it is in flight again
        try:
            self.counter.add(table=STATE, entities=len(operations))
            results = await self._transact(self.table, operations)
        except TableTransactionError as exc:
            if exc.status_code != 409:
                raise
            # Brought back by someone else meanwhile: the live records are the task, the copy is stale. The
            # watch entry was put at this save's CompleteBy, which may be later than the live task's: put
            # it at the live task's (simulation finding 16: the Supervisor came late).
            live = await self.live.load_live(order_id)
            if live is not None and live.state.process_state.in_flight and live.state.complete_by is not None:
                await self.watches.put(live.state)
            await self._remove_parked(pk, order_id, str(claimed.get("etag") or ""), parked)
            raise ConcurrencyError(order_id) from exc
        for extra in audits[room:]:
            self.counter.add(table=STATE, entities=1)
            await self.table.upsert_entity(extra, mode=UpdateMode.REPLACE)
        record.etags = {}
        for (_, entity), result in zip(operations, results, strict=False):
            if entity.get("Kind") in ("state", "step", "input"):
                record.etags[entity["RowKey"]] = result["etag"]
        if await self._remove_parked(pk, order_id, str(claimed.get("etag") or ""), parked):
            await self._delete_rows(pk, [e["RowKey"] for e in trail])
        record.parked = record.audited = False
        record.indexed = bool(state_entity["Watched"])
        record.listed = listed
        record.mark_saved()
        return record

    async def _delete_rows(self, pk: str, keys: list[str]) -> None:
        """Delete copies of audit entries from the history table (a batch with one gone already: one by
        one)."""
        history = self._history()
        for i in range(0, len(keys), _BATCH):
            batch = keys[i : i + _BATCH]
            self.counter.add(table=HISTORY, entities=len(batch))
            try:
                await self._transact(history, [("delete", {"PartitionKey": pk, "RowKey": k}) for k in batch])
            except TableTransactionError:
                for key in batch:
                    self.counter.add(table=HISTORY, entities=1)
                    with contextlib.suppress(ResourceNotFoundError):
                        await history.delete_entity(pk, key)

    async def _file(self, state: TaskState) -> None:
        """Put a parked task's entry in the calendar, at the time its wait ends."""
        self.counter.add(table=HISTORY, entities=1)
        await self._history().upsert_entity(calendar_entity(state), mode=UpdateMode.REPLACE)

    async def promote(self, now: datetime, horizon: float, limit: int = 1000) -> int:
        """Bring back to the live records (and the watch table) the parked tasks due within ``horizon``
        seconds of ``now`` (see :meth:`engine.ports.StateStore.promote`): the calendar's cursor is read (one
        point read); if its time has come, one range query of the calendar's entries due by then, each task
        brought back and its entry deleted, and the cursor set to half the horizon on. Returns how many
        tasks came back."""
        history = self._history()
        self.counter.add(table=HISTORY, entities=1)
        try:
            cursor = await history.get_entity(CALENDAR, _CURSOR)
            if cursor["NextAt"] > now:
                return 0
        except ResourceNotFoundError:
            pass
        query = history.query_entities(
            _RANGE,
            parameters={"pk": CALENDAR, "lo": "0", "hi": _stamp(now + timedelta(seconds=horizon))},
            select=["RowKey", "OrderID"],
            results_per_page=limit,
        ).by_page()
        due = [entity async for entity in await anext(query, _empty_page())][:limit]
        self.counter.add(table=HISTORY, entities=len(due))
        brought = 0
        whole = len(due) < limit
        for entity in due:
            record = await self.tasks.load(entity["OrderID"])
            try:
                if record is not None and record.parked:
                    await self.tasks.save(record)
                    brought += 1
                elif record is not None and record.state.process_state.in_flight and record.state.complete_by:
                    # Live (brought back meanwhile, or still on its way out): its watch entry is put again,
                    # so a park that is about to drop it is refused and the task stays watched.
                    await self.watches.put(record.state)
            except ConcurrencyError:
                whole = False  # changed meanwhile: its entry stays for the next reading
                continue
            self.counter.add(table=HISTORY, entities=1)
            with contextlib.suppress(ResourceNotFoundError):
                await history.delete_entity(CALENDAR, entity["RowKey"])
        if whole:
            self.counter.add(table=HISTORY, entities=1)
            await history.upsert_entity(
                {
                    "PartitionKey": CALENDAR,
                    "RowKey": _CURSOR,
                    "NextAt": now + timedelta(seconds=horizon / 2),
                },
                mode=UpdateMode.REPLACE,
            )
        return brought
