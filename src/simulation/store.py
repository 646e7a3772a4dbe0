"""The engine's :class:`~engine.ports.StateStore` and :class:`~engine.ports.BreakerStore` on simulated
Table Storage (:mod:`simulation.tables`).

It keeps the layout and the order of requests of ``adapters.table_store`` (the port's only production
implementation), because that is where the interleavings live: three tables (live records, watch, history),
a task's records in one shard partition, every state change one transaction conditional on the ETags it
read, the watch entry written in a request of its own before the transaction that needs it, the history
written before the live records are deleted, tallies per shard, tombstones. Each request to a table is one
await (``io.before``: latency, a crash before it reaches the store, a refused call) followed by the
operation applied at once and ``io.after`` (a crash or a lost answer after it took effect).

One instance per simulated process, like the adapter: its cache of the history's tallies is its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any, Protocol, TypeVar

# The adapter's own key layout, so the simulated store cannot drift from what the adapter writes.
from adapters.table_store import _archive_key as archive_key
from adapters.table_store import _gone_key as gone_key
from adapters.table_store import _input_key as input_key
from adapters.table_store import _listed_state, listing_key, shard_of
from adapters.table_store import _stamp as stamp
from adapters.table_store import _state_key as state_key
from adapters.table_store import _step_key as step_key
from engine.breaker import BreakerRecord
from engine.errors import BreakerConflict, ConcurrencyError, InvalidContinuation
from engine.ports import CreateOutcome, ExpiredEntry, Page, PurgeReport, StateCounts
from engine.state import AuditEntry, ProcessState, StepState, TaskRecord, TaskState

from .tables import MAX_BATCH, Operation, Row, Table, TableError, Tables

T = TypeVar("T")

LIVE, WATCH, HISTORY, BREAKERS = "orders", "orderswatch", "ordershistory", "breakers"
FINISHED = tuple(state for state in ProcessState if state.finished)
TALLY = "count"
_RACES = 5  # as the adapter: attempts at a write that loses a race on a shared row


class Requests(Protocol):
    """What every request to the simulated storage goes through (see :mod:`simulation.world`)."""

    def before(self, kind: str) -> Awaitable[None]:
        """The request is on its way: may crash the caller or refuse the call at once; the awaitable is
        its latency."""
        ...

    def after(self, kind: str) -> None:
        """The request took effect: may crash the caller or lose the answer."""
        ...


class Observer(Protocol):
    """Told of every committed change to a task's state record (the simulation's checks)."""

    def state_saved(
        self,
        order_id: str,
        before: TaskState | None,
        after: TaskState,
        steps: list[StepState],
        audit: list[AuditEntry],
    ) -> None:
        """A transaction wrote the task's state (``before``: as it was stored; None on creation)."""
        ...

    def watch_written(self, order_id: str, complete_by: datetime | None, created: bool, cause: str) -> None:
        """A watch entry was inserted, replaced or (``complete_by`` None) deleted."""
        ...

    def creation_taken_back(self, order_id: str) -> None:
        """A submission deleted the task it had just written (the id was in the history)."""
        ...


# ---- keys, as the adapter writes them ------------------------------------------------------------------
# ---- stored values (immutable; copied on the way to the engine) ----------------------------------------
@dataclass(frozen=True, slots=True)
class LiveState:
    state: TaskState
    watched: bool
    index_key: str


@dataclass(frozen=True, slots=True)
class InputRow:
    input: dict[str, Any]
    input_hash: str


@dataclass(frozen=True, slots=True)
class Archived:
    state: TaskState
    steps: tuple[StepState, ...]
    input: dict[str, Any]
    input_hash: str
    index_key: str
    audited: bool


@dataclass(frozen=True, slots=True)
class Tombstone:
    order_id: str
    process_state: str
    finished_at: datetime
    until: datetime
    gone_key: str


@dataclass(frozen=True, slots=True)
class HistoryListing:
    state: TaskState
    audited: bool


@dataclass(frozen=True, slots=True)
class AuditRow:
    order_id: str
    entry: AuditEntry


def _conflict(exc: TableError) -> bool:
    return exc.status in (404, 409, 412)


@dataclass(frozen=True)
class StoreFixes:
    """The fixes of the bugs the simulation found in the store's protocol (docs/simulation.md, "What it
    found", findings 2 to 6), each a flag so that a regression test can turn it off and show that its seed
    still catches the bug (the seeds, which drift as the code changes, are in
    ``tests/simulation/regressions.py``). ``adapters.table_store`` has them all:
    :data:`FIXED` is the protocol it follows, request for request (``tests/adapters/test_store_races.py``
    builds each bug's interleaving on it); :data:`UNFIXED` turns every fix off.

    ``history_first``: a submission whose watch entry it inserted reads the history before it writes the
    task. Without it, the submission does both at once and takes the task back when the history has the
    id; if the write's answer is lost, or the process dies before the take-back, the task stays: the
    Supervisor starts it as if its kick were lost, the finished order runs again and can never be moved to
    the history (the history has the id). Its seed needs both of finding 6's off too (each of those
    also covers it).

    ``keep_watch_of_live_task``: a submission refused because the task exists removes the watch entry it
    inserted only when no live task has the id. Without it, the entry also goes when the live task has
    finished; but when two submissions of one id race, the entry the slower one inserted is the only one
    the task has (the faster one's insert found it there), so the finished task is never moved to the
    history. Its seed needs ``rewatch_new_task`` off too (the latter also prevents it, unless
    the process that would put the entry again dies first).

    ``archive_if_unchanged``: a second attempt at moving a task to the history (the first wrote the history
    but did not delete the live records) rewrites the history's copy only if it is unchanged since it read
    it, and a task the history already holds as a tombstone (moved and purged meanwhile) just has its live
    records deleted. Without it, the rewrite is unconditional: when the clean-up purges the task between
    the read and the rewrite, the task is back in the history, uncounted, and its next purge takes the
    shard's tally below what the history holds.

    ``rewatch_new_task``: a submission that wrote the task under a watch entry it did not insert (one left
    by an earlier attempt that died before writing) puts the entry again, at the task's CompleteBy. Without
    it, the submission relies on the entry it found; but a sweep that read the task as absent (it was not
    written yet) deletes that entry just after, and the task is never watched again: never recovered if it
    stalls, never moved to the history when it finishes.

    ``take_back_leftover`` and ``history_also_first`` (finding 6): a submission that found a watch entry
    writes the task before it reads the history (an earlier task of the id may still be on its way there);
    when it dies, or loses its answer, before taking the task back, the task stays with nothing sent about
    it, and the Supervisor starts it as a lost kick: the finished order runs again. With
    ``history_also_first`` such a submission reads the history before the write as well (an id the history
    already holds is answered with nothing written); with ``take_back_leftover`` the Supervisor asks the
    store about a task never started before it starts it (:meth:`engine.ports.StateStore.take_back`), and
    one whose id the history holds is deleted instead. One seed shows it with both off, another with
    ``history_also_first`` off alone (the tombstone had expired when the Supervisor came to the task, so
    the question alone could not tell).
    """

    history_first: bool = True
    keep_watch_of_live_task: bool = True
    archive_if_unchanged: bool = True
    rewatch_new_task: bool = True
    take_back_leftover: bool = True
    history_also_first: bool = True


FIXED = StoreFixes()
UNFIXED = StoreFixes(
    history_first=False,
    keep_watch_of_live_task=False,
    archive_if_unchanged=False,
    rewatch_new_task=False,
    take_back_leftover=False,
    history_also_first=False,
)


class SimStateStore:
    """:class:`engine.ports.StateStore` on simulated tables, request for request like the adapter with
    ``protocol`` :data:`FIXED` (the default); a :class:`StoreFixes` flag turned off puts its bug back."""

    def __init__(
        self, tables: Tables, io: Requests, observer: Observer, shards: int = 8, protocol: StoreFixes = FIXED
    ) -> None:
        self.protocol = protocol
        self.live = tables.table(LIVE)
        self.watch = tables.table(WATCH)
        self.history = tables.table(HISTORY)
        self.io = io
        self.observer = observer
        self.shards = shards
        self._tallies: dict[str, tuple[str, dict[str, int]]] = {}
        self._tables = tables

    def _pk(self, order_id: str) -> str:
        return shard_of(order_id, self.shards)

    def _delete_if_there(self, pk: str, key: str) -> None:
        with contextlib.suppress(TableError):
            self.history.one(pk, ("delete", key, None, None))

    @staticmethod
    def _first(table: Table, pk: str, lo: str, hi: str, want: int) -> list[tuple[str, Row]]:
        """The first page of a range query (``want`` rows at most)."""
        return table.range(pk, lo, hi)[:want]

    async def _request(self, kind: str, operation: Callable[[], T]) -> T:
        await self.io.before(kind)
        result = operation()
        self.io.after(kind)
        return result

    # ---- mapping ------------------------------------------------------------------------------------
    @staticmethod
    def _snapshot_state(state: TaskState) -> TaskState:
        return state.model_copy()

    def _listing_key(self, record: TaskRecord) -> str:
        state = record.state
        listed = record.listed
        if listed is not None and _listed_state(listed) == state.process_state.value:
            return listed
        return listing_key(state.process_state, state.updated_at, state.order_id)

    def _audit_key(self, order_id: str, entry: AuditEntry, n: int) -> str:
        # The adapter adds a random tail so that two instances' entries of one microsecond stay apart.
        return f"audit|{order_id}|{stamp(entry.at)}|{n:02d}{self._tables.number():08d}"

    def _record(self, order_id: str, rows: list[tuple[str, Row]]) -> TaskRecord | None:
        state_row = input_row = None
        steps: list[StepState] = []
        etags: dict[str, str] = {}
        for key, row in rows:
            value = row.value
            if isinstance(value, LiveState):
                state_row = row
            elif isinstance(value, InputRow):
                input_row = row
            elif isinstance(value, StepState):
                steps.append(value.model_copy())
            else:
                continue
            etags[key] = row.etag
        if state_row is None or input_row is None:
            return None
        live: LiveState = state_row.value
        given: InputRow = input_row.value
        steps.sort(key=lambda s: s.index)
        return TaskRecord(
            state=live.state.model_copy(),
            steps=steps,
            input=given.input,
            input_hash=given.input_hash,
            etags=etags,
            indexed=live.watched,
            listed=live.index_key,
        )

    def _from_archive(self, row: Row) -> TaskRecord:
        archived: Archived = row.value
        return TaskRecord(
            state=archived.state.model_copy(),
            steps=[s.model_copy() for s in archived.steps],
            input=archived.input,
            input_hash=archived.input_hash,
            etags={archive_key(archived.state.order_id): row.etag},
            archived=True,
        )

    # ---- submission ---------------------------------------------------------------------------------
    async def create(self, record: TaskRecord) -> tuple[CreateOutcome, TaskRecord]:
        """The adapter's submission: watch entry first (insert only); then, if it inserted it, a read of the
        history and the task's transaction only if the id is not there, else the transaction and a read of
        the history after it; answered from the history or the live task if taken; the entry put again
        when the task was written under one it did not insert."""
        order_id, pk = record.order_id, self._pk(record.order_id)
        state = record.state
        watched = state.process_state.in_flight and state.complete_by is not None
        key = self._listing_key(record)
        snapshot = self._snapshot_state(state)
        operations: list[Operation] = [
            ("create", input_key(order_id), InputRow(record.input, record.input_hash), None),
            ("create", state_key(order_id), LiveState(snapshot, watched, key), None),
            *(("create", step_key(order_id, s.index), s.model_copy(), None) for s in record.steps),
            ("create", key, snapshot, None),
        ]
        added = await self._add_watch(state, "create") if watched else None
        written: list[str | None] | None = None
        for _ in range(_RACES):
            found: Row | None
            protocol = self.protocol
            if protocol.history_first if added is not None else protocol.history_also_first:
                # The history first, the task written only if the id is not there.
                found = await self._read_archive(order_id)
                written = (
                    await self._create_live(pk, order_id, operations, snapshot) if found is None else None
                )
                if written is not None and added is None:
                    # An entry was there: a task of the id may have been on its way to the history during
                    # that read, so it is read again after the write.
                    found = await self._read_archive(order_id)
                elif found is not None:
                    answer = await self._existing(record, added, found)
                    assert answer is not None
                    return answer
            elif added is not None:
                written, found = await asyncio.gather(
                    self._create_live(pk, order_id, operations, snapshot), self._read_archive(order_id)
                )
            else:
                written = await self._create_live(pk, order_id, operations, snapshot)
                found = await self._read_archive(order_id) if written is not None else None
            if written is not None and found is None:
                break
            if written is not None:
                await self._delete_created(pk, operations)
            answer = await self._existing(record, added, found if written is not None else None)
            if answer is not None:
                return answer
        else:
            raise ConcurrencyError(order_id)
        assert written is not None
        if watched and added is None and self.protocol.rewatch_new_task:
            # The entry found was left by an attempt that died before writing; a sweep may have read the
            # task as absent and be about to delete it: put it again (its ETag changes, so such a delete
            # is refused), at the task's own CompleteBy.
            await self._put_watch(state, "create: under an entry it did not insert")
        for (_, row_key, value, _), etag in zip(operations, written, strict=True):
            if isinstance(value, LiveState | InputRow | StepState) and etag is not None:
                record.etags[row_key] = etag
        record.indexed = watched
        record.listed = key
        record.mark_saved()
        return CreateOutcome.CREATED, record

    async def _existing(
        self, record: TaskRecord, added: str | None, found: Row | None
    ) -> tuple[CreateOutcome, TaskRecord] | None:
        order_id = record.order_id
        if found is None:
            found = await self._read_archive(order_id)
        existing: TaskRecord | None = None
        if found is None:
            existing = await self._load_live(order_id)
            if existing is None:
                return None
        if self.protocol.keep_watch_of_live_task:
            stray = added is not None and existing is None
        else:
            stray = added is not None and (existing is None or not existing.indexed)
        if stray:
            assert added is not None
            await self._remove_watch(order_id, added, "create refused")
        if found is not None:
            if not isinstance(found.value, Archived):
                return CreateOutcome.PURGED, record
            existing = self._from_archive(found)
        assert existing is not None
        same = existing.input_hash == record.input_hash
        return (CreateOutcome.EXISTS_SAME if same else CreateOutcome.EXISTS_DIFFERENT), existing

    async def _create_live(
        self, pk: str, order_id: str, operations: list[Operation], snapshot: TaskState
    ) -> list[str | None] | None:
        def write() -> list[str | None] | None:
            try:
                etags = self.live.transact(pk, operations)
            except TableError as exc:
                if exc.status != 409:
                    raise
                return None
            self.observer.state_saved(order_id, None, snapshot, [], [])
            return etags

        return await self._request("live.create", write)

    async def _delete_created(self, pk: str, operations: list[Operation]) -> None:
        deletes: list[Operation] = [("delete", key, None, None) for _, key, _, _ in operations]
        order_id = next(v.state.order_id for _, _, v, _ in operations if isinstance(v, LiveState))

        def delete() -> None:
            self.live.transact(pk, deletes)
            self.observer.creation_taken_back(order_id)

        await self._request("live.delete-created", delete)

    async def _read_archive(self, order_id: str) -> Row | None:
        pk = self._pk(order_id)
        return await self._request("history.get", lambda: self.history.get(pk, archive_key(order_id)))

    # ---- one task -------------------------------------------------------------------------------------
    async def load(self, order_id: str) -> TaskRecord | None:
        record = await self._load_live(order_id)
        if record is not None:
            return record
        found = await self._read_archive(order_id)
        return self._from_archive(found) if found is not None and isinstance(found.value, Archived) else None

    async def _load_live(self, order_id: str) -> TaskRecord | None:
        pk, prefix = self._pk(order_id), f"order|{order_id}|"
        rows = await self._request("live.load", lambda: self.live.range(pk, prefix, prefix + "~"))
        return self._record(order_id, rows)

    async def save(self, record: TaskRecord) -> TaskRecord:
        order_id, pk = record.order_id, self._pk(record.order_id)
        state_etag = record.etags.get(state_key(order_id))
        if record.archived or state_etag is None:
            raise ConcurrencyError(order_id)
        state = record.state
        watched = state.process_state.in_flight and state.complete_by is not None
        key = self._listing_key(record)
        snapshot = self._snapshot_state(state)
        changed = record.changed_steps()
        audit = record.pending_audit()
        operations: list[Operation] = [
            ("update", state_key(order_id), LiveState(snapshot, watched, key), state_etag)
        ]
        for index in changed:
            row_key = step_key(order_id, index)
            operations.append(("update", row_key, record.steps[index].model_copy(), record.etags[row_key]))
        for n, entry in enumerate(audit):
            operations.append(
                ("create", self._audit_key(order_id, entry, n), AuditRow(order_id, entry), None)
            )
        operations.append(("upsert", key, snapshot, None))
        if record.listed is not None and record.listed != key:
            operations.append(("delete", record.listed, None, None))
        if watched and not record.indexed:
            await self._put_watch(state, "save: back in flight")  # watch before the state says so
        steps = [record.steps[i] for i in changed]

        def write() -> list[str | None]:
            before = self.live.get(pk, state_key(order_id))
            try:
                etags = self.live.transact(pk, operations)
            except TableError as exc:
                if _conflict(exc):
                    raise ConcurrencyError(order_id) from exc
                raise
            assert before is not None
            self.observer.state_saved(order_id, before.value.state, snapshot, steps, audit)
            return etags

        etags = await self._request("live.save", write)
        for (_, row_key, _, _), etag in zip(operations, etags, strict=True):
            if row_key in record.etags and etag is not None:
                record.etags[row_key] = etag
        record.indexed = watched
        record.listed = key
        record.mark_saved()
        return record

    # ---- audit ----------------------------------------------------------------------------------------
    async def _audit_rows(self, table: Table, order_id: str, kind: str) -> list[tuple[str, Row]]:
        pk, prefix = self._pk(order_id), f"audit|{order_id}|"
        return await self._request(kind, lambda: table.range(pk, prefix, prefix + "~"))

    async def audit(self, order_id: str, archived: bool = False) -> list[AuditEntry]:
        table, kind = (self.history, "history.audit") if archived else (self.live, "live.audit")
        return [row.value.entry for _, row in await self._audit_rows(table, order_id, kind)]

    # ---- the watch table ------------------------------------------------------------------------------
    async def _add_watch(self, state: TaskState, cause: str) -> str | None:
        pk, order_id, complete_by = self._pk(state.order_id), state.order_id, state.complete_by

        def insert() -> str | None:
            try:
                etag = self.watch.one(pk, ("create", order_id, complete_by, None))
            except TableError:
                return None
            self.observer.watch_written(order_id, complete_by, True, cause)
            return etag

        return await self._request("watch.insert", insert)

    async def _remove_watch(self, order_id: str, etag: str, cause: str) -> None:
        pk = self._pk(order_id)

        def delete() -> None:
            try:
                self.watch.one(pk, ("delete", order_id, None, etag))
            except TableError:
                return
            self.observer.watch_written(order_id, None, False, cause)

        await self._request("watch.delete", delete)

    async def _put_watch(self, state: TaskState, cause: str) -> None:
        pk, order_id, complete_by = self._pk(state.order_id), state.order_id, state.complete_by

        def upsert() -> None:
            created = self.watch.get(pk, order_id) is None
            self.watch.one(pk, ("upsert", order_id, complete_by, None))
            self.observer.watch_written(order_id, complete_by, created, cause)

        await self._request("watch.upsert", upsert)

    async def expired(self, now: datetime) -> AsyncIterator[ExpiredEntry]:
        for shard in range(self.shards):
            pk = f"s{shard:02d}"

            def due(pk: str = pk) -> list[ExpiredEntry]:
                rows = self.watch.range(pk, "", "~")
                return [ExpiredEntry(key, row.value, row.etag) for key, row in rows if row.value <= now]

            for entry in await self._request("watch.query", due):
                yield entry

    async def rewatch(self, entry: ExpiredEntry, complete_by: datetime) -> None:
        pk = self._pk(entry.order_id)

        def update() -> None:
            try:
                self.watch.one(pk, ("update", entry.order_id, complete_by, entry.token))
            except TableError:
                return
            self.observer.watch_written(entry.order_id, complete_by, False, "rewatch")

        await self._request("watch.update", update)

    async def unwatch(self, entry: ExpiredEntry) -> None:
        await self._remove_watch(entry.order_id, entry.token, "unwatch")

    # ---- the history ----------------------------------------------------------------------------------
    async def _tally(self, pk: str, fresh: bool = False) -> tuple[str, dict[str, int]]:
        if not fresh and pk in self._tallies:
            return self._tallies[pk]
        row = await self._request("history.tally", lambda: self.history.get(pk, TALLY))
        tally = (row.etag, dict(row.value)) if row is not None else ("", {s.value: 0 for s in FINISHED})
        self._tallies[pk] = tally
        return tally

    def _tally_operation(
        self, tally: tuple[str, dict[str, int]], change: dict[str, int]
    ) -> tuple[Operation, dict[str, int]]:
        etag, counts = tally
        new = {k: counts[k] + change.get(k, 0) for k in counts}
        if not etag:
            return ("create", TALLY, new, None), new
        return ("update", TALLY, new, etag), new

    async def _submit_counted(
        self, pk: str, operations: list[Operation], tally: tuple[str, dict[str, int]], change: dict[str, int]
    ) -> None:
        tally_op, new = self._tally_operation(tally, change)
        try:
            etags = await self._request(
                "history.write", lambda: self.history.transact(pk, [*operations, tally_op])
            )
        except TableError:
            self._tallies.pop(pk, None)
            raise
        etag = etags[-1]
        assert etag is not None
        self._tallies[pk] = etag, new

    async def archive(self, record: TaskRecord) -> bool:
        if record.archived:
            return True
        state = record.state
        if not state.process_state.finished:
            raise ValueError(f"task {record.order_id} is {state.process_state.value}, not finished")
        order_id, pk = record.order_id, self._pk(record.order_id)
        trail = await self._audit_rows(self.live, order_id, "live.audit")
        key = listing_key(state.process_state, state.updated_at, order_id)
        snapshot = self._snapshot_state(state)
        archived = Archived(
            snapshot,
            tuple(s.model_copy() for s in record.steps),
            record.input,
            record.input_hash,
            key,
            bool(trail),
        )
        listing = HistoryListing(snapshot, bool(trail))
        copies: list[Operation] = [("upsert", k, row.value, None) for k, row in trail]
        room = MAX_BATCH - 3
        for i in range(0, max(len(copies) - room, 0), MAX_BATCH):
            batch = copies[i : min(i + MAX_BATCH, len(copies) - room)]
            await self._request("history.copy", partial(self.history.transact, pk, batch))
        tail = copies[max(len(copies) - room, 0) :]
        if not await self._write_archive(pk, order_id, archived, listing, tail):
            return False
        return await self._delete_live(record, trail)

    async def take_back(self, record: TaskRecord) -> bool:
        if not self.protocol.take_back_leftover or record.archived:
            return False
        if await self._read_archive(record.order_id) is None:
            return False
        trail = await self._audit_rows(self.live, record.order_id, "live.audit")
        if not await self._delete_live(record, trail, taken_back=True):
            raise ConcurrencyError(record.order_id)
        return True

    async def _write_archive(
        self, pk: str, order_id: str, archived: Archived, listing: HistoryListing, copies: list[Operation]
    ) -> bool:
        change = {archived.state.process_state.value: 1}
        key = archived.index_key
        for fresh in (False, *([True] * (_RACES - 1))):
            tally = await self._tally(pk, fresh)
            try:
                await self._submit_counted(
                    pk,
                    [
                        ("create", archive_key(order_id), archived, None),
                        ("upsert", key, listing, None),
                        *copies,
                    ],
                    tally,
                    change,
                )
                return True
            except TableError as exc:
                if exc.status == 412:
                    continue
                if exc.status != 409:
                    raise
            found = await self._read_archive(order_id)
            if found is None:
                continue
            value = found.value
            if (
                self.protocol.archive_if_unchanged
                and isinstance(value, Tombstone)
                and value.finished_at == archived.state.updated_at
            ):
                return True  # moved and purged already: only the live records are left to delete
            if not isinstance(value, Archived) or value.state.created_at != archived.state.created_at:
                return False
            condition = found.etag if self.protocol.archive_if_unchanged else None
            verb = "update" if condition is not None else "upsert"
            operations: list[Operation] = [
                (verb, archive_key(order_id), archived, condition),
                ("upsert", key, listing, None),
                *copies,
            ]
            try:
                await self._request("history.rewrite", partial(self.history.transact, pk, operations))
            except TableError as exc:
                if exc.status != 412:
                    raise
                continue  # purged (or rewritten) since it was read: look again
            return True
        return False

    async def _delete_live(
        self, record: TaskRecord, trail: list[tuple[str, Row]], taken_back: bool = False
    ) -> bool:
        order_id, pk = record.order_id, self._pk(record.order_id)
        guarded: list[Operation] = [("delete", key, None, etag) for key, etag in record.etags.items()]
        if input_key(order_id) not in record.etags:
            guarded.append(("delete", input_key(order_id), None, None))
        if record.listed is not None:
            guarded.append(("delete", record.listed, None, None))
        audits: list[Operation] = [("delete", key, None, row.etag) for key, row in trail]
        room = MAX_BATCH - len(guarded)
        try:
            for i in range(0, max(len(audits) - room, 0), MAX_BATCH):
                batch = audits[i : min(i + MAX_BATCH, len(audits) - room)]
                await self._request("live.delete-audit", partial(self.live.transact, pk, batch))
            operations = [*guarded, *audits[max(len(audits) - room, 0) :]]

            def delete() -> None:
                self.live.transact(pk, operations)
                if taken_back:
                    self.observer.creation_taken_back(order_id)

            await self._request("live.delete", delete)
        except TableError as exc:
            if _conflict(exc):
                return False
            raise
        return True

    async def purge(self, finished_before: datetime, tombstone_until: datetime, limit: int) -> PurgeReport:
        purged = lost = 0
        for shard in range(self.shards):
            pk = f"s{shard:02d}"
            due: list[tuple[str, Row]] = []
            for state in FINISHED:
                if purged + len(due) >= limit:
                    break
                lo, hi = f"index|{state.value}|", f"index|{state.value}|{stamp(finished_before)}"
                want = min(limit - purged - len(due), 1000)
                page = await self._request(
                    "history.due", partial(self._first, self.history, pk, lo, hi, want)
                )
                due += page[: limit - purged - len(due)]
            if not due:
                continue
            groups: list[list[tuple[tuple[str, Row], list[Operation]]]] = [[]]
            size = 0
            for entry in due:
                operations = await self._purge_operations(pk, entry, tombstone_until)
                if size + len(operations) > MAX_BATCH - 1 and groups[-1]:
                    groups.append([])
                    size = 0
                groups[-1].append((entry, operations))
                size += len(operations)
            for group in groups:
                done = await self._purge_group(pk, group)
                if done is None:
                    for one in group:
                        if await self._purge_group(pk, [one]) is None:
                            lost += 1
                        else:
                            purged += 1
                else:
                    purged += done
            if purged + lost >= limit:
                break
        return PurgeReport(purged=purged, lost_races=lost, more=purged + lost >= limit)

    async def _purge_operations(
        self, pk: str, entry: tuple[str, Row], tombstone_until: datetime
    ) -> list[Operation]:
        key, row = entry
        listed: HistoryListing = row.value
        state = listed.state
        order_id = state.order_id
        gone = gone_key(tombstone_until, order_id)
        tombstone = Tombstone(order_id, state.process_state.value, state.updated_at, tombstone_until, gone)
        operations: list[Operation] = [
            ("upsert", archive_key(order_id), tombstone, None),
            ("delete", key, None, row.etag),
            ("create", gone, order_id, None),
        ]
        if listed.audited:
            trail = await self._audit_rows(self.history, order_id, "history.audit")
            operations += [("delete", k, None, None) for k, _ in trail]
        return operations

    async def _purge_group(self, pk: str, group: list[tuple[tuple[str, Row], list[Operation]]]) -> int | None:
        change: dict[str, int] = {}
        for (_, row), _ in group:
            name = row.value.state.process_state.value
            change[name] = change.get(name, 0) - 1
        operations = [op for _, ops in group for op in ops]
        for fresh in (False, *([True] * (_RACES - 1))):
            tally = await self._tally(pk, fresh)
            try:
                await self._submit_counted(pk, operations, tally, change)
                return len(group)
            except TableError as exc:
                if not _conflict(exc):
                    raise
                if (await self._tally(pk, fresh=True))[0] == tally[0]:
                    return None
        return None

    async def drop_tombstones(self, before: datetime, limit: int) -> int:
        dropped = 0
        for shard in range(self.shards):
            if dropped >= limit:
                break
            pk = f"s{shard:02d}"
            want = min(limit - dropped, 1000)
            page = await self._request(
                "history.gone", partial(self._first, self.history, pk, "gone|", f"gone|{stamp(before)}", want)
            )
            page = page[: limit - dropped]
            for i in range(0, len(page), MAX_BATCH // 2):
                keys = [
                    k for gone, row in page[i : i + MAX_BATCH // 2] for k in (gone, archive_key(row.value))
                ]
                operations: list[Operation] = [("delete", k, None, None) for k in keys]
                try:
                    await self._request("history.drop", partial(self.history.transact, pk, operations))
                except TableError as exc:
                    if not _conflict(exc):
                        raise
                    for key in keys:
                        await self._request("history.drop-one", partial(self._delete_if_there, pk, key))
                dropped += len(keys) // 2
        return dropped

    # ---- listings and counts ----------------------------------------------------------------------------
    async def list_by_state(self, state: ProcessState, page_size: int, continuation: str | None) -> Page:
        tables = [self.live] + ([self.history] if state.finished else [])
        place, offset = 0, 0
        if continuation:
            try:
                place_text, offset_text = continuation.split(":")
                place, offset = int(place_text), int(offset_text)
            except ValueError as exc:
                raise InvalidContinuation(continuation) from exc
            if place < 0 or place >= len(tables) * self.shards or offset < 0:
                raise InvalidContinuation(continuation)
        prefix = f"index|{state.value}|"
        items: list[TaskState] = []
        while place < len(tables) * self.shards and len(items) < page_size:
            table = tables[place // self.shards]
            pk = f"s{place % self.shards:02d}"
            rows = await self._request("list", partial(table.range, pk, prefix, prefix + "~"))
            take = rows[offset : offset + page_size - len(items)]
            for _, row in take:
                value = row.value
                items.append((value.state if isinstance(value, HistoryListing) else value).model_copy())
            offset += len(take)
            if offset >= len(rows):
                place, offset = place + 1, 0
        more = place < len(tables) * self.shards
        return Page(items, f"{place}:{offset}" if more else None)

    async def count_by_state(self, limit: int) -> StateCounts:
        totals = dict.fromkeys(ProcessState, 0)
        complete = True
        for shard in range(self.shards):
            pk = f"s{shard:02d}"
            rows = await self._request("count", partial(self.live.range, pk, "index|", "index|~"))
            if len(rows) > limit:
                rows, complete = rows[:limit], False
            for key, _ in rows:
                totals[ProcessState(_listed_state(key))] += 1
            tally = (await self._tally(pk, fresh=True))[1]
            for name, n in tally.items():
                totals[ProcessState(name)] += n
        return StateCounts(totals, complete)


class SimBreakerStore:
    """:class:`engine.ports.BreakerStore` on a simulated table, every write conditional on the ETag."""

    def __init__(self, tables: Tables, io: Requests, on_write: Callable[[BreakerRecord], None]) -> None:
        self.table = tables.table(BREAKERS)
        self.io = io
        self.on_write = on_write

    async def load_all(self) -> list[BreakerRecord]:
        await self.io.before("breaker.load-all")
        records = [replace(row.value, etag=row.etag) for _, _, row in self.table.rows("breaker")]
        self.io.after("breaker.load-all")
        return records

    async def load(self, service: str) -> BreakerRecord | None:
        await self.io.before("breaker.load")
        row = self.table.get("breaker", service)
        self.io.after("breaker.load")
        return replace(row.value, etag=row.etag) if row is not None else None

    async def save(self, record: BreakerRecord) -> BreakerRecord:
        await self.io.before("breaker.save")
        operation: Operation = (
            ("create", record.service, replace(record, etag=None), None)
            if record.etag is None
            else ("update", record.service, replace(record, etag=None), record.etag)
        )
        try:
            etag = self.table.one("breaker", operation)
        except TableError as exc:
            raise BreakerConflict(record.service) from exc
        saved = replace(record, etag=etag)
        self.on_write(saved)
        self.io.after("breaker.save")
        return saved
