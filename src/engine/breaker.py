"""Circuit breakers shared by every instance of an Agent, one record per remote service in a
:class:`~engine.breaker.BreakerStore`.

Every instance stops calling a service that is down, and every instance sees it come back:

- **Opening.** Each process counts its own consecutive failures of a service in memory; when its count
  reaches ``fail_max`` it writes the record open with ``openUntil = now + reset`` (ETag-guarded; on a
  lost race it reloads and decides again, usually adopting the open record someone else wrote). Why
  local counts: a healthy service with an occasional failure then costs no write at all, and a shared
  count would cost a write per failure (and one more per success to reset it). The price is that, with
  N processes, up to N x (fail_max - 1) calls may fail before the first one opens it, which is what
  per-process breakers cost before, and still only a handful of calls.
- **Open.** No instance calls (:class:`CircuitOpenError`).
- **Half-open.** After ``openUntil`` exactly one instance at a time takes the trial call ("the probe"):
  an ETag-guarded claim that names the instance and a probe deadline, so a prober that crashes frees
  it at that deadline. Success closes it for all, failure opens it again for ``reset`` seconds.
- **Costs.** Each process keeps a cached view of the record, re-read at most every ``refresh_seconds``
  (in the background while calls keep going; only the very first call of a process waits for it) and
  replaced at once by every write it makes itself. Writes happen only on transitions: open, probe
  claim, close or re-open. A closed, healthy service costs no table operation per call, only one read
  per process per ``refresh_seconds`` while calls flow (none when idle).

The pure decisions (what a failure, a probe claim or a probe's outcome does to the record, and when
the Supervisor should hold work) are the functions below; :class:`CircuitBreaker` applies them. Its
lock guards only its in-memory state and is never held across an ``await``, so calls run concurrently
(a single hung call never blocks the other calls to the service) and it is safe on an event loop.

If the store cannot be reached, a breaker acts on what its own process learns until it can again.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from . import metrics
from .errors import BreakerConflict, CircuitOpenError

if TYPE_CHECKING:
    from .clock import Clock

log = logging.getLogger("engine.breaker")

# Lost races in a row after which a writer stops and keeps what it last read (others are deciding).
_MAX_RACES = 5


class BreakerState(StrEnum):
    """Closed: calls flow. Open: calls fail fast. Half-open: one instance's trial call decides."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


@dataclass(frozen=True)
class BreakerRecord:
    """One service's breaker as stored. ``etag`` is None for a record not stored yet."""

    service: str
    state: BreakerState = BreakerState.CLOSED
    consecutive_failures: int = 0
    opened_at: datetime | None = None  # when it opened; kept while it stays open or half-open
    open_until: datetime | None = None
    probe_holder: str | None = None  # the instance making the trial call
    probe_by: datetime | None = None  # after this, another instance may take the probe
    updated_at: datetime | None = None
    etag: str | None = None


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


class Admission(StrEnum):
    """What a breaker lets a caller do."""

    CALL = "call"
    REJECT = "reject"
    PROBE = "probe"  # the caller may try to claim the trial call


# ---- the pure decisions ------------------------------------------------------------------------------
def admission(record: BreakerRecord, now: datetime, instance: str) -> Admission:
    """Whether an instance may call the service now, must not, or may claim the trial call."""
    if record.state is BreakerState.CLOSED:
        return Admission.CALL
    # Work waits while the open interval or someone's trial call lasts; the trial's holder may go on.
    own_probe = record.state is BreakerState.HALF_OPEN and record.probe_holder == instance
    if hold_until(record, now) is not None and not own_probe:
        return Admission.REJECT
    return Admission.PROBE


def opened(
    record: BreakerRecord, now: datetime, failures: int, fail_max: int, reset_seconds: float
) -> BreakerRecord | None:
    """A process counted ``failures`` consecutive failures: the record opened, or None if nothing changes
    (too few, or it is already open or half-open)."""
    if record.state is not BreakerState.CLOSED or failures < fail_max:
        return None
    return replace(
        record,
        state=BreakerState.OPEN,
        consecutive_failures=failures,
        opened_at=now,
        open_until=now + timedelta(seconds=reset_seconds),
        probe_holder=None,
        probe_by=None,
        updated_at=now,
    )


def probe_claimed(
    record: BreakerRecord, now: datetime, instance: str, probe_seconds: float
) -> BreakerRecord | None:
    """``instance`` takes the trial call until ``now + probe_seconds``, or None if it may not now."""
    if admission(record, now, instance) is not Admission.PROBE:
        return None
    return replace(
        record,
        state=BreakerState.HALF_OPEN,
        probe_holder=instance,
        probe_by=now + timedelta(seconds=probe_seconds),
        updated_at=now,
    )


def probe_ended(
    record: BreakerRecord, now: datetime, instance: str, healthy: bool, reset_seconds: float
) -> BreakerRecord | None:
    """The trial call of ``instance`` ended: closed for everyone if the service is healthy, open again
    otherwise. None if the probe is no longer this instance's (its deadline passed and another took it)."""
    if record.state is not BreakerState.HALF_OPEN or record.probe_holder != instance:
        return None
    if healthy:
        return BreakerRecord(record.service, updated_at=now, etag=record.etag)
    return replace(
        record,
        state=BreakerState.OPEN,
        consecutive_failures=record.consecutive_failures + 1,
        open_until=now + timedelta(seconds=reset_seconds),
        probe_holder=None,
        probe_by=None,
        updated_at=now,
    )


def hold_until(record: BreakerRecord | None, now: datetime) -> datetime | None:
    """Until when work waiting on this service should be left alone: the end of the open interval, or
    of a trial call under way; None when it may be sent again now (closed, or a trial call is due)."""
    if record is None or record.state is BreakerState.CLOSED:
        return None
    if record.state is BreakerState.OPEN and record.open_until is not None and now < record.open_until:
        return record.open_until
    if record.state is BreakerState.HALF_OPEN and record.probe_by is not None and now < record.probe_by:
        return record.probe_by
    return None


# ---- a process-local store ---------------------------------------------------------------------------
class MemoryBreakerStore:
    """:class:`~engine.breaker.BreakerStore` in one process's memory: breakers that are not shared (one
    process, or tests). Writes are ETag-conditional like the table's."""

    def __init__(self) -> None:
        self._records: dict[str, BreakerRecord] = {}
        self._etags = itertools.count(1)
        self.operations = 0

    async def load_all(self) -> list[BreakerRecord]:
        """Every stored record."""
        self.operations += 1
        return list(self._records.values())

    async def load(self, service: str) -> BreakerRecord | None:
        """One service's record, or None."""
        self.operations += 1
        return self._records.get(service)

    async def save(self, record: BreakerRecord) -> BreakerRecord:
        """Store the record if its ETag is the stored one (None: only if none is stored)."""
        self.operations += 1
        current = self._records.get(record.service)
        if (current.etag if current else None) != record.etag:
            raise BreakerConflict(record.service)
        saved = replace(record, etag=f"b{next(self._etags)}")
        self._records[record.service] = saved
        return saved


# ---- one process's breaker for one service -------------------------------------------------------------
@dataclass(frozen=True)
class Permit:
    """Leave to make one call; ``probe`` when it is the trial call that decides for every instance."""

    probe: bool = False


Decide = Callable[[BreakerRecord, datetime], BreakerRecord | None]


class CircuitBreaker:
    """One process's view of one service's shared breaker.

    Call :meth:`before_call` before each call (it raises :class:`CircuitOpenError` or returns a
    :class:`Permit`), then exactly one of :meth:`on_success`, :meth:`on_failure` (the failure counts
    against the service), :meth:`on_neutral` (the service answered, it just said no) or
    :meth:`on_abandoned` (cancelled: nothing learned) with that permit.
    """

    def __init__(
        self,
        service: str,
        store: BreakerStore,
        clock: Clock,
        *,
        fail_max: int,
        reset_seconds: float,
        probe_seconds: float,
        instance_id: str = "",
        refresh_seconds: float = 1.0,
    ) -> None:
        self.service = service
        self.store = store
        self.clock = clock
        self.fail_max = fail_max
        self.reset_seconds = reset_seconds
        self.probe_seconds = probe_seconds
        self.instance_id = instance_id or uuid.uuid4().hex
        self.refresh_seconds = refresh_seconds
        self._lock = threading.Lock()
        self._view: BreakerRecord | None = None  # None until first read
        self._read_at: datetime | None = None
        self._version = 0  # bumped by every local change, so an older read in flight cannot undo it
        self._refreshing: asyncio.Future[BreakerRecord] | None = None
        self._failures = 0  # this process's consecutive failures
        self._probing = False  # this process is claiming or making the trial call
        self._opening = False  # this process is writing the record open

    @property
    def view(self) -> BreakerRecord:
        """The cached record (closed until first read)."""
        with self._lock:
            return self._view or BreakerRecord(self.service)

    @property
    def state(self) -> BreakerState:
        """The cached state."""
        return self.view.state

    # ---- the cache -------------------------------------------------------------------------------
    def _adopt(self, record: BreakerRecord) -> None:
        with self._lock:
            self._set_view(record)

    def _set_view(self, record: BreakerRecord) -> None:
        """Cache ``record`` (the lock is held). Failures counted before an opening belong to the outage
        it records, so once the breaker is not closed the local count starts afresh."""
        self._view = record
        metrics.breaker_state(self.service, record.state.value)
        self._read_at = self.clock.now()
        self._version += 1
        if record.state is not BreakerState.CLOSED:
            self._failures = 0

    async def refresh(self) -> BreakerRecord:
        """Read the record now and cache it; on a store error keep the cached view (closed if none)."""
        with self._lock:
            version = self._version
        try:
            record = await self.store.load(self.service) or BreakerRecord(self.service)
        except Exception:
            log.warning("could not read the breaker of %s; keeping its view", self.service, exc_info=True)
            with self._lock:
                self._read_at = self.clock.now()  # try again after the interval, not on every call
                self._view = self._view or BreakerRecord(self.service)
                return self._view
        with self._lock:
            if self._version == version:  # no local write since the read began: it is current
                self._set_view(record)
            return self._view or record

    async def _fresh_view(self) -> None:
        """Start a re-read if the view is older than ``refresh_seconds``; wait for it only when cold."""
        with self._lock:
            now = self.clock.now()
            if self._read_at is not None and (now - self._read_at).total_seconds() < self.refresh_seconds:
                return
            cold = self._view is None
            pending = self._refreshing
            if pending is None:
                pending = self._refreshing = asyncio.ensure_future(self.refresh())
                pending.add_done_callback(self._refreshed)
        if cold:
            await asyncio.shield(pending)

    def _refreshed(self, done: asyncio.Future[BreakerRecord]) -> None:
        with self._lock:
            if self._refreshing is done:
                self._refreshing = None

    # ---- writes ----------------------------------------------------------------------------------
    async def _write(self, decide: Decide) -> bool:
        """Apply ``decide`` to the record and save it conditionally; on a lost race reload and decide
        again. True if this process's change was saved (or, with the store unreachable, applied locally)."""
        record, reloaded = self.view, False
        for _ in range(_MAX_RACES):
            changed = decide(record, self.clock.now())
            if changed is None:
                if reloaded:  # what won the race: cache it (an unread view keeps its age)
                    self._adopt(record)
                return False
            try:
                saved = await self.store.save(changed)
            except BreakerConflict:
                try:
                    record = await self.store.load(self.service) or BreakerRecord(self.service)
                    reloaded = True
                except Exception:
                    log.warning("could not reload the breaker of %s", self.service, exc_info=True)
                    return False
                continue
            except Exception:
                log.warning("could not save the breaker of %s; acting locally", self.service, exc_info=True)
                self._adopt(changed)
                return True
            self._adopt(saved)
            return True
        self._adopt(record)
        return False

    # ---- the call protocol -------------------------------------------------------------------------
    async def before_call(self) -> Permit:
        """Raise :class:`CircuitOpenError` unless a call may be made now; the permit says if it is a probe."""
        await self._fresh_view()
        with self._lock:
            verdict = admission(self._view or BreakerRecord(self.service), self.clock.now(), self.instance_id)
            if verdict is Admission.CALL:
                return Permit()
            if verdict is Admission.REJECT:
                raise CircuitOpenError(f"circuit open: {self.service} failed repeatedly")
            if self._probing:
                raise CircuitOpenError(f"circuit half-open: a trial call to {self.service} is in progress")
            self._probing = True
        try:
            won = await self._write(
                lambda r, now: probe_claimed(r, now, self.instance_id, self.probe_seconds)
            )
        except BaseException:
            self._stop_probing()
            raise
        if not won:
            self._stop_probing()
            raise CircuitOpenError(f"circuit half-open: another instance is probing {self.service}")
        return Permit(probe=True)

    def _stop_probing(self) -> None:
        with self._lock:
            self._probing = False

    async def _end_probe(self, healthy: bool) -> None:
        try:
            await self._write(
                lambda r, now: probe_ended(r, now, self.instance_id, healthy, self.reset_seconds)
            )
        finally:
            self._stop_probing()

    async def on_success(self, permit: Permit) -> None:
        """The call worked: the local count restarts; a probe closes the breaker for everyone."""
        with self._lock:
            self._failures = 0
        if permit.probe:
            await self._end_probe(healthy=True)

    async def on_failure(self, permit: Permit) -> None:
        """The call failed in a way that counts against the service."""
        if permit.probe:
            await self._end_probe(healthy=False)
            return
        with self._lock:
            if self._view is not None and self._view.state is not BreakerState.CLOSED:
                return  # a call that began before this process learned of the opening: same outage
            self._failures += 1
            failures = self._failures
            if failures < self.fail_max or self._opening:
                return
            self._opening = True
        try:
            await self._write(lambda r, now: opened(r, now, failures, self.fail_max, self.reset_seconds))
        finally:
            with self._lock:
                self._opening = False
                self._failures = 0

    async def on_neutral(self, permit: Permit) -> None:
        """The call ended in a way that says nothing bad about the service's health (a rejected request):
        no count; a probe that got such an answer shows the service is up, and closes the breaker."""
        if permit.probe:
            await self._end_probe(healthy=True)

    def on_abandoned(self, permit: Permit) -> None:
        """The call was cancelled before it ended: nothing learned. A probe it held is freed in this
        process (which may claim it again at once); other instances may take it at its deadline. No
        write: the call is being cancelled, so awaiting anything here could be cut short anyway."""
        if permit.probe:
            self._stop_probing()
