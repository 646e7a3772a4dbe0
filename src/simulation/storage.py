"""The simulated storage account the engine's stores run on: the real adapters
(:class:`adapters.table_store.TableStateStore`, :class:`adapters.breaker_store.TableBreakerStore`) over
SDK-shaped clients (:mod:`simulation.table_client`) of simulated tables (:mod:`simulation.tables`).

The simulation's checks see what is stored, not what the engine believes: every change a request applies
is read here, entity by entity, and told to the :class:`Observer` (the oracle) as the change of a task's
state, a watch entry, a taken-back creation or a breaker's record. The entities are read with the
adapters' own mappings, since those are what the engine reads back.
"""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any, Protocol, cast

from azure.data.tables.aio import TableClient

from adapters.breaker_store import BREAKER_PARTITION, TableBreakerStore
from adapters.table_store import TableStateStore, shard_of
from engine.breaker import BreakerRecord
from engine.state import AuditEntry, StepState, TaskRecord, TaskState

from .table_client import Requests, SimTableClient, _entity
from .tables import Change, Row, Table, Tables

LIVE, WATCH, HISTORY = "orders", "orderswatch", "ordershistory"
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
        self.live.observers.append(self._live_changed)
        self.watch.observers.append(self._watch_changed)
        self._tails = itertools.count(1)
        self._states: dict[str, tuple[str, TaskState]] = {}  # state row key -> (ETag, state as read)
        # Only its entity mapping is used (to read the history's tasks as the adapter does).
        self._reader = TableStateStore(cast(TableClient, None), cast(TableClient, None), shards)

    def _tail(self) -> str:
        return f"{next(self._tails):08x}"

    def state_store(self, io: Requests) -> TableStateStore:
        """One process's store (its own cache of the history's tallies, as the adapter has)."""
        live, watch, history = (
            cast(TableClient, SimTableClient(self.live, io, "live")),
            cast(TableClient, SimTableClient(self.watch, io, "watch", answers_refusals=True)),
            cast(TableClient, SimTableClient(self.history, io, "history")),
        )
        return TableStateStore(
            live,
            watch,
            self.shards,
            history=history,
            transact=lambda table, operations: table.submit_transaction(operations),
            unique=self._tail,
        )

    def breaker_store(self, io: Requests) -> TableBreakerStore:
        """The breakers' store (its requests are named ``breaker.<operation>``)."""
        return TableBreakerStore(cast(TableClient, SimTableClient(self.live, io, "breaker")))

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
        state = TableStateStore._to_state(row.props)
        self._states[key] = (row.etag, state)
        return state

    @staticmethod
    def step(row: Row) -> StepState:
        """A step record as the adapter reads it."""
        return TableStateStore._to_step(row.props)

    def archived(self, row: Row) -> TaskRecord:
        """A task of the history as the adapter reads it."""
        return self._reader._from_archive(_entity(row))

    @staticmethod
    def audit_entry(row: Row) -> AuditEntry:
        """An audit entry as the adapter reads it."""
        return TableStateStore._to_audit(row.props)

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
            if not gone.process_state.finished:
                observer.creation_taken_back(gone.order_id)
            return
        after = self.state(state.after)
        if state.before is None:
            observer.state_saved(after.order_id, None, after, [], [])
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
