"""The Supervisor: finds tasks past their CompleteBy and arranges recovery. It knows no business logic."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from . import telemetry, transitions
from .outbox import deliver
from .parts import EngineParts
from .ports import ConcurrencyError
from .transitions import Context

log = logging.getLogger("engine.supervisor")


@dataclass
class SweepReport:
    """What one sweep found and did."""

    expired: int = 0
    rewatched: int = 0
    unwatched: int = 0
    kicked: int = 0
    retried: int = 0
    errored: int = 0
    lost_races: int = 0
    seconds: float = 0.0
    order_ids: list[str] = field(default_factory=list)


class Supervisor:
    """Run :meth:`sweep` periodically. Concurrent Supervisors are safe: every change is ETag-conditional,
    so only one of them recovers a given task."""

    def __init__(self, parts: EngineParts) -> None:
        self.parts = parts
        self.workflow, self.store, self.sender = parts.workflow, parts.store, parts.sender
        self.clock, self.settings = parts.clock, parts.settings

    def sweep(self) -> SweepReport:
        """One pass over expired in-flight tasks."""
        started = time.perf_counter()
        report = SweepReport()
        now = self.clock.now()
        for entry in self.store.expired(now):
            record = self.store.load(entry.order_id)
            state = record.state if record else None
            if (
                record is None
                or state is None
                or not state.process_state.in_flight
                or state.complete_by is None
            ):
                self.store.unwatch(entry)  # finished: stop watching it
                report.unwatched += 1
                continue
            if state.complete_by > now:
                self.store.rewatch(entry, state.complete_by)  # still within its time: look again then
                report.rewatched += 1
                continue
            report.expired += 1
            ctx = Context(self.workflow, self.settings, now)
            before = record.state.process_state
            failures_before = record.state.failure_count
            out = transitions.recover_expired(record, ctx)
            if not out:
                continue  # moved on since the index was read
            try:
                self.store.save(record)
            except ConcurrencyError:
                report.lost_races += 1
                continue
            deliver(self.sender, out, ctx.alerts)
            report.order_ids.append(record.order_id)
            after = record.state.process_state
            if ctx.alerts:
                report.errored += 1
            elif record.state.failure_count == failures_before:
                report.kicked += 1
            else:
                report.retried += 1
            telemetry.info(
                log,
                "recovered expired task",
                **telemetry.context(
                    record.order_id,
                    record.steps[record.state.current_step].name,
                    record.state.attempt,
                    was=before.value,
                    now=after.value,
                    failureCount=record.state.failure_count,
                ),
            )
        report.seconds = time.perf_counter() - started
        telemetry.emit_event(
            telemetry.SUPERVISOR_SWEEP_COMPLETED,
            expired=report.expired,
            rewatched=report.rewatched,
            unwatched=report.unwatched,
            retried=report.retried,
            errored=report.errored,
            seconds=round(report.seconds, 4),
        )
        return report
