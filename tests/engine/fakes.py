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

from engine import formats
from engine.errors import ConcurrencyError, InvalidContinuation
from engine.ports import CreateOutcome, ExpiredEntry, Page, PurgeReport, StateCounts
from engine.state import AuditEntry, ProcessState, TaskRecord, TaskState


class MemoryStore:
    """Keeps copies of records with an ETag per record; writes are conditional like Table Storage's.

    Like the Table Storage store it has a live part, a watch (one entry per task from submission until the
    Supervisor drops it, a lower bound of the task's CompleteBy), and a history: finished tasks the
    Supervisor archived, purged by the retention clean-up into tombstones that refuse their ids.
    """

    def __init__(self) -> None:
        self.records: dict[str, tuple[str, TaskRecord]] = {}
        self.audits: dict[str, list[AuditEntry]] = {}
        self.history: dict[str, TaskRecord] = {}
        self.tombstones: dict[str, datetime] = {}  # order id -> until when its id is refused
        self.watched: dict[str, tuple[datetime, str]] = {}  # order id -> (lower bound, token)
        self._etags = itertools.count(1)
        self.operations = 0
        self.loads = 0

    def _put(self, record: TaskRecord) -> TaskRecord:
        etag = f"e{next(self._etags)}"
        stored = record.model_copy(deep=True)
        stored.mark_saved()
        stored.etags = {"state": etag}
        stored.listed = f"{record.state.process_state.value}|{record.order_id}"
        stored.indexed = record.state.process_state.in_flight and record.state.complete_by is not None
        self.records[record.order_id] = (etag, stored)
        return stored.model_copy(deep=True)

    def _watch(self, order_id: str, at: datetime) -> None:
        self.watched[order_id] = (at, f"w{next(self._etags)}")

    async def create(self, record: TaskRecord) -> tuple[CreateOutcome, TaskRecord]:
        self.operations += 1
        order_id = record.order_id
        if order_id in self.records:
            existing = self.records[order_id][1].model_copy(deep=True)
            same = existing.input_hash == record.input_hash
            return (CreateOutcome.EXISTS_SAME if same else CreateOutcome.EXISTS_DIFFERENT), existing
        if order_id in self.history:
            archived = self.history[order_id].model_copy(deep=True)
            same = archived.input_hash == record.input_hash
            return (CreateOutcome.EXISTS_SAME if same else CreateOutcome.EXISTS_DIFFERENT), archived
        if order_id in self.tombstones:
            return CreateOutcome.PURGED, record
        if record.state.complete_by is not None and order_id not in self.watched:
            self._watch(order_id, record.state.complete_by)
        self.audits.setdefault(order_id, []).extend(record.pending_audit())
        return CreateOutcome.CREATED, self._put(record)

    async def load(self, order_id: str) -> TaskRecord | None:
        self.operations += 1
        self.loads += 1
        found = self.records.get(order_id)
        if found is not None:
            return found[1].model_copy(deep=True)
        archived = self.history.get(order_id)
        return archived.model_copy(deep=True) if archived is not None else None

    async def save(self, record: TaskRecord) -> TaskRecord:
        self.operations += 1
        current = self.records.get(record.order_id)
        if record.archived or current is None or current[0] != record.etags.get("state"):
            raise ConcurrencyError(record.order_id)
        state = record.state
        if state.process_state.in_flight and state.complete_by is not None and not record.indexed:
            self._watch(record.order_id, state.complete_by)  # back in flight: watched before saved
        self.audits.setdefault(record.order_id, []).extend(record.pending_audit())
        saved = self._put(record)
        record.etags, record.listed, record.indexed = saved.etags, saved.listed, saved.indexed
        record.mark_saved()
        return record

    async def audit(self, order_id: str, archived: bool = False) -> list[AuditEntry]:
        self.operations += 1
        return [entry.model_copy() for entry in self.audits.get(order_id, [])]

    async def expired(self, now: datetime) -> AsyncIterator[ExpiredEntry]:
        for order_id, (at, token) in sorted(self.watched.items(), key=lambda item: item[1][0]):
            if at <= now:
                yield ExpiredEntry(order_id, at, token)

    async def rewatch(self, entry: ExpiredEntry, complete_by: datetime) -> None:
        if self.watched.get(entry.order_id, (None, None))[1] == entry.token:
            self._watch(entry.order_id, complete_by)

    async def unwatch(self, entry: ExpiredEntry) -> None:
        if self.watched.get(entry.order_id, (None, None))[1] == entry.token:
            del self.watched[entry.order_id]

    async def archive(self, record: TaskRecord) -> bool:
        self.operations += 1
        if record.archived:
            return True
        if not record.state.process_state.finished:
            raise ValueError(f"task {record.order_id} is not finished")
        current = self.records.get(record.order_id)
        if current is None or current[0] != record.etags.get("state"):
            return False
        stored = current[1].model_copy(deep=True)
        stored.archived, stored.listed, stored.indexed = True, None, False
        stored.etags = {"archive": f"e{next(self._etags)}"}
        self.history[record.order_id] = stored
        del self.records[record.order_id]
        return True

    async def park(self, record: TaskRecord, entry: ExpiredEntry) -> bool:
        # Nothing to gain in memory: a task that waits stays where it is (the Supervisor rewatches it).
        self.operations += 1
        return False

    async def promote(self, now: datetime, horizon: float, limit: int = 1000) -> int:
        return 0

    async def take_back(self, record: TaskRecord) -> bool:
        self.operations += 1
        if record.order_id not in self.history and record.order_id not in self.tombstones:
            return False
        current = self.records.get(record.order_id)
        if current is None or current[0] != record.etags.get("state"):
            raise ConcurrencyError(record.order_id)
        del self.records[record.order_id]
        return True

    async def purge(self, finished_before: datetime, tombstone_until: datetime, limit: int) -> PurgeReport:
        self.operations += 1
        due = sorted(
            (r for r in self.history.values() if r.state.updated_at < finished_before),
            key=lambda r: r.state.updated_at,
        )[:limit]
        for record in due:
            del self.history[record.order_id]
            self.audits.pop(record.order_id, None)
            self.tombstones[record.order_id] = tombstone_until
        return PurgeReport(purged=len(due), more=len(due) == limit)

    async def drop_tombstones(self, before: datetime, limit: int) -> int:
        self.operations += 1
        expired = [order_id for order_id, until in self.tombstones.items() if until < before][:limit]
        for order_id in expired:
            del self.tombstones[order_id]
        return len(expired)

    def _states(self, state: ProcessState | None = None) -> list[TaskState]:
        live = [r.state for _, r in self.records.values()]
        kept = [r.state for r in self.history.values()]
        return [s for s in live + kept if state is None or s.process_state is state]

    async def list_by_state(
        self,
        state: ProcessState,
        page_size: int,
        continuation: str | None,
        waiting_for: str | None = None,
        submitter: str | None = None,
    ) -> Page:
        matching = [
            s
            for s in self._states(state)
            if (waiting_for is None or s.waiting_for == waiting_for)
            and (submitter is None or s.submitter == submitter)
        ]
        try:
            start = int(continuation or 0)
        except ValueError as exc:
            raise InvalidContinuation(continuation or "") from exc
        end = start + page_size
        return Page(matching[start:end], str(end) if end < len(matching) else None)

    async def count_by_state(self, limit: int) -> StateCounts:
        counts = dict.fromkeys(ProcessState, 0)
        live = [r.state.process_state for _, r in self.records.values()]
        for state in live[:limit]:
            counts[state] += 1
        for record in self.history.values():  # the history's tally: never limited
            counts[record.state.process_state] += 1
        waiting: dict[str, int] = {}
        for _, record in list(self.records.values())[:limit]:
            if record.state.process_state is ProcessState.WAITING and record.state.waiting_for:
                waiting[record.state.waiting_for] = waiting.get(record.state.waiting_for, 0) + 1
        return StateCounts(counts, len(live) <= limit, dict(sorted(waiting.items())))

    def state(self, order_id: str) -> TaskRecord:
        """The stored record, live or in the history (for assertions)."""
        found = self.records.get(order_id)
        return found[1] if found is not None else self.history[order_id]


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
        self.failing: set[str] = set()  # queues whose sends fail (the broker is unreachable for them)

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
        if queue in self.failing:
            raise ConnectionError(f"cannot reach queue {queue}")
        self.sent.append(
            Sent(queue, body, message_id, correlation_id, reply_to, time_to_live_seconds, scheduled_at)
        )

    def take(self, queue: str | None = None) -> list[Sent]:
        """Remove and return what was sent (to one queue, or all)."""
        taken = [s for s in self.sent if queue is None or s.queue == queue]
        self.sent = [s for s in self.sent if s not in taken]
        return taken


class SwitchKept:
    """A switch store in memory, with its ETag check (the table store's is tested on Azurite)."""

    def __init__(self, tasks: bool) -> None:
        self.tasks = tasks
        self.switch: formats.Switch | None = None
        self.writes = 0
        self.seen: dict[str, formats.Instance] = {}

    async def read_switch(self) -> formats.Switch | None:
        return self.switch

    async def write_switch(self, switch: formats.Switch) -> formats.Switch | None:
        current = self.switch.etag if self.switch is not None else None
        if switch.etag != current:
            return None  # another instance wrote it first
        self.writes += 1
        self.switch = formats.Switch(switch.writes, switch.flips_at, f"e{self.writes}")
        return self.switch

    async def holds_tasks(self) -> bool:
        return self.tasks

    async def announce(self, instance: formats.Instance) -> None:
        self.seen[instance.name] = instance

    async def instances(self) -> list[formats.Instance]:
        return list(self.seen.values())

    async def forget(self, instance: formats.Instance) -> None:
        del self.seen[instance.name]
