"""In-memory stand-ins for the engine's (asynchronous) ports, for unit tests of the state machine only.

The integration suites use the real Table Storage adapter on Azurite and the real Service Bus SDK on
the emulator; these exist so the rules can be driven step by step with a manual clock.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from engine.errors import ConcurrencyError, InvalidContinuation
from engine.ports import CreateOutcome, ExpiredEntry, Page, StateCounts
from engine.state import AuditEntry, ProcessState, TaskRecord


class MemoryStore:
    """Keeps copies of records with an ETag per record; writes are conditional like Table Storage's."""

    def __init__(self) -> None:
        self.records: dict[str, tuple[str, TaskRecord]] = {}
        self.audits: dict[str, list[AuditEntry]] = {}
        self._etags = itertools.count(1)
        self.operations = 0
        self.loads = 0

    def _put(self, record: TaskRecord) -> TaskRecord:
        etag = f"e{next(self._etags)}"
        stored = record.model_copy(deep=True)
        stored.mark_saved()
        stored.etags = {"state": etag}
        self.records[record.order_id] = (etag, stored)
        return stored.model_copy(deep=True)

    async def create(self, record: TaskRecord) -> tuple[CreateOutcome, TaskRecord]:
        self.operations += 1
        if record.order_id in self.records:
            existing = self.records[record.order_id][1].model_copy(deep=True)
            same = existing.input_hash == record.input_hash
            return (CreateOutcome.EXISTS_SAME if same else CreateOutcome.EXISTS_DIFFERENT), existing
        return CreateOutcome.CREATED, self._put(record)

    async def load(self, order_id: str) -> TaskRecord | None:
        self.operations += 1
        self.loads += 1
        found = self.records.get(order_id)
        return found[1].model_copy(deep=True) if found else None

    async def save(self, record: TaskRecord) -> TaskRecord:
        self.operations += 1
        current = self.records.get(record.order_id)
        if current is None or current[0] != record.etags.get("state"):
            raise ConcurrencyError(record.order_id)
        self.audits.setdefault(record.order_id, []).extend(record.pending_audit())
        saved = self._put(record)
        record.etags = saved.etags
        record.mark_saved()
        return record

    async def audit(self, order_id: str) -> list[AuditEntry]:
        self.operations += 1
        return [entry.model_copy() for entry in self.audits.get(order_id, [])]

    async def expired(self, now: datetime) -> AsyncIterator[ExpiredEntry]:
        # A simplified watch: every in-flight task with its current CompleteBy.
        for _, record in list(self.records.values()):
            state = record.state
            if state.process_state.in_flight and state.complete_by is not None and state.complete_by <= now:
                yield ExpiredEntry(state.order_id, state.complete_by)

    async def rewatch(self, entry: ExpiredEntry, complete_by: datetime) -> None:
        pass

    async def unwatch(self, entry: ExpiredEntry) -> None:
        pass

    async def list_by_state(self, state: ProcessState, page_size: int, continuation: str | None) -> Page:
        matching = [r.state for _, r in self.records.values() if r.state.process_state is state]
        try:
            start = int(continuation or 0)
        except ValueError as exc:
            raise InvalidContinuation(continuation or "") from exc
        end = start + page_size
        return Page(matching[start:end], str(end) if end < len(matching) else None)

    async def count_by_state(self, limit: int) -> StateCounts:
        counts = dict.fromkeys(ProcessState, 0)
        states = [r.state.process_state for _, r in self.records.values()]
        for state in states[:limit]:
            counts[state] += 1
        return StateCounts(counts, len(states) <= limit)

    def state(self, order_id: str) -> TaskRecord:
        """The stored record (for assertions)."""
        return self.records[order_id][1]


@dataclass
class Sent:
    queue: str
    body: Any
    message_id: str
    correlation_id: str
    reply_to: str | None
    time_to_live_seconds: float | None
    scheduled_at: datetime | None


class RecordingSender:
    """Collects what would have been sent."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []

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
        self.sent.append(
            Sent(queue, body, message_id, correlation_id, reply_to, time_to_live_seconds, scheduled_at)
        )

    def take(self, queue: str | None = None) -> list[Sent]:
        """Remove and return what was sent (to one queue, or all)."""
        taken = [s for s in self.sent if queue is None or s.queue == queue]
        self.sent = [s for s in self.sent if s not in taken]
        return taken
