"""A step that waits (a timer, an approval): when a timer ends, the wait's start, whether a step waits now,
whether its deadline passed, and a wait that ends badly (rejected, or its deadline's policy)."""

from __future__ import annotations

from datetime import datetime, timedelta

from ..conditions import value_at
from ..decisions import Decision, command
from ..messages import (
    CommandKind,
    StatusEvent,
)
from ..state import Phase, ProcessState, StepStatus, TaskRecord
from ..workflow import Approval, Timer
from .call_log import _log_dispatch, _log_end
from .context import (
    Context,
    _fresh_failure_counts,
    _moved,
    _touch,
    document,
    status,
    wake_command,
)


def timer_due(record: TaskRecord, ctx: Context, index: int, timer: Timer) -> datetime:
    """When the timer of step ``index`` ends, started now: ``after_seconds`` (or its setting) from now, or
    the time its input field holds (an absent or unreadable value: now)."""
    if timer.until is None:
        seconds = ctx.settings.wait_seconds.get(timer.setting or "", timer.after_seconds)
        return ctx.now + timedelta(seconds=seconds or 0.0)
    value = value_at(document(record, index - 1), timer.until)
    try:
        at = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        return ctx.now  # nothing to wait for: the input says no time (the input model should refuse it)
    return at


def _start_wait(record: TaskRecord, ctx: Context, index: int, wait: Timer | Approval) -> Decision | None:
    """Step ``index`` starts waiting: Waiting with its deadline as CompleteBy; a timer's wake-up is
    scheduled for its time. None (the step marked done) for a timer whose time has already come."""
    state = record.state
    step = record.steps[index]
    if isinstance(wait, Timer):
        until = timer_due(record, ctx, index, wait)
        if until <= ctx.now:
            step.status = StepStatus.COMPLETED
            step.reason = "timer: its time had come when its turn came"
            return None
        # The wake-up is scheduled for ``until``; the Supervisor re-sends it if not come a window later.
        complete_by = until + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    else:
        seconds = ctx.settings.wait_seconds.get(wait.setting or "", wait.deadline_seconds)
        until = complete_by = ctx.now + timedelta(seconds=seconds)
    step.status = StepStatus.WAITING
    step.attempts += 1
    step.complete_by = until
    step.last_error = None
    _log_dispatch(record, ctx, index, "wait")
    state.phase, state.process_state = Phase.FORWARD, ProcessState.WAITING
    state.current_step = index
    state.attempt = step.attempts
    state.complete_by = complete_by
    state.locked_by = None  # nobody works on a wait
    state.waiting_for, state.wait_until = wait.kind, until
    _touch(record, ctx)
    note = status(
        record, ctx, StatusEvent.WAITING, step=step.name, detail=f"{wait.kind} until {until.isoformat()}"
    )
    if isinstance(wait, Timer):
        return _moved(note, wake_command(record, until, f"timer of {step.name}", new_id=ctx.new_id))
    return _moved(note)


def _waiting(record: TaskRecord, ctx: Context, index: int, kind: type[Timer] | type[Approval]) -> bool:
    """Whether step ``index`` is the task's current step, a wait of ``kind``, and waiting now."""
    state = record.state
    return (
        index == state.current_step
        and index < len(record.steps)
        and isinstance(ctx.steps[index].wait, kind)
        and record.steps[index].status is StepStatus.WAITING
    )


def deadline_passed(record: TaskRecord, ctx: Context) -> bool:
    """Whether the task is Waiting and its current wait's time (an approval's deadline) has come."""
    step = record.steps[record.state.current_step]
    waiting = record.state.process_state is ProcessState.WAITING
    return waiting and step.complete_by is not None and step.complete_by <= ctx.now


def _wait_failed(record: TaskRecord, ctx: Context, error: str) -> Decision:
    """The current wait ends badly (rejected, or its deadline passed with policy compensate): the task is
    handed to a Scheduler to undo, as a cancel is. The wait had no effect: the undo passes over it."""
    index = record.state.current_step
    step = record.steps[index]
    step.status = StepStatus.FAILED
    step.last_error = error[:1000]
    _log_end(record, ctx, index, "rejected" if error.startswith("rejected") else "expired", error)
    state = record.state
    state.last_error = f"{step.name}: {error}"[:1000]
    state.phase, state.process_state = Phase.COMPENSATE, ProcessState.COMPENSATING
    state.locked_by = None
    state.next_attempt_at = None
    state.complete_by = ctx.now + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    _fresh_failure_counts(record)
    _touch(record, ctx)
    return _moved(
        status(record, ctx, StatusEvent.COMPENSATING, step=step.name, detail=error),
        command(state.order_id, CommandKind.RESUME, f"{step.name} {error}"[:200], new_id=ctx.new_id),
    )
