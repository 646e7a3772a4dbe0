"""The engine's ports: the state store and the message sender. Adapters implement them.

Both do I/O, so both are asynchronous: a slow store or broker holds no thread, only its own coroutine.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel

from .search import SearchQuery
from .state import AuditEntry, ProcessState, TaskRecord, TaskState


class CreateOutcome(StrEnum):
    """What submitting a task did."""

    CREATED = "created"
    EXISTS_SAME = "exists-same"  # same id, same input: nothing was written
    EXISTS_DIFFERENT = "exists-different"  # same id, other input: a conflict
    # The id belonged to a task that finished and was purged after the retention period: its tombstone
    # refuses the id (any input) until the tombstone expires.
    PURGED = "purged"


@dataclass(frozen=True)
class ExpiredEntry:
    """A watched task whose (lower-bound) CompleteBy has come, as the sweep found it."""

    order_id: str
    complete_by: datetime
    token: str = ""  # the store's version of the entry, so stale updates to it are refused


@dataclass(frozen=True)
class Page:
    """One page of a listing, and the token for the next (None at the end)."""

    states: list[TaskState]
    continuation: str | None


@dataclass(frozen=True)
class StateCounts:
    """How many tasks each ProcessState holds; ``complete`` is False when counting stopped at its limit
    (the counts are then lower bounds).

    Every state but the finished ones (Processed, Compensated) is counted exactly; a finished state counts
    the tasks still kept, i.e. those that finished within the retention period."""

    counts: dict[ProcessState, int]
    complete: bool
    # The Waiting tasks by what they wait for (their sum is the Waiting count).
    waiting: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PurgeReport:
    """What one bounded batch of the retention clean-up did."""

    purged: int = 0  # finished tasks deleted, each leaving a tombstone
    lost_races: int = 0  # changed while being purged: left for a later batch
    more: bool = False  # the batch was full: more may be due


class StateStore(Protocol):
    """Durable task state with conditional (ETag) writes."""

    async def create(self, record: TaskRecord) -> tuple[CreateOutcome, TaskRecord]:
        """Write the input, the state and the step records in one transaction (all or nothing)."""
        ...

    async def load(self, order_id: str) -> TaskRecord | None:
        """The task with its steps and ETags, or None."""
        ...

    async def save(self, record: TaskRecord) -> TaskRecord:
        """Write the state, the changed steps and the record's pending audit entries in one transaction,
        the state and steps each conditional on its ETag.

        Raises :class:`engine.errors.ConcurrencyError` if any of them changed since it was loaded.
        """
        ...

    async def audit(self, order_id: str, archived: bool = False) -> list[AuditEntry]:
        """The task's audit entries, oldest first (``archived``: the task was read from the history, or is
        parked)."""
        ...

    async def archive(self, record: TaskRecord) -> bool:
        """Move a finished task, loaded just now, and its audit trail from the live records to the
        history, where the retention clean-up finds it. The history is written first, then the live
        records are deleted in one transaction conditional on every ETag read, so a crash in between
        leaves the task in both (read from the live records) and the next attempt finishes the move.

        True once the task is only in the history (also when it already was); False when it changed
        since it was loaded (nothing is deleted; try again later).
        """
        ...

    async def take_back(self, record: TaskRecord) -> bool:
        """For a live task never started, loaded just now: True, with its live records deleted, if the
        history holds its id. A submission of an id the history holds writes the task before it can read
        the history when a watch entry was already there, and takes the task back; if it died (or lost its
        answer) in between, the task stays, with nothing sent about it. It is not a new order: the
        Supervisor asks before it starts such a task. False if the history does not hold the id.

        Raises :class:`engine.errors.ConcurrencyError` if the task changed since it was loaded.
        """
        ...

    async def park(self, record: TaskRecord, entry: ExpiredEntry) -> bool:
        """Move a task waiting for a timer or an approval, loaded just now, out of the live records and the
        watch table, into the store's parked tasks and its calendar (at the task's CompleteBy), so that while
        it waits it costs nothing a sweep, a listing of another state or a count reads. It is still loaded
        by its id (:meth:`load` returns it with ``parked`` set), listed and counted as Waiting, and its next
        :meth:`save` brings it back to the live records. False if it changed since it was loaded (it stays
        live)."""
        ...

    async def promote(self, now: datetime, horizon: float, limit: int = 1000) -> int:
        """Bring back to the live records, watched, the parked tasks whose CompleteBy is within ``horizon``
        seconds of ``now``, reading the calendar at most every ``horizon / 2`` seconds; how many came back."""
        ...

    async def purge(self, finished_before: datetime, tombstone_until: datetime, limit: int) -> PurgeReport:
        """Delete at most ``limit`` tasks of the history that finished before ``finished_before``, with
        everything stored for them, each conditional on the task being unchanged since the batch read
        it; each leaves a tombstone that refuses its id until ``tombstone_until``."""
        ...

    async def drop_tombstones(self, before: datetime, limit: int) -> int:
        """Delete at most ``limit`` tombstones that expired before ``before`` (their ids are free again)."""
        ...

    def expired(self, now: datetime) -> AsyncIterator[ExpiredEntry]:
        """Watched tasks whose watch time is at or before ``now``, at a cost in proportion to in-flight
        work, not to completed history. A watch time is never later than the task's CompleteBy."""
        ...

    async def rewatch(self, entry: ExpiredEntry, complete_by: datetime) -> None:
        """Move a watch entry forward to the task's current CompleteBy (no-op if it changed meanwhile)."""
        ...

    async def unwatch(self, entry: ExpiredEntry) -> None:
        """Stop watching a task that is no longer in flight (no-op if the entry changed meanwhile)."""
        ...

    async def search_orders(self, query: SearchQuery, page_size: int, continuation: str | None) -> Page:
        """Tasks that meet ``query`` (:mod:`engine.search`), a page at a time; a page may hold fewer than
        asked for before the end (go on with its token). Raises :class:`engine.errors.InvalidContinuation`
        for a token it did not issue."""
        ...

    async def list_by_state(
        self,
        state: ProcessState,
        page_size: int,
        continuation: str | None,
        waiting_for: str | None = None,
        submitter: str | None = None,
    ) -> Page:
        """Tasks in one ProcessState, a page at a time; Waiting ones only those waiting for
        ``waiting_for`` (``timer``, ``approval``) when given; only those ``submitter`` submitted, when
        given (a page may then hold fewer than asked for before the end: go on with its token).

        Raises :class:`engine.errors.InvalidContinuation` for a token it did not issue.
        """
        ...

    async def count_by_state(self, limit: int) -> StateCounts:
        """How many tasks are in each ProcessState (see :class:`StateCounts`), reading at most ``limit``
        entries per shard, at a cost that does not grow with the history."""
        ...


class MessageSender(Protocol):
    """Sends one message to a named queue."""

    async def send(
        self,
        queue: str,
        body: BaseModel,
        *,
        message_id: str,
        correlation_id: str,
        reply_to: str | None = None,
        time_to_live_seconds: float | None = None,
        scheduled_at: datetime | None = None,
    ) -> None:
        """Send (or schedule) a JSON message; raise on failure."""
        ...
