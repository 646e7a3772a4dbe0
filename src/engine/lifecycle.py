"""An order's lifecycle as the Supervisor sees it, decided here and carried out by its sweep through the
store's ports: what is owed to a watched order whose watch entry came due. Three answers:

- :class:`Settled`: no longer in flight (finished, in Error, or gone). A finished order is moved to the
  history before it stops being watched, so a submission of the same id never finds it in neither place
  (adapters.table_store); a pending Error alert is raised first, by the sweep only once the process that
  entered Error had a step's budget to raise it itself.
- :class:`InTime`: in flight and within its CompleteBy. Parked if it waits long (:func:`parks`), brought
  back to the live records if it is parked and due soon, and looked at again at its CompleteBy.
- :class:`Expired`: past its CompleteBy: the state machine's recovery (``transitions.recover_expired``),
  unless it was never started, when it may be a submission's leftover to take back.

No I/O here: the rules are plain functions of the record and the time, tested on their own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from .settings import EngineSettings
from .state import ProcessState, StepStatus, TaskRecord
from .waits import PARKED


@dataclass(frozen=True)
class Settled:
    """Owed before its watch entry goes: the move to the history (``archive``), and a pending Error alert
    (``alert_owed_by``: when the sweep raises it itself; None: no alert pending)."""

    archive: bool
    alert_owed_by: datetime | None


@dataclass(frozen=True)
class InTime:
    """Within its time: ``park`` it (it waits long), or ``bring_back`` (parked, due soon), then watch it
    again at ``until``."""

    park: bool
    bring_back: bool
    until: datetime


@dataclass(frozen=True)
class Expired:
    """Past its CompleteBy; ``never_started``: nothing was ever sent about it."""

    never_started: bool


def watched(
    record: TaskRecord | None, now: datetime, clock: Callable[[], datetime], settings: EngineSettings
) -> Settled | InTime | Expired:
    """What a due watch entry's order is owed, judged at the sweep's ``now``; whether it parks is judged at
    the ``clock``'s time then: a slow sweep would park a wait that ends before it is done (found by the
    simulation: parked past its deadline)."""
    if record is None or not record.state.process_state.in_flight or record.state.complete_by is None:
        if record is None:
            return Settled(archive=False, alert_owed_by=None)
        archive = record.state.process_state.finished and not record.archived
        owed = (
            alert_owed_by(record, settings.step_complete_by_seconds) if record.state.alert_pending else None
        )
        return Settled(archive=archive, alert_owed_by=owed)
    if record.state.complete_by > now:
        park = parks(record, clock(), settings.park_horizon_seconds)
        return InTime(park=park, bring_back=record.parked and not park, until=record.state.complete_by)
    return Expired(never_started=never_started(record))


def parks(record: TaskRecord, now: datetime, horizon: float) -> bool:
    """Whether a task within its time waits long enough to be parked: for a wait of a kind that parks (a
    callback's wait is a step's CompleteBy, short) that ends (its time, its deadline) more than two horizons
    from now, so it is parked well before the calendar's reading that brings it back."""
    state = record.state
    ends = state.wait_until or state.complete_by
    return (
        horizon > 0
        and state.process_state is ProcessState.WAITING
        and state.waiting_for in PARKED
        and ends is not None
        and ends > now + timedelta(seconds=2 * horizon)
    )


def latest_due(record: TaskRecord, now: datetime) -> datetime:
    """The latest CompleteBy of the task, or of any of its steps in flight, that has passed by ``now``: when
    the latest timeout the Supervisor is about to judge happened."""
    times = [record.state.complete_by] if record.state.complete_by is not None else []
    times += [
        step.complete_by
        for step in record.steps
        if step.status in (StepStatus.RUNNING, StepStatus.WAITING, StepStatus.COMPENSATING)
        and step.complete_by is not None
        and step.complete_by <= now
    ]
    return max(times, default=now)


def alert_owed_by(record: TaskRecord, seconds: float) -> datetime:
    """When the Supervisor raises a task's pending Error alert itself: ``seconds`` (a step's budget) after
    the task entered Error, by when the process that put it there has raised it and recorded so unless it
    died (its last change, the move into Error, is ``UpdatedAt``)."""
    return record.state.updated_at + timedelta(seconds=seconds)


def never_started(record: TaskRecord) -> bool:
    """Pending with no step ever dispatched: what a submission leaves when its kick was not sent."""
    state = record.state
    return (
        state.process_state is ProcessState.PENDING
        and state.attempt == 0
        and all(step.status is StepStatus.NOT_STARTED and step.attempts == 0 for step in record.steps)
    )
