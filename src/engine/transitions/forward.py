"""Forward: a submitted task's first state, a Scheduler's claim, and the dispatch of the next step (a call, a
group, or a wait), leaving out the steps whose condition does not hold, or the task's finish."""

from __future__ import annotations

from datetime import timedelta

from .. import machine
from ..decisions import REFUSED, Decision
from ..machine import Operation
from ..messages import (
    StatusEvent,
)
from ..state import AuditEntry, Phase, ProcessState, TaskRecord
from .compensation import _dispatch_compensation
from .context import (
    _DONE,
    Context,
    _touch,
    allows,
    document,
    status,
)
from .dispatch import _dispatch, _leave_out
from .endings import _finish
from .groups import (
    _dispatch_group,
)
from .waiting import _start_wait


def new_record_state(record: TaskRecord, ctx: Context) -> None:
    """A submitted task: Pending, unlocked, with a CompleteBy by which a Scheduler must have claimed it."""
    state = record.state
    state.process_state = machine.INITIAL
    state.locked_by = None
    state.complete_by = ctx.now + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    state.created_at = state.updated_at = state.step_since = ctx.now


def claim(record: TaskRecord, ctx: Context) -> Decision:
    """A Scheduler takes a free task (Pending, or Compensating and unlocked) and dispatches its work.

    Refused when the task is not claimable, which the caller treats as "someone else has it".
    """
    if allows(Operation.CLAIM, record) is None:
        return REFUSED
    state = record.state
    state.locked_by = ctx.instance_id
    state.next_attempt_at = None
    _touch(record, ctx)
    if state.phase is Phase.COMPENSATE:
        return _dispatch_compensation(record, ctx, start=state.current_step)
    first_time = state.failure_count == 0 and all(s.attempts == 0 for s in record.steps)
    decision = _dispatch_forward(record, ctx)
    return decision.after(status(record, ctx, StatusEvent.RECEIVED)) if first_time else decision


def _dispatch_forward(record: TaskRecord, ctx: Context) -> Decision:
    """Run the first step that is not done, or finish the task. A step whose condition does not hold on
    the input and the results so far is left out (audited with the condition), and the next one comes up:
    the condition reads only what was saved, so whoever evaluates it again gets the same answer."""
    before = record.state.process_state
    left_out: list[AuditEntry] = []
    while True:
        index = next((i for i, s in enumerate(record.steps) if s.status not in _DONE), None)
        if index is None:
            decision = _finish(record, ctx, ProcessState.PROCESSED, StatusEvent.PROCESSED)
            break
        definition = ctx.steps[index]
        if ctx.grouped(index):
            dispatched = _dispatch_group(record, ctx, ctx.group(index), left_out)
            if dispatched is not None:
                decision = dispatched
                break
            continue  # every step of the group left out or done
        condition = definition.when
        if condition is None or condition.holds(document(record, index - 1)):
            if definition.wait is None:
                decision = _dispatch(record, ctx, index, compensating=False)
                break
            started = _start_wait(record, ctx, index, definition.wait)
            if started is not None:
                decision = started
                break
            continue  # a timer whose time has already come: done at once
        left_out.append(_leave_out(record, ctx, index, f"condition not met: {condition.describe()}"))
    # Each entry is written by the save that makes this whole move: it says the task's change in it.
    for entry in left_out:
        entry.process_state_before, entry.process_state_after = before, record.state.process_state
    return decision
