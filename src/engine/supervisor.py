"""The Supervisor: finds tasks past their CompleteBy and arranges recovery. It knows no business logic."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime

from . import lifecycle, metrics, telemetry, tracing, transitions, waits
from .breaker import BreakerRecord
from .decisions import Outcome
from .errors import ConcurrencyError, NotUnderstood
from .outbox import alert_raised, carry_out
from .parts import EngineParts
from .state import ProcessState, TaskRecord

log = logging.getLogger("engine.supervisor")


@dataclass
class SweepReport:
    """What one sweep found and did."""

    expired: int = 0
    rewatched: int = 0
    unwatched: int = 0
    archived: int = 0  # finished tasks moved to the history (kept there for the retention period)
    kicked: int = 0
    retried: int = 0
    errored: int = 0
    held: int = 0  # left alone: the step's service has an open circuit breaker (no failure counted)
    released: int = 0  # given back without a failure counted: a hold ended, or a breaker wants a trial
    deadlines: int = 0  # approvals past their deadline, handed to a Scheduler to undo the order
    parked: int = 0  # waiting long: moved out of the live records until it is nearly due
    promoted: int = 0  # parked tasks nearly due, brought back to the live records
    taken_back: int = 0  # never started, and its id is in the history: a submission's leftover, deleted
    alerted: int = 0  # Error alerts raised again: the process that entered Error died before saying it had
    lost_races: int = 0
    passed_over: int = 0  # a later release's task (or one it cannot read): reported, left to that release
    seconds: float = 0.0
    order_ids: list[str] = field(default_factory=list)

    def count(self, outcome: Outcome) -> None:
        """Count one recovery by what it did."""
        if outcome is Outcome.KICKED:
            self.kicked += 1
        elif outcome is Outcome.RETRIED:
            self.retried += 1
        elif outcome is Outcome.ERRORED:
            self.errored += 1
        elif outcome is Outcome.HELD:
            self.held += 1
        elif outcome is Outcome.RELEASED:
            self.released += 1
        elif outcome is Outcome.DEADLINE:
            self.deadlines += 1


class Supervisor:
    """Run :meth:`sweep` periodically. Concurrent Supervisors are safe: every change is ETag-conditional,
    so only one of them recovers a given task."""

    def __init__(self, parts: EngineParts) -> None:
        self.parts = parts

    async def _breakers(self) -> dict[str, BreakerRecord]:
        """Every service's circuit breaker, by service; none if they are not shared or cannot be read (then
        nothing is held: the sweep acts as it would without breakers)."""
        if self.parts.breakers is None:
            return {}
        try:
            found = {record.service: record for record in await self.parts.breakers.load_all()}
        except Exception:
            log.warning("could not read the circuit breakers; holding nothing this sweep", exc_info=True)
            return {}
        for service, record in found.items():
            metrics.breaker_state(service, record.state.value)
        return found

    async def _archive(self, record: TaskRecord) -> bool:
        """Move a finished task to the history; False if it changed meanwhile or could not be moved now
        (it stays watched, and a later sweep tries again)."""
        try:
            return await self.parts.store.archive(record)
        except Exception:
            log.warning("could not move finished order %s to the history", record.order_id, exc_info=True)
            return False

    async def _raise_alert(self, record: TaskRecord) -> bool:
        """Raise the Error alert of a task whose AlertPending is still set (whoever put it in Error did not
        live to record the alert as raised), then record it; False if the task changed meanwhile."""
        alert = transitions.error_alert(record)
        telemetry.emit_event(alert.name, **alert.fields())
        return await alert_raised(self.parts.store, record)

    async def sweep(self) -> SweepReport:
        """One pass over expired in-flight tasks. The breakers are read once, when the first task that
        needs recovery is found (a sweep with nothing expired reads nothing more)."""
        with tracing.span(tracing.SUPERVISOR_SWEEP) as span:
            report = await self._sweep(tracing.traceparent(span))
        metrics.sweep_took(report.seconds)
        return report

    async def _sweep(self, sweep: str | None) -> SweepReport:
        started = time.perf_counter()
        report = SweepReport()
        store = self.parts.store
        ctx = self.parts.context()
        breakers: dict[str, BreakerRecord] | None = None
        breakers_read = datetime.min.replace(tzinfo=ctx.now.tzinfo)
        horizon = ctx.settings.park_horizon_seconds
        if horizon > 0:
            try:
                report.promoted = await store.promote(ctx.now, horizon)
            except Exception:
                log.warning("could not read the calendar of parked orders", exc_info=True)
        async for entry in store.expired(ctx.now):
            try:
                record = await store.load(entry.order_id)
            except NotUnderstood:
                # A later release's task (reported by the store): left to an instance that reads it.
                report.passed_over += 1
                continue
            look = lifecycle.watched(record, ctx.now, self.parts.clock.now, ctx.settings)
            if isinstance(look, lifecycle.Settled):
                if record is not None and look.archive:
                    if not await self._archive(record):
                        report.lost_races += 1
                        continue  # still watched: the next sweep tries again
                    report.archived += 1
                if record is not None and look.alert_owed_by is not None:
                    if look.alert_owed_by > ctx.now:
                        # The process that entered Error raises the alert and records it just after its
                        # save: a sweep in between (another worker's) leaves it that process's, and looks
                        # again once it has had a step's budget, so only a death raises it twice.
                        await store.rewatch(entry, look.alert_owed_by)
                        report.rewatched += 1
                        continue
                    report.alerted += 1
                    if not await self._raise_alert(record):
                        report.lost_races += 1
                        continue  # still watched: the next sweep looks again
                await store.unwatch(entry)  # no longer in flight: stop watching it
                report.unwatched += 1
                continue
            assert record is not None  # only a settled order may be gone
            if isinstance(look, lifecycle.InTime):
                if look.park and await store.park(record, entry):
                    report.parked += 1
                    continue
                if look.bring_back:
                    try:
                        await store.save(record)  # due soon and still parked: back to the live records
                    except ConcurrencyError:
                        report.lost_races += 1
                        continue
                await store.rewatch(entry, look.until)
                report.rewatched += 1
                continue
            report.expired += 1
            if look.never_started:
                # A task nothing was sent about yet may be a submission's leftover: asked before it starts.
                try:
                    if await store.take_back(record):
                        report.taken_back += 1
                        await store.unwatch(entry)
                        continue
                except ConcurrencyError:
                    report.lost_races += 1
                    continue
            before = record.state.process_state
            asked = [step.retry_at for step in record.steps]
            # What the wait's kind raises when the Supervisor acts on it past its CompleteBy (an approval).
            waiting = waits.of(record.state.waiting_for) if before is ProcessState.WAITING else None
            overdue = waiting.overdue if waiting is not None else None
            if breakers is None or breakers_read < lifecycle.latest_due(record, self.parts.clock.now()):
                # Read again when the reading is older than the timeout about to be judged: a slow sweep
                # would judge it by a breaker closed before the step timed out, and count what the open
                # breaker explains (simulation, finding 21).
                breakers_read = self.parts.clock.now()
                breakers = await self._breakers()
            # The recovery is a span of the order's trace (under its submission), linked to this sweep's:
            # what it sends (a retry, an undo) continues the order's trace.
            with tracing.span(
                tracing.SUPERVISOR_RECOVER,
                parent=record.state.trace_parent,
                links=(sweep,),
                attributes=tracing.task_attributes(record, record.state.current_step, record.state.attempt),
            ):
                task_ctx = self.parts.context(record=record)
                if task_ctx.workflow is None:
                    decision = transitions.workflow_not_deployed(record, task_ctx, "supervisor")
                else:
                    decision = transitions.recover_expired(record, task_ctx, breakers)
                if not decision.changed:
                    continue  # moved on since the index was read
                try:
                    await store.save(record)
                except ConcurrencyError:
                    tracing.annotate(**{tracing.RECOVERY: "lost a race"})
                    report.lost_races += 1
                    continue
                tracing.annotate(**{tracing.RECOVERY: decision.outcome.value})
                if decision.outcome is Outcome.HELD and record.state.complete_by is not None:
                    # Held again and again while the outage lasts: move the watch entry now, so the next
                    # sweeps skip the task until the hold ends instead of loading it to find that out.
                    await store.rewatch(entry, record.state.complete_by)
                await carry_out(self.parts.sender, decision, record, store)
                if overdue is not None:
                    step = record.steps[record.state.current_step]
                    telemetry.emit_event(
                        overdue,
                        orderId=record.order_id,
                        step=step.name,
                        deadline=step.complete_by.isoformat() if step.complete_by else "",
                        processState=record.state.process_state.value,
                    )
            report.order_ids.append(record.order_id)
            report.count(decision.outcome)
            # A group's steps are recovered each on its own: one line per step asked to run again.
            again = [
                s for s, was in zip(record.steps, asked, strict=True) if s.retry_at and s.retry_at != was
            ]
            for step in again or [record.steps[record.state.current_step]]:
                if decision.outcome is Outcome.RETRIED:
                    metrics.step_retried(record.state.workflow, step.name, "supervisor")
                telemetry.info(
                    log,
                    "recovered expired task",
                    **telemetry.context(
                        record.order_id,
                        step.name,
                        step.attempts if again else record.state.attempt,
                        was=before.value,
                        now=record.state.process_state.value,
                        failureCount=record.state.failure_count,
                        **({"retryAt": step.retry_at.isoformat()} if step.retry_at and again else {}),
                    ),
                )
        report.seconds = time.perf_counter() - started
        telemetry.emit_event(
            telemetry.SUPERVISOR_SWEEP_COMPLETED,
            expired=report.expired,
            rewatched=report.rewatched,
            unwatched=report.unwatched,
            archived=report.archived,
            kicked=report.kicked,
            retried=report.retried,
            errored=report.errored,
            held=report.held,
            released=report.released,
            deadlines=report.deadlines,
            takenBack=report.taken_back,
            parked=report.parked,
            promoted=report.promoted,
            alerted=report.alerted,
            lostRaces=report.lost_races,
            seconds=round(report.seconds, 4),
        )
        return report
