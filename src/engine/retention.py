"""Retention: finished tasks are kept for a period, then purged in bounded batches, each leaving a tombstone.

A task that finished (Processed, Compensated) is moved from the live records to the history by the
Supervisor once it sees it finished; the clean-up here deletes it from the history, with everything stored
for it, once it has been finished for longer than the retention period. Tasks in Error are never purged:
they wait for an operator. Each purged task leaves a tombstone for as long again, which refuses its id
(:class:`Purged`): within the retention period a re-submission of the id gets the task back (the same input)
or a conflict (another input), then the id is refused, and only once the tombstone is gone does the id
start a new task. So a client that retries a submission long after it was accepted never starts the work
twice, for twice the retention period.

The clean-up runs on a timer of its own and does at most ``batch`` tasks per store call, for at most
``max_seconds`` per run: a backlog (after a long outage, or a shorter retention) drains over several runs
instead of holding one for long. A run that found nothing to do makes the runs after it return at once for
``idle`` (a twentieth of the retention, at most five minutes): finished tasks become due as time passes, so
looking more often than that finds nothing more, and costs queries.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

import isodate

from . import telemetry
from .clock import Clock
from .errors import Conflict
from .ports import StateStore

log = logging.getLogger("engine.retention")

RETENTION_COMPLETED = "RetentionCompleted"


class Purged(Conflict):
    """The id belonged to a task that finished and was purged; its tombstone refuses the id for now."""

    def __init__(self, order_id: str) -> None:
        super().__init__(order_id)
        self.args = (
            f"order {order_id} finished longer ago than the retention period and was deleted; its id "
            "cannot be used again until its tombstone expires (as long again)",
        )


def parse_retention(value: str) -> timedelta:
    """An ISO 8601 duration in days, hours, minutes and seconds (``P30D``, ``PT20S``), positive.

    Months and years are refused: their length depends on the date, and a retention should not.
    """
    try:
        parsed = isodate.parse_duration(value)
    except (isodate.ISO8601Error, ValueError) as exc:
        raise ValueError(f"{value!r} is not an ISO 8601 duration such as P30D or PT20S") from exc
    if not isinstance(parsed, timedelta):
        raise ValueError(f"{value!r}: give the duration in days, hours, minutes or seconds (P365D, not P1Y)")
    if parsed <= timedelta(0):
        raise ValueError(f"{value!r}: the duration must be positive")
    return parsed


@dataclass(frozen=True)
class RetentionPolicy:
    """How long finished tasks are kept, how long their tombstones (default: as long again), and the
    bounds of one clean-up run."""

    retention: timedelta = timedelta(days=30)
    tombstone: timedelta | None = None
    batch: int = 200
    max_seconds: float = 20.0
    idle: timedelta | None = None

    @property
    def tombstone_period(self) -> timedelta:
        """How long a purged task's id stays refused."""
        return self.tombstone if self.tombstone is not None else self.retention

    @property
    def idle_period(self) -> timedelta:
        """How long after a run that found nothing the next run looks again."""
        return self.idle if self.idle is not None else min(self.retention / 20, timedelta(minutes=5))


@dataclass
class RetentionReport:
    """What one clean-up run did."""

    purged: int = 0
    tombstones_dropped: int = 0
    lost_races: int = 0
    batches: int = 0
    more: bool = False  # stopped at its time bound with work left: the next run goes on
    idle: bool = False  # returned at once: a recent run found nothing to do
    seconds: float = 0.0


class Retention:
    """The clean-up. Concurrent runs are safe: every deletion is conditional on what its batch read."""

    def __init__(self, store: StateStore, clock: Clock, policy: RetentionPolicy) -> None:
        self.store = store
        self.clock = clock
        self.policy = policy
        self._quiet_until: datetime | None = None

    async def run(self) -> RetentionReport:
        """Purge what is due, then drop expired tombstones, a batch at a time, within the time bound."""
        started = time.perf_counter()
        policy = self.policy
        report = RetentionReport()
        if self._quiet_until is not None and self.clock.now() < self._quiet_until:
            report.idle = True
            return report

        def out_of_time() -> bool:
            return time.perf_counter() - started >= policy.max_seconds

        while True:
            now = self.clock.now()
            batch = await self.store.purge(
                now - policy.retention, now + policy.tombstone_period, policy.batch
            )
            report.batches += 1
            report.purged += batch.purged
            report.lost_races += batch.lost_races
            # A batch of lost races only would find the same tasks again at once: leave them to a later run.
            if not batch.more or batch.purged == 0:
                break
            if out_of_time():
                report.more = True
                break
        while not report.more:
            dropped = await self.store.drop_tombstones(self.clock.now(), policy.batch)
            report.batches += 1
            report.tombstones_dropped += dropped
            if dropped < policy.batch:
                break
            if out_of_time():
                report.more = True
        report.seconds = time.perf_counter() - started
        found = report.purged or report.tombstones_dropped or report.lost_races
        self._quiet_until = None if found else self.clock.now() + policy.idle_period
        telemetry.emit_event(
            RETENTION_COMPLETED,
            purged=report.purged,
            tombstonesDropped=report.tombstones_dropped,
            lostRaces=report.lost_races,
            batches=report.batches,
            more=report.more,
            seconds=round(report.seconds, 4),
        )
        return report
