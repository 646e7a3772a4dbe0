"""A step that waits (a timer, an approval), as its kind (``engine.waits``) says: the wait's start, whether a
step waits now, whether its deadline passed, and a wait that ends badly (rejected, or its deadline's
policy)."""

from __future__ import annotations

from datetime import timedelta

from .. import waits
from ..decisions import Decision, command
from ..messages import (
    CommandKind,
    StatusEvent,
)
from ..state import Phase, ProcessState, StepStatus, TaskRecord
from ..workflow import Wait
from .call_log import _log_dispatch, _log_end
from .context import (
    Context,
    _fresh_failure_counts,
    _moved,
    _touch,
    status,
)


def _start_wait(record: TaskRecord, ctx: Context, index: int, wait: Wait) -> Decision | None:
    """Step ``index`` starts waiting: Waiting until the time its kind gives, with the CompleteBy its kind
    gives after that, sending what its kind sends (a timer's wake-up). None (the step marked done) for a
    wait whose time has already come."""
    state = record.state
    step = record.steps[index]
    kind = waits.BY_NAME[wait.kind]
    until = kind.until(record, index, wait, ctx)
    if until is None:
        step.status = StepStatus.COMPLETED
        step.reason = f"{kind.name}: its time had come when its turn came"
        return None
    complete_by = kind.complete_by(until, ctx)
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
    state.waiting_for, state.wait_until = kind.name, until
    _touch(record, ctx)
    note = status(record, ctx, StatusEvent.WAITING, step=step.name, detail=kind.detail(until))
    return _moved(note, *kind.sends(record, until, f"{kind.name} of {step.name}", ctx.new_id))


def _waiting(record: TaskRecord, ctx: Context, index: int, kind: str) -> bool:
    """Whether step ``index`` is the task's current step, a wait of ``kind`` (its name), and waiting now."""
    if index != record.state.current_step or index >= len(record.steps):
        return False
    wait = ctx.steps[index].wait
    return wait is not None and wait.kind == kind and record.steps[index].status is StepStatus.WAITING


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
