"""The engine's ports: the state store and the message sender. Adapters implement them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel

from .state import ProcessState, TaskRecord, TaskState


class ConcurrencyError(Exception):
    """Someone else changed the record first (ETag mismatch): back off without side effects."""


class CreateOutcome(StrEnum):
    """What submitting a task did."""

    CREATED = "created"
    EXISTS_SAME = "exists-same"  # same id, same input: nothing was written
    EXISTS_DIFFERENT = "exists-different"  # same id, other input: a conflict


@dataclass(frozen=True)
class ExpiredEntry:
    """An in-flight task whose CompleteBy has passed, as the sweep found it."""

    order_id: str
    complete_by: datetime
    process_state: ProcessState


@dataclass(frozen=True)
class Page:
    """One page of a listing, and the token for the next (None at the end)."""

    states: list[TaskState]
    continuation: str | None


class StateStore(Protocol):
    """Durable task state with conditional (ETag) writes."""

    def create(self, record: TaskRecord) -> tuple[CreateOutcome, TaskRecord]:
        """Write the input, the state and the step records in one transaction (all or nothing)."""
        ...

    def load(self, order_id: str) -> TaskRecord | None:
        """The task with its steps and ETags, or None."""
        ...

    def save(self, record: TaskRecord) -> TaskRecord:
        """Write the state and changed steps in one transaction, each conditional on its ETag.

        Raises :class:`ConcurrencyError` if any of them changed since it was loaded.
        """
        ...

    def expired(self, now: datetime) -> Iterable[ExpiredEntry]:
        """In-flight tasks whose CompleteBy is at or before ``now``, at a cost in proportion to
        in-flight work, not to completed history."""
        ...

    def list_by_state(self, state: ProcessState, page_size: int, continuation: str | None) -> Page:
        """Tasks in one ProcessState, a page at a time."""
        ...


class MessageSender(Protocol):
    """Sends one message to a named queue."""

    def send(
        self,
        queue: str,
        body: BaseModel,
        *,
        message_id: str,
        correlation_id: str,
        reply_to: str | None = None,
        time_to_live_seconds: float | None = None,
        scheduled_at: datetime | None = None,
        properties: dict[str, Any] | None = None,
    ) -> None:
        """Send (or schedule) a JSON message; raise on failure."""
        ...
