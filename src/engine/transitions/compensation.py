"""Compensation: the steps that may have had an effect undone in reverse order, an undo that waits for a
call still in flight, and the answers to an undo."""

from __future__ import annotations

from datetime import datetime, timedelta

from ..decisions import Decision, command
from ..messages import (
    CommandKind,
    StatusEvent,
)
from ..state import Phase, ProcessState, StepStatus, TaskRecord
from .context import (
    _MAY_HAVE_EFFECT,
    Context,
    _engine,
    _moved,
    _touch,
    status,
)
from .dispatch import _dispatch
from .endings import _enter_error, _finish


def _dispatch_compensation(record: TaskRecord, ctx: Context, start: int) -> Decision:
    """Undo the highest step at or below ``start`` that may have had an effect, or finish as Compensated."""
    index = next(
        (
            i
            for i in range(min(start, len(record.steps) - 1), -1, -1)
            if record.steps[i].status in _MAY_HAVE_EFFECT and ctx.steps[i].compensation
        ),
        None,
    )
    if index is None:
        return _finish(record, ctx, ProcessState.COMPENSATED, StatusEvent.COMPENSATED)
    # The undo waits for the call of a step skipped while running to settle: the step's own, or that of a
    # step passed over because it cannot be undone (its effect must not land after an undo of the order).
    waits = [
        step.undo_not_before
        for step in record.steps[index : start + 1]
        if step.undo_not_before is not None and step.undo_not_before > ctx.now
    ]
    if waits:
        return _undo_later(record, ctx, index, max(waits))
    return _dispatch(record, ctx, index, compensating=True)


def _undo_later(record: TaskRecord, ctx: Context, index: int, at: datetime) -> Decision:
    """Give the task back unlocked, Compensating at step ``index``, with a resume scheduled for ``at``.

    The step was skipped while its call was in flight; an undo sent now could reach the service before
    that call lands, and the call would then apply an effect nothing undoes. Whoever claims the task
    before ``at`` (a duplicate resume, the Supervisor's kick) finds the same wait and defers again.
    """
    state = record.state
    step = record.steps[index]
    state.phase, state.process_state = Phase.COMPENSATE, ProcessState.COMPENSATING
    state.current_step = index
    state.attempt = step.compensation_attempts
    state.locked_by = None
    state.next_attempt_at = at
    state.complete_by = at + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    _touch(record, ctx)
    reason = f"undo of {step.name} waits for the call in flight when it was skipped"
    return _moved(command(state.order_id, CommandKind.RESUME, reason, at=at, new_id=ctx.new_id))


def _compensation_succeeded(record: TaskRecord, ctx: Context) -> Decision:
    """The current step is undone: undo the one before it."""
    index = record.state.current_step
    step = record.steps[index]
    step.status = StepStatus.COMPENSATED
    step.last_error = None
    undone = status(record, ctx, StatusEvent.STEP_COMPENSATED, step=step.name)
    return _dispatch_compensation(record, ctx, start=index - 1).after(undone)


def _compensation_failed(record: TaskRecord, ctx: Context, error: str) -> Decision:
    """A compensation cannot be done: an operator must look."""
    step = record.steps[record.state.current_step]
    step.last_error = error
    return _enter_error(
        record, ctx, f"compensation of {step.name} failed: {error}", _engine(ctx, "scheduler")
    )
