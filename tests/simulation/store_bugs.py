"""The state store's protocol without the fixes of findings 2 to 6 (docs/simulation.md, "What it found"):
each function is a method of a unit of :class:`adapters.table_store.TableStateStore` (its live records'
:class:`~adapters.table_store.live.Live`, its history's :class:`~adapters.table_store.history.History`) as
it behaves with one or more of those fixes taken out, for ``tests/simulation/regressions.py`` to put back
into the adapter the simulation runs (and so show that the finding's seed still catches its bug).

- ``history_first`` (finding 3): a submission whose watch entry it inserted reads the history before it
  writes the task; without it, it does both at once and takes the task back when the history has the id.
- ``keep_watch_of_live_task`` (finding 2): a refused submission removes the watch entry it inserted only
  when no live task has the id; without it, also when the live task has finished.
- ``archive_if_unchanged`` (finding 4): a second move to the history rewrites the history's copy only if
  unchanged since read, and takes a tombstone of the same task as done; without it, it rewrites blindly.
- ``rewatch_new_task`` (finding 5): a task written under a watch entry the submission did not insert puts
  the entry again; without it, it relies on the entry it found.
- ``take_back_leftover`` and ``history_also_first`` (finding 6): the Supervisor asks the store about a
  task never started; a submission that found a watch entry reads the history before its write as well.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters.table_store import _RACES, CreateOutcome
from adapters.table_store.history import History
from adapters.table_store.live import Live
from engine.errors import ConcurrencyError
from engine.state import TaskRecord

FIXES = (
    "history_first",
    "keep_watch_of_live_task",
    "archive_if_unchanged",
    "rewatch_new_task",
    "take_back_leftover",
    "history_also_first",
)


def take_out(monkeypatch: pytest.MonkeyPatch, *fixes: str) -> None:
    """Put the bugs of ``fixes`` back into the adapter (until the monkeypatch is undone)."""
    unknown = set(fixes) - set(FIXES)
    if unknown:
        raise ValueError(f"no such fix: {sorted(unknown)}")
    off = set(fixes)
    if off & {"history_first", "history_also_first", "rewatch_new_task"}:

        async def create(self: Live, record: TaskRecord) -> tuple[CreateOutcome, TaskRecord]:
            return await _create(self, record, off)

        monkeypatch.setattr(Live, "create", create)
    if "keep_watch_of_live_task" in off:
        monkeypatch.setattr(Live, "_existing", _existing_dropping_the_entry)
    if "archive_if_unchanged" in off:
        monkeypatch.setattr(History, "_write_archive", _write_archive_blindly)
    if "take_back_leftover" in off:

        async def take_back(self: History, record: TaskRecord) -> bool:
            return False

        monkeypatch.setattr(History, "take_back", take_back)


async def _create(self: Live, record: TaskRecord, off: set[str]) -> tuple[CreateOutcome, TaskRecord]:
    """``Live.create`` without the fixes in ``off`` among history_first, history_also_first and
    rewatch_new_task."""
    state_entity = self.codec.state_entity(record)
    operations: list[Any] = [
        ("create", self.codec.input_entity(record)),
        ("create", state_entity),
        *(("create", self.codec.step_entity(record.order_id, s)) for s in record.steps),
    ]
    operations += [
        ("create", entity) for _, entity, *_ in self.codec.listing_operations(record, state_entity)
    ]
    watched = bool(state_entity["Watched"])
    order_id = record.order_id
    added = await self.watches.add(record.state) if watched else None
    for _ in range(_RACES):
        first = "history_first" if added is not None else "history_also_first"
        if first not in off:
            found = await self.archives.read_archive(order_id)
            written = await self._create_live(operations) if found is None else None
            if written is not None and added is None:
                found = await self.archives.read_archive(order_id)
            known = found
        elif added is not None:  # the write and the read at once
            written, found = await asyncio.gather(
                self._create_live(operations), self.archives.read_archive(order_id)
            )
            known = found if written is not None else None
        else:  # the write, then the read
            written = await self._create_live(operations)
            found = await self.archives.read_archive(order_id) if written is not None else None
            known = found
        if written is not None and found is None:
            break
        if written is not None:
            await self._delete_created(order_id, operations)
        answer = await self._existing(record, added, known)
        if answer is not None:
            return answer
    else:
        raise ConcurrencyError(order_id)
    if watched and added is None and "rewatch_new_task" not in off:
        await self.watches.put(record.state)
    for (_, entity), result in zip(operations, written, strict=True):
        if entity.get("Kind") in ("state", "step", "input"):
            record.etags[entity["RowKey"]] = result["etag"]
    record.indexed = watched
    record.listed = state_entity["IndexKey"]
    record.mark_saved()
    return CreateOutcome.CREATED, record


async def _existing_dropping_the_entry(
    self: Live, record: TaskRecord, added: str | None, found: Any
) -> tuple[CreateOutcome, TaskRecord] | None:
    """``Live._existing`` that also removes the entry it inserted when the live task finished."""
    order_id = record.order_id
    if found is None and self.history is not None:
        found = await self.archives.read_archive(order_id)
    existing: TaskRecord | None = None
    if found is None:
        existing = await self.load_live(order_id)
        if existing is None:
            return None
    if added is not None and (existing is None or not existing.indexed):
        await self.watches.remove(order_id, added)
    if found is not None:
        if found.get("Kind") != "archive":
            return CreateOutcome.PURGED, record
        existing = self.codec.from_archive(found)
    assert existing is not None
    same = existing.input_hash == record.input_hash
    return (CreateOutcome.EXISTS_SAME if same else CreateOutcome.EXISTS_DIFFERENT), existing


async def _write_archive_blindly(
    self: History,
    pk: str,
    order_id: str,
    archive: dict[str, Any],
    listing: dict[str, Any],
    copies: list[Any],
) -> bool:
    """``History._write_archive`` whose second attempt rewrites the history's copy unconditionally."""
    from azure.data.tables import TableTransactionError, UpdateMode

    change = {archive["ProcessState"]: 1}
    for fresh in (False, *([True] * (_RACES - 1))):
        tally = await self.tallies.tally(pk, fresh)
        try:
            await self.tallies.submit_counted(
                pk,
                [("create", archive), ("upsert", listing, {"mode": UpdateMode.REPLACE}), *copies],
                tally,
                change,
            )
            return True
        except TableTransactionError as exc:
            if exc.status_code == 412:
                continue
            if exc.status_code != 409:
                raise
        found = await self.read_archive(order_id)
        if found is None:
            continue
        if found.get("Kind") != "archive" or found.get("CreatedAt") != archive["CreatedAt"]:
            return False
        operations = [
            ("upsert", archive, {"mode": UpdateMode.REPLACE}),
            ("upsert", listing, {"mode": UpdateMode.REPLACE}),
            *copies,
        ]
        await self._transact(self._history(), operations)
        return True
    return False
