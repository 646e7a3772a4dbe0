"""The engine's ports: the state store and the message sender. Adapters implement them.

Both do I/O, so both are asynchronous: a slow store or broker holds no thread, only its own coroutine.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel

from .breaker import BreakerRecord
from .state import AuditEntry, ProcessState, TaskRecord, TaskState


class CreateOutcome(StrEnum):
    """What submitting a task did."""

    CREATED = "created"
    EXISTS_SAME = "exists-same"  # same id, same input: nothing was written
    EXISTS_DIFFERENT = "exists-different"  # same id, other input: a conflict


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
    (the counts are then lower bounds)."""

    counts: dict[ProcessState, int]
    complete: bool


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

    async def audit(self, order_id: str) -> list[AuditEntry]:
        """The task's audit entries, oldest first."""
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

    async def list_by_state(self, state: ProcessState, page_size: int, continuation: str | None) -> Page:
        """Tasks in one ProcessState, a page at a time.

        Raises :class:`engine.errors.InvalidContinuation` for a token it did not issue.
        """
        ...

    async def count_by_state(self, limit: int) -> StateCounts:
        """How many tasks are in each ProcessState, counting at most ``limit`` tasks."""
        ...


class BreakerStore(Protocol):
    """The circuit breakers' records, one per service, with conditional (ETag) writes."""

    async def load_all(self) -> list[BreakerRecord]:
        """Every stored record (one request: the Supervisor reads them once per sweep)."""
        ...

    async def load(self, service: str) -> BreakerRecord | None:
        """One service's record, or None if none was written yet."""
        ...

    async def save(self, record: BreakerRecord) -> BreakerRecord:
        """Write the record if it is unchanged since it was read (``etag``; None: only if there is none)
        and return it with its new ETag.

        Raises :class:`engine.errors.BreakerConflict` if it changed (or appeared) meanwhile.
        """
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
