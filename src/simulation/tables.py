"""Table Storage in memory, as far as the state store relies on it: tables of partitions of entities, an
ETag per entity, point operations conditional on an ETag, key-range queries within a partition, and
entity-group transactions (one partition, at most 100 entities, each entity once, all or nothing).

An operation here is synchronous and atomic; the simulated store awaits its "request" first (latency,
faults, crashes) and then applies the operation in one go, so a transaction is never seen half done.
Values are immutable snapshots owned by the table: callers copy what they hand to the engine.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# Azure's limit on the entities of one entity-group transaction.
MAX_BATCH = 100


class TableError(Exception):
    """What Table Storage answers when it refuses an operation: 404 (absent), 409 (exists), 412 (the ETag
    does not match). A refused transaction raises the status of its first refused operation."""

    def __init__(self, status: int, key: str = "") -> None:
        super().__init__(f"{status} {key}")
        self.status = status
        self.key = key


@dataclass(slots=True)
class Row:
    """One entity: its value (never changed in place) and its ETag."""

    value: Any
    etag: str


# An operation of a transaction: (verb, row key, value or change, ETag condition).
# verbs: create (409 if present), upsert (replace or insert), update (404 absent, 412 ETag), delete (404,
# 412), merge (like update; the value is a function of the current value).
Operation = tuple[str, str, Any, str | None]


_GROUPS: dict[str, str] = {}


def group_of(row_key: str) -> str:
    """:func:`_group_of`, remembered (row keys repeat: a task's rows are read and written many times)."""
    found = _GROUPS.get(row_key)
    if found is None:
        if len(_GROUPS) > 1_000_000:
            _GROUPS.clear()
        found = _GROUPS[row_key] = _group_of(row_key)
    return found


def _group_of(row_key: str) -> str:
    """The key range a row key belongs to, for the queries the store makes (``order|<id>|...``,
    ``index|<state>|...``, ``audit|<id>|...``, ``gone|...``): its first two ``|`` parts, or one for
    ``gone``."""
    first, _, rest = row_key.partition("|")
    if first == "gone" or not rest:
        return first
    second, _, _ = rest.partition("|")
    return f"{first}|{second}"


class _Range:
    """The rows of one key range, with their keys kept in order (a range query is two bisections, as
    Table Storage answers one in proportion to what it returns)."""

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

    def between(self, lo: str, hi: str) -> list[tuple[str, Row]]:
        keys = self.keys
        start, stop = bisect.bisect_left(keys, lo), bisect.bisect_left(keys, hi)
        rows = self.rows
        return [(key, rows[key]) for key in keys[start:stop]]


class Table:
    """One table: partitions of rows, grouped by key range so that a range query reads only its range."""

    def __init__(self, name: str, etags: Iterator[int]) -> None:
        self.name = name
        self._etags = etags
        self._groups: dict[str, dict[str, _Range]] = {}  # pk -> key range -> its rows

    def _new_etag(self) -> str:
        return f"W/{next(self._etags)}"

    def _group(self, pk: str, row_key: str, create: bool = False) -> _Range | None:
        groups = self._groups.get(pk)
        if groups is None:
            if not create:
                return None
            groups = self._groups[pk] = {}
        name = group_of(row_key)
        found = groups.get(name)
        if found is None and create:
            found = groups[name] = _Range()
        return found

    def get(self, pk: str, row_key: str) -> Row | None:
        """A point read (None: absent)."""
        group = self._group(pk, row_key)
        return group.rows.get(row_key) if group is not None else None

    def range(self, pk: str, lo: str, hi: str) -> list[tuple[str, Row]]:
        """The rows of one partition with ``lo <= RowKey < hi``, in key order; ``lo`` and ``hi`` lie in one
        key range (see :func:`group_of`), or ``lo`` is empty (the whole partition) or a prefix such as
        ``index|`` that spans several."""
        groups = self._groups.get(pk)
        if not groups:
            return []
        name = group_of(lo)
        if not lo or (lo.endswith("|") and name == lo[:-1] and "|" not in name):
            chosen = sorted(
                (key, group) for key, group in groups.items() if not lo or key.startswith(lo) or key == name
            )
            return [found for _, group in chosen for found in group.between(lo, hi)]
        group = groups.get(name)
        return group.between(lo, hi) if group is not None else []

    def partitions(self) -> list[str]:
        """Every partition that holds a row."""
        return sorted(pk for pk, groups in self._groups.items() if any(g.rows for g in groups.values()))

    def rows(self, pk: str | None = None) -> list[tuple[str, str, Row]]:
        """Every row (of one partition), as (pk, rk, row), in key order: for the simulation's checks."""
        pks = [pk] if pk is not None else self.partitions()
        return [(p, key, row) for p in pks for key, row in self.range(p, "", "\U0010ffff")]

    def transact(self, pk: str, operations: list[Operation]) -> list[str | None]:
        """Apply ``operations`` to partition ``pk`` all or nothing; the new ETag of each (None for a
        delete). Raises :class:`TableError` for the first refused operation, having changed nothing."""
        if not operations:
            return []
        if len(operations) > MAX_BATCH:
            raise ValueError(f"a transaction holds at most {MAX_BATCH} entities, not {len(operations)}")
        if len(operations) > 1 and len({key for _, key, _, _ in operations}) != len(operations):
            raise ValueError("an entity may appear only once in a transaction")
        staged: list[tuple[str, str, Any]] = []
        for verb, key, value, etag in operations:
            row = self.get(pk, key)
            if verb == "create":
                if row is not None:
                    raise TableError(409, key)
            elif verb == "upsert":
                pass
            elif verb in ("update", "delete", "merge"):
                if row is None:
                    raise TableError(404, key)
                if etag is not None and row.etag != etag:
                    raise TableError(412, key)
                if verb == "merge":
                    value = value(row.value)
            else:
                raise ValueError(f"unknown operation {verb!r}")
            staged.append((verb, key, value))
        results: list[str | None] = []
        for verb, key, value in staged:
            group = self._group(pk, key, create=True)
            assert group is not None
            if verb == "delete":
                group.delete(key)
                results.append(None)
            else:
                etag = self._new_etag()
                group.put(key, Row(value, etag))
                results.append(etag)
        return results

    def one(self, pk: str, operation: Operation) -> str | None:
        """A single-entity operation (the same rules as one operation of a transaction)."""
        return self.transact(pk, [operation])[0]


class Tables:
    """The storage account: named tables, one ETag sequence."""

    def __init__(self) -> None:
        self._etags = itertools.count(1)
        self._numbers = itertools.count(1)
        self._tables: dict[str, Table] = {}

    def number(self) -> int:
        """A number unique in this account (a unique tail for keys that could otherwise collide)."""
        return next(self._numbers)

    def table(self, name: str) -> Table:
        """The table ``name`` (created on first use)."""
        found = self._tables.get(name)
        if found is None:
            found = self._tables[name] = Table(name, self._etags)
        return found


Change = Callable[[Any], Any]
