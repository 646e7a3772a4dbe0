"""The state store on Azure Table Storage (Azurite locally).

Two tables:

- The state table. PartitionKey is a shard (``s00``..``s{N-1}``) derived from the OrderID, so a task's
  records share a partition and change together in one entity-group transaction:
  ``order|<id>|state`` - the task state record (``OrderID``, ``LockedBy``, ``CompleteBy``,
  ``ProcessState``, ``FailureCount``, ...); ``order|<id>|input`` - the submitted body;
  ``order|<id>|step|NN`` - one record per step; ``audit|<id>|<time>|<n>`` - one audit entry per
  operator action or automatic Error, written in the transaction that makes the change (outside the
  ``order|<id>|`` range, so loading a task never reads its history).
- The watch table (``<state table>watch``): one small entry per in-flight task, keyed by shard and
  OrderID, holding a CompleteBy that is never later than the task's own. The Supervisor's sweep reads
  only this table, one range query per shard, so its cost follows the in-flight work however much
  completed history the state table holds (even on an emulator that scans a whole table per query).

The watch entry is written before the task first becomes in flight (submission, resubmission) and is
otherwise maintained by the Supervisor: an entry whose time has come but whose task is still running
is moved to the task's current CompleteBy, and one whose task has finished is removed. Because every
transition sets CompleteBy later than the previous one, the entry stays a lower bound, and a step
transition costs at most two table operations: the load (one query) and the save (one transaction); the
Scheduler skips the load when its message carries the task as saved (see ``engine.saved_task``).

The store uses the asynchronous clients (``azure.data.tables.aio``, on azure-core's aiohttp transport), so
a slow table service holds no thread. Like every aio client, they belong to the event loop they are
first used on.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import threading
import uuid
import zlib
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from azure.core import MatchConditions
from azure.core.async_paging import AsyncPageIterator
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import TableEntity, TableTransactionError, UpdateMode
from azure.data.tables.aio import TableClient, TableServiceClient

from adapters.table_batch import submit_transaction
from engine.deadletters import DeadLetterAction
from engine.errors import ConcurrencyError, InvalidContinuation
from engine.ports import CreateOutcome, ExpiredEntry, Page, StateCounts
from engine.state import AuditEntry, ProcessState, StepState, TaskRecord, TaskState

# The task-state rows of one shard (@pk), for queries over tasks rather than one task's key range.
_STATE_ROWS = "PartitionKey eq @pk and RowKey ge 'order|' and RowKey lt 'order}' and Kind eq 'state'"
_BODY_CHUNK = 30_000  # characters; a string property holds 64 KiB of UTF-16
_STATE_FIELDS = {name: field.alias or name for name, field in TaskState.model_fields.items()}
_STEP_FIELDS = {name: field.alias or name for name, field in StepState.model_fields.items()}
_AUDIT_FIELDS = [field.alias or name for name, field in AuditEntry.model_fields.items()]
_DEAD_LETTER_FIELDS = [field.alias or name for name, field in DeadLetterAction.model_fields.items()]
# The partition of dead-letter actions that name no known task (outside the s00.. shards).
DEAD_LETTER_PARTITION = "deadletters"


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


def shard_of(order_id: str, shards: int) -> str:
    """The partition a task lives in: stable for an id, spread evenly."""
    return f"s{zlib.crc32(order_id.encode()) % shards:02d}"


def _state_key(order_id: str) -> str:
    return f"order|{order_id}|state"


def _input_key(order_id: str) -> str:
    return f"order|{order_id}|input"


def _step_key(order_id: str, index: int) -> str:
    return f"order|{order_id}|step|{index:02d}"


def _audit_prefix(order_id: str) -> str:
    return f"audit|{order_id}|"


class TableStateStore:
    """:class:`engine.ports.StateStore` on one Azure table."""

    def __init__(
        self,
        table: TableClient,
        watch: TableClient,
        shards: int = 8,
        counter: OperationCounter | None = None,
    ) -> None:
        if not 1 <= shards <= 100:
            raise ValueError("shards must be between 1 and 100")
        self.table = table
        self.watch = watch
        self.shards = shards
        self.counter = counter or OperationCounter()

    @classmethod
    async def from_service(
        cls, service: TableServiceClient, table_name: str, shards: int = 8
    ) -> TableStateStore:
        """A store on ``table_name`` and its watch table, creating both if missing (Bicep does in Azure)."""
        watch_name = watch_table_name(table_name)
        for name in (table_name, watch_name):
            with contextlib.suppress(ResourceExistsError):
                await service.create_table(name)
        return cls(service.get_table_client(table_name), service.get_table_client(watch_name), shards)

    async def close(self) -> None:
        """Close both table clients (and their connections)."""
        await self.table.close()
        await self.watch.close()

    # ---- entity mapping --------------------------------------------------------------------------
    def _pk(self, order_id: str) -> str:
        return shard_of(order_id, self.shards)

    def _state_entity(self, record: TaskRecord) -> dict[str, Any]:
        state = record.state
        entity: dict[str, Any] = {
            "PartitionKey": self._pk(state.order_id),
            "RowKey": _state_key(state.order_id),
            "Kind": "state",
            "Watched": state.process_state.in_flight and state.complete_by is not None,
        }
        for name, alias in _STATE_FIELDS.items():
            value = getattr(state, name)
            if value is None:
                continue  # Table storage has no nulls: a missing property reads back as None
            entity[alias] = value.value if hasattr(value, "value") else value
        return entity

    def _step_entity(self, order_id: str, step: StepState) -> dict[str, Any]:
        entity: dict[str, Any] = {
            "PartitionKey": self._pk(order_id),
            "RowKey": _step_key(order_id, step.index),
            "Kind": "step",
            "OrderID": order_id,
        }
        for name, alias in _STEP_FIELDS.items():
            value = getattr(step, name)
            if value is None:
                continue
            if name == "result":
                value = json.dumps(value, separators=(",", ":"))
            entity[alias] = value.value if hasattr(value, "value") else value
        return entity

    def _input_entity(self, record: TaskRecord) -> dict[str, Any]:
        body = json.dumps(record.input, separators=(",", ":"), sort_keys=True)
        chunks = [body[i : i + _BODY_CHUNK] for i in range(0, len(body), _BODY_CHUNK)] or [""]
        entity: dict[str, Any] = {
            "PartitionKey": self._pk(record.order_id),
            "RowKey": _input_key(record.order_id),
            "Kind": "input",
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
            "CompleteBy": state.complete_by,
        }

    @staticmethod
    def _to_state(entity: dict[str, Any]) -> TaskState:
        values = {alias: entity[alias] for alias in _STATE_FIELDS.values() if entity.get(alias) is not None}
        return TaskState.model_validate(values)

    @staticmethod
    def _to_step(entity: dict[str, Any]) -> StepState:
        values = {alias: entity[alias] for alias in _STEP_FIELDS.values() if entity.get(alias) is not None}
        if "Result" in values:
            values["Result"] = json.loads(values["Result"])
        return StepState.model_validate(values)

    # ---- operations ------------------------------------------------------------------------------
    async def create(self, record: TaskRecord) -> tuple[CreateOutcome, TaskRecord]:
        """Watch the task, then write its input, state and steps in one transaction (all or nothing).

        The watch entry goes first: a crash in between leaves an entry the Supervisor removes, while the
        other order could leave a Pending task nobody watches. A submission refused because the order
        exists (409) changes neither that order's watch entry nor, for a finished order, adds one.
        """
        state_entity = self._state_entity(record)
        operations: list[Any] = [
            ("create", self._input_entity(record)),
            ("create", state_entity),
            *(("create", self._step_entity(record.order_id, s)) for s in record.steps),
        ]
        # Insert only: an entry already there is the task's own (or one left by a crash before its
        # transaction), and never later than that task's CompleteBy; moving it would break that bound.
        added = await self._add_watch(record.state) if state_entity["Watched"] else None
        try:
            self.counter.add(table=STATE, entities=len(operations))
            results = await submit_transaction(self.table, operations)
        except TableTransactionError as exc:
            if exc.status_code != 409:
                raise
            existing = await self.load(record.order_id)
            if added is not None and existing is not None and not existing.indexed:
                # The order exists and is not watched (it has finished): a refused or repeated
                # submission leaves nothing behind.
                await self._remove_watch(record.order_id, added)
            if existing is None:  # deleted in between: extremely unlikely; report as a conflict
                return CreateOutcome.EXISTS_DIFFERENT, record
            same = existing.input_hash == record.input_hash
            return (CreateOutcome.EXISTS_SAME if same else CreateOutcome.EXISTS_DIFFERENT), existing
        # The transaction's answer carries every new ETag: no need to read the task back.
        for (_, entity), result in zip(operations, results, strict=True):
            if entity.get("Kind") in ("state", "step"):
                record.etags[entity["RowKey"]] = result["etag"]
        record.indexed = bool(state_entity["Watched"])
        record.mark_saved()
        return CreateOutcome.CREATED, record

    async def load(self, order_id: str) -> TaskRecord | None:
        """One query over the task's key range."""
        entities = [
            entity
            async for entity in self.table.query_entities(
                "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
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
        steps = sorted((self._to_step(e) for e in entities if e.get("Kind") == "step"), key=lambda s: s.index)
        body = "".join(input_entity.get(f"Body{i}", "") for i in range(int(input_entity["BodyChunks"])))
        etags = {_state_key(order_id): state_entity.metadata["etag"] or ""}
        for e in entities:
            if e.get("Kind") == "step":
                etags[e["RowKey"]] = e.metadata["etag"] or ""
        return TaskRecord(
            state=self._to_state(state_entity),
            steps=steps,
            input=json.loads(body) if body else {},
            input_hash=input_entity["BodyHash"],
            etags=etags,
            indexed=bool(state_entity.get("Watched")),
        )

    async def save(self, record: TaskRecord) -> TaskRecord:
        """The state, the changed steps and the index entry, in one ETag-conditional transaction."""
        order_id = record.order_id
        state_entity = self._state_entity(record)
        conditional = {"mode": UpdateMode.REPLACE, "match_condition": MatchConditions.IfNotModified}
        operations: list[Any] = [
            ("update", state_entity, {**conditional, "etag": record.etags[_state_key(order_id)]})
        ]
        for index in record.changed_steps():
            entity = self._step_entity(order_id, record.steps[index])
            operations.append(("update", entity, {**conditional, "etag": record.etags[entity["RowKey"]]}))
        for n, entry in enumerate(record.pending_audit()):
            operations.append(("create", self._audit_entity(order_id, entry, n)))
        if state_entity["Watched"] and not record.indexed:
            await self._put_watch(
                record.state
            )  # back in flight (resubmitted): watch before the state says so
        try:
            self.counter.add(table=STATE, entities=len(operations))
            results = await submit_transaction(self.table, operations)
        except TableTransactionError as exc:
            if exc.status_code in (404, 409, 412):
                raise ConcurrencyError(order_id) from exc
            raise
        for (_, entity, *_), result in zip(operations, results, strict=False):
            if entity["RowKey"] in record.etags and result.get("etag"):
                record.etags[entity["RowKey"]] = result["etag"]
        record.indexed = bool(state_entity["Watched"])
        record.mark_saved()
        return record

    def _audit_entity(self, order_id: str, entry: AuditEntry, n: int) -> dict[str, Any]:
        # Time first so a range query returns the history in order; a random tail keeps two entries
        # written in the same microsecond (two instances) apart.
        stamp = entry.at.strftime("%Y%m%dT%H%M%S%fZ")
        entity: dict[str, Any] = {
            "PartitionKey": self._pk(order_id),
            "RowKey": f"{_audit_prefix(order_id)}{stamp}|{n:02d}{uuid.uuid4().hex[:8]}",
            "Kind": "audit",
            "OrderID": order_id,
        }
        for alias, value in entry.model_dump(by_alias=True, mode="python").items():
            if value is not None:
                entity[alias] = value.value if hasattr(value, "value") else value
        return entity

    async def audit(self, order_id: str) -> list[AuditEntry]:
        """The task's audit entries, oldest first: one range query in the task's partition."""
        prefix = _audit_prefix(order_id)
        entities = [
            entity
            async for entity in self.table.query_entities(
                "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
                parameters={"pk": self._pk(order_id), "lo": prefix, "hi": f"{prefix}~"},
            )
        ]
        self.counter.add(table=STATE, entities=len(entities))
        entries = [
            AuditEntry.model_validate({a: e[a] for a in _AUDIT_FIELDS if e.get(a) is not None})
            for e in sorted(entities, key=lambda e: str(e["RowKey"]))
        ]
        return entries

    async def append_audit(self, order_id: str, entry: AuditEntry) -> None:
        """Add an entry to a task's audit trail on its own, for an action that changes no task record
        (a dead-lettered message of the task replayed or purged)."""
        self.counter.add(table=STATE, entities=1)
        await self.table.create_entity(self._audit_entity(order_id, entry, 0))

    async def append_dead_letter_audit(self, entry: DeadLetterAction) -> None:
        """Audit a dead-letter action that names no known task: partition ``deadletters``, one
        ``audit|<queue>|<time>|...`` row per action, so a queue's history is one range query."""
        stamp = entry.at.strftime("%Y%m%dT%H%M%S%fZ")
        entity: dict[str, Any] = {
            "PartitionKey": DEAD_LETTER_PARTITION,
            "RowKey": f"audit|{entry.queue}|{stamp}|{uuid.uuid4().hex[:8]}",
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
                "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
                parameters={"pk": DEAD_LETTER_PARTITION, "lo": prefix, "hi": f"{prefix}~"},
            )
        ]
        self.counter.add(table=STATE, entities=len(entities))
        return [
            DeadLetterAction.model_validate({a: e[a] for a in _DEAD_LETTER_FIELDS if e.get(a) is not None})
            for e in sorted(entities, key=lambda e: str(e["RowKey"]))
        ]

    async def _add_watch(self, state: TaskState) -> str | None:
        """Insert the task's watch entry; its ETag, or None if an entry is already there."""
        self.counter.add(table=WATCH, entities=1)
        try:
            created = await self.watch.create_entity(self._watch_entity(state))
        except ResourceExistsError:
            return None
        return str(created.get("etag") or "")

    async def _remove_watch(self, order_id: str, etag: str) -> None:
        """Delete the watch entry this store inserted, unless it changed since."""
        self.counter.add(table=WATCH, entities=1)
        with contextlib.suppress(ResourceNotFoundError, ResourceModifiedError):
            await self.watch.delete_entity(
                self._pk(order_id), order_id, etag=etag, match_condition=MatchConditions.IfNotModified
            )

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
                        token=entity.metadata["etag"] or "",
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

    async def list_by_state(self, state: ProcessState, page_size: int, continuation: str | None) -> Page:
        """Tasks in one state, filling the page shard by shard; the continuation token carries the
        shard and the table's own token."""
        shard, token = _decode_token(continuation)
        items: list[TaskState] = []
        while shard < self.shards and len(items) < page_size:
            pages = self.table.query_entities(
                f"{_STATE_ROWS} and ProcessState eq @state",
                parameters={"pk": f"s{shard:02d}", "state": state.value},
                results_per_page=page_size - len(items),
            ).by_page(continuation_token=token)
            found = [self._to_state(e) async for e in await anext(pages, _empty_page())]
            self.counter.add(table=STATE, entities=len(found))
            items.extend(found)
            # by_page is typed as a plain iterator; it is the SDK's PageIterator, which keeps the token.
            token = cast(AsyncPageIterator[TableEntity], pages).continuation_token
            if token is None:
                shard += 1
        more = shard < self.shards
        return Page(items, _encode_token(shard, token) if more else None)

    async def count_by_state(self, limit: int) -> StateCounts:
        """Every task's state in one pass per shard, reading only its ``ProcessState`` (a projection),
        until ``limit`` tasks are counted. The service still scans each shard's order rows (the state is
        not part of any key), so this costs in proportion to stored orders, like a listing: one pass for
        every state instead of one listing per state."""
        counts = dict.fromkeys(ProcessState, 0)
        seen = 0
        for shard in range(self.shards):
            entities = self.table.query_entities(
                _STATE_ROWS,
                parameters={"pk": f"s{shard:02d}"},
                select=["ProcessState"],
                results_per_page=1000,
            )
            before = seen
            try:
                async for entity in entities:
                    if seen == limit:
                        return StateCounts(counts, complete=False)
                    counts[ProcessState(entity["ProcessState"])] += 1
                    seen += 1
            finally:
                self.counter.add(1 + (seen - before) // 1000, table=STATE, entities=seen - before)
        return StateCounts(counts, complete=True)


async def _empty_page() -> AsyncIterator[TableEntity]:
    """A page with nothing on it (what ``anext`` returns when the query has no page left)."""
    return
    yield


def _encode_token(shard: int, token: Any) -> str:
    raw = json.dumps({"s": shard, "t": token}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_token(value: str | None) -> tuple[int, Any]:
    if not value:
        return 0, None
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        data = json.loads(raw)
        return int(data["s"]), data.get("t")
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidContinuation(value) from exc
