"""The state store on Azure Table Storage (Azurite locally): :class:`TableStateStore`, the engine's
:class:`engine.ports.StateStore`, made of one unit a lifecycle.

Three tables, and a fourth for the search entries:

- the state table holds the live records of every task (in flight, in Error, finished in the last sweep
  interval), in shards of its OrderID, so a task's records change together in one transaction
  (:mod:`.live`);
- the watch table holds one small entry per in-flight task, the only table the Supervisor's sweep reads
  (:mod:`.watch`);
- the history table holds finished tasks for the retention period, then their tombstones
  (:mod:`.history`, with the shards' tallies in :mod:`.tallies`), and the parked tasks with their
  calendar (:mod:`.parking`);
- the search table holds the search entries (:mod:`.search`, which also lists and counts by state).

Which unit owns what:

- :mod:`.codec` - the one mapping between a task and every stored shape, and the keys (no I/O);
- :mod:`.tables` - the clients, the transaction, the operation counter, shared by every unit;
- :mod:`.live` - a task's submission, load and save, and its audit trail;
- :mod:`.watch` - the watch entries and the sweep's reads of them;
- :mod:`.history` - the id's row in the history (mark, finished task, tombstone), the move there, the
  clean-up;
- :mod:`.tallies` - each shard's counts of finished and parked tasks;
- :mod:`.parking` - park, return, calendar;
- :mod:`.search` - search entries, searches, listings and counts;
- :mod:`.switch` - the formats switch; :mod:`.indexing` - the listing's backfill.

Each unit's docstring says why its part is correct; the correctness of a submission (why an id is never
taken twice, live or finished) is :mod:`.live`'s, and rests on :mod:`.history`'s order of a move.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

from azure.core.exceptions import ResourceExistsError
from azure.data.tables.aio import TableClient, TableServiceClient

from engine import (
    AuditEntry,
    CreateOutcome,
    DeadLetterAction,
    ExpiredEntry,
    Formats,
    Page,
    ProcessState,
    PurgeReport,
    SearchQuery,
    StateCounts,
    Switch,
    TaskRecord,
)
from engine import (
    formats as format_records,  # the module: this class has a property of the name
)

from .codec import (
    CALENDAR,
    FINISHED,
    PARKED_KINDS,
    WAITING_TALLY,
    Codec,
    _archive_key,
    _listed_wait,
    _stamp,
    calendar_entity,
    listing_key,
    shard_of,
    tally_entity,
)
from .history import History
from .indexing import Indexing, IndexReport
from .live import DEAD_LETTER_PARTITION, Live, _may_have_been_swept
from .parking import Parking
from .search import Search, _encode_marks
from .switch import INSTANCE_ROW, SWITCH_PARTITION, SWITCH_ROW, FormatsSwitch
from .tables import (
    _RACES,
    _RANGE,
    HISTORY,
    SEARCH,
    STATE,
    WATCH,
    OnTables,
    OperationCounter,
    Tables,
    Transact,
    _empty_page,
    _random_tail,
    env_settings_in_use,
    history_table_name,
    search_table_name,
    watch_table_name,
)
from .tallies import Tallies
from .watch import Watches

__all__ = [
    "CALENDAR",
    "DEAD_LETTER_PARTITION",
    "FINISHED",
    "HISTORY",
    "INSTANCE_ROW",
    "PARKED_KINDS",
    "SEARCH",
    "STATE",
    "SWITCH_PARTITION",
    "SWITCH_ROW",
    "WAITING_TALLY",
    "WATCH",
    "_RACES",
    "_RANGE",
    "CreateOutcome",
    "IndexReport",
    "OperationCounter",
    "TableStateStore",
    "Transact",
    "_archive_key",
    "_empty_page",
    "_encode_marks",
    "_listed_wait",
    "_may_have_been_swept",
    "_stamp",
    "env_settings_in_use",
    "history_table_name",
    "listing_key",
    "search_table_name",
    "shard_of",
    "watch_table_name",
]


class TableStateStore(OnTables):
    """:class:`engine.ports.StateStore` on the live state table, the watch table and the history table: the
    units, put together on one set of tables.

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
        self.tables = tables = Tables(
            table, watch, shards, counter or OperationCounter(), history, transact, search, marks
        )
        self.codec = codec = Codec(shards, unique)
        self.watches = Watches(tables, codec)
        self.tallies = Tallies(tables, codec)
        self.searches = Search(tables, codec, self.tallies)
        self.archives = History(tables, codec, self.tallies, self.searches)
        self.live = Live(tables, codec, self.watches, self.archives, self.searches)
        self.parking = Parking(tables, codec, self.live, self.watches, self.archives, self.tallies, self)
        self.switch = FormatsSwitch(tables, codec)
        self.indexing = Indexing(tables, codec, self.live, self.watches, self.archives)

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

    # ---- what it shares with its units (the tables: OnTables; the codec's record format) -----------------
    @property
    def formats(self) -> Formats:
        """The record format it writes (engine.formats): the runtime's, kept current by the switch."""
        return self.codec.formats

    @formats.setter
    def formats(self, value: Formats) -> None:
        self.codec.formats = value

    @property
    def _transaction(self) -> Transact | None:
        return self.tables.transaction

    @_transaction.setter
    def _transaction(self, value: Transact | None) -> None:
        self.tables.transaction = value

    async def close(self) -> None:
        """Close the table clients (and their connections)."""
        await self.tables.close()

    # ---- the formats switch (engine.formats) ---------------------------------------------------------------
    async def read_switch(self) -> Switch | None:
        return await self.switch.read_switch()

    async def write_switch(self, switch: Switch) -> Switch | None:
        return await self.switch.write_switch(switch)

    async def announce(self, instance: format_records.Instance) -> None:
        await self.switch.announce(instance)

    async def instances(self) -> list[format_records.Instance]:
        return await self.switch.instances()

    async def forget(self, instance: format_records.Instance) -> None:
        await self.switch.forget(instance)

    async def holds_tasks(self) -> bool:
        return await self.switch.holds_tasks()

    # ---- the stored shapes, for tools that write them directly (bench) -------------------------------------
    def archive_entities(
        self, record: TaskRecord, audited: bool = False
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.codec.archive_entities(record, audited)

    def parked_entities(
        self, record: TaskRecord, audited: bool = False
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.codec.parked_entities(record, audited)

    tally_entity = staticmethod(tally_entity)
    calendar_entity = staticmethod(calendar_entity)

    # ---- one task: live records, audit ---------------------------------------------------------------------
    async def create(self, record: TaskRecord) -> tuple[CreateOutcome, TaskRecord]:
        return await self.live.create(record)

    async def load(self, order_id: str) -> TaskRecord | None:
        return await self.live.load(order_id)

    async def save(self, record: TaskRecord) -> TaskRecord:
        """A parked task is saved back to the live records (:meth:`Parking.unpark`); any other, in place."""
        if record.parked:
            return await self.parking.unpark(record)
        return await self.live.save(record)

    async def audit(self, order_id: str, archived: bool = False) -> list[AuditEntry]:
        return await self.live.audit(order_id, archived)

    async def append_audit(self, order_id: str, entry: AuditEntry) -> None:
        await self.live.append_audit(order_id, entry)

    async def append_dead_letter_audit(self, entry: DeadLetterAction) -> None:
        await self.live.append_dead_letter_audit(entry)

    async def dead_letter_audit(self, queue: str) -> list[DeadLetterAction]:
        return await self.live.dead_letter_audit(queue)

    # ---- the watch table -----------------------------------------------------------------------------------
    def expired(self, now: datetime) -> AsyncIterator[ExpiredEntry]:
        return self.watches.expired(now)

    async def rewatch(self, entry: ExpiredEntry, complete_by: datetime) -> None:
        await self.watches.rewatch(entry, complete_by)

    async def unwatch(self, entry: ExpiredEntry) -> None:
        await self.watches.unwatch(entry)

    # ---- the history ---------------------------------------------------------------------------------------
    async def archive(self, record: TaskRecord) -> bool:
        return await self.archives.archive(record)

    async def take_back(self, record: TaskRecord) -> bool:
        return await self.archives.take_back(record)

    async def purge(self, finished_before: datetime, tombstone_until: datetime, limit: int) -> PurgeReport:
        return await self.archives.purge(finished_before, tombstone_until, limit)

    async def drop_tombstones(self, before: datetime, limit: int) -> int:
        return await self.archives.drop_tombstones(before, limit)

    # ---- parked tasks --------------------------------------------------------------------------------------
    async def park(self, record: TaskRecord, entry: ExpiredEntry) -> bool:
        return await self.parking.park(record, entry)

    async def promote(self, now: datetime, horizon: float, limit: int = 1000) -> int:
        return await self.parking.promote(now, horizon, limit)

    # ---- listings, counts and search -----------------------------------------------------------------------
    async def list_by_state(
        self,
        state: ProcessState,
        page_size: int,
        continuation: str | None,
        waiting_for: str | None = None,
        submitter: str | None = None,
    ) -> Page:
        return await self.searches.list_by_state(state, page_size, continuation, waiting_for, submitter)

    async def search_orders(self, query: SearchQuery, page_size: int, continuation: str | None) -> Page:
        return await self.searches.search_orders(query, page_size, continuation)

    async def count_by_state(self, limit: int) -> StateCounts:
        return await self.searches.count_by_state(limit)

    # ---- building the listing of a store written before it -------------------------------------------------
    async def index_page(self, shard: int, continuation: str | None, page_size: int = 100) -> IndexReport:
        return await self.indexing.index_page(shard, continuation, page_size)
