"""The live records of a task, in the state table: their submission, load and save, and its audit entries.

PartitionKey is a shard (``s00``..``s{N-1}``) derived from the OrderID, so a task's records share a
partition and change together in one entity-group transaction: ``order|<id>|state`` - the task state
record (``OrderID``, ``LockedBy``, ``CompleteBy``, ``ProcessState``, ``FailureCount``, ...);
``order|<id>|input`` - the submitted body; ``order|<id>|step|NN`` - one record per step;
``audit|<id>|<time>|<n>`` - one audit entry per operator action or automatic Error, written in the
transaction that makes the change (outside the ``order|<id>|`` range, so loading a task never reads its
history); ``index|<ProcessState>|<time>|<id>|`` - the task's entry in the listing by state, a copy of the
state record written in every transaction that writes the state record (whose ``IndexKey`` names it; a
change of state deletes the old entry and writes the new one). Listing or counting one state reads that
state's entries only, and an entry and its task can never disagree. (The shapes are :mod:`.codec`'s.)

A submission checks the history for the id, so a finished task moved there is not submitted again as a
new one. Beside the watch entry (and the search entries) it inserts the id's row in the history,
``order|<id>`` of ``Kind`` returned: the task's mark, the same marker a parked task leaves when it comes
back, which sends readers to the live records. The insert succeeds only if the history has no row for the
id (no finished task, no tombstone, no other task's mark). A task submitted so has its row from before its
live records are written: the mark, then the finished task written over it by the move to the history,
then its tombstone, until that goes. So an inserted mark says that no other task has the id, live or
finished, and that the history cannot gain it while this task lives, and the task is written with no read
of the history: two round trips at submission instead of three.

A refused insert means the id had a row, and the submission does what it did before marks: it reads the
row, writes nothing if it is a finished task or a tombstone, and else (a live task's mark, or one left by
a submission that died before its write, or none any more: then it marks again) writes the task, reading
the history once more after the write when the watch entry was there already. That is safe because a
finished task leaves the live table only after its history copy is written and before its watch entry is
deleted: if the insert succeeded, no earlier task with the id can still be on its way out, so the history
cannot gain the id between the read and the write. If an entry was there, a task written when the history
had the id is deleted again before anything is sent; a task written under an entry the submission did not
insert (one left by an attempt that died before writing) puts the entry again at its own CompleteBy, so a
sweep that found no task under it and is about to delete it is refused; so does a task written so late that
its own entry came due first (a slow insert), which a sweep may have deleted already. A task left behind
by a submission that died before taking it back is deleted by the Supervisor
(:meth:`adapters.table_store.history.History.take_back`). A
submission whose transaction is refused because a live task without a mark has the id (written before
marks were) deletes its mark again. Such a task is the one gap: a submission of its id that marks it in
the instant the task moves to the history may be written again, so an upgrade from a version without
marks is safest with the live table drained (every order finished and moved).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import TableEntity, TableTransactionError, UpdateMode

from engine import AuditEntry, ConcurrencyError, CreateOutcome, DeadLetterAction, TaskRecord, TaskState

from .codec import (
    _LIVE_PROPERTIES,
    _RETURNED,
    _WHOLE,
    Codec,
    _etag,
    _input_key,
    _or_passed_over,
    _stamp,
    _state_key,
    _step_key,
    _Understood,
    _unknown,
    to_audit,
    to_state,
    to_step,
)
from .history import History
from .search import Search
from .tables import _IF_MATCH, _RACES, _RANGE, HISTORY, STATE, Tables, Unit, _conflict, _nothing
from .watch import Watches

log = logging.getLogger("adapters.table_store")

_DEAD_LETTER_FIELDS = [field.alias or name for name, field in DeadLetterAction.model_fields.items()]
# The partition of dead-letter actions that name no known task (outside the s00.. shards).
DEAD_LETTER_PARTITION = "deadletters"
# How far another instance's clock may run ahead of a submitter's: a submission whose task was written
# later than this before its entry's CompleteBy may have had that entry swept (see Live.create).
_CLOCK_SKEW_SECONDS = 0.1


class Live(Unit):
    """A task's live records: written at submission (with its watch entry, its mark in the history and its
    search entries), loaded (from the history when it is not live), saved, and its audit trail."""

    def __init__(
        self, tables: Tables, codec: Codec, watches: Watches, archives: History, searches: Search
    ) -> None:
        super().__init__(tables, codec)
        self.watches = watches
        self.archives = archives
        self.searches = searches

    async def create(self, record: TaskRecord) -> tuple[CreateOutcome, TaskRecord]:
        """Watch the task, then write its input, state, steps and listing entry in one transaction (all or
        nothing), checking the history for the id (see this module's docstring).

        The watch entry goes first: a crash in between leaves an entry the Supervisor removes, while the
        other order could leave a Pending task nobody watches. A submission refused because the order
        exists (409) never moves that order's watch entry; the entry it inserted itself goes again only if
        the history answered (no live task has the id), since a live task may have no other entry.
        """
        # Measured from here, on this process's own clock: the task was made (CreatedAt, and the CompleteBy
        # its watch entry carries) just before, with nothing awaited in between.
        loop = asyncio.get_running_loop()
        started = loop.time()
        state_entity = self.codec.state_entity(record)
        audit = record.pending_audit()
        operations: list[Any] = [
            ("create", self.codec.input_entity(record)),
            ("create", state_entity),
            *(("create", self.codec.step_entity(record.order_id, s)) for s in record.steps),
            # A task written already claimed carries its claim's audit entries (Scheduler.claim_new).
            *(("create", self.codec.audit_entity(record.order_id, e, n)) for n, e in enumerate(audit)),
        ]
        operations += [
            ("create", entity) for _, entity, *_ in self.codec.listing_operations(record, state_entity)
        ]
        watched = bool(state_entity["Watched"])
        # Insert only: an entry already there is the task's own (or one left by a crash before its
        # transaction), and never later than that task's CompleteBy; moving it would break that bound.
        # The search entries go first too, beside it: an order never exists without them, and entries
        # whose order was never written (refused, or a crash) are passed over by a search.
        watching = self.watches.add(record.state) if watched else _nothing()
        # The id's row in the history (its mark) beside the watch entry and the search entries: inserted, it
        # says the history has never had the id since its last tombstone went, nor can gain it while the task
        # lives, so the history need not be read (see the module's docstring).
        searching = [self.searches.write_entries(record.state)] if self.search is not None else []
        if self.marks or searching:
            marking = (
                self.archives.mark(record.state) if self.history is not None and self.marks else _nothing()
            )
            added, marked, *_ = await asyncio.gather(watching, marking, *searching)
        else:
            # The schedule of a store without marks or search entries, as the simulation's regression
            # seeds were found.
            added, marked = await watching, None
        for _ in range(_RACES):
            found: TableEntity | None = None
            if self.history is None:
                written = await self._create_live(operations)
            elif marked is not None:
                written = await self._create_live(operations)
                if written is None:
                    # A live task without a mark has the id (submitted before marks were written): the
                    # mark goes again, and the row is that task's to write when it moves.
                    await self.archives.unmark(record.order_id, marked)
                    marked = None
            else:
                # No mark (the id had a row, or marks are off). The history first: an id it holds is
                # answered with nothing written, so a lost answer or a crash cannot leave a task behind.
                row = await self.archives.read_archive(record.order_id)
                if row is None and self.marks:
                    marked = await self.archives.mark(record.state)  # the row went meanwhile: mark it again
                    continue
                found = None if row is None or row.get("Kind") == _RETURNED else row
                written = await self._create_live(operations) if found is None else None
                if written is not None and added is None:
                    # An entry was there: an earlier task with this id may have been leaving the live
                    # table during that read, so the history is read again after the write. (When this
                    # submission inserted the entry, no earlier task can be, and once is enough.)
                    found = await self.archives.read_kept(record.order_id)
            if written is not None and found is None:
                break
            if written is not None:
                # The id is in the history: take the new task back, as if never written.
                await self._delete_created(record.order_id, operations)
            answer = await self._existing(record, added, found)
            if answer is not None:
                await self.searches.delete_entries(
                    self._pk(record.order_id), self.searches.entry_keys(record.state)
                )  # its own, unused
                return answer
            # Gone in between (another submission of the id took its own write back): try again.
        else:
            raise ConcurrencyError(record.order_id)
        if watched and (added is None or _may_have_been_swept(record.state, loop.time() - started)):
            # Written under an entry this submission did not insert (left by an earlier attempt that died
            # before writing), or so late that its own entry came due first (a slow insert: simulation,
            # finding 10): a sweep may have read it, found no task and deleted it, or be about to. Put it
            # again, at this task's CompleteBy: its ETag changes, so such a delete is refused, and one
            # made already is undone.
            await self.watches.put(record.state)
        # The transaction's answer carries every new ETag: no need to read the task back.
        for (_, entity), result in zip(operations, written, strict=True):
            if entity.get("Kind") in ("state", "step", "input"):
                record.etags[entity["RowKey"]] = result["etag"]
        record.indexed = watched
        record.listed = state_entity["IndexKey"]
        record.mark_saved()
        return CreateOutcome.CREATED, record

    async def _existing(
        self, record: TaskRecord, added: str | None, found: TableEntity | None
    ) -> tuple[CreateOutcome, TaskRecord] | None:
        """The answer to a submission of an id that is taken: from the history if it has the id (it
        holds finished tasks, and a tombstone refuses any input), else from the live task; None if neither
        has it any more. A watch entry this submission added goes again only when the history answered:
        a live task's only entry may be that one (another submission of the id wrote the task), and the
        Supervisor removes it once the task no longer needs it."""
        order_id = record.order_id
        if found is None and self.history is not None:
            found = await self.archives.read_kept(order_id)
        existing: TaskRecord | None = None
        if found is None:
            existing = await self.load_live(order_id)
            if existing is None:
                return None
        if added is not None and existing is None:
            # No live task: a refused or repeated submission of an id in the history leaves nothing.
            await self.watches.remove(order_id, added)
        if found is not None:
            if found.get("Kind") not in _WHOLE:
                return CreateOutcome.PURGED, record
            existing = self.codec.from_archive(found)
        assert existing is not None
        same = existing.input_hash == record.input_hash
        return (CreateOutcome.EXISTS_SAME if same else CreateOutcome.EXISTS_DIFFERENT), existing

    async def _create_live(self, operations: list[Any]) -> list[Mapping[str, Any]] | None:
        """The new task's transaction; None if the task is there already."""
        try:
            self.counter.add(table=STATE, entities=len(operations))
            return await self._transact(self.table, operations)
        except TableTransactionError as exc:
            if exc.status_code != 409:
                raise
            return None

    async def _delete_created(self, order_id: str, operations: list[Any]) -> None:
        """Delete what :meth:`create` has just written (nothing was sent about it yet)."""
        deletes = [
            ("delete", {"PartitionKey": e["PartitionKey"], "RowKey": e["RowKey"]}) for _, e in operations
        ]
        self.counter.add(table=STATE, entities=len(deletes))
        await self._transact(self.table, deletes)
        await self.searches.delete_entries(
            self._pk(order_id), self.searches.entry_keys(to_state(operations[1][1]))
        )
        log.info("order %s was submitted again after it finished; its history answered", order_id)

    async def load(self, order_id: str) -> TaskRecord | None:
        """One query over the task's key range in the live table; a task not there is read from the
        history table (one point read), where a finished task is kept and a parked one waits. A task
        brought back from there meanwhile (written live, then its parked copy deleted) is read live
        again."""
        record = await self.load_live(order_id)
        if record is not None or self.history is None:
            return record
        found = await self.archives.read_archive(order_id)
        if found is not None and found.get("Kind") in _WHOLE:
            return self.codec.from_archive(found)
        if found is not None and found.get("Kind") == _RETURNED:
            return await self.load_live(order_id)
        return None

    async def load_live(self, order_id: str) -> TaskRecord | None:
        entities = [
            entity
            async for entity in self.table.query_entities(
                _RANGE,
                parameters={
                    "pk": self._pk(order_id),
                    "lo": f"order|{order_id}|",
                    "hi": f"order|{order_id}|~",
                },
            )
        ]
        self.counter.add(table=STATE, entities=len(entities))
        state_entity = next((e for e in entities if e.get("Kind") == "state"), None)
        input_entity = next((e for e in entities if e.get("Kind") == "input"), None)
        if state_entity is None or input_entity is None:
            return None
        state = to_state(state_entity)
        steps = sorted((to_step(e) for e in entities if e.get("Kind") == "step"), key=lambda s: s.index)
        with _Understood(input_entity):
            body = "".join(input_entity.get(f"Body{i}", "") for i in range(int(input_entity["BodyChunks"])))
            document = json.loads(body) if body else {}
        etags = {_state_key(order_id): _etag(state_entity), _input_key(order_id): _etag(input_entity)}
        kept = {}
        for e in entities:
            properties = _LIVE_PROPERTIES.get(e.get("Kind", ""))
            if properties is not None and (unknown := _unknown(e, properties)):
                kept[e["RowKey"]] = unknown
            if e.get("Kind") == "step":
                etags[e["RowKey"]] = _etag(e)
        return TaskRecord(
            state=state,
            steps=steps,
            input=document,
            input_hash=input_entity["BodyHash"],
            kept=kept,
            etags=etags,
            indexed=bool(state_entity.get("Watched")),
            listed=state_entity.get("IndexKey"),
        )

    async def save(self, record: TaskRecord) -> TaskRecord:
        """The state, the changed steps, the audit entries and the listing entry, in one transaction
        conditional on the ETags of the state and the changed steps (a parked task is saved by
        :meth:`adapters.table_store.parking.Parking.unpark` instead)."""
        order_id = record.order_id
        state_etag = record.etags.get(_state_key(order_id))
        if record.archived or state_etag is None:
            raise ConcurrencyError(order_id)  # a finished task from the history is never saved again
        state_entity = self.codec.state_entity(record)
        conditional = {"mode": UpdateMode.REPLACE, **_IF_MATCH}
        listing = self.codec.listing_operations(record, state_entity)
        operations: list[Any] = [("update", state_entity, {**conditional, "etag": state_etag})]
        changed, written = record.unsaved_steps()
        for index in changed:
            kept = record.kept.get(_step_key(order_id, index), {})
            entity = self.codec.step_entity(order_id, record.steps[index], kept)
            operations.append(("update", entity, {**conditional, "etag": record.etags[entity["RowKey"]]}))
        if record.input_changed():
            # Sensitive fields dropped (engine.sealing): the input again, in the same transaction.
            entity = self.codec.input_entity(record)
            etag = record.etags.get(entity["RowKey"])
            options = {**conditional, "etag": etag} if etag else {"mode": UpdateMode.REPLACE}
            operations.append(("update", entity, options))
        for n, entry in enumerate(record.pending_audit()):
            operations.append(("create", self.codec.audit_entity(order_id, entry, n)))
        operations += listing
        if state_entity["Watched"] and not record.indexed:
            await self.watches.put(
                record.state
            )  # back in flight (resubmitted): watch before the state says so
        try:
            self.counter.add(table=STATE, entities=len(operations))
            results = await self._transact(self.table, operations)
        except TableTransactionError as exc:
            if _conflict(exc):
                raise ConcurrencyError(order_id) from exc
            raise
        for (_, entity, *_), result in zip(operations, results, strict=False):
            if entity["RowKey"] in record.etags and result.get("etag"):
                record.etags[entity["RowKey"]] = result["etag"]
        record.indexed = bool(state_entity["Watched"])
        record.listed = state_entity["IndexKey"]
        record.mark_saved(written)
        return record

    async def audit(self, order_id: str, archived: bool = False) -> list[AuditEntry]:
        """The task's audit entries, oldest first: one range query in the task's partition, of the live
        table or (``archived``) of the history."""
        table, name = (self._history(), HISTORY) if archived else (self.table, STATE)
        read = [_or_passed_over(to_audit, e) for e in await self._audit_rows(table, order_id, name)]
        return [entry for entry in read if entry is not None]  # what it cannot read: reported, passed over

    async def append_audit(self, order_id: str, entry: AuditEntry) -> None:
        """Add an entry to a task's audit trail on its own, for an action that changes no task record
        (a dead-lettered message of the task replayed or purged).

        A live task's entry is written with a touch of its input record, conditional on that record's
        ETag, so the move of a finished task to the history (which deletes the input conditionally on
        the ETag it read) cannot leave the entry behind; a task already in the history gets it there.
        """
        pk = self._pk(order_id)
        entity = self.codec.audit_entity(order_id, entry, 0)
        for _ in range(_RACES):
            self.counter.add(table=STATE, entities=1)
            try:
                live = await self.table.get_entity(pk, _input_key(order_id), select=["BodyHash"])
            except ResourceNotFoundError:
                if self.history is not None and await self.archives.append_archived_audit(order_id, entity):
                    return
                break
            touch = {"PartitionKey": pk, "RowKey": _input_key(order_id), "AuditedAt": entry.at}
            operations = [
                ("create", entity),
                ("update", touch, {"mode": UpdateMode.MERGE, "etag": _etag(live), **_IF_MATCH}),
            ]
            try:
                self.counter.add(table=STATE, entities=2)
                await self._transact(self.table, operations)
                return
            except TableTransactionError as exc:
                if not _conflict(exc):
                    raise
        # Neither live nor in the history (purged meanwhile), or busy: keep it where it always went.
        log.warning("audit entry for order %s written outside its task's records", order_id)
        self.counter.add(table=STATE, entities=1)
        await self.table.create_entity(entity)

    async def append_dead_letter_audit(self, entry: DeadLetterAction) -> None:
        """Audit a dead-letter action that names no known task: partition ``deadletters``, one
        ``audit|<queue>|<time>|...`` row per action, so a queue's history is one range query."""
        entity: dict[str, Any] = {
            "PartitionKey": DEAD_LETTER_PARTITION,
            "RowKey": f"audit|{entry.queue}|{_stamp(entry.at)}|{uuid.uuid4().hex[:8]}",
            "Kind": "audit",
            **entry.model_dump(by_alias=True, exclude_none=True),
        }
        self.counter.add(table=STATE, entities=1)
        await self.table.create_entity(entity)

    async def dead_letter_audit(self, queue: str) -> list[DeadLetterAction]:
        """The audited dead-letter actions of one queue that named no known task, oldest first."""
        prefix = f"audit|{queue}|"
        entities = [
            entity
            async for entity in self.table.query_entities(
                _RANGE, parameters={"pk": DEAD_LETTER_PARTITION, "lo": prefix, "hi": f"{prefix}~"}
            )
        ]
        self.counter.add(table=STATE, entities=len(entities))
        return [
            DeadLetterAction.model_validate({a: e[a] for a in _DEAD_LETTER_FIELDS if e.get(a) is not None})
            for e in sorted(entities, key=lambda e: str(e["RowKey"]))
        ]


def _may_have_been_swept(state: TaskState, elapsed: float) -> bool:
    """Whether a submission that took ``elapsed`` seconds to write its task may have had its own watch entry
    swept first: the entry came due (at the task's CompleteBy, by the clock of a Supervisor up to
    :data:`_CLOCK_SKEW_SECONDS` ahead) before the task was there, and a sweep that found no task under it
    deleted it as the leftover of a submission that died. On the usual path the write comes long before."""
    if state.complete_by is None:
        return False
    window = (state.complete_by - state.created_at).total_seconds()
    return elapsed >= window - _CLOCK_SKEW_SECONDS
