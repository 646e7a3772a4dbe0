"""The simulated storage account the engine's stores run on: the real adapters
(:class:`adapters.table_store.TableStateStore`, :class:`adapters.breaker_store.TableBreakerStore`) over
SDK-shaped clients (:mod:`simulation.table_client`) of simulated tables (:mod:`simulation.tables`).

The simulation's checks see what is stored, not what the engine believes: every change a request applies
is read here, entity by entity, and told to the :class:`Observer` (the oracle) as the change of a task's
state, a watch entry, a taken-back creation or a breaker's record. The entities are read with the
adapters' own mappings, since those are what the engine reads back.

Parked orders (``TableStateStore.park``): a park deletes an order's live records once its parked copy (the
history table's ``order|<id>``, ``Kind`` parked) is written, and a return inserts them again while that copy
is still there (then replaces it by a ``returned`` marker). Neither is a change of the order's state: a park
is told as :meth:`Observer.parked`, a return as :meth:`Observer.returned` followed by the change the saving
of it carries (from the parked copy's state to the one inserted). The history table's changes keep the
parking invariants, checked on the request that could break them (:meth:`Storage._history_changed`): each
shard's waiting tally counts its parked copies by kind; an order is never in neither place (no live state,
no parked copy, not finished); a parked order whose live records are gone keeps its listing entry and a
calendar entry or a watch entry.
"""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any, Protocol, cast

from azure.data.tables.aio import TableClient

from adapters.breaker_store import BREAKER_PARTITION, TableBreakerStore
from adapters.table_store import (
    CALENDAR,
    PARKED_KINDS,
    WAITING_TALLY,
    TableStateStore,
    _stamp,
    search_table_name,
    shard_of,
)
from adapters.table_store.codec import to_audit, to_state, to_step
from engine.breaker import BreakerRecord
from engine.state import AuditEntry, ProcessState, StepState, StepStatus, TaskRecord, TaskState

from .table_client import Requests, SimTableClient, _entity
from .tables import Change, Row, Table, Tables

LIVE, WATCH, HISTORY = "orders", "orderswatch", "ordershistory"
SEARCH = search_table_name(LIVE)
SHARDS = 8


class Observer(Protocol):
    """Told of every committed change the simulation checks (the oracle)."""

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
        """A watch entry was inserted, replaced or (``complete_by`` None) deleted; ``cause``: the request's
        verb."""
        ...

    def creation_taken_back(self, order_id: str) -> None:
        """A task that never ran was deleted (a submission of an id in the history took it back)."""
        ...

    def breaker_written(self, record: BreakerRecord) -> None:
        """A service's breaker record was written."""
        ...

    def parked(self, order_id: str, state: TaskState) -> None:
        """The order's live records were deleted, its parked copy (``state``) written before: no change of
        its state."""
        ...

    def returned(self, order_id: str, how: str) -> None:
        """The order's live records were inserted again from its parked copy (``how``: what brought it
        back); :meth:`state_saved` follows with the change the return carries."""
        ...

    def violation(self, order_id: str, what: str) -> None:
        """A broken invariant of the stored records (parking)."""
        ...

    def note(self, order_id: str, what: str, *args: Any) -> None:
        """A line of the order's trace (``what`` formatted with ``args`` when shown)."""
        ...


class Places(Protocol):
    """Told when an order's records appear in, or leave, a place (the live table, a parked copy, the
    history, a tombstone) and of every change of the search table (:mod:`simulation.search`)."""

    def created(self, state: TaskState) -> None:
        """The task's live records were written by a submission (not a return)."""
        ...

    def moved(self, order_id: str, now: str | None, before: Row | None) -> None:
        """The order's live state record appeared or went (``now`` "live" or None), or its history row
        changed kind (``now``: the new kind); ``before``: the history's row as it was, if any."""
        ...

    def search_changed(self, pk: str, changes: list[Change]) -> None:
        """A request changed the search table."""
        ...


class Storage:
    """The account: the live, watch and history tables (the breakers in the live table's ``breaker``
    partition, as in Azure), and the reading of their changes for the observer."""

    def __init__(self, observer: Observer, shards: int = SHARDS) -> None:
        self.observer = observer
        self.shards = shards
        self.tables = Tables()
        self.live = self.tables.table(LIVE)
        self.watch = self.tables.table(WATCH)
        self.history = self.tables.table(HISTORY)
        self.search = self.tables.table(SEARCH)
        self.places: Places | None = None  # the search model, when the run has one (simulation.search)
        self.live.observers.append(self._live_changed)
        self.watch.observers.append(self._watch_changed)
        self.history.observers.append(self._history_changed)
        self.search.observers.append(self._search_changed)
        self.calendar: dict[str, set[str]] = {}  # order id -> its calendar entries' keys
        self.parked_copies: dict[tuple[str, str], int] = {}  # (shard, what it waits for) -> parked copies
        self._tails = itertools.count(1)
        self._states: dict[str, tuple[str, TaskState]] = {}  # state row key -> (ETag, state as read)
        # Only its entity mapping is used (to read the history's tasks as the adapter does).
        self._reader = TableStateStore(cast(TableClient, None), cast(TableClient, None), shards)

    def _tail(self) -> str:
        return f"{next(self._tails):08x}"

    def state_store(self, io: Requests, marks: bool = True, search: bool = False) -> TableStateStore:
        """One process's store (its own cache of the history's tallies, as the adapter has); ``marks``: see
        :class:`adapters.table_store.TableStateStore`; ``search``: with the search table, as the app's
        (without it, orders are written with no search entries)."""
        return TableStateStore(**self.store_arguments(io, marks, search))

    def store_arguments(self, io: Requests, marks: bool = True, search: bool = False) -> dict[str, Any]:
        """What a process's ``TableStateStore`` is built with, this release's or an earlier one's
        (``Simulation(beside=...)``): its clients of the simulated tables, and the rest."""
        return {
            "table": cast(TableClient, SimTableClient(self.live, io, "live")),
            "watch": cast(TableClient, SimTableClient(self.watch, io, "watch", answers_refusals=True)),
            "shards": self.shards,
            "history": cast(TableClient, SimTableClient(self.history, io, "history")),
            "transact": lambda table, operations: table.submit_transaction(operations),
            "unique": self._tail,
            "marks": marks,
            "search": cast(TableClient, SimTableClient(self.search, io, "search")) if search else None,
        }

    def breaker_store(self, io: Requests) -> TableBreakerStore:
        """The breakers' store (its requests are named ``breaker.<operation>``)."""
        return TableBreakerStore(self.breaker_client(io))

    def breaker_client(self, io: Requests) -> TableClient:
        """The client the breakers' store is built on (this release's or an earlier one's)."""
        return cast(TableClient, SimTableClient(self.live, io, "breaker"))

    def pk(self, order_id: str) -> str:
        """The partition of an order's records."""
        return shard_of(order_id, self.shards)

    # ---- reading entities -------------------------------------------------------------------------------
    def state(self, row: Row) -> TaskState:
        """A state record (or a listing entry, or a history's task) as the adapter reads it; remembered by
        ETag, since every save reads the one it replaces."""
        key = f"{row.props['PartitionKey']}|{row.props['RowKey']}"
        found = self._states.get(key)
        if found is not None and found[0] == row.etag:
            return found[1]
        state = to_state(row.props)
        self._states[key] = (row.etag, state)
        return state

    @staticmethod
    def step(row: Row) -> StepState:
        """A step record as the adapter reads it."""
        return to_step(row.props)

    def archived(self, row: Row) -> TaskRecord:
        """A task of the history as the adapter reads it."""
        return self._reader.codec.from_archive(_entity(row))

    @staticmethod
    def audit_entry(row: Row) -> AuditEntry:
        """An audit entry as the adapter reads it."""
        return to_audit(row.props)

    # ---- what changed -------------------------------------------------------------------------------------
    def _live_changed(self, table: Table, pk: str, changes: list[Change]) -> None:
        if pk == BREAKER_PARTITION:
            for change in changes:
                if change.after is not None:
                    self.observer.breaker_written(TableBreakerStore._record(_entity(change.after)))
            return
        state: Change | None = None
        steps: list[Change] = []
        audit: list[Change] = []
        for change in changes:
            key = change.row_key
            if key.startswith("order|"):
                if key.endswith("|state"):
                    state = change
                elif change.after is not None and change.after.props.get("Kind") == "step":
                    steps.append(change)
            elif key.startswith("audit|") and change.before is None and change.after is not None:
                audit.append(change)
        if state is None:
            return
        observer = self.observer
        if state.after is None:
            assert state.before is not None
            self._states.pop(f"{pk}|{state.row_key}", None)
            gone = self.state(state.before)
            if self.places is not None:
                self.places.moved(gone.order_id, None, None)
            if gone.process_state.finished:
                # The move to the history writes it there before it deletes the live records (or finds it
                # purged since an earlier attempt of the move): a reader never finds it nowhere.
                kept = self.history.get(pk, f"order|{gone.order_id}")
                if kept is None or kept.props.get("Kind") not in ("archive", "tombstone"):
                    observer.violation(
                        gone.order_id,
                        f"a finished order in neither place: its live records were deleted "
                        f"({gone.process_state.value}) while the history does not hold it",
                    )
                return
            if not gone.process_state.finished:
                copy = self.parked_copy(pk, gone.order_id)
                if copy is not None:
                    self._parked(pk, gone, copy)
                    return
                # A creation taken back: Pending and never dispatched, or claimed in its insert and not
                # saved since (Scheduler.claim_new).
                never_dispatched = gone.process_state is ProcessState.PENDING and not gone.attempt
                claimed_as_written = gone.updated_at == gone.created_at and gone.attempt <= 1
                if not (never_dispatched or claimed_as_written):
                    observer.violation(
                        gone.order_id,
                        f"an order in neither place: its live records were deleted "
                        f"({gone.process_state.value}, attempt {gone.attempt}), unfinished, with no parked "
                        "copy",
                    )
                observer.creation_taken_back(gone.order_id)
            return
        if state.before is not None and len(changes) == 1 and _only_marked(state.before, state.after):
            # A park's mark (adapters.table_store.parking.Parking._mark_parking): no change of the order.
            self.observer.note(
                str(state.after.props.get("OrderID")), "marked for parking ({})", state.after.etag
            )
            return
        after = self.state(state.after)
        if state.before is None:
            copy = self.parked_copy(pk, after.order_id)
            if self.places is not None:
                self.places.moved(after.order_id, "live", None)
                if copy is None:
                    self.places.created(after)
            if copy is None:
                # A task written claimed (Scheduler.claim_new) carries its claim's steps and audit entries.
                observer.state_saved(
                    after.order_id,
                    None,
                    after,
                    [self.step(c.after) for c in steps if c.after is not None],
                    [self.audit_entry(c.after) for c in audit if c.after is not None],
                )
                return
            # Brought back from its parked copy: the change is from the copy's state to the one inserted,
            # the audit entries copied back from the history not among the save's own.
            before = self.state(copy)
            new = [
                self.audit_entry(c.after)
                for c in audit
                if c.after is not None and self.history.get(pk, c.row_key) is None
            ]
            steps_now = [self.step(c.after) for c in steps if c.after is not None]
            observer.returned(after.order_id, _how(before, after, steps_now, new))
            observer.state_saved(after.order_id, before, after, steps_now, new)
            return
        observer.state_saved(
            after.order_id,
            self.state(state.before),
            after,
            [self.step(c.after) for c in steps if c.after is not None],
            [self.audit_entry(c.after) for c in audit if c.after is not None],
        )

    def _watch_changed(self, table: Table, pk: str, changes: list[Change]) -> None:
        for change in changes:
            after = change.after
            complete_by: Any = after.props.get("CompleteBy") if after is not None else None
            created = change.before is None and after is not None
            self.observer.watch_written(change.row_key, complete_by, created, change.verb)
            if after is None:
                self._remembered(change.row_key, "its watch entry was deleted")

    def _search_changed(self, table: Table, pk: str, changes: list[Change]) -> None:
        if self.places is not None:
            self.places.search_changed(pk, changes)

    # ---- parked orders ------------------------------------------------------------------------------
    def parked_copy(self, pk: str, order_id: str) -> Row | None:
        """The order's parked copy in the history table (None: none, or another kind of entity there)."""
        row = self.history.get(pk, f"order|{order_id}")
        return row if row is not None and row.props.get("Kind") == "parked" else None

    def is_live(self, order_id: str) -> bool:
        """Whether the order has its live state record."""
        return self.live.get(self.pk(order_id), f"order|{order_id}|state") is not None

    def _parked(self, pk: str, state: TaskState, copy: Row) -> None:
        """The order's live records were deleted, its parked copy there: it keeps its listing entry, and its
        deadline or its timer (a calendar entry, or its watch entry still there)."""
        order_id = state.order_id
        self.observer.parked(order_id, self.state(copy))
        if self.history.get(pk, str(copy.props.get("IndexKey"))) is None:
            self.observer.violation(order_id, "parked without its listing entry")
        self._remembered(order_id, "its live records were deleted")

    def _filed(self, order_id: str, key: str) -> None:
        """A calendar entry of a parked order is no later than its wait ends (its timer's time, its
        approval's deadline): the calendar brings it back before it is due."""
        copy = self.parked_copy(self.pk(order_id), order_id)
        if copy is None:
            return
        parked = self.state(copy)
        due = parked.wait_until or parked.complete_by
        if due is not None and key.split("|", 1)[0] > _stamp(due):
            self.observer.violation(
                order_id,
                f"a parked order brought back late: its calendar entry {key} is after its wait ends ({due})",
            )

    def _remembered(self, order_id: str, what: str) -> None:
        """A parked order whose live records are gone is never forgotten: it has a calendar entry or a watch
        entry (checked when the live records, a calendar entry or the watch entry go)."""
        pk = self.pk(order_id)
        if self.parked_copy(pk, order_id) is None or self.is_live(order_id):
            return
        if self.calendar.get(order_id) or self.watch.get(pk, order_id) is not None:
            return
        self.observer.violation(
            order_id, f"a parked order forgotten: {what}, and it has no calendar entry and no watch entry"
        )

    def _history_changed(self, table: Table, pk: str, changes: list[Change]) -> None:
        if pk == CALENDAR:
            for change in changes:
                if change.row_key == "cursor":
                    continue
                order_id = change.row_key.split("|", 1)[1]
                entries = self.calendar.setdefault(order_id, set())
                if change.after is None:
                    entries.discard(change.row_key)
                    self._remembered(order_id, "its calendar entry was deleted")
                else:
                    entries.add(change.row_key)
                    self._filed(order_id, change.row_key)
            return
        counted = False
        for change in changes:
            key = change.row_key
            if key == WAITING_TALLY:
                counted = True
                continue
            if not key.startswith("order|") or key.count("|") != 1:
                continue
            was, now = (r.props.get("Kind") if r is not None else None for r in (change.before, change.after))
            for row, kind, sign in ((change.before, was, -1), (change.after, now, 1)):
                if kind == "parked" and row is not None:
                    slot = (pk, str(row.props.get("WaitingFor")))
                    self.parked_copies[slot] = self.parked_copies.get(slot, 0) + sign
                    counted = True
            order_id = key.removeprefix("order|")
            self.observer.note(
                order_id, "history {} {} -> {} ({})", change.verb, was, now, _etag(change.after)
            )
            if self.places is not None and was != now:
                self.places.moved(order_id, str(now) if now is not None else None, change.before)
            if was == "parked" and now not in ("parked", "archive") and not self.is_live(order_id):
                self.observer.violation(
                    order_id,
                    f"an order in neither place: its parked copy became {now or 'nothing'}, and it has no "
                    f"live records",
                )
        if counted:
            self.check_tally(pk)

    def waiting_tally(self, pk: str) -> dict[str, int]:
        """The shard's waiting tally as stored (zeros: none written)."""
        row = self.history.get(pk, WAITING_TALLY)
        return {kind: int(row.props.get(kind, 0)) if row is not None else 0 for kind in PARKED_KINDS}

    def check_tally(self, pk: str) -> None:
        """The shard's waiting tally equals its parked copies, by what they wait for."""
        tally = self.waiting_tally(pk)
        copies = {kind: self.parked_copies.get((pk, kind), 0) for kind in PARKED_KINDS}
        others = {k: n for (p, k), n in self.parked_copies.items() if p == pk and k not in PARKED_KINDS and n}
        if tally != copies or others:
            self.observer.violation(
                "", f"shard {pk}: the waiting tally says {tally}, the parked copies are {copies | others}"
            )


def _only_marked(before: Row, after: Row) -> bool:
    """Whether a state record's change is a park's mark alone (its ``Parking`` property)."""
    mark = "Parking"
    return after.props.get(mark) != before.props.get(mark) and {
        k: v for k, v in before.props.items() if k != mark
    } == {k: v for k, v in after.props.items() if k != mark}


def _etag(row: Row | None) -> str:
    return row.etag if row is not None else "-"


def _how(before: TaskState, after: TaskState, steps: list[StepState], audit: list[AuditEntry]) -> str:
    """What brought a parked order back: an action (its audit entry), a timer's wake-up, the Supervisor
    (a deadline applied, or due soon), or the calendar (nothing changed)."""
    acts = sorted({e.action for e in audit if e.action not in ("error", "left out")})
    if acts:
        return "by " + ", ".join(acts)
    if before.waiting_for == "timer" and any(
        s.index == before.current_step and s.status is StepStatus.COMPLETED for s in steps
    ):
        return "by a wake-up"
    if after.process_state is not before.process_state:
        return "by the Supervisor's deadline"
    return "unchanged (the calendar, or the Supervisor)"
