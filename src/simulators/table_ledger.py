"""The simulators' ledger in an Azure table, shared by every instance of the app that hosts them.

The Flex Consumption plan runs a Function App on several instances, and a retried call may land on any
of them: the ledger must be one record that all of them see. It lives in the state store's account, in
its own table (:func:`ledger_table_name`), one entity per service and idempotency key:

- PartitionKey is the service, RowKey the SHA-256 of the key (keys may hold ``/``, ``#``, ``?`` or
  control characters, which a RowKey may not, and may be longer than is wise for a key); the key itself
  is kept in the ``Key`` property.
- An apply inserts the entity (insert fails if it exists, so of two instances racing on one key exactly
  one applies it); the loser reads the winner's entry and answers as a replay.
- A compensation reads the entity and updates it only if its ETag is unchanged (``If-Match``); on a
  412 it reads again, finds the compensation the other instance made, and changes nothing.
- The result values the apply answered and the values the apply's and the undo's bodies carried are JSON
  text in ``Result``, ``Carried`` and ``UndoCarried``. ``AppliedSeq`` and ``CompensatedSeq`` order the
  changes by the time each was made, in microseconds since the epoch on the instance that made it: there
  is no one counter every instance shares (it would be one entity every call updates), so two changes
  made on two instances within their clocks' skew (milliseconds) may be ordered wrong. ``TraceIds`` is
  the JSON list of the distinct trace ids the key's calls came in; a replay or a repeated undo in a
  trace new to the entity adds its id with an ETag-conditional update, best effort (a lost race or a
  failed write leaves it out, and the call is answered all the same). An entity written before these
  properties existed reads with None in each.

The SDK's synchronous client runs in worker threads (``asyncio.to_thread``): its asynchronous client
needs aiohttp, which the app does not otherwise install, and these calls are a demo's, not the engine's.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.data.tables import EdmType, EntityProperty, TableClient, TableEntity, UpdateMode

from .ledger import Change, LedgerStore, LedgerUnavailable, Snapshot
from .models import SERVICES, LedgerEntry, ServiceName, Values

log = logging.getLogger(__name__)

DEFAULT_STATE_TABLE = "orders"
# Rounds of read-then-conditional-update a compensation tries; each lost round means another caller
# changed the entity, and once it is compensated the next read ends the loop.
MAX_UPDATE_ROUNDS = 5

T = TypeVar("T")


def ledger_table_name(state_table: str) -> str:
    """The ledger table that goes with a state table (as the watch table does)."""
    return f"{state_table}sim"


def row_key(key: str) -> str:
    """The RowKey of an idempotency key: valid whatever characters the key holds."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _values(entity: Mapping[str, Any], name: str) -> Values | None:
    text = entity.get(name)
    return None if text is None else dict(json.loads(str(text)))


def _sequence(entity: Mapping[str, Any], name: str) -> int | None:
    value = entity.get(name)
    # The SDK reads an Edm.Int64 back as an EntityProperty.
    value = value.value if isinstance(value, EntityProperty) else value
    return None if value is None else int(value)


def _trace_ids(entity: Mapping[str, Any]) -> tuple[str, ...] | None:
    text = entity.get("TraceIds")
    return None if text is None else tuple(str(trace) for trace in json.loads(str(text)))


def _now() -> EntityProperty:
    """This change's place in the order of changes: the time, in microseconds (see the module's note)."""
    return EntityProperty(time.time_ns() // 1000, EdmType.INT64)


def _json(values: Values) -> str:
    return json.dumps(values, separators=(",", ":"), sort_keys=True)


def _json_list(traces: tuple[str, ...]) -> str:
    return json.dumps(list(traces), separators=(",", ":"))


def _entry(entity: Mapping[str, Any]) -> LedgerEntry:
    return LedgerEntry(
        order_id=str(entity["OrderId"]),
        applied=1 if entity.get("Applied") else 0,
        compensated=1 if entity.get("Compensated") else 0,
        result=_values(entity, "Result"),
        carried=_values(entity, "Carried"),
        undo_carried=_values(entity, "UndoCarried"),
        applied_seq=_sequence(entity, "AppliedSeq"),
        compensated_seq=_sequence(entity, "CompensatedSeq"),
        trace_ids=_trace_ids(entity),
    )


class TableLedger(LedgerStore):
    """:class:`LedgerStore` on one table; any number of processes may share it."""

    def __init__(self, table: TableClient, *, create_table: bool = False) -> None:
        self.table = table
        # Locally (Azurite) the table is created on first use; in Azure the Bicep creates it and the
        # app's identity needs no right to create tables.
        self._create_table = create_table
        self._table_ready = not create_table
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, environ: Mapping[str, str]) -> TableLedger | None:
        """The ledger in the state store's account, or None if no state store is configured.

        Reads the app's own settings: ``STATE_STORE_CONNECTION`` (a connection string, local) or
        ``STATE_STORE_ENDPOINT`` with ``AZURE_CLIENT_ID`` (a managed identity, Azure), and
        ``STATE_TABLE_NAME``.
        """
        table_name = ledger_table_name(environ.get("STATE_TABLE_NAME") or DEFAULT_STATE_TABLE)
        connection = environ.get("STATE_STORE_CONNECTION")
        if connection:
            return cls(TableClient.from_connection_string(connection, table_name), create_table=True)
        endpoint = environ.get("STATE_STORE_ENDPOINT")
        if not endpoint:
            return None
        from azure.identity import DefaultAzureCredential  # only needed in Azure

        credential = DefaultAzureCredential(managed_identity_client_id=environ.get("AZURE_CLIENT_ID"))
        return cls(TableClient(endpoint=endpoint, table_name=table_name, credential=credential))

    @property
    def location(self) -> str:
        """The table's URL."""
        return f"{self.table.url}/{self.table.table_name}"

    # ---- LedgerStore -------------------------------------------------------------------------------
    async def find(self, service: ServiceName, key: str) -> LedgerEntry | None:
        """The entry of one key, read from the table."""
        entity = await self._run(self._read, service, key)
        return None if entity is None else _entry(entity)

    async def entries(self) -> Snapshot:
        """Every entry of the table (one query, paged by the SDK)."""
        return await self._run(self._entries)

    async def apply(
        self,
        service: ServiceName,
        key: str,
        order_id: str,
        *,
        result: Values | None = None,
        carried: Values | None = None,
        trace_id: str | None = None,
    ) -> Change:
        """Insert the key's entry; if it exists already, answer it unchanged (but for the trace ids)."""
        return await self._run(
            self._apply, service, key, order_id, dict(result or {}), dict(carried or {}), trace_id
        )

    async def compensate(
        self, service: ServiceName, key: str, *, carried: Values | None = None, trace_id: str | None = None
    ) -> Change:
        """Mark the key's entry compensated with an ETag-conditional update, once."""
        return await self._run(self._compensate, service, key, dict(carried or {}), trace_id)

    # ---- in a worker thread --------------------------------------------------------------------------
    async def _run(self, call: Callable[..., T], *args: Any) -> T:
        # Shielded like the file ledger: a cancelled request must not abandon a write half way.
        return await asyncio.shield(asyncio.to_thread(self._guarded, call, *args))

    def _guarded(self, call: Callable[..., T], *args: Any) -> T:
        try:
            self._ensure_table()
            return call(*args)
        except AzureError as exc:
            log.error("ledger table %s: %s", self.table.table_name, exc)
            raise LedgerUnavailable(f"the ledger table did not answer: {exc}") from exc

    def _ensure_table(self) -> None:
        if self._table_ready:
            return
        with self._lock:
            if not self._table_ready:
                with contextlib.suppress(ResourceExistsError):
                    self.table.create_table()
                self._table_ready = True

    def _read(self, service: ServiceName, key: str) -> TableEntity | None:
        try:
            return self.table.get_entity(service, row_key(key))
        except ResourceNotFoundError:
            return None

    def _entries(self) -> Snapshot:
        snapshot: Snapshot = {service: {} for service in SERVICES}
        for entity in self.table.list_entities():
            service = entity["PartitionKey"]
            if service in snapshot:
                snapshot[service][str(entity["Key"])] = _entry(entity).wire()
        return snapshot

    def _apply(
        self,
        service: ServiceName,
        key: str,
        order_id: str,
        result: Values,
        carried: Values,
        trace_id: str | None,
    ) -> Change:
        applied_at = _now()
        entry = LedgerEntry(
            order_id=order_id,
            applied=1,
            compensated=0,
            result=result,
            carried=carried,
            applied_seq=applied_at.value,
            trace_ids=(),
        ).traced(trace_id)
        entity = {
            "PartitionKey": service,
            "RowKey": row_key(key),
            "Key": key,
            "OrderId": order_id,
            "Applied": 1,
            "Compensated": 0,
            "Result": _json(result),
            "Carried": _json(carried),
            "AppliedSeq": applied_at,
            "TraceIds": _json_list(entry.trace_ids or ()),
        }
        try:
            self.table.create_entity(entity)
        except ResourceExistsError:
            existing = self._read(service, key)
            if existing is None:  # entries are never deleted, so this is a storage fault
                raise LedgerUnavailable(f"{service} key {key!r} exists and cannot be read") from None
            return Change(self._trace(service, key, existing, trace_id), changed=False)
        return Change(entry, changed=True)

    def _compensate(self, service: ServiceName, key: str, carried: Values, trace_id: str | None) -> Change:
        for _ in range(MAX_UPDATE_ROUNDS):
            existing = self._read(service, key)
            # A key never applied gets no entry: there is nothing to undo (as in the file ledger).
            if existing is None:
                return Change(None, changed=False)
            entry = _entry(existing)
            if entry.compensated:
                return Change(self._trace(service, key, existing, trace_id), changed=False)
            compensated_at = _now()
            undone = {"compensated": 1, "undo_carried": carried, "compensated_seq": compensated_at.value}
            after = entry.model_copy(update=undone).traced(trace_id)
            update: dict[str, Any] = {
                "PartitionKey": service,
                "RowKey": row_key(key),
                "Compensated": 1,
                "UndoCarried": _json(carried),
                "CompensatedSeq": compensated_at,
            }
            if after.trace_ids is not None:
                update["TraceIds"] = _json_list(after.trace_ids)
            try:
                self.table.update_entity(
                    update,
                    mode=UpdateMode.MERGE,
                    etag=existing.metadata["etag"],
                    match_condition=MatchConditions.IfNotModified,
                )
            except ResourceModifiedError:
                continue  # someone changed the entity since the read: read it again
            return Change(after, changed=True)
        raise LedgerUnavailable(f"{service} key {key!r} kept changing during {MAX_UPDATE_ROUNDS} updates")

    def _trace(
        self, service: ServiceName, key: str, entity: TableEntity, trace_id: str | None
    ) -> LedgerEntry:
        """The entry of ``entity`` with ``trace_id`` added (an ETag-conditional update) if it is new to it.

        Best effort: the call that came with it changes nothing else, so it is answered whatever happens
        here. Another caller's change to the entity since it was read makes it read again (a few rounds);
        a write that fails is logged, and the entry answered as it was.
        """
        for _ in range(MAX_UPDATE_ROUNDS):
            entry = _entry(entity)
            traced = entry.traced(trace_id)
            if traced is entry:
                return entry
            try:
                try:
                    self.table.update_entity(
                        {
                            "PartitionKey": service,
                            "RowKey": row_key(key),
                            "TraceIds": _json_list(traced.trace_ids or ()),
                        },
                        mode=UpdateMode.MERGE,
                        etag=entity.metadata["etag"],
                        match_condition=MatchConditions.IfNotModified,
                    )
                    return traced
                except ResourceModifiedError:
                    reread = self._read(service, key)  # someone changed it since the read: read it again
            except AzureError as exc:
                log.warning("cannot record trace %s on %s key %r: %s", trace_id, service, key, exc)
                return entry
            if reread is None:  # entries are never deleted, so this is a storage fault
                return entry
            entity = reread
        log.warning("cannot record trace %s on %s key %r: it kept changing", trace_id, service, key)
        return _entry(entity)
