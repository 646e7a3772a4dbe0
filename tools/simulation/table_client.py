"""The asynchronous ``TableClient`` of azure-data-tables, as far as the adapters use it, on the simulated
service of :mod:`simulation.tables`: so the simulation runs ``adapters.table_store`` and
``adapters.breaker_store`` themselves, every request of theirs, and a bug in them (a dropped If-Match, a
wrong key, a missed continuation) is a bug the simulation can find.

Each call is one request, as over HTTP: it first goes through ``io.before`` (its latency; the process may
die before it arrives, or the call fail at once with a 503), then takes effect at once, then goes through
``io.after`` (the process may die, or the answer be lost, after it took effect). A query is one request per
page. Answers and errors are the SDK's: entities as :class:`~azure.data.tables.TableEntity` with their ETag in
``metadata``, ``ResourceNotFoundError``, ``ResourceExistsError`` and ``ResourceModifiedError`` for point
operations, :class:`~azure.data.tables.TableTransactionError` with the status and error code for a refused
transaction, and, as the SDK does, nothing for a point delete of an absent entity.

Which refusals may also lose their answer on the way back (``io.after``): those the adapters take as an
answer rather than a failure (an absent entity on a point read, a submission's write of an id that is
there already, anything the watch table answers). That is where the model of the adapter that the
regression seeds of ``tests/simulation/regressions.py`` were found on drew them, so those seeds keep
exploring the same interleavings; a refused conditional write of a task, the history or a breaker reports
its refusal.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from typing import Any, Protocol

from azure.core import MatchConditions
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.data.tables import TableEntity, TableTransactionError, UpdateMode

from .tables import MAX_PAGE, Operation, Row, Table, TableError, parse_filter, query


class Requests(Protocol):
    """What every request to the simulated service goes through (see :mod:`simulation.world`)."""

    def before(self, kind: str) -> Awaitable[None]:
        """The request is on its way: may crash the caller or refuse the call at once; the awaitable is
        its latency."""
        ...

    def after(self, kind: str) -> None:
        """The request took effect: may crash the caller or lose the answer."""
        ...


_POINT_ERRORS: dict[int, type[HttpResponseError]] = {
    404: ResourceNotFoundError,
    409: ResourceExistsError,
    412: ResourceModifiedError,
}


def _entity(row: Row, select: Iterable[str] | None = None) -> TableEntity:
    props = row.props
    entity = TableEntity(props if select is None else {name: props[name] for name in select if name in props})
    entity._metadata = {"etag": row.etag, "timestamp": None}
    return entity


def _condition(etag: str | None, match_condition: MatchConditions | None) -> str | None:
    """The ETag a write is conditional on (None: unconditional), as the SDK turns its arguments into
    ``If-Match``."""
    if match_condition is MatchConditions.IfNotModified:
        if not etag:
            raise ValueError("IfNotModified needs an etag")
        return etag
    return None


def _operation(item: Any) -> tuple[str, Operation]:
    """An SDK transaction tuple (``("create", entity)``, ``("update", entity, {...})``, ...) as the
    partition it names and the operation."""
    verb, entity, *rest = item
    options: Mapping[str, Any] = rest[0] if rest else {}
    pk, rk = entity["PartitionKey"], entity["RowKey"]
    merge = options.get("mode", UpdateMode.MERGE) is UpdateMode.MERGE
    if verb == "create":
        return pk, Operation("create", rk, entity)
    if verb == "upsert":
        return pk, Operation("upsert", rk, entity, merge=merge)
    etag = _condition(options.get("etag"), options.get("match_condition"))
    if verb == "update":
        return pk, Operation("update", rk, entity, etag, merge)
    if verb == "delete":
        return pk, Operation("delete", rk, etag=etag)
    raise TypeError(f"unknown transaction operation {verb!r}")


def _transaction_error(refused: TableError) -> TableTransactionError:
    """The SDK's error for a refused transaction (built here, not in the frame that raises it: a local
    holding it would keep that frame and the error in a cycle for the garbage collector)."""
    error = TableTransactionError(message=f"{refused.index}:{refused.code}")
    error.status_code = refused.status
    error.error_code = refused.code  # type: ignore[attr-defined]  # the SDK sets it the same way
    return error


class _Page:
    """One page of a query's answer."""

    def __init__(self, entities: list[TableEntity]) -> None:
        self._entities = entities

    def __aiter__(self) -> AsyncIterator[TableEntity]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[TableEntity]:
        for entity in self._entities:
            yield entity


class _Pages:
    """``by_page()``: one request per page; ``continuation_token`` is the next page's start, as the SDK
    keeps it (``{"PartitionKey": ..., "RowKey": ...}``), None after the last page."""

    def __init__(
        self,
        client: SimTableClient,
        text: str,
        parameters: Mapping[str, Any],
        select: Any,
        per_page: int,
        token: Any,
    ) -> None:
        self._client = client
        self._where = parse_filter(text).bind(parameters)
        self._select = select
        self._per_page = per_page
        self._start: tuple[str, str] | None = (token["PartitionKey"], token["RowKey"]) if token else None
        self._done = False
        self.continuation_token: Any = token

    def __aiter__(self) -> _Pages:
        return self

    async def __anext__(self) -> _Page:
        if self._done:
            raise StopAsyncIteration
        client = self._client
        kind = f"{client.label}.query"
        await client.io.before(kind)
        rows, following = query(client.table, self._where, self._start, self._per_page)
        page = _Page([_entity(row, self._select) for row in rows])
        client.io.after(kind)
        self._start = following
        self._done = following is None
        self.continuation_token = (
            {"PartitionKey": following[0], "RowKey": following[1]} if following is not None else None
        )
        return page


class _Query:
    """What ``query_entities`` returns: iterable entity by entity across pages, or page by page."""

    def __init__(
        self, client: SimTableClient, text: str, parameters: Mapping[str, Any], select: Any, per_page: int
    ) -> None:
        parse_filter(text)  # refused here, as the SDK refuses a malformed call when it is made
        self._args = (client, text, parameters, select, per_page)

    def by_page(self, continuation_token: Any = None) -> _Pages:
        return _Pages(*self._args, continuation_token)

    def __aiter__(self) -> AsyncIterator[TableEntity]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[TableEntity]:
        async for page in self.by_page():
            async for entity in page:
                yield entity


class SimTableClient:
    """``azure.data.tables.aio.TableClient`` on one simulated table; ``label`` names its requests
    (``<label>.<operation>``) for the world's faults and the traces."""

    def __init__(self, table: Table, io: Requests, label: str, answers_refusals: bool = False) -> None:
        self.table = table
        self.io = io
        self.label = label
        self.table_name = table.name
        # Whether every refusal of this table is an answer that may be lost too (see the module's docstring).
        self._answers_refusals = answers_refusals

    async def _request(
        self, operation: str, pk: str, operations: list[Operation], answered: bool
    ) -> list[str | None]:
        kind = f"{self.label}.{operation}"
        await self.io.before(kind)
        try:
            etags = self.table.apply(pk, operations)
        except TableError:
            if answered or self._answers_refusals:
                self.io.after(kind)
            raise
        self.io.after(kind)
        return etags

    async def _point(self, operation: str, pk: str, op: Operation) -> dict[str, Any]:
        try:
            [etag] = await self._request(operation, pk, [op], answered=False)
        except TableError as exc:
            if exc.status in _POINT_ERRORS:
                raise _POINT_ERRORS[exc.status](message=f"{exc.code}: {exc.key}") from exc
            raise
        return {"etag": etag, "date": None, "version": None}

    # ---- reads ------------------------------------------------------------------------------------------
    async def get_entity(
        self, partition_key: str, row_key: str, *, select: Any = None, **_: Any
    ) -> TableEntity:
        kind = f"{self.label}.get"
        await self.io.before(kind)
        row = self.table.get(partition_key, row_key)
        # An absent entity is an answer the adapters expect: it may be lost on the way back as well.
        self.io.after(kind)
        if row is None:
            raise ResourceNotFoundError(message=f"ResourceNotFound: {row_key}")
        return _entity(row, select)

    def query_entities(
        self,
        query_filter: str,
        *,
        parameters: Mapping[str, Any] | None = None,
        select: Any = None,
        results_per_page: int | None = None,
        **_: Any,
    ) -> _Query:
        per_page = min(results_per_page or MAX_PAGE, MAX_PAGE)
        if isinstance(select, str):
            select = [name.strip() for name in select.split(",")]
        return _Query(self, query_filter, parameters or {}, select, per_page)

    # ---- point writes -----------------------------------------------------------------------------------
    async def create_entity(self, entity: Mapping[str, Any], **_: Any) -> dict[str, Any]:
        return await self._point(
            "create", entity["PartitionKey"], Operation("create", entity["RowKey"], entity)
        )

    async def upsert_entity(
        self, entity: Mapping[str, Any], mode: UpdateMode = UpdateMode.MERGE, **_: Any
    ) -> dict[str, Any]:
        op = Operation("upsert", entity["RowKey"], entity, merge=mode is UpdateMode.MERGE)
        return await self._point("upsert", entity["PartitionKey"], op)

    async def update_entity(
        self,
        entity: Mapping[str, Any],
        mode: UpdateMode = UpdateMode.MERGE,
        *,
        etag: str | None = None,
        match_condition: MatchConditions | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        op = Operation(
            "update", entity["RowKey"], entity, _condition(etag, match_condition), mode is UpdateMode.MERGE
        )
        return await self._point("update", entity["PartitionKey"], op)

    async def delete_entity(
        self,
        partition_key: str | Mapping[str, Any],
        row_key: str | None = None,
        *,
        etag: str | None = None,
        match_condition: MatchConditions | None = None,
        **_: Any,
    ) -> None:
        if isinstance(partition_key, str):
            pk = partition_key
        else:  # delete_entity(entity)
            pk, row_key = partition_key["PartitionKey"], partition_key["RowKey"]
        assert row_key is not None
        op = Operation("delete", row_key, etag=_condition(etag, match_condition))
        try:
            await self._point("delete", pk, op)
        except ResourceNotFoundError:
            return  # the SDK answers an absent entity's delete as done

    # ---- transactions -----------------------------------------------------------------------------------
    async def submit_transaction(self, operations: Iterable[Any], **_: Any) -> list[Mapping[str, Any]]:
        """An entity-group transaction: each operation's ``{"etag": ...}`` (``{}`` for a delete), or
        :class:`TableTransactionError`. Like ``adapters.table_batch.submit_transaction``, an empty one
        sends nothing."""
        items = [_operation(item) for item in operations]
        if not items:
            return []
        pk = items[0][0]
        ops = [op for _, op in items]
        creation = all(op.verb == "create" for op in ops)
        try:
            if any(other != pk for other, _ in items):
                raise TableError(400, "CommandsInBatchActOnDifferentPartitions")
            # A submission's write of an id already there is an answer (the order exists), not a failure.
            etags = await self._request("transaction", pk, ops, answered=creation)
        except TableError as exc:
            raise _transaction_error(exc) from exc
        return [{"etag": etag} if etag is not None else {} for etag in etags]

    async def close(self) -> None:
        """Nothing to release."""
