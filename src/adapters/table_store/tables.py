"""What the units of the store share: the four table clients, how a transaction is sent, the operation
counter, and the few table primitives every unit uses (an insert that says whether it went in, a delete
conditional on an ETag, a task's audit rows).

The store uses the asynchronous clients (``azure.data.tables.aio``, on azure-core's aiohttp transport), so
a slow table service holds no thread. Like every aio client, they belong to the event loop they are
first used on.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import TableEntity, TableTransactionError
from azure.data.tables.aio import TableClient

from adapters.table_batch import submit_transaction

from .codec import Codec, _audit_prefix

# The task-state rows of one shard (@pk), for queries over tasks rather than one task's key range.
_STATE_ROWS = "PartitionKey eq @pk and RowKey ge 'order|' and RowKey lt 'order}' and Kind eq 'state'"
_RANGE = "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi"
_RANGE_WAITING = _RANGE + " and WaitingFor eq @kind"
# Entities per entity-group transaction (Azure's limit).
_BATCH = 100
_RACES = 5  # attempts at a write that loses a race on a shared row (a tally) before giving up for now
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


def _conflict(exc: TableTransactionError) -> bool:
    """The transaction was refused because an entity changed, appeared or went meanwhile."""
    return exc.status_code in (404, 409, 412)


async def _nothing() -> None:
    return None


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


async def _empty_page() -> AsyncIterator[TableEntity]:
    """A page with nothing on it (what ``anext`` returns when the query has no page left)."""
    return
    yield


class Tables:
    """The store's table clients and what every unit of it shares: its shards, its operation counter, how it
    sends a transaction, whether a submission marks its id in the history.

    ``history`` may be left out only by code that uses the entity mapping or the live records alone (it
    is then not checked at submission, and nothing can be archived or purged). Without ``search``, orders
    are written with no search entries, and searches find nothing.
    """

    def __init__(
        self,
        table: TableClient,
        watch: TableClient,
        shards: int,
        counter: OperationCounter,
        history: TableClient | None,
        transact: Transact | None,
        search: TableClient | None,
        marks: bool,
    ) -> None:
        self.table = table
        self.watch = watch
        self.history = history
        self.search = search
        self.shards = shards
        self.counter = counter
        self.transaction = transact
        self.marks = marks

    async def close(self) -> None:
        """Close the table clients (and their connections)."""
        await self.table.close()
        await self.watch.close()
        if self.history is not None:
            await self.history.close()
        if self.search is not None:
            await self.search.close()


class OnTables:
    """What reads the shared :class:`Tables` through its own attributes (a unit, and the store that puts
    the units together)."""

    tables: Tables

    @property
    def table(self) -> TableClient:
        return self.tables.table

    @property
    def watch(self) -> TableClient:
        return self.tables.watch

    @property
    def history(self) -> TableClient | None:
        return self.tables.history

    @property
    def search(self) -> TableClient | None:
        return self.tables.search

    @property
    def shards(self) -> int:
        return self.tables.shards

    @property
    def counter(self) -> OperationCounter:
        return self.tables.counter

    @property
    def marks(self) -> bool:
        return self.tables.marks

    def _history(self) -> TableClient:
        if self.history is None:
            raise RuntimeError("this store has no history table")
        return self.history


class Unit(OnTables):
    """A unit of the store: its part of the work on the shared :class:`Tables`, with the :class:`Codec`."""

    def __init__(self, tables: Tables, codec: Codec) -> None:
        self.tables = tables
        self.codec = codec

    def _pk(self, order_id: str) -> str:
        return self.codec.pk(order_id)

    async def _transact(self, table: TableClient, operations: list[Any]) -> list[Mapping[str, Any]]:
        # The module's submit_transaction is looked up at each call (tests wrap it to make a request fail).
        return await (self.tables.transaction or submit_transaction)(table, operations)

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
