"""What ends a wait that calls nothing: a timer's wake-up (early, due, or stale), and a person's approval or
rejection. These are the moves of the operations a kind's rows own (``engine.waits``: WAKE is a timer's,
APPROVE and REJECT an approval's); a callback ends as an Agent's reply does (:mod:`.replies`)."""

from __future__ import annotations

from datetime import datetime

from ..decisions import REFUSED, Decision
from ..machine import Operation
from ..messages import (
    StatusEvent,
)
from ..state import ProcessState, StepStatus, TaskRecord
from ..waits import APPROVAL, TIMER
from .call_log import _log_end
from .context import (
    Context,
    allows,
    status,
)
from .forward import _dispatch_forward
from .operator import (
    _hand_back,
    _operator_took_over,
)
from .waiting import _wait_failed, _waiting, deadline_passed


def _end_wait(record: TaskRecord, ctx: Context, reason: str, *, scheduler: bool) -> Decision:
    """The current wait is over and went well: the step is done, and the task moves on. The Scheduler
    dispatches the next step itself; anyone else hands the task back to it with a kick (only a Scheduler
    dispatches)."""
    step = record.steps[record.state.current_step]
    step.status = StepStatus.COMPLETED
    step.reason = reason[:1000]
    step.last_error = None
    _log_end(record, ctx, record.state.current_step, reason)
    done = status(record, ctx, StatusEvent.STEP_COMPLETED, step=step.name, detail=reason)
    if scheduler:
        return _dispatch_forward(record, ctx).after(done)
    return _hand_back(record, ctx, f"{step.name} {reason}").after(done)


def wake_early(record: TaskRecord, ctx: Context, index: int, attempt: int) -> datetime | None:
    """The time a wake-up that came early for the current timer must come again at (None: not early, or
    not for the current wait). Nothing runs before its timer: an early wake-up only schedules another."""
    state = record.state
    step = record.steps[index] if index < len(record.steps) else None
    if step is None or state.attempt != attempt or not _waiting(record, ctx, index, TIMER):
        return None
    due = step.complete_by
    return due if due is not None and due > ctx.now else None


def wake(record: TaskRecord, ctx: Context, index: int, attempt: int) -> Decision:
    """A timer's wake-up: end the wait if it is for the current wait (step and attempt) and its time has
    come. A late, duplicate or early one is refused and changes nothing."""
    state = record.state
    if state.attempt != attempt or not _waiting(record, ctx, index, TIMER):
        return REFUSED
    due = record.steps[index].complete_by
    if due is None or due > ctx.now or allows(Operation.WAKE, record) is None:
        return REFUSED
    return _end_wait(record, ctx, "timer due", scheduler=True)


def approve(record: TaskRecord, ctx: Context, index: int) -> Decision:
    """A person approves the waiting approval of step ``index``; the task moves on (out of Error too, when
    its deadline put it there). Past its deadline a Waiting approval can no longer be given: its policy
    applies, whether or not the Supervisor has come yet."""
    if not _waiting(record, ctx, index, APPROVAL) or allows(Operation.APPROVE, record) is None:
        return REFUSED
    if deadline_passed(record, ctx):
        return REFUSED
    return _end_wait(record, ctx, "approved", scheduler=False)


def reject(record: TaskRecord, ctx: Context, index: int, reason: str) -> Decision:
    """A person rejects the waiting approval of step ``index``: what was done is undone."""
    if not _waiting(record, ctx, index, APPROVAL) or allows(Operation.REJECT, record) is None:
        return REFUSED
    if record.state.process_state is ProcessState.ERROR:
        _operator_took_over(record)
    return _wait_failed(record, ctx, f"rejected: {reason}" if reason else "rejected")
