"""The state store on Azure Table Storage (Azurite locally).

Three tables:

- The state table holds the live records. PartitionKey is a shard (``s00``..``s{N-1}``) derived from the
  OrderID, so a task's records share a partition and change together in one entity-group transaction:
  ``order|<id>|state`` - the task state record (``OrderID``, ``LockedBy``, ``CompleteBy``,
  ``ProcessState``, ``FailureCount``, ...); ``order|<id>|input`` - the submitted body;
  ``order|<id>|step|NN`` - one record per step; ``audit|<id>|<time>|<n>`` - one audit entry per
  operator action or automatic Error, written in the transaction that makes the change (outside the
  ``order|<id>|`` range, so loading a task never reads its history); ``index|<ProcessState>|<time>|<id>|``
  - the task's entry in the listing by state, a copy of the state record written in every transaction
  that writes the state record (whose ``IndexKey`` names it; a change of state deletes the old entry and
  writes the new one). Listing or counting one state reads that state's entries only, and an entry and
  its task can never disagree.
- The watch table (``<state table>watch``): one small entry per in-flight task, keyed by shard and
  OrderID, holding a CompleteBy that is never later than the task's own. The Supervisor's sweep reads
  only this table, one range query per shard, so its cost follows the in-flight work however much
  completed history there is (even on an emulator that scans a whole table per query).
- The history table (``<state table>history``): finished tasks (Processed, Compensated), moved there by
  the Supervisor when it drops their watch entry, kept for the retention period, then purged by the
  clean-up. Same shards: ``order|<id>`` - the whole task in one entity (state, steps, input: one point
  read); ``index|<ProcessState>|<finished>|<id>|`` - its listing entry, keyed by the time it finished, so
  the clean-up finds what expired with one range query; ``audit|<id>|...`` - its audit entries;
  ``count`` - how many finished tasks of each state the shard holds, changed in the transaction that adds
  or purges a task (by the Supervisor and the clean-up, never on an order's own path). A purged task
  leaves a tombstone (``order|<id>``, a few properties) and a ``gone|<until>|<id>|`` entry; both go once
  ``<until>`` passes, and until then the id is refused. It also holds the parked tasks: a task waiting
  long for a timer or an approval, moved there by the Supervisor (:meth:`TableStateStore.park`) under the
  same ``order|<id>`` key (``Kind`` parked), with its listing entry ``index|Waiting|<kind>|...``, its audit
  entries, each shard's waiting tally ``count|waiting``, and the calendar (partition ``calendar``:
  ``<CompleteBy>|<id>`` per parked task, and the ``cursor`` saying when it is read next). Any save of a
  parked task brings it back to the live records (:meth:`TableStateStore._unpark`).

The live table holds live work only (in flight, in Error, finished in the last sweep interval), so what
reads it costs in proportion to live work on Azure and on Azurite alike (Azurite runs every query as a
scan of the whole table); the history is read by key (one order's GET, the counts, the submission's
check), and by range only for a listing of a finished state and by the clean-up.

The watch entry is written before the task first becomes in flight (submission, resubmission) and is
otherwise maintained by the Supervisor: an entry whose time has come but whose task is still running
is moved to the task's current CompleteBy, and one whose task has finished is removed, after the task is
moved to the history. Because every transition sets CompleteBy later than the previous one, the entry
stays a lower bound, and a step transition costs at most two table operations: the load (one query) and
the save (one transaction); the Scheduler skips the load when its message carries the task as saved (see
``engine.saved_task``).

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
(:meth:`TableStateStore.take_back`). A
submission whose transaction is refused because a live task without a mark has the id (written before
marks were) deletes its mark again. Such a task is the one gap: a submission of its id that marks it in
the instant the task moves to the history may be written again, so an upgrade from a version without
marks is safest with the live table drained (every order finished and moved).

The store uses the asynchronous clients (``azure.data.tables.aio``, on azure-core's aiohttp transport), so
a slow table service holds no thread. Like every aio client, they belong to the event loop they are
first used on.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import re
import threading
import uuid
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from azure.core import MatchConditions
from azure.core.async_paging import AsyncPageIterator
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import TableEntity, TableTransactionError, UpdateMode
from azure.data.tables.aio import TableClient, TableServiceClient
from pydantic import ValidationError

from adapters.table_batch import submit_transaction
from engine import formats, telemetry
from engine.deadletters import DeadLetterAction
from engine.errors import ConcurrencyError, InvalidContinuation, NotUnderstood
from engine.ports import CreateOutcome, ExpiredEntry, Page, PurgeReport, StateCounts
from engine.search import AT_A_STEP, SearchQuery, prefixes, query_prefix
from engine.state import AuditEntry, ProcessState, StepState, TaskRecord, TaskState

log = logging.getLogger("adapters.table_store")

# The task-state rows of one shard (@pk), for queries over tasks rather than one task's key range.
_STATE_ROWS = "PartitionKey eq @pk and RowKey ge 'order|' and RowKey lt 'order}' and Kind eq 'state'"
_RANGE = "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi"
_RANGE_WAITING = _RANGE + " and WaitingFor eq @kind"
_BODY_CHUNK = 30_000  # characters; a string property holds 64 KiB of UTF-16
_STATE_FIELDS = {name: field.alias or name for name, field in TaskState.model_fields.items()}
_STEP_FIELDS = {name: field.alias or name for name, field in StepState.model_fields.items()}
_AUDIT_FIELDS = [field.alias or name for name, field in AuditEntry.model_fields.items()]
_FORMAT = formats.FORMAT_PROPERTY
# The properties this release writes on each of a task's live records. Any other a record holds was written
# by a later release: kept as it is (TaskRecord.kept) and written back with the record, never dropped.
_KEYS = {"PartitionKey", "RowKey", "Kind", _FORMAT}
# (Parking: a park under way, which the next save clears; AuditedAt: the input's touch by an audit entry.)
_STATE_PROPERTIES = frozenset({*_KEYS, *_STATE_FIELDS.values(), "Watched", "IndexKey", "Parking"})
_STEP_PROPERTIES = frozenset({*_KEYS, *_STEP_FIELDS.values(), "OrderID"})
_INPUT_PROPERTIES = frozenset({*_KEYS, "OrderID", "BodyHash", "BodyChunks", "AuditedAt"})
_LIVE_PROPERTIES = {"state": _STATE_PROPERTIES, "input": _INPUT_PROPERTIES, "step": _STEP_PROPERTIES}
_WHOLE_PROPERTIES = frozenset(
    {*_STATE_PROPERTIES, "BodyHash", "Audited", "StepsChunks", "BodyChunks", "Claimed"}
    - {"Watched", "Parking"}
)
_CHUNK = re.compile(r"(Body|Steps)\d+$")
# A task in one entity (parked, or in the history) carries what a later release stored on its input and
# step records under these prefixes, so bringing it back writes them again: a save drops no property.
_KEPT_INPUT, _KEPT_STEP = "KeptInput_", re.compile(r"KeptStep(\d+)_(.+)$")
_DEAD_LETTER_FIELDS = [field.alias or name for name, field in DeadLetterAction.model_fields.items()]
# The partition of dead-letter actions that name no known task (outside the s00.. shards).
DEAD_LETTER_PARTITION = "deadletters"
# The deployment's formats switch (engine.formats): one entity of the state table, outside the shards.
SWITCH_PARTITION, SWITCH_ROW = "release", "formats"
# Beside it, each instance's word that it runs (engine.formats.Instance): ``instance|<instance id>``.
INSTANCE_ROW = "instance|"
# Entities per entity-group transaction (Azure's limit).
_BATCH = 100
# The states the history holds.
FINISHED = tuple(state for state in ProcessState if state.finished)
# A shard's tally of finished tasks in the history.
_TALLY = "count"
# The kinds of the history table's one-entity tasks: a finished task, and a parked one.
_WHOLE = ("archive", "parked")
# What a parked task leaves under its key once it is back in the live records: a marker saying "read the
# live records again" (a reader that missed them just before they were written finds them then), written
# over when the task moves to the history or is parked again.
_RETURNED = "returned"
# Each shard's tally of the parked tasks, by what they wait for (a row of its own: parks and their returns
# never contend with the history's tally).
WAITING_TALLY = _WAITING_TALLY = "count|waiting"
PARKED_KINDS = ("timer", "approval")
# The calendar of parked tasks: one partition of the history table, ``<time the wait ends>|<id>`` per task,
# and its cursor (when the calendar is to be read next).
CALENDAR = "calendar"
_CURSOR = "cursor"
_RACES = 5  # attempts at a write that loses a race on a shared row (a tally) before giving up for now
# How far another instance's clock may run ahead of a submitter's: a submission whose task was written
# later than this before its entry's CompleteBy may have had that entry swept (see TableStateStore.create).
_CLOCK_SKEW_SECONDS = 0.1
_IF_MATCH = {"match_condition": MatchConditions.IfNotModified}

# How an entity-group transaction is sent: ``adapters.table_batch.submit_transaction`` (the SDK's request at a
# fraction of its CPU) unless a store is given another with the same contract, such as
# ``lambda table, operations: table.submit_transaction(operations)`` (the SDK's own, or a simulated client's).
Transact = Callable[[TableClient, list[Any]], Awaitable[list[Mapping[str, Any]]]]


def _random_tail() -> str:
    return uuid.uuid4().hex[:8]


class OperationCounter:
    """Counts requests to the table service (a transaction or a query page is one), and, per table, the
    requests and the entities they read or wrote (what the per-partition scalability target counts)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self.requests: dict[str, int] = {}
        self.entities: dict[str, int] = {}

    def add(self, n: int = 1, *, table: str = "", entities: int = 0) -> None:
        """Count ``n`` requests to ``table`` that touched ``entities`` entities."""
        with self._lock:
            self.count += n
            self.requests[table] = self.requests.get(table, 0) + n
            self.entities[table] = self.entities.get(table, 0) + entities


# Names the operation counter files requests under.
STATE = "state"
WATCH = "watch"
HISTORY = "history"
SEARCH = "search"


def env_settings_in_use(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment names a proxy or a ``.netrc`` file exists.

    azure-core's aiohttp transport, left to its default, looks both up again on every request, each time
    in a thread of the event loop's executor: two thread hand-offs per table call. Pass the result as
    ``use_env_settings`` so that the lookups happen only where there is something to find.
    """
    env = os.environ if environ is None else environ
    if any(name.lower().endswith("_proxy") and value for name, value in env.items()):
        return True
    netrc = env.get("NETRC") or str(Path(env.get("HOME") or Path.home()) / ".netrc")
    return Path(netrc).is_file()


def watch_table_name(table_name: str) -> str:
    """The watch table that goes with a state table."""
    return f"{table_name}watch"


def search_table_name(table_name: str) -> str:
    """The table of search entries (``engine.search``) that goes with a state table."""
    return f"{table_name}search"


def history_table_name(table_name: str) -> str:
    """The history table (finished tasks, for the retention period) that goes with a state table."""
    return f"{table_name}history"


def shard_of(order_id: str, shards: int) -> str:
    """The partition a task lives in: stable for an id, spread evenly."""
    return f"s{zlib.crc32(order_id.encode()) % shards:02d}"


def _stamp(at: datetime) -> str:
    """A time as a fixed-width string that sorts as the time does."""
    return at.astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def _state_key(order_id: str) -> str:
    return f"order|{order_id}|state"


def _input_key(order_id: str) -> str:
    return f"order|{order_id}|input"


def _step_prefix(order_id: str) -> str:
    return f"order|{order_id}|step|"


def _step_key(order_id: str, index: int) -> str:
    return f"{_step_prefix(order_id)}{index:02d}"


def _audit_prefix(order_id: str) -> str:
    return f"audit|{order_id}|"


def _listing_class(state: ProcessState, waiting_for: str | None) -> str:
    """What a listing entry's key is grouped by: the state, and for Waiting what the task waits for, so
    the Waiting tasks of one kind are one key range of their own (listed and counted without the others)."""
    if state is ProcessState.WAITING and waiting_for:
        return f"{state.value}|{waiting_for}"
    return state.value


def listing_key(state: ProcessState, since: datetime, order_id: str, waiting_for: str | None = None) -> str:
    """A task's entry in the listing of ``state``, which it entered at ``since``: a shard's entries of one
    state are one key range, oldest first (Waiting: one range per kind of wait, within the state's). Like
    every key that names a task, it holds ``|<id>|``."""
    return f"index|{_listing_class(state, waiting_for)}|{_stamp(since)}|{order_id}|"


def _listing_range(
    state: ProcessState, before: datetime | None = None, waiting_for: str | None = None
) -> tuple[str, str]:
    prefix = f"index|{_listing_class(state, waiting_for)}|"
    return prefix, prefix + (_stamp(before) if before is not None else "~")


def _listed_state(key: str) -> str:
    return key.split("|", 2)[1]


def _listed_wait(key: str) -> str | None:
    """What a Waiting task's listing entry says it waits for (None for another state's entry)."""
    parts = key.split("|", 3)
    return parts[2] if parts[1] == ProcessState.WAITING.value and len(parts) > 3 else None


def _archive_key(order_id: str) -> str:
    return f"order|{order_id}"


def _gone_key(until: datetime, order_id: str) -> str:
    return f"gone|{_stamp(until)}|{order_id}|"


def _leftover(found: Mapping[str, Any], whole: Mapping[str, Any]) -> bool:
    """Whether what the history table holds under a task's key is what the task may be written over: a
    stale parked copy of the same task, or the marker of its return to the live records."""
    kind = found.get("Kind")
    return kind == _RETURNED or (kind == "parked" and found.get("CreatedAt") == whole["CreatedAt"])


def _tally_names(row: str) -> tuple[str, ...]:
    return PARKED_KINDS if row == _WAITING_TALLY else tuple(s.value for s in FINISHED)


def _chunks(text: str) -> list[str]:
    return [text[i : i + _BODY_CHUNK] for i in range(0, len(text), _BODY_CHUNK)] or [""]


def _joined(entity: Mapping[str, Any], prefix: str) -> str:
    return "".join(entity.get(f"{prefix}{i}", "") for i in range(int(entity.get(f"{prefix}Chunks", 0))))


def _etag(entity: Any) -> str:
    return str(entity.metadata.get("etag") or "")


def _conflict(exc: TableTransactionError) -> bool:
    """The transaction was refused because an entity changed, appeared or went meanwhile."""
    return exc.status_code in (404, 409, 412)


@dataclass(frozen=True)
class IndexReport:
    """What one page of :meth:`TableStateStore.index_page` did."""

    read: int = 0  # task records read
    indexed: int = 0  # live tasks given their listing entry
    archived: int = 0  # finished tasks moved to the history
    skipped: int = 0  # changed or busy meanwhile: indexed by their own next save, or by a run again
    continuation: str | None = None  # where the shard goes on; None: the shard is done


class TableStateStore:
    """:class:`engine.ports.StateStore` on the live state table, the watch table and the history table.

    ``history`` may be left out only by code that uses the entity mapping or the live records alone (it
    is then not checked at submission, and nothing can be archived or purged).
    """

    def __init__(
        self,
        table: TableClient,
        watch: TableClient,
        shards: int = 8,
        counter: OperationCounter | None = None,
        history: TableClient | None = None,
        transact: Transact | None = None,
        unique: Callable[[], str] = _random_tail,
        search: TableClient | None = None,
        marks: bool = True,
    ) -> None:
        """``unique`` gives the eight characters that keep two audit entries of one microsecond apart
        (random; the simulation's come from its seed). ``marks``: a submission marks its id in the history
        (False: it reads the history instead, as before marks; the simulation's regression seeds run so)."""
        if not 1 <= shards <= 100:
            raise ValueError("shards must be between 1 and 100")
        self.table = table
        self.watch = watch
        self.history = history
        # Without it, orders are written with no search entries, and searches find nothing.
        self.search = search
        self.shards = shards
        self.counter = counter or OperationCounter()
        self._transaction = transact
        self._unique = unique
        self.marks = marks
        # The record format it writes (engine.formats): the runtime's, kept current by the switch.
        self.formats = formats.Formats()
        # Each shard's tally as last read or written here (ETag, counts): a stale one costs one refused
        # transaction and a read.
        self._tallies: dict[tuple[str, str], tuple[str, dict[str, int]]] = {}

    @classmethod
    async def from_service(
        cls, service: TableServiceClient, table_name: str, shards: int = 8
    ) -> TableStateStore:
        """A store on ``table_name`` and its watch, history and search tables, creating them if missing
        (Bicep does in Azure)."""
        names = (
            table_name,
            watch_table_name(table_name),
            history_table_name(table_name),
            search_table_name(table_name),
        )
        for name in names:
            with contextlib.suppress(ResourceExistsError):
                await service.create_table(name)
        table, watch, history, search = (service.get_table_client(name) for name in names)
        return cls(table, watch, shards, history=history, search=search)

    # ---- the formats switch (engine.formats) ------------------------------------------------------
    async def read_switch(self) -> formats.Switch | None:
        try:
            entity = await self.table.get_entity(SWITCH_PARTITION, SWITCH_ROW)
        except ResourceNotFoundError:
            return None
        self.counter.add(table=STATE, entities=1)
        writes = entity.get("Writes")
        if not isinstance(writes, int) or isinstance(writes, bool):
            writes = formats.BEFORE_SWITCH  # unreadable: the safe side, what the release before reads
        return formats.Switch(writes, entity.get("FlipsAt"), _etag(entity))

    async def write_switch(self, switch: formats.Switch) -> formats.Switch | None:
        entity = {"PartitionKey": SWITCH_PARTITION, "RowKey": SWITCH_ROW, "Writes": switch.writes}
        if switch.flips_at is not None:
            entity["FlipsAt"] = switch.flips_at
        self.counter.add(table=STATE, entities=1)
        try:
            if switch.etag is None:
                written = await self.table.create_entity(entity)
            else:
                written = await self.table.update_entity(
                    entity, mode=UpdateMode.REPLACE, etag=switch.etag, **_IF_MATCH
                )
        except (ResourceExistsError, ResourceModifiedError):
            return None
        return formats.Switch(switch.writes, switch.flips_at, written.get("etag"))

    async def announce(self, instance: formats.Instance) -> None:
        entity = {
            "PartitionKey": SWITCH_PARTITION,
            "RowKey": f"{INSTANCE_ROW}{instance.name}",
            "Release": instance.release,
            "Reads": instance.reads,
            "SeenAt": instance.seen_at,
        }
        self.counter.add(table=STATE, entities=1)
        await self.table.upsert_entity(entity, mode=UpdateMode.REPLACE)

    async def instances(self) -> list[formats.Instance]:
        found = []
        async for e in self.table.query_entities(
            "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
            parameters={"pk": SWITCH_PARTITION, "lo": INSTANCE_ROW, "hi": INSTANCE_ROW[:-1] + "}"},
        ):
            self.counter.add(table=STATE, entities=1)
            reads, seen_at = e.get("Reads"), e.get("SeenAt")
            if isinstance(reads, int) and isinstance(seen_at, datetime):  # else not an instance's word
                name = e["RowKey"].removeprefix(INSTANCE_ROW)
                found.append(formats.Instance(name, str(e.get("Release", "")), reads, seen_at))
        return found

    async def forget(self, instance: formats.Instance) -> None:
        self.counter.add(table=STATE, entities=1)
        with contextlib.suppress(ResourceNotFoundError):
            await self.table.delete_entity(SWITCH_PARTITION, f"{INSTANCE_ROW}{instance.name}")

    async def holds_tasks(self) -> bool:
        for table in (self.table, self.history):
            if table is None:
                continue
            pages = table.query_entities("PartitionKey ge 's' and PartitionKey lt 't'", results_per_page=1)
            self.counter.add(table=STATE if table is self.table else HISTORY, entities=1)
            async for _ in pages:
                return True
        return False

    async def _transact(self, table: TableClient, operations: list[Any]) -> list[Mapping[str, Any]]:
        # The module's submit_transaction is looked up at each call (tests wrap it to make a request fail).
        return await (self._transaction or submit_transaction)(table, operations)

    async def close(self) -> None:
        """Close the table clients (and their connections)."""
        await self.table.close()
        await self.watch.close()
        if self.history is not None:
            await self.history.close()
        if self.search is not None:
            await self.search.close()

    def _history(self) -> TableClient:
        if self.history is None:
            raise RuntimeError("this store has no history table")
        return self.history

    # ---- entity mapping --------------------------------------------------------------------------
    def _pk(self, order_id: str) -> str:
        return shard_of(order_id, self.shards)

    def _state_properties(self, state: TaskState) -> dict[str, Any]:
        entity: dict[str, Any] = {"PartitionKey": self._pk(state.order_id), _FORMAT: self.formats.writes}
        for name, alias in _STATE_FIELDS.items():
            value = getattr(state, name)
            if value is None:
                continue  # Table storage has no nulls: a missing property reads back as None
            if name == "search":
                value = json.dumps(value, separators=(",", ":"), sort_keys=True)
            entity[alias] = value.value if hasattr(value, "value") else value
        return entity

    def _state_entity(self, record: TaskRecord) -> dict[str, Any]:
        state = record.state
        entity = {**record.kept.get(_state_key(state.order_id), {}), **self._state_properties(state)}
        entity["RowKey"] = _state_key(state.order_id)
        entity["Kind"] = "state"
        entity["Watched"] = state.process_state.in_flight and state.complete_by is not None
        return entity

    def _listing_key(self, record: TaskRecord) -> str:
        """The task's listing entry for its state now: the one it has while its state stays the same."""
        state = record.state
        listed = record.listed
        if listed is not None and listed.startswith(
            _listing_range(state.process_state, None, state.waiting_for)[0]
        ):
            return listed
        return listing_key(state.process_state, state.updated_at, state.order_id, state.waiting_for)

    def _listing_operations(self, record: TaskRecord, state_entity: dict[str, Any]) -> list[Any]:
        """Set the state record's ``IndexKey`` and return the operations that keep the listing with it: the
        entry (a copy of the state record) written, and the previous state's entry deleted."""
        entry = self._listing_entry(record, state_entity)
        key = entry["RowKey"]
        operations: list[Any] = [("upsert", entry, {"mode": UpdateMode.REPLACE})]
        if record.listed is not None and record.listed != key:
            operations.append(
                ("delete", {"PartitionKey": state_entity["PartitionKey"], "RowKey": record.listed})
            )
        return operations

    def _listing_entry(self, record: TaskRecord, state_entity: dict[str, Any]) -> dict[str, Any]:
        """Set the state record's ``IndexKey`` and return its listing entry (a copy of the state record)."""
        key = self._listing_key(record)
        state_entity["IndexKey"] = key
        entry = {**state_entity, "RowKey": key, "Kind": "index"}
        del entry["Watched"]
        return entry

    def _step_entity(self, order_id: str, step: StepState, kept: Mapping[str, Any] = {}) -> dict[str, Any]:
        entity: dict[str, Any] = {
            **kept,
            "PartitionKey": self._pk(order_id),
            "RowKey": _step_key(order_id, step.index),
            "Kind": "step",
            _FORMAT: self.formats.writes,
            "OrderID": order_id,
        }
        for name, alias in _STEP_FIELDS.items():
            value = getattr(step, name)
            if value is None:
                continue
            if name == "result":
                value = json.dumps(value, separators=(",", ":"))
            elif name == "calls":
                if not value:
                    continue
                value = json.dumps(
                    [entry.model_dump(mode="json", by_alias=True, exclude_none=True) for entry in value],
                    separators=(",", ":"),
                )
            entity[alias] = value.value if hasattr(value, "value") else value
        return entity

    def _input_entity(self, record: TaskRecord) -> dict[str, Any]:
        body = json.dumps(record.input, separators=(",", ":"), sort_keys=True)
        chunks = _chunks(body)
        entity: dict[str, Any] = {
            **record.kept.get(_input_key(record.order_id), {}),
            "PartitionKey": self._pk(record.order_id),
            "RowKey": _input_key(record.order_id),
            "Kind": "input",
            _FORMAT: self.formats.writes,
            "OrderID": record.order_id,
            "BodyHash": record.input_hash,
            "BodyChunks": len(chunks),
        }
        for i, chunk in enumerate(chunks):
            entity[f"Body{i}"] = chunk
        return entity

    def _watch_entity(self, state: TaskState) -> dict[str, Any]:
        return {
            "PartitionKey": self._pk(state.order_id),
            "RowKey": state.order_id,
            _FORMAT: self.formats.writes,
            "CompleteBy": state.complete_by,
        }

    def _search_keys(self, state: TaskState) -> list[str]:
        """The keys of a task's search entries (``engine.search``)."""
        if self.search is None:
            return []
        tail = f"{_stamp(state.created_at)}|{state.order_id}|"
        return [prefix + tail for prefix in prefixes(state)]

    def _search_entities(self, state: TaskState) -> list[dict[str, Any]]:
        """A task's search entries: each carries what a search filters on besides its key."""
        carried: dict[str, Any] = {
            "PartitionKey": self._pk(state.order_id),
            _FORMAT: self.formats.writes,
            "OrderID": state.order_id,
            "CreatedAt": state.created_at,
            "Workflow": state.workflow,
            "WorkflowVersion": state.workflow_version,
        }
        if state.submitter:
            carried["Submitter"] = state.submitter
        for name, value in (state.search or {}).items():
            carried[f"Q_{name}"] = value
        return [{**carried, "RowKey": key} for key in self._search_keys(state)]

    async def _write_search(self, state: TaskState) -> None:
        entities = self._search_entities(state)
        if self.search is None or not entities:
            return
        self.counter.add(table=SEARCH, entities=len(entities))
        operations = [("upsert", e, {"mode": UpdateMode.REPLACE}) for e in entities]
        await self._transact(self.search, operations)

    async def _delete_search(self, pk: str, keys: list[str]) -> None:
        """Delete search entries of shard ``pk`` (best effort: one left behind is passed over by a search,
        whose order it no longer finds)."""
        if self.search is not None:
            for i in range(0, len(keys), _BATCH):
                deletes = [("delete", {"PartitionKey": pk, "RowKey": k}) for k in keys[i : i + _BATCH]]
                self.counter.add(table=SEARCH, entities=len(deletes))
                try:
                    await self._transact(self.search, deletes)
                except TableTransactionError:
                    # One was gone already: the rest one at a time.
                    for _, entity in deletes:
                        with contextlib.suppress(ResourceNotFoundError):
                            self.counter.add(table=SEARCH, entities=1)
                            await self.search.delete_entity(entity["PartitionKey"], entity["RowKey"])

    def archive_entities(
        self, record: TaskRecord, audited: bool = False
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A finished task as the history keeps it: the task in one entity, and its listing entry (also for
        tools that fill a history directly, with :meth:`tally_entity` for the shard's count)."""
        state = record.state
        key = listing_key(state.process_state, state.updated_at, state.order_id)
        return self._whole_entities(record, "archive", key, audited)

    def parked_entities(
        self, record: TaskRecord, audited: bool = False
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A waiting task as it is parked: the task in one entity (as the history keeps a finished one), and
        its listing entry, under the key it had in the live table."""
        return self._whole_entities(record, "parked", self._listing_key(record), audited)

    def _whole_entities(
        self, record: TaskRecord, kind: str, key: str, audited: bool
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        state = record.state
        summary = {**self._state_properties(state), "IndexKey": key, "Audited": audited}
        steps = json.dumps(
            [step.model_dump(mode="json", by_alias=True, exclude_none=True) for step in record.steps],
            separators=(",", ":"),
        )
        body = json.dumps(record.input, separators=(",", ":"), sort_keys=True)
        whole: dict[str, Any] = {
            **record.kept.get(_state_key(state.order_id), {}),
            **summary,
            "RowKey": _archive_key(state.order_id),
            "Kind": kind,
            "BodyHash": record.input_hash,
        }
        for row, properties in record.kept.items():
            if row == _input_key(state.order_id):
                whole.update({f"{_KEPT_INPUT}{name}": v for name, v in properties.items()})
            elif row.startswith(_step_prefix(state.order_id)):
                index = int(row.rsplit("|", 1)[1])
                whole.update({f"KeptStep{index:02d}_{name}": v for name, v in properties.items()})
        for prefix, text in (("Steps", steps), ("Body", body)):
            chunks = _chunks(text)
            whole[f"{prefix}Chunks"] = len(chunks)
            for i, chunk in enumerate(chunks):
                whole[f"{prefix}{i}"] = chunk
        return whole, {**summary, "RowKey": key, "Kind": "index"}

    @staticmethod
    def _to_state(entity: Mapping[str, Any]) -> TaskState:
        """The task state a record holds; raises :class:`NotUnderstood` (reported) for one of a later
        format or one this release cannot read."""
        with _understood(entity):
            values = {
                alias: entity[alias] for alias in _STATE_FIELDS.values() if entity.get(alias) is not None
            }
            if isinstance(values.get("Search"), str):
                values["Search"] = json.loads(values["Search"])
            return TaskState.model_validate(values)

    @classmethod
    def _readable_state(cls, entity: Mapping[str, Any]) -> TaskState | None:
        """:meth:`_to_state`, or None for a record this release cannot read (reported; a listing, a search
        or a clean-up passes over it)."""
        return _or_passed_over(cls._to_state, entity)

    @staticmethod
    def _to_step(entity: Mapping[str, Any]) -> StepState:
        with _understood(entity):
            values = {
                alias: entity[alias] for alias in _STEP_FIELDS.values() if entity.get(alias) is not None
            }
            for name in ("Result", "Calls"):
                if name in values:
                    values[name] = json.loads(values[name])
            return StepState.model_validate(values)

    def _from_archive(self, entity: TableEntity) -> TaskRecord:
        """A task read from the history table: finished (read-only), or parked (saved back to the live
        records)."""
        state = self._to_state(entity)
        with _understood(entity):
            steps = [StepState.model_validate(step) for step in json.loads(_joined(entity, "Steps"))]
            body = _joined(entity, "Body")
            document = json.loads(body) if body else {}
        parked = entity.get("Kind") == "parked"
        return TaskRecord(
            state=state,
            steps=steps,
            input=document,
            input_hash=entity["BodyHash"],
            kept=_kept_rows(state.order_id, _unknown(entity, _WHOLE_PROPERTIES)),
            etags={_archive_key(entity["OrderID"]): _etag(entity)},
            archived=not parked,
            parked=parked,
            audited=bool(entity.get("Audited")),
            listed=entity.get("IndexKey") if parked else None,
        )

    def _audit_entity(self, order_id: str, entry: AuditEntry, n: int) -> dict[str, Any]:
        # Time first so a range query returns the history in order; a random tail keeps two entries
        # written in the same microsecond (two instances) apart.
        entity: dict[str, Any] = {
            "PartitionKey": self._pk(order_id),
            "RowKey": f"{_audit_prefix(order_id)}{_stamp(entry.at)}|{n:02d}{self._unique()}",
            "Kind": "audit",
            _FORMAT: self.formats.writes,
            "OrderID": order_id,
        }
        for alias, value in entry.model_dump(by_alias=True, mode="python").items():
            if value is not None:
                entity[alias] = value.value if hasattr(value, "value") else value
        return entity

    # ---- submission ------------------------------------------------------------------------------
    async def create(self, record: TaskRecord) -> tuple[CreateOutcome, TaskRecord]:
        """Watch the task, then write its input, state, steps and listing entry in one transaction (all or
        nothing), checking the history for the id (see the module's docstring).

        The watch entry goes first: a crash in between leaves an entry the Supervisor removes, while the
        other order could leave a Pending task nobody watches. A submission refused because the order
        exists (409) never moves that order's watch entry; the entry it inserted itself goes again only if
        the history answered (no live task has the id), since a live task may have no other entry.
        """
        # Measured from here, on this process's own clock: the task was made (CreatedAt, and the CompleteBy
        # its watch entry carries) just before, with nothing awaited in between.
        loop = asyncio.get_running_loop()
        started = loop.time()
        state_entity = self._state_entity(record)
        audit = record.pending_audit()
        operations: list[Any] = [
            ("create", self._input_entity(record)),
            ("create", state_entity),
            *(("create", self._step_entity(record.order_id, s)) for s in record.steps),
            # A task written already claimed carries its claim's audit entries (Scheduler.claim_new).
            *(("create", self._audit_entity(record.order_id, e, n)) for n, e in enumerate(audit)),
        ]
        operations += [("create", entity) for _, entity, *_ in self._listing_operations(record, state_entity)]
        watched = bool(state_entity["Watched"])
        # Insert only: an entry already there is the task's own (or one left by a crash before its
        # transaction), and never later than that task's CompleteBy; moving it would break that bound.
        # The search entries go first too, beside it: an order never exists without them, and entries
        # whose order was never written (refused, or a crash) are passed over by a search.
        watching = self._add_watch(record.state) if watched else _nothing()
        # The id's row in the history (its mark) beside the watch entry and the search entries: inserted, it
        # says the history has never had the id since its last tombstone went, nor can gain it while the task
        # lives, so the history need not be read (see the module's docstring).
        searching = [self._write_search(record.state)] if self.search is not None else []
        if self.marks or searching:
            marking = self._mark(record.state) if self.history is not None and self.marks else _nothing()
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
                    await self._unmark(record.order_id, marked)
                    marked = None
            else:
                # No mark (the id had a row, or marks are off). The history first: an id it holds is
                # answered with nothing written, so a lost answer or a crash cannot leave a task behind.
                row = await self._read_archive(record.order_id)
                if row is None and self.marks:
                    marked = await self._mark(record.state)  # the row went meanwhile: mark it again
                    continue
                found = None if row is None or row.get("Kind") == _RETURNED else row
                written = await self._create_live(operations) if found is None else None
                if written is not None and added is None:
                    # An entry was there: an earlier task with this id may have been leaving the live
                    # table during that read, so the history is read again after the write. (When this
                    # submission inserted the entry, no earlier task can be, and once is enough.)
                    found = await self._read_kept(record.order_id)
            if written is not None and found is None:
                break
            if written is not None:
                # The id is in the history: take the new task back, as if never written.
                await self._delete_created(record.order_id, operations)
            answer = await self._existing(record, added, found)
            if answer is not None:
                await self._delete_search(
                    self._pk(record.order_id), self._search_keys(record.state)
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
            await self._put_watch(record.state)
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
            found = await self._read_kept(order_id)
        existing: TaskRecord | None = None
        if found is None:
            existing = await self._load_live(order_id)
            if existing is None:
                return None
        if added is not None and existing is None:
            # No live task: a refused or repeated submission of an id in the history leaves nothing.
            await self._remove_watch(order_id, added)
        if found is not None:
            if found.get("Kind") not in _WHOLE:
                return CreateOutcome.PURGED, record
            existing = self._from_archive(found)
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
        await self._delete_search(self._pk(order_id), self._search_keys(self._to_state(operations[1][1])))
        log.info("order %s was submitted again after it finished; its history answered", order_id)

    async def _read_kept(self, order_id: str) -> TableEntity | None:
        """The history table's entity for the id, unless it only says the task is live again."""
        found = await self._read_archive(order_id)
        return None if found is not None and found.get("Kind") == _RETURNED else found

    async def _read_archive(self, order_id: str) -> TableEntity | None:
        """The history's entity for the id: the finished task, its tombstone, or None."""
        self.counter.add(table=HISTORY, entities=1)
        try:
            return await self._history().get_entity(self._pk(order_id), _archive_key(order_id))
        except ResourceNotFoundError:
            return None

    async def _mark(self, state: TaskState) -> str | None:
        """Insert the id's row in the history, saying its task is in the live records; its ETag, or None if
        the history has a row for the id already (a task's, a tombstone, or a mark)."""
        self.counter.add(table=HISTORY, entities=1)
        mark = _marker(self._pk(state.order_id), state.order_id, state.created_at)
        return await _insert(self._history(), mark)

    async def _unmark(self, order_id: str, etag: str) -> None:
        """Delete the mark this store inserted, unless it changed since."""
        self.counter.add(table=HISTORY, entities=1)
        await _delete_unchanged(self._history(), self._pk(order_id), _archive_key(order_id), etag)

    # ---- one task --------------------------------------------------------------------------------
    async def load(self, order_id: str) -> TaskRecord | None:
        """One query over the task's key range in the live table; a task not there is read from the
        history table (one point read), where a finished task is kept and a parked one waits. A task
        brought back from there meanwhile (written live, then its parked copy deleted) is read live
        again."""
        record = await self._load_live(order_id)
        if record is not None or self.history is None:
            return record
        found = await self._read_archive(order_id)
        if found is not None and found.get("Kind") in _WHOLE:
            return self._from_archive(found)
        if found is not None and found.get("Kind") == _RETURNED:
            return await self._load_live(order_id)
        return None

    async def _load_live(self, order_id: str) -> TaskRecord | None:
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
        state = self._to_state(state_entity)
        steps = sorted((self._to_step(e) for e in entities if e.get("Kind") == "step"), key=lambda s: s.index)
        with _understood(input_entity):
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
        conditional on the ETags of the state and the changed steps."""
        if record.parked:
            return await self._unpark(record)
        order_id = record.order_id
        state_etag = record.etags.get(_state_key(order_id))
        if record.archived or state_etag is None:
            raise ConcurrencyError(order_id)  # a finished task from the history is never saved again
        state_entity = self._state_entity(record)
        conditional = {"mode": UpdateMode.REPLACE, **_IF_MATCH}
        listing = self._listing_operations(record, state_entity)
        operations: list[Any] = [("update", state_entity, {**conditional, "etag": state_etag})]
        for index in record.changed_steps():
            kept = record.kept.get(_step_key(order_id, index), {})
            entity = self._step_entity(order_id, record.steps[index], kept)
            operations.append(("update", entity, {**conditional, "etag": record.etags[entity["RowKey"]]}))
        if record.input_changed():
            # Sensitive fields dropped (engine.sealing): the input again, in the same transaction.
            entity = self._input_entity(record)
            etag = record.etags.get(entity["RowKey"])
            options = {**conditional, "etag": etag} if etag else {"mode": UpdateMode.REPLACE}
            operations.append(("update", entity, options))
        for n, entry in enumerate(record.pending_audit()):
            operations.append(("create", self._audit_entity(order_id, entry, n)))
        operations += listing
        if state_entity["Watched"] and not record.indexed:
            await self._put_watch(
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
        record.mark_saved()
        return record

    # ---- audit -----------------------------------------------------------------------------------
    async def _audit_rows(self, table: TableClient, order_id: str, name: str) -> list[TableEntity]:
        prefix = _audit_prefix(order_id)
        entities = [
            entity
            async for entity in table.query_entities(
                _RANGE, parameters={"pk": self._pk(order_id), "lo": prefix, "hi": f"{prefix}~"}
            )
        ]
        self.counter.add(table=name, entities=len(entities))
        return sorted(entities, key=lambda e: str(e["RowKey"]))

    async def audit(self, order_id: str, archived: bool = False) -> list[AuditEntry]:
        """The task's audit entries, oldest first: one range query in the task's partition, of the live
        table or (``archived``) of the history."""
        table, name = (self._history(), HISTORY) if archived else (self.table, STATE)
        read = [_or_passed_over(self._to_audit, e) for e in await self._audit_rows(table, order_id, name)]
        return [entry for entry in read if entry is not None]  # what it cannot read: reported, passed over

    @staticmethod
    def _to_audit(entity: Mapping[str, Any]) -> AuditEntry:
        with _understood(entity):
            return AuditEntry.model_validate(
                {a: entity[a] for a in _AUDIT_FIELDS if entity.get(a) is not None}
            )

    async def append_audit(self, order_id: str, entry: AuditEntry) -> None:
        """Add an entry to a task's audit trail on its own, for an action that changes no task record
        (a dead-lettered message of the task replayed or purged).

        A live task's entry is written with a touch of its input record, conditional on that record's
        ETag, so the move of a finished task to the history (which deletes the input conditionally on
        the ETag it read) cannot leave the entry behind; a task already in the history gets it there.
        """
        pk = self._pk(order_id)
        entity = self._audit_entity(order_id, entry, 0)
        for _ in range(_RACES):
            self.counter.add(table=STATE, entities=1)
            try:
                live = await self.table.get_entity(pk, _input_key(order_id), select=["BodyHash"])
            except ResourceNotFoundError:
                if self.history is not None and await self._append_archived_audit(order_id, entity):
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

    async def _append_archived_audit(self, order_id: str, entity: dict[str, Any]) -> bool:
        """Add an audit entry to a task in the history, marking the task and its listing entry (so a purge
        that read them before is refused and reads the trail again). False: no such task there."""
        history = self._history()
        for _ in range(_RACES):
            found = await self._read_archive(order_id)
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

    # ---- the watch table -------------------------------------------------------------------------
    async def _add_watch(self, state: TaskState) -> str | None:
        """Insert the task's watch entry; its ETag, or None if an entry is already there."""
        self.counter.add(table=WATCH, entities=1)
        return await _insert(self.watch, self._watch_entity(state))

    async def _remove_watch(self, order_id: str, etag: str) -> None:
        """Delete the watch entry this store inserted, unless it changed since."""
        self.counter.add(table=WATCH, entities=1)
        await _delete_unchanged(self.watch, self._pk(order_id), order_id, etag)

    async def _put_watch(self, state: TaskState) -> None:
        self.counter.add(table=WATCH, entities=1)
        await self.watch.upsert_entity(self._watch_entity(state), mode=UpdateMode.REPLACE)

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

    # ---- the history -----------------------------------------------------------------------------
    async def _tally(self, pk: str, fresh: bool = False, row: str = _TALLY) -> tuple[str, dict[str, int]]:
        """A shard's tally in the history table (ETag "" and zeros: none written yet): of the finished tasks
        it holds by state, or (``row`` :data:`_WAITING_TALLY`) of the parked ones by what they wait for."""
        if not fresh and (pk, row) in self._tallies:
            return self._tallies[pk, row]
        names = _tally_names(row)
        self.counter.add(table=HISTORY, entities=1)
        try:
            entity = await self._history().get_entity(pk, row)
            tally = _etag(entity), {name: int(entity.get(name) or 0) for name in names}
        except ResourceNotFoundError:
            tally = "", dict.fromkeys(names, 0)
        self._tallies[pk, row] = tally
        return tally

    @staticmethod
    def tally_entity(pk: str, counts: Mapping[str, int], row: str = _TALLY) -> dict[str, Any]:
        """A shard's tally of the finished tasks its history holds, per state name (or, ``row``
        :data:`_WAITING_TALLY`, of the parked tasks, per what they wait for)."""
        return {"PartitionKey": pk, "RowKey": row, **{n: counts.get(n, 0) for n in _tally_names(row)}}

    def _tally_operation(
        self, pk: str, tally: tuple[str, dict[str, int]], change: Mapping[str, int], row: str = _TALLY
    ) -> Any:
        etag, counts = tally
        entity = self.tally_entity(pk, {k: counts[k] + change.get(k, 0) for k in counts}, row)
        if not etag:
            return ("create", entity)
        return ("update", entity, {"mode": UpdateMode.REPLACE, "etag": etag, **_IF_MATCH})

    async def _submit_counted(
        self,
        pk: str,
        operations: list[Any],
        tally: tuple[str, dict[str, int]],
        change: Mapping[str, int],
        row: str = _TALLY,
    ) -> list[Mapping[str, Any]]:
        """A history transaction that changes the shard's tally by ``change`` (last operation); its
        results."""
        return await self._submit_tallied(pk, operations, {row: (tally, change)})

    async def _submit_tallied(
        self,
        pk: str,
        operations: list[Any],
        changes: Mapping[str, tuple[tuple[str, dict[str, int]], Mapping[str, int]]],
    ) -> list[Mapping[str, Any]]:
        """A history transaction that changes one or more of the shard's tallies (by row: the tally as
        read, and the change), the tallies last; its results."""
        operations = [
            *operations,
            *(self._tally_operation(pk, tally, change, row) for row, (tally, change) in changes.items()),
        ]
        self.counter.add(table=HISTORY, entities=len(operations))
        try:
            results = await self._transact(self._history(), operations)
        except TableTransactionError:
            for row in changes:
                self._tallies.pop((pk, row), None)
            raise
        for n, (row, (tally, change)) in enumerate(changes.items()):
            counts = {k: v + change.get(k, 0) for k, v in tally[1].items()}
            result = results[len(results) - len(changes) + n]
            self._tallies[pk, row] = str(result.get("etag") or ""), counts
        return results

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
        archive, listing = self.archive_entities(record, audited=bool(trail))
        copies = [("upsert", dict(e), {"mode": UpdateMode.REPLACE}) for e in trail]
        room = _BATCH - 3  # the task, its listing entry and the tally
        for i in range(0, max(len(copies) - room, 0), _BATCH):
            batch = copies[i : min(i + _BATCH, len(copies) - room)]
            self.counter.add(table=HISTORY, entities=len(batch))
            await self._transact(self._history(), batch)
        tail = copies[max(len(copies) - room, 0) :]
        if not await self._write_archive(pk, order_id, archive, listing, tail):
            return False
        return await self._delete_live(record, trail)

    async def take_back(self, record: TaskRecord) -> bool:
        """Delete a never-started live task whose id the history holds (see
        :meth:`engine.ports.StateStore.take_back`): one point read of the history and, if it has the id, the
        live records deleted in one transaction conditional on the ETags read."""
        if self.history is None or record.archived:
            return False
        if await self._read_kept(record.order_id) is None:
            return False
        if not await self._delete_live(record, await self._audit_rows(self.table, record.order_id, STATE)):
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
        found = await self._read_archive(order_id) if self.marks else None
        if found is not None and _leftover(found, archive):
            written = await self._write_over(pk, found, archive, listing, copies, {_TALLY: change}, False)
            if written is not None:
                return True
        for fresh in (False, *([True] * (_RACES - 1))):
            tally = await self._tally(pk, fresh)
            try:
                await self._submit_counted(
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
            found = await self._read_archive(order_id)
            if found is None:
                continue  # not the task: the tally appeared meanwhile
            if found.get("Kind") == "tombstone" and found.get("FinishedAt") == archive["UpdatedAt"]:
                return True  # moved and purged since the first attempt: only the live records are left
            if _leftover(found, archive):
                # A parked copy of this task, left by a park or a return that did not finish (the live
                # task is the task), or the marker of one that came back: the history's copy takes its place.
                if await self._write_over(pk, found, archive, listing, copies, {_TALLY: change}, fresh):
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

    async def _delete_live(self, record: TaskRecord, trail: list[TableEntity]) -> bool:
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
            readable = [task for e in gone if (task := self._readable_state(e)) is not None]
            await self._delete_search(pk, [key for task in readable for key in self._search_keys(task)])
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
            tally = await self._tally(pk, fresh)
            try:
                await self._submit_counted(pk, operations, tally, change)
                return len(group)
            except TableTransactionError as exc:
                if not _conflict(exc):
                    raise
                if not await self._tally_moved(pk, tally):
                    return None  # not the tally: a task changed (or went) since the query read it
        return None

    async def _tally_moved(self, pk: str, tally: tuple[str, dict[str, int]], row: str = _TALLY) -> bool:
        return (await self._tally(pk, True, row))[0] != tally[0]

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

    async def _write_over(
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
            return await self._submit_tallied(
                pk,
                operations,
                {row: (await self._tally(pk, fresh, row), change) for row, change in counted.items()},
            )
        except TableTransactionError as exc:
            if not _conflict(exc):
                raise
            return None

    # ---- parked tasks ----------------------------------------------------------------------------
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
            await self.unwatch(entry)
            return True
        order_id, pk = record.order_id, self._pk(record.order_id)
        if not await self._mark_parking(record):
            return False
        trail = await self._audit_rows(self.table, order_id, STATE)
        parked, listing = self.parked_entities(record, audited=bool(trail))
        copies = [("upsert", dict(e), {"mode": UpdateMode.REPLACE}) for e in trail]
        for i in range(0, len(copies), _BATCH):
            batch = copies[i : i + _BATCH]
            self.counter.add(table=HISTORY, entities=len(batch))
            await self._transact(self._history(), batch)
        etag = await self._write_parked(pk, order_id, parked, listing)
        if etag is None:
            return False
        await self._file(state)
        if not await self._delete_live(record, trail):
            # Changed since it was read (an approval, a cancel, an audit entry): it stays live.
            await self._remove_parked(pk, order_id, etag, parked)
            await self._delete_rows(pk, [e["RowKey"] for e in trail])
            return False
        await self.unwatch(entry)
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
            tally = await self._tally(pk, fresh, _WAITING_TALLY)
            operations: list[Any] = [("create", parked), ("upsert", listing, {"mode": UpdateMode.REPLACE})]
            try:
                results = await self._submit_counted(
                    pk, operations, tally, change[_WAITING_TALLY], _WAITING_TALLY
                )
                return str(results[0].get("etag") or "")
            except TableTransactionError as exc:
                if exc.status_code == 412:
                    continue  # the tally moved: read it again
                if exc.status_code != 409:
                    raise
            found = await self._read_archive(order_id)
            if found is None:
                continue
            if not _leftover(found, parked):
                log.error("order %s: the history table holds another task with its id; not parked", order_id)
                return None
            # A stale copy of another kind moves from its kind's count to this one's (simulation
            # finding 17: it left the tally wrong).
            written = await self._write_over(pk, found, parked, listing, [], change, True)
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
            tally = await self._tally(pk, fresh, _WAITING_TALLY)
            try:
                await self._submit_counted(pk, operations, tally, change, _WAITING_TALLY)
                return True
            except TableTransactionError as exc:
                if exc.status_code == 404 and len(operations) > 1:
                    operations = operations[:1]  # the listing entry went already: the copy alone
                    continue
                if not _conflict(exc):
                    raise
                if not await self._tally_moved(pk, tally, _WAITING_TALLY):
                    return False  # not the tally: the copy changed or went
        return False

    async def _unpark(self, record: TaskRecord) -> TaskRecord:
        """Save a parked task back to the live records: claim its parked copy (a conditional write, so of
        two that bring it back only one goes on), put its watch entry, write its live records (state, input,
        steps, listing entry, audit entries) in one transaction that only inserts, then replace the parked
        copy by a marker that sends readers to the live records (one that missed them a moment before
        reads them again). A crash in between leaves the task live and its copy stale: the live records are
        the task, and the copy goes when the task is moved to the history (:meth:`_write_over`)."""
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
        state_entity = self._state_entity(record)
        # Only the entry: the one it had is in the history table, where the parked copy goes with it.
        entry = self._listing_entry(record, state_entity)
        listed = entry["RowKey"]
        operations: list[Any] = [
            ("create", self._input_entity(record)),
            ("create", state_entity),
            *(
                ("create", self._step_entity(order_id, s, record.kept.get(_step_key(order_id, s.index), {})))
                for s in record.steps
            ),
            ("create", entry),
        ]
        audits: list[dict[str, Any]] = [dict(e) for e in trail] + [
            self._audit_entity(order_id, e, n) for n, e in enumerate(record.pending_audit())
        ]
        room = _BATCH - len(operations)
        operations += [("create", a) for a in audits[:room]]
        if state_entity["Watched"]:
            await self._put_watch(record.state)  # watched before it is in flight again
        try:
            self.counter.add(table=STATE, entities=len(operations))
            results = await self._transact(self.table, operations)
        except TableTransactionError as exc:
            if exc.status_code != 409:
                raise
            # Brought back by someone else meanwhile: the live records are the task, the copy is stale. The
            # watch entry was put at this save's CompleteBy, which may be later than the live task's: put
            # it at the live task's (simulation finding 16: the Supervisor came late).
            live = await self._load_live(order_id)
            if live is not None and live.state.process_state.in_flight and live.state.complete_by is not None:
                await self._put_watch(live.state)
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

    @staticmethod
    def calendar_entity(state: TaskState) -> dict[str, Any]:
        """A parked task's entry in the calendar, at the time its wait ends (a timer's time, an approval's
        deadline; also for tools that park directly)."""
        due = state.wait_until or state.complete_by
        assert due is not None
        return {
            "PartitionKey": CALENDAR,
            "RowKey": f"{_stamp(due)}|{state.order_id}",
            "OrderID": state.order_id,
        }

    async def _file(self, state: TaskState) -> None:
        """Put a parked task's entry in the calendar, at the time its wait ends."""
        self.counter.add(table=HISTORY, entities=1)
        await self._history().upsert_entity(self.calendar_entity(state), mode=UpdateMode.REPLACE)

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
            record = await self.load(entity["OrderID"])
            try:
                if record is not None and record.parked:
                    await self.save(record)
                    brought += 1
                elif record is not None and record.state.process_state.in_flight and record.state.complete_by:
                    # Live (brought back meanwhile, or still on its way out): its watch entry is put again,
                    # so a park that is about to drop it is refused and the task stays watched.
                    await self._put_watch(record.state)
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

    # ---- listings and counts ---------------------------------------------------------------------
    async def list_by_state(
        self,
        state: ProcessState,
        page_size: int,
        continuation: str | None,
        waiting_for: str | None = None,
        submitter: str | None = None,
    ) -> Page:
        """Tasks in one state, read from that state's listing entries only (with ``waiting_for``, those
        waiting for it: for Waiting, that kind's entries only), filling the page shard by shard: the live
        table's, then (for a finished state) the history's. The continuation token carries the table,
        the shard and the table's own token."""
        place, token = _decode_token(continuation)
        tables = [self.table]
        if (state.finished or state is ProcessState.WAITING) and self.history is not None:
            tables.append(self.history)  # finished tasks are kept there, and parked ones wait there
        if place >= len(tables) * self.shards:
            raise InvalidContinuation(continuation or "")
        keyed = state is ProcessState.WAITING
        lo, hi = _listing_range(state, None, waiting_for if keyed else None)
        # Waiting tasks are keyed by what they wait for; in another state (an approval in Error) the
        # entries of the state are read and filtered on the copy of the state record each one is.
        query, kind = (
            (_RANGE, {}) if keyed or waiting_for is None else (_RANGE_WAITING, {"kind": waiting_for})
        )
        if submitter is not None:
            # One submitter's: the state's entries, filtered on the copy of the state record each one is.
            query, kind = f"{query} and Submitter eq @submitter", {**kind, "submitter": submitter}
        items: list[TaskState] = []
        while place < len(tables) * self.shards and len(items) < page_size:
            table = tables[place // self.shards]
            pages = table.query_entities(
                query,
                parameters={"pk": f"s{place % self.shards:02d}", "lo": lo, "hi": hi, **kind},
                results_per_page=page_size - len(items),
            ).by_page(continuation_token=token)
            read = [self._readable_state(e) async for e in await anext(pages, _empty_page())]
            found = [state for state in read if state is not None]  # what it cannot read: passed over
            self.counter.add(table=STATE if table is self.table else HISTORY, entities=len(found))
            # An order that moves while the page is read (parked into the history, promoted back, or
            # listed again on re-entering its state) can have an entry in both places: listed once.
            seen = {item.order_id for item in items}
            for task in found:
                if task.order_id not in seen:
                    seen.add(task.order_id)
                    items.append(task)
            # by_page is typed as a plain iterator; it is the SDK's PageIterator, which keeps the token.
            token = cast(AsyncPageIterator[TableEntity], pages).continuation_token
            if token is None:
                place += 1
        more = place < len(tables) * self.shards
        return Page(items, _encode_token(place, token) if more else None)

    # ---- search (engine.search) -------------------------------------------------------------------
    async def search_orders(self, query: SearchQuery, page_size: int, continuation: str | None) -> Page:
        """Tasks that meet ``query``, a page at a time (fewer than asked for before the end when criteria
        turn hits away: go on with the token). See :mod:`engine.search` for what each search reads."""
        if query.keyed:
            return await self._search_keyed(query, page_size, continuation)
        return await self._search_at_step(query, page_size, continuation)

    async def _search_keyed(self, query: SearchQuery, page_size: int, continuation: str | None) -> Page:
        if self.search is None:
            _decode_marks(continuation, self.shards)
            return Page([], None)
        prefix = query_prefix(query)
        lo = prefix + (_stamp(query.submitted_from) if query.submitted_from else "")
        hi = prefix + (_stamp(query.submitted_to) if query.submitted_to else "~")
        conditions, parameters = [], dict[str, Any]()
        if query.workflow:
            conditions.append("Workflow eq @workflow")
            parameters["workflow"] = query.workflow
        if query.workflow_version is not None:
            conditions.append("WorkflowVersion eq @version")
            parameters["version"] = query.workflow_version
        if query.storefront:
            conditions.append("Submitter eq @submitter")
            parameters["submitter"] = query.storefront
        for n, (name, value) in enumerate(sorted(query.fields.items())):
            conditions.append(f"Q_{name} eq @q{n}")
            parameters[f"q{n}"] = value
        places = [_Place(self.search, f"s{shard:02d}", lo, hi) for shard in range(self.shards)]

        async def states(found: list[TableEntity]) -> list[TaskState | None]:
            read = await asyncio.gather(*(self._state_of(e["OrderID"], e["CreatedAt"]) for e in found))
            return [state if state is not None and query.holds(state) else None for state in read]

        return await self._fan_out(
            places,
            conditions,
            parameters,
            ["RowKey", "OrderID", "CreatedAt"],
            states,
            page_size,
            continuation,
        )

    async def _fan_out(
        self,
        places: list[_Place],
        conditions: list[str],
        parameters: dict[str, Any],
        select: list[str] | None,
        states: Callable[[list[TableEntity]], Awaitable[list[TaskState | None]]],
        page_size: int,
        continuation: str | None,
    ) -> Page:
        """A page of what key ranges (``places``) hold, read all at once, one page of each per round, then
        taken place by place: a search costs one round trip per round, not one per shard. Each range goes
        on after the last key it gave (the token holds those), so what a round read beyond the page is read
        again by the next page, never skipped. ``states`` turns entries into the tasks they stand for
        (None: not one the search wants). A page stops after reading four pages' worth (at least 200
        entries), however few of them the criteria kept: a search costs at most that per page."""
        marks = _decode_marks(continuation, len(places))
        budget, read = max(page_size * 4, 200), 0
        items: list[TaskState] = []
        while len(items) < page_size and read < budget and any(m != _DONE for m in marks):
            need = page_size - len(items)
            active = [i for i, mark in enumerate(marks) if mark != _DONE]
            pages = await asyncio.gather(
                *(self._range_page(places[i], marks[i], conditions, parameters, select, need) for i in active)
            )
            fetched = [(i, entity) for i, (found, _) in zip(active, pages, strict=True) for entity in found]
            read += len(fetched)
            taken: dict[int, int] = {}
            # Taken in place order, as many at a time as the page still needs: what the page cannot hold
            # is not looked at (the next page reads it again).
            at = 0
            while at < len(fetched) and len(items) < page_size:
                chunk = fetched[at : at + page_size - len(items)]
                at += len(chunk)
                for (i, entity), state in zip(chunk, await states([e for _, e in chunk]), strict=True):
                    marks[i] = entity["RowKey"]
                    taken[i] = taken.get(i, 0) + 1
                    if state is not None:
                        items.append(state)
            for i, (found, exhausted) in zip(active, pages, strict=True):
                if exhausted and taken.get(i, 0) == len(found):
                    marks[i] = _DONE
        more = any(m != _DONE for m in marks)
        return Page(items, _encode_marks(marks) if more else None)

    async def _range_page(
        self,
        place: _Place,
        after: str | None,
        conditions: list[str],
        parameters: dict[str, Any],
        select: list[str] | None,
        size: int,
    ) -> tuple[list[TableEntity], bool]:
        """Up to ``size`` entries of one key range (after ``after``, when given), and whether the range
        has nothing beyond them."""
        if after is not None and not place.lo <= after < place.hi:
            raise InvalidContinuation(after)  # not a key of this range: not a token this search issued
        start = "RowKey gt @lo" if after is not None else "RowKey ge @lo"
        where = " and ".join(["PartitionKey eq @pk", start, "RowKey lt @hi", *conditions])
        values = {
            **parameters,
            "pk": place.pk,
            "lo": after if after is not None else place.lo,
            "hi": place.hi,
        }
        pages = place.table.query_entities(where, parameters=values, select=select, results_per_page=size)
        iterator = pages.by_page()
        found = [entity async for entity in await anext(iterator, _empty_page())]
        name = SEARCH if place.table is self.search else STATE if place.table is self.table else HISTORY
        self.counter.add(table=name, entities=len(found))
        return found, cast(AsyncPageIterator[TableEntity], iterator).continuation_token is None

    async def _state_of(self, order_id: str, created_at: datetime) -> TaskState | None:
        """The state of the task a search entry names (live, or in the history; read at once), or None if
        the entry is not that task's (never written, or since purged)."""
        pk = self._pk(order_id)

        async def read(table: TableClient | None, key: str, select: list[str] | None) -> TableEntity | None:
            if table is None:
                return None
            self.counter.add(table=STATE if table is self.table else HISTORY, entities=1)
            try:
                return await table.get_entity(pk, key, select=select)
            except ResourceNotFoundError:
                return None

        live, kept = await asyncio.gather(
            read(self.table, _state_key(order_id), None),
            read(self.history, _archive_key(order_id), [*_STATE_FIELDS.values(), "Kind"]),
        )
        entity = (
            live if live is not None else kept if kept is not None and kept.get("Kind") in _WHOLE else None
        )
        if entity is None:
            return None
        state = self._readable_state(entity)
        return state if state is not None and state.created_at == created_at else None

    async def _search_at_step(self, query: SearchQuery, page_size: int, continuation: str | None) -> Page:
        """Tasks at a step (``query.positions``), or at any step for a while, from the listing entries of
        the states a task can be at a step in: the live table's and, for Waiting, the parked tasks' in the
        history; every state's range of every shard read at once (see :meth:`_fan_out`)."""
        states = [query.process_state] if query.process_state is not None else list(AT_A_STEP)
        places = [
            _Place(table, f"s{shard:02d}", *_listing_range(state))
            for state in states
            if state in AT_A_STEP
            for table in (self.table, self.history)
            if table is not None and (table is self.table or state is ProcessState.WAITING)
            for shard in range(self.shards)
        ]
        if query.step is not None and not query.positions:
            _decode_marks(continuation, len(places))
            return Page([], None)
        conditions, parameters = [], dict[str, Any]()
        if query.step is not None:
            # Spaces around the parentheses: the SDK substitutes a parameter only as a word of its own.
            at = " or ".join(
                f"( Workflow eq @w{n} and WorkflowVersion eq @v{n} and CurrentStep eq @c{n} )"
                for n in range(len(query.positions))
            )
            conditions.append(f"( {at} )")
            for n, (workflow, version, index) in enumerate(query.positions):
                parameters.update({f"w{n}": workflow, f"v{n}": version, f"c{n}": index})
        elif query.workflow_version is not None:
            conditions.append("WorkflowVersion eq @version")
            parameters["version"] = query.workflow_version
        if query.at_step_before is not None:
            conditions.append("StepSince le @since")
            parameters["since"] = query.at_step_before
        if query.waiting_for is not None:
            conditions.append("WaitingFor eq @kind")
            parameters["kind"] = query.waiting_for

        async def states_of(found: list[TableEntity]) -> list[TaskState | None]:
            read = [self._readable_state(e) for e in found]
            return [state if state is not None and query.holds(state) else None for state in read]

        return await self._fan_out(places, conditions, parameters, None, states_of, page_size, continuation)

    async def count_by_state(self, limit: int) -> StateCounts:
        """How many tasks each state holds: the live table's listing entries of every shard (their keys
        only, one range query per shard) and, for the finished states and the parked tasks, each shard's
        two tallies in the history table (two point reads per shard), all at once. Nothing here reads the
        history's or the parked tasks, so the cost follows the live work (in flight, in Error) and not the
        history or what waits long. A shard with more than ``limit`` live entries is counted up to
        ``limit``."""

        waiting: dict[str, int] = {}

        async def live(shard: int) -> tuple[dict[str, int], bool]:
            counts: dict[str, int] = {}
            entities = self.table.query_entities(
                _RANGE,
                parameters={"pk": f"s{shard:02d}", "lo": "index|", "hi": "index|~"},
                select=["RowKey"],
                results_per_page=1000,
            )
            seen = 0
            try:
                async for entity in entities:
                    if seen == limit:
                        return counts, False
                    state = _listed_state(entity["RowKey"])
                    counts[state] = counts.get(state, 0) + 1
                    kind = _listed_wait(entity["RowKey"])
                    if kind is not None:
                        waiting[kind] = waiting.get(kind, 0) + 1
                    seen += 1
            finally:
                self.counter.add(1 + seen // 1000, table=STATE, entities=seen)
            return counts, True

        async def finished(shard: int) -> dict[str, int]:
            if self.history is None:
                return {}
            return (await self._tally(f"s{shard:02d}", fresh=True))[1]

        async def parked(shard: int) -> dict[str, int]:
            if self.history is None:
                return {}
            return (await self._tally(f"s{shard:02d}", True, _WAITING_TALLY))[1]

        shards = range(self.shards)
        lives, tallies, parks = await asyncio.gather(
            asyncio.gather(*(live(s) for s in shards)),
            asyncio.gather(*(finished(s) for s in shards)),
            asyncio.gather(*(parked(s) for s in shards)),
        )
        totals = dict.fromkeys(ProcessState, 0)
        for counts in [c for c, _ in lives] + list(tallies):
            for name, n in counts.items():
                totals[ProcessState(name)] += n
        for counts in parks:
            for kind, n in counts.items():
                if n:
                    totals[ProcessState.WAITING] += n
                    waiting[kind] = waiting.get(kind, 0) + n
        return StateCounts(
            totals, complete=all(whole for _, whole in lives), waiting=dict(sorted(waiting.items()))
        )

    # ---- building the listing of a store written before it -----------------------------------------
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
            state = self._readable_state(entity)
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
        record = await self.load(order_id)
        if record is None or record.archived:
            return True
        if not record.state.process_state.finished:
            return False
        guard = record.state.model_copy(update={"complete_by": record.state.updated_at})
        etag = await self._add_watch(guard)
        if etag is None:
            return False
        try:
            moved = await self.archive(record)
        finally:
            await self._remove_watch(order_id, etag)
        return moved


async def _nothing() -> None:
    return None


def _marker(pk: str, order_id: str, created_at: Any) -> dict[str, Any]:
    """The history's row for a task in the live records: its mark at submission, or the marker of its
    return from parking."""
    return {
        "PartitionKey": pk,
        "RowKey": _archive_key(order_id),
        "Kind": _RETURNED,
        "OrderID": order_id,
        "CreatedAt": created_at,
    }


def _may_have_been_swept(state: TaskState, elapsed: float) -> bool:
    """Whether a submission that took ``elapsed`` seconds to write its task may have had its own watch entry
    swept first: the entry came due (at the task's CompleteBy, by the clock of a Supervisor up to
    :data:`_CLOCK_SKEW_SECONDS` ahead) before the task was there, and a sweep that found no task under it
    deleted it as the leftover of a submission that died. On the usual path the write comes long before."""
    if state.complete_by is None:
        return False
    window = (state.complete_by - state.created_at).total_seconds()
    return elapsed >= window - _CLOCK_SKEW_SECONDS


async def _insert(table: TableClient, entity: Mapping[str, Any]) -> str | None:
    """Insert ``entity``; its ETag, or None if the table holds an entity under its keys already."""
    try:
        created = await table.create_entity(entity)
    except ResourceExistsError:
        return None
    return str(created.get("etag") or "")


async def _delete_unchanged(table: TableClient, pk: str, row_key: str, etag: str) -> None:
    """Delete an entity unless it changed since ``etag`` (or is gone already)."""
    with contextlib.suppress(ResourceNotFoundError, ResourceModifiedError):
        await table.delete_entity(pk, row_key, etag=etag, match_condition=MatchConditions.IfNotModified)


@dataclass(frozen=True)
class _Place:
    """One key range of one partition of one table, as a search reads it."""

    table: TableClient
    pk: str
    lo: str
    hi: str


_DONE = "~"  # a range read to its end (no key sorts after "~" in these ranges)


# What reading a token this store did not issue may raise: OverflowError for a forged 1e400 or Infinity,
# RecursionError for one nested too deep.
_FORGED = (ValueError, KeyError, TypeError, IndexError, AttributeError, OverflowError, RecursionError)


def _encode_marks(marks: list[str | None]) -> str:
    """A search's continuation: where each range goes on (``None``: its start; :data:`_DONE`: read)."""
    done = [i for i, mark in enumerate(marks) if mark == _DONE]
    after = {str(i): mark for i, mark in enumerate(marks) if mark not in (None, _DONE)}
    raw = json.dumps({"n": len(marks), "d": done, "a": after}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_marks(value: str | None, count: int) -> list[str | None]:
    if not value:
        return [None] * count
    try:
        data = json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
        if data["n"] != count:
            raise ValueError(data["n"])
        marks: list[str | None] = [None] * count
        for i in data["d"]:
            marks[_place_number(i, count)] = _DONE
        for i, mark in data["a"].items():
            if not isinstance(mark, str):
                raise TypeError(mark)
            marks[_place_number(i, count)] = mark
        return marks
    except _FORGED as exc:
        raise InvalidContinuation(value) from exc


def _place_number(value: Any, count: int) -> int:
    """A range's or a place's number as a token holds it: a whole number (or its digits) below ``count``;
    ValueError for anything else (a float, a flag, a negative number, which Python would index from the
    end)."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 6:
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < count:
        raise ValueError(value)
    return value


async def _empty_page() -> AsyncIterator[TableEntity]:
    """A page with nothing on it (what ``anext`` returns when the query has no page left)."""
    return
    yield


def _encode_token(place: int, token: Any) -> str:
    raw = json.dumps({"s": place, "t": token}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


# The table service's own continuation: its next keys, as it gives them (printable ASCII, no space).
_SERVICE_TOKEN_KEYS = ("PartitionKey", "RowKey")


def _service_key(value: Any) -> bool:
    return value is None or (
        isinstance(value, str)
        and 0 < len(value) <= 1024
        and value.isascii()
        and value.isprintable()
        and " " not in value
    )


def _decode_token(value: str | None) -> tuple[int, Any]:
    """The place (table and shard) and the table service's token of a listing's continuation;
    InvalidContinuation for anything this store did not issue the like of (a forged number, text or list
    where a number or the service's keys belong), before any of it reaches the service."""
    if not value:
        return 0, None
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        data = json.loads(raw)
        place = _place_number(data["s"], 10_000)
        token = data.get("t")
        if token is not None and not (
            isinstance(token, dict)
            and set(token) <= set(_SERVICE_TOKEN_KEYS)
            and all(_service_key(v) for v in token.values())
        ):
            raise ValueError(token)
        return place, token
    except _FORGED as exc:
        raise InvalidContinuation(value) from exc


@contextlib.contextmanager
def _understood(entity: Mapping[str, Any]) -> Iterator[None]:
    """Turns what this release cannot read in a stored record (a later format, a value it does not know,
    a corrupted property) into :class:`NotUnderstood`, reported with the order and the record named."""
    order_id = entity.get("OrderID") if isinstance(entity.get("OrderID"), str) else None
    try:
        formats.record_format(entity.get(_FORMAT))
        yield
    except NotUnderstood as exc:
        raise _reported(entity, exc.what, order_id) from exc
    except (ValidationError, ValueError, KeyError, TypeError) as exc:
        raise _reported(entity, f"it cannot be read: {exc}", order_id) from exc


def _or_passed_over[T](read: Callable[[Mapping[str, Any]], T], entity: Mapping[str, Any]) -> T | None:
    """What ``read`` makes of a stored record, or None for one this release cannot read (reported)."""
    try:
        return read(entity)
    except NotUnderstood:
        return None


def _reported(entity: Mapping[str, Any], what: str, order_id: str | None) -> NotUnderstood:
    row = entity.get("RowKey")
    telemetry.emit_event(telemetry.NOT_UNDERSTOOD, orderId=order_id, record=row, what=what[:500])
    return NotUnderstood(f"its record {row}: {what}", order_id)


def _kept_rows(order_id: str, unknown: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The later release's properties of a task kept in one entity, back on the records they came from."""
    rows: dict[str, dict[str, Any]] = {}
    for name, value in unknown.items():
        if name.startswith(_KEPT_INPUT):
            row, name = _input_key(order_id), name.removeprefix(_KEPT_INPUT)
        elif match := _KEPT_STEP.match(name):
            row, name = _step_key(order_id, int(match[1])), match[2]
        else:
            row = _state_key(order_id)
        rows.setdefault(row, {})[name] = value
    return rows


def _unknown(entity: Mapping[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """The properties of a stored record this release does not write (a later release's): kept."""
    return {name: value for name, value in entity.items() if name not in known and not _CHUNK.match(name)}
