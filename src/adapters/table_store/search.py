"""Finding tasks: the search entries (``engine.search``), the searches, and the listings and counts by state.

A task's search entries (in the search table, ``<state table>search``, the task's shard) are written at
submission, beside its watch entry and before its live records, so an order never exists without them;
entries whose order was never written (refused, or a crash) are passed over by a search, as is one left
behind by a purge, which deletes them after the task (one left by a crash between finds no task).

A listing of one state reads that state's listing entries only (``index|<ProcessState>|...``, in the live
table and, for a finished state or Waiting, in the history table), and an entry and its task can never
disagree: the entry is a copy of the state record, written in every transaction that writes the record.
Counting reads the live table's listing entries (their keys only) and each shard's two tallies in the
history table, so its cost follows the live work, not the history or what waits long.

A continuation token is read back only if it is one this store could have issued (the place, and the
table service's own keys): anything else is :class:`InvalidContinuation` before any of it reaches the
service.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from azure.core.async_paging import AsyncPageIterator
from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import TableEntity, TableTransactionError, UpdateMode
from azure.data.tables.aio import TableClient

from engine import (
    AT_A_STEP,
    InvalidContinuation,
    Page,
    ProcessState,
    SearchQuery,
    StateCounts,
    TaskState,
    query_prefix,
)

from .codec import (
    _STATE_FIELDS,
    _WAITING_TALLY,
    _WHOLE,
    Codec,
    _archive_key,
    _listed_state,
    _listed_wait,
    _listing_range,
    _stamp,
    _state_key,
    readable_state,
)
from .tables import _BATCH, _RANGE, _RANGE_WAITING, HISTORY, SEARCH, STATE, Tables, Unit, _empty_page
from .tallies import Tallies


class Search(Unit):
    """The search entries, the searches, and the listings and counts by state."""

    def __init__(self, tables: Tables, codec: Codec, tallies: Tallies) -> None:
        super().__init__(tables, codec)
        self.tallies = tallies

    def entry_keys(self, state: TaskState) -> list[str]:
        """The keys of a task's search entries (``engine.search``)."""
        if self.search is None:
            return []
        return self.codec.search_keys(state)

    async def write_entries(self, state: TaskState) -> None:
        entities = self.codec.search_entities(state)
        if self.search is None or not entities:
            return
        self.counter.add(table=SEARCH, entities=len(entities))
        operations = [("upsert", e, {"mode": UpdateMode.REPLACE}) for e in entities]
        await self._transact(self.search, operations)

    async def delete_entries(self, pk: str, keys: list[str]) -> None:
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
        state = readable_state(entity)
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
            read = [readable_state(e) for e in found]
            return [state if state is not None and query.holds(state) else None for state in read]

        return await self._fan_out(places, conditions, parameters, None, states_of, page_size, continuation)

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
            read = [readable_state(e) async for e in await anext(pages, _empty_page())]
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
            return (await self.tallies.tally(f"s{shard:02d}", fresh=True))[1]

        async def parked(shard: int) -> dict[str, int]:
            if self.history is None:
                return {}
            return (await self.tallies.tally(f"s{shard:02d}", True, _WAITING_TALLY))[1]

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
