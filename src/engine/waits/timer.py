"""A timer: a step that waits until a time and calls nothing (declared with ``engine.workflow.Timer``).

- It starts when its turn comes. Its time is ``after_seconds`` (or its setting) from then, or the time an
  input field holds (:func:`timer_due`); a time that has already come ends it at once (the step is done and
  the next one runs). Otherwise a wake-up is scheduled for its time (:func:`wake_command`), and its
  CompleteBy is a step's budget after it.
- It ends when its wake-up comes at its time (WAKE: the Scheduler ends the wait and dispatches the next
  step). One that comes early schedules another for the time; one for another wait, or a second one, finds
  nothing to end.
- Past its CompleteBy its wake-up was lost: the Supervisor sends it again and counts nothing (REWAKE:
  nothing failed).
- It parks. An operator may extend it (its CompleteBy stays a budget after the later time), end it by hand
  (skip) or cancel the order, as any wait allows.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Final

from ..conditions import value_at
from ..decisions import Outgoing, command, random_id
from ..messages import CommandKind
from ..rules import Operation, Slot, on_wait
from ..state import ProcessState, TaskRecord
from ..workflow import Timer
from .kind import Kind, MoveContext

TIMER: Final = "timer"  # a time comes: a wake-up message the Scheduler receives


def timer_due(record: TaskRecord, timer: Timer, ctx: MoveContext) -> datetime:
    """When ``timer`` ends, started now: ``after_seconds`` (or its setting) from now, or the time its input
    field holds (an absent or unreadable value: now)."""
    if timer.until is None:
        seconds = ctx.settings.wait_seconds.get(timer.setting or "", timer.after_seconds)
        return ctx.now + timedelta(seconds=seconds or 0.0)
    value = value_at({"input": record.input}, timer.until)
    try:
        at = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        return ctx.now  # nothing to wait for: the input says no time (the input model should refuse it)
    return at


def wake_command(
    record: TaskRecord, at: datetime, reason: str, new_id: Callable[[], str] = random_id
) -> Outgoing:
    """The wake-up of the task's current wait (a timer), scheduled for ``at``: it names the wait (step and
    attempt), so one for another wait ends nothing."""
    state = record.state
    return command(state.order_id, CommandKind.WAKE, reason, at, new_id, (state.current_step, state.attempt))


class TimerWait(Kind[Timer]):
    """A timer (see the module)."""

    name = TIMER
    text = "a timer"
    parks = True
    expires = Operation.REWAKE
    ends = (Operation.WAKE,)
    commands = 1  # its wake-up
    rows = (
        # Its wake-up at its time ends it; the next step may be another wait (two waits in a row).
        (
            Slot.ENDS,
            on_wait(
                Operation.WAKE,
                ProcessState.WAITING,
                (
                    (ProcessState.PROCESSING, "timer due, next step dispatched"),
                    (ProcessState.WAITING, "timer due, next step waits"),
                    (ProcessState.PROCESSED, "timer due, done"),
                ),
                wait=TIMER,
            ),
        ),
        # Its wake-up was lost: sent again, no failure (nothing failed).
        (
            Slot.EXPIRES,
            on_wait(
                Operation.REWAKE,
                ProcessState.WAITING,
                ((ProcessState.WAITING, "wake-up lost (Supervisor re-sends)"),),
                wait=TIMER,
            ),
        ),
    )

    def until(self, record: TaskRecord, index: int, wait: Timer, ctx: MoveContext) -> datetime | None:
        """Its time (:func:`timer_due`); None when that has already come."""
        due = timer_due(record, wait, ctx)
        return due if due > ctx.now else None

    def complete_by(self, until: datetime, ctx: MoveContext) -> datetime:
        """A step's budget after its time: the wake-up is scheduled for the time, and the Supervisor sends
        it again if it has not come a window later."""
        return until + timedelta(seconds=ctx.settings.step_complete_by_seconds)

    def sends(
        self, record: TaskRecord, at: datetime, reason: str, new_id: Callable[[], str]
    ) -> tuple[Outgoing, ...]:
        """Its wake-up, for ``at``."""
        return (wake_command(record, at, reason, new_id),)


TIMER_WAIT: Final = TimerWait()
