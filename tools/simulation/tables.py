"""Table Storage in memory, as the service behaves towards a client: tables of partitions of entities, an
ETag per entity, point operations conditional on an ETag (or unconditional), queries within a partition
by an OData filter, and entity-group transactions (one partition, at most 100 entities, each entity once,
all or nothing, refused with the status of the first operation that fails).

An operation here is synchronous and atomic: :mod:`simulation.table_client`, the SDK-shaped client the
real adapters talk to, awaits the request first (latency, faults, crashes) and then applies it in one go,
so a transaction is never seen half done. Entities are stored as the service stores them: copies of the
properties sent, a missing value for ``None``, times in UTC.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

# Azure's limit on the entities of one entity-group transaction.
MAX_BATCH = 100
# A string property holds at most 64 KiB of UTF-16.
MAX_STRING = 32 * 1024
# The service's largest page of a query.
MAX_PAGE = 1000
_LAST_KEY = "\U0010ffff"


class TableError(Exception):
    """What the service answers when it refuses an operation: 400 (malformed), 404 (absent), 409 (exists),
    412 (the ETag does not match); ``index``: the refused operation of a transaction."""

    def __init__(self, status: int, code: str, key: str = "", index: int = 0) -> None:
        super().__init__(f"{index}:{status} {code} {key}")
        self.status = status
        self.code = code
        self.key = key
        self.index = index


@dataclass(slots=True)
class Row:
    """One stored entity: its properties (never changed in place; PartitionKey and RowKey included) and its
    ETag."""

    props: dict[str, Any]
    etag: str


# Operation and Change are never changed once built; not frozen, since a frozen dataclass sets each field
# through object.__setattr__ (four times the cost, for about 100,000 of them in a run of 300 orders).
@dataclass(slots=True)
class Operation:
    """One operation of a request: ``verb`` create (409 if present), upsert (insert or write), update (404
    absent, 412 ETag) or delete (404, 412); ``merge`` keeps the properties not sent; ``etag`` None is
    unconditional (``If-Match: *``)."""

    verb: str
    row_key: str
    props: Mapping[str, Any] | None = None
    etag: str | None = None
    merge: bool = False


@dataclass(slots=True)
class Change:
    """What an applied operation did to one entity (for the simulation's observers)."""

    verb: str
    row_key: str
    before: Row | None
    after: Row | None


Observer = Callable[["Table", str, list[Change]], None]


def stored(props: Mapping[str, Any]) -> dict[str, Any]:
    """The properties as the service keeps them: ``None`` left out, times in UTC; a type the wire cannot
    carry, or a string too long for a property, is refused as the SDK or the service refuses it."""
    kept: dict[str, Any] = {}
    for name, value in props.items():
        if value is None:
            continue
        kind = type(value)
        if kind is str:
            if len(value) > MAX_STRING:
                raise TableError(400, "PropertyValueTooLarge", name)
        elif kind is datetime:
            tz = value.tzinfo
            if tz is None:
                value = value.replace(tzinfo=UTC)
            elif tz is not UTC:
                value = value.astimezone(UTC)
        elif isinstance(value, Enum) or kind not in (bool, int, float, bytes):
            # An enum would go out as its str() (the member's name on some): the adapter converts its own.
            raise TypeError(f"property {name}: {kind.__name__} is not a Table Storage type")
        kept[name] = value
    return kept


class _Partition:
    """The entities of one partition, with their keys kept in order (a query by a RowKey range is two
    bisections, as the service answers one in proportion to what it returns)."""

    __slots__ = ("keys", "rows")

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}
        self.keys: list[str] = []

    def put(self, key: str, row: Row) -> None:
        if key not in self.rows:
            bisect.insort(self.keys, key)
        self.rows[key] = row

    def delete(self, key: str) -> None:
        del self.rows[key]
        del self.keys[bisect.bisect_left(self.keys, key)]


class Table:
    """One table: partitions of entities. ``observers`` are told of every applied request's changes."""

    def __init__(self, name: str, etags: Iterator[int]) -> None:
        self.name = name
        self._etags = etags
        self._partitions: dict[str, _Partition] = {}
        self.observers: list[Observer] = []

    def get(self, pk: str, row_key: str) -> Row | None:
        """A point read (None: absent)."""
        partition = self._partitions.get(pk)
        return partition.rows.get(row_key) if partition is not None else None

    def scan(
        self, pk: str, lo: str = "", hi: str = _LAST_KEY, start: str | None = None
    ) -> list[tuple[str, Row]]:
        """The entities of one partition with ``lo <= RowKey < hi`` (and ``>= start``), in key order."""
        partition = self._partitions.get(pk)
        if partition is None:
            return []
        keys = partition.keys
        first = bisect.bisect_left(keys, lo if start is None or start < lo else start)
        stop = bisect.bisect_left(keys, hi)
        rows = partition.rows
        return [(key, rows[key]) for key in keys[first:stop]]

    def partitions(self) -> list[str]:
        """Every partition that holds an entity, in order."""
        return sorted(pk for pk, partition in self._partitions.items() if partition.rows)

    def rows(self, pk: str | None = None) -> list[tuple[str, str, Row]]:
        """Every entity (of one partition), as (pk, rk, row), in key order: for the simulation's checks."""
        pks = [pk] if pk is not None else self.partitions()
        return [(p, key, row) for p in pks for key, row in self.scan(p)]

    def apply(self, pk: str, operations: list[Operation]) -> list[str | None]:
        """Apply ``operations`` to partition ``pk`` all or nothing; the new ETag of each (None for a delete).
        Raises :class:`TableError` for the first refused operation, having changed nothing."""
        if len(operations) > MAX_BATCH:
            raise TableError(400, "InvalidInput", f"{len(operations)} operations")
        if len(operations) > 1 and len({op.row_key for op in operations}) != len(operations):
            raise TableError(400, "InvalidDuplicateRow")
        partition = self._partitions.get(pk)
        staged: list[tuple[Operation, Row | None, dict[str, Any] | None]] = []
        for index, op in enumerate(operations):
            row = partition.rows.get(op.row_key) if partition is not None else None
            verb = op.verb
            if verb == "create":
                if row is not None:
                    raise TableError(409, "EntityAlreadyExists", op.row_key, index)
            elif verb in ("update", "delete"):
                if row is None:
                    raise TableError(404, "ResourceNotFound", op.row_key, index)
                if op.etag is not None and row.etag != op.etag:
                    raise TableError(412, "UpdateConditionNotSatisfied", op.row_key, index)
            elif verb != "upsert":
                raise ValueError(f"unknown operation {verb!r}")
            props: dict[str, Any] | None = None
            if verb != "delete":
                assert op.props is not None
                props = stored(op.props)
                if props.get("PartitionKey", pk) != pk or props.get("RowKey", op.row_key) != op.row_key:
                    raise TableError(400, "CommandsInBatchActOnDifferentPartitions", op.row_key, index)
                if op.merge and row is not None:
                    props = {**row.props, **props}
                props["PartitionKey"], props["RowKey"] = pk, op.row_key
            staged.append((op, row, props))
        if partition is None:
            partition = self._partitions[pk] = _Partition()
        results: list[str | None] = []
        changes: list[Change] = []
        for op, before, props in staged:
            if props is None:
                partition.delete(op.row_key)
                results.append(None)
                changes.append(Change(op.verb, op.row_key, before, None))
            else:
                row = Row(props, f'W/"{next(self._etags)}"')
                partition.put(op.row_key, row)
                results.append(row.etag)
                changes.append(Change(op.verb, op.row_key, before, row))
        for observer in self.observers:
            observer(self, pk, changes)
        return results


class Tables:
    """The storage account: named tables, one ETag sequence."""

    def __init__(self) -> None:
        self._etags = itertools.count(1)
        self._tables: dict[str, Table] = {}

    def table(self, name: str) -> Table:
        """The table ``name`` (created on first use)."""
        found = self._tables.get(name)
        if found is None:
            found = self._tables[name] = Table(name, self._etags)
        return found


# ---- queries ------------------------------------------------------------------------------------------
_TERM = re.compile(r"^(\w+) (eq|ne|gt|ge|lt|le) (@\w+|'(?:[^']|'')*'|true|false|-?\d+(?:\.\d+)?)$")
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
}


@dataclass(frozen=True, slots=True)
class Filter:
    """An OData filter of ``and``-ed comparisons (what the adapters send): the partition it names, the
    RowKey range it bounds (answered by bisection) and the comparisons left to test entity by entity."""

    terms: tuple[tuple[str, str, str], ...]  # (property, operator, @parameter or literal)

    def bind(self, parameters: Mapping[str, Any]) -> Query:
        """The filter with its ``@`` parameters given."""
        pk: str | None = None
        lo, hi = "", _LAST_KEY
        tests: list[tuple[str, Callable[[Any, Any], bool], Any]] = []
        for name, operator, text in self.terms:
            value = _value(text, parameters)
            if name == "PartitionKey" and operator == "eq":
                pk = value
            elif name == "RowKey" and operator in ("ge", "gt", "lt", "le", "eq"):
                # Half-open [lo, hi): a strict or inclusive bound becomes the next key ("\0" is the
                # smallest suffix); the exact test below keeps what bisection let in.
                if operator in ("ge", "gt", "eq"):
                    lo = max(lo, value)
                if operator in ("lt", "le", "eq"):
                    hi = min(hi, value + "\0" if operator != "lt" else value)
                if operator == "gt":
                    tests.append((name, _COMPARE[operator], value))
            else:
                tests.append((name, _COMPARE[operator], value))
        return Query(pk, lo, hi, tuple(tests))


@dataclass(frozen=True, slots=True)
class Query:
    """A bound filter."""

    pk: str | None
    lo: str
    hi: str
    tests: tuple[tuple[str, Callable[[Any, Any], bool], Any], ...]

    def matches(self, props: Mapping[str, Any]) -> bool:
        """Whether an entity in the range passes the other comparisons (a missing property, or one of
        another type than its comparand, passes none, as in the service)."""
        for name, compare, value in self.tests:
            found = props.get(name)
            if found is None or (
                type(found) is not type(value)
                and not (isinstance(found, datetime) and isinstance(value, datetime))
            ):
                return False
            if not compare(found, value):
                return False
        return True


def _value(text: str, parameters: Mapping[str, Any]) -> Any:
    if text.startswith("@"):
        value = parameters[text[1:]]
        if isinstance(value, datetime):
            return stored({"v": value})["v"]
        return value
    if text.startswith("'"):
        return text[1:-1].replace("''", "'")
    if text in ("true", "false"):
        return text == "true"
    return float(text) if "." in text else int(text)


_FILTERS: dict[str, Filter] = {}


def parse_filter(text: str) -> Filter:
    """The filter of ``text`` (remembered: the adapters send a few fixed ones). Anything but ``and``-ed
    comparisons is refused, so a new kind of query shows here before it is trusted."""
    found = _FILTERS.get(text)
    if found is None:
        terms = []
        for term in text.split(" and "):
            match = _TERM.match(term.strip())
            if match is None:
                raise NotImplementedError(f"the simulated table service cannot read the filter {text!r}")
            terms.append((match[1], match[2], match[3]))
        found = _FILTERS[text] = Filter(tuple(terms))
    return found


def query(
    table: Table, where: Query, start: tuple[str, str] | None, limit: int
) -> tuple[list[Row], tuple[str, str] | None]:
    """One page of ``where`` from ``start`` (the continuation's PartitionKey and RowKey), at most ``limit``
    entities; the next page's start, or None."""
    pks = [where.pk] if where.pk is not None else table.partitions()
    if start is not None:
        pks = [pk for pk in pks if pk >= start[0]]
    page: list[Row] = []
    for pk in pks:
        first = start[1] if start is not None and pk == start[0] else None
        for key, row in table.scan(pk, where.lo, where.hi, first):
            if not where.matches(row.props):
                continue
            if len(page) == limit:
                return page, (pk, key)
            page.append(row)
    return page, None
