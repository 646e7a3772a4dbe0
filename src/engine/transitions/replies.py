"""An Agent's reply (or a callback) applied: fenced to the dispatch the task waits for, then a step
succeeded, failed, or was accepted to be answered later (a callback), forward or as an undo."""

from __future__ import annotations

from typing import Any

from ..decisions import REFUSED, UNCHANGED, Decision
from ..machine import Operation
from ..messages import (
    AgentReply,
    ReplyOutcome,
    StatusEvent,
)
from ..state import Phase, ProcessState, StepStatus, TaskRecord
from ..waits import CALLBACK_WAIT
from .call_log import _log_reply
from .compensation import _compensation_failed, _compensation_succeeded, _dispatch_compensation
from .context import (
    Context,
    _fresh_failure_counts,
    _moved,
    _touch,
    allows,
    status,
)
from .forward import _dispatch_forward
from .groups import (
    _at_group,
    _group_failed,
    _group_in_flight,
)


def reply_operation(reply: AgentReply) -> Operation:
    """Which operation an Agent's reply asks for."""
    if reply.outcome is ReplyOutcome.ACCEPTED:
        return Operation.ACCEPT
    succeeded = reply.outcome is ReplyOutcome.SUCCEEDED
    if reply.compensating:
        return Operation.COMPENSATION_SUCCEEDED if succeeded else Operation.COMPENSATION_FAILED
    return Operation.STEP_SUCCEEDED if succeeded else Operation.STEP_FAILED


def apply_reply(record: TaskRecord, ctx: Context, reply: AgentReply) -> Decision:
    """Apply an Agent's reply if the table allows it and it is for the current step and attempt (fencing).

    A late or duplicate reply is refused and changes nothing.
    """
    if not awaits(record, ctx, reply.step_index, reply.compensating, reply.attempt):
        return REFUSED
    index = reply.step_index
    operation = reply_operation(reply)
    rule = allows(operation, record, ctx, index)
    if rule is None:
        return REFUSED
    if not rule.changes:
        return UNCHANGED
    _log_reply(record, ctx, reply)
    if operation is Operation.STEP_SUCCEEDED and record.state.phase is Phase.COMPENSATE:
        return _kept_for_undo(record, ctx, index, reply.result)
    if operation is Operation.ACCEPT:
        return _accepted(record, ctx, index)
    if operation is Operation.STEP_SUCCEEDED:
        return _step_succeeded(record, ctx, reply.result, index)
    if operation is Operation.STEP_FAILED:
        return _step_failed(record, ctx, reply.error or "step failed", index)
    if operation is Operation.COMPENSATION_SUCCEEDED:
        return _compensation_succeeded(record, ctx)
    return _compensation_failed(record, ctx, reply.error or "compensation failed")


def awaits(record: TaskRecord, ctx: Context, index: int, compensating: bool, attempt: int) -> bool:
    """Whether an answer (a reply, a callback) for this dispatch of step ``index`` (forward or undo, and
    its attempt) is one the task still waits for (fencing): its current step and attempt, or, while a
    group runs, any step of the group at that step's own attempt. A step of a group that failed may
    still finish forward until its undo is dispatched (kept for the undo)."""
    state = record.state
    if index >= len(record.steps):
        return False
    if ctx.grouped(index) and not compensating and index in ctx.group(state.current_step):
        return record.steps[index].attempts == attempt
    return state.current_step == index and state.attempt == attempt


def _kept_for_undo(record: TaskRecord, ctx: Context, index: int, result: dict[str, Any]) -> Decision:
    """A step of a group that failed (or was cancelled) completed before its undo was dispatched: its
    result is kept for the undo, which is still to come; nothing else changes."""
    step = record.steps[index]
    step.status = StepStatus.COMPLETED
    step.result = result
    step.last_error = None
    _touch(record, ctx)
    return _moved()


def _accepted(record: TaskRecord, ctx: Context, index: int) -> Decision:
    """The step's service took the call and answers later: the step waits for its callback until its
    CompleteBy (past it, the Supervisor's policy applies as for any step: the same idempotency key again,
    then Error). A step of a group waits on its own: the task stays Processing."""
    state = record.state
    step = record.steps[index]
    until = CALLBACK_WAIT.until(record, index, None, ctx)
    detail = CALLBACK_WAIT.detail(until)
    if ctx.grouped(index):
        step.status = StepStatus.WAITING
        _touch(record, ctx)
        return _moved(status(record, ctx, StatusEvent.WAITING, step=step.name, detail=detail, index=index))
    step.status = StepStatus.WAITING
    state.process_state = ProcessState.WAITING
    state.waiting_for, state.wait_until = CALLBACK_WAIT.name, until
    _touch(record, ctx)
    return _moved(status(record, ctx, StatusEvent.WAITING, step=step.name, detail=detail))


def step_succeeded(record: TaskRecord, ctx: Context, result: dict[str, Any]) -> Decision:
    """The current forward step is done: record what compensating it needs, then move on."""
    if allows(Operation.STEP_SUCCEEDED, record, ctx) is None:
        return REFUSED
    return _step_succeeded(record, ctx, result, record.state.current_step)


def _step_succeeded(record: TaskRecord, ctx: Context, result: dict[str, Any], index: int) -> Decision:
    step = record.steps[index]
    step.status = StepStatus.COMPLETED
    step.result = result
    step.last_error = None
    step.retry_at = None
    if not ctx.grouped(index):
        done = status(record, ctx, StatusEvent.STEP_COMPLETED, step=step.name)
        return _dispatch_forward(record, ctx).after(done)
    done = status(record, ctx, StatusEvent.STEP_COMPLETED, step=step.name, index=index)
    if _group_in_flight(record, ctx, index):
        _at_group(record, ctx, ctx.group(index))  # the join waits for the others
        return _moved(done)
    return _dispatch_forward(record, ctx).after(done)


def step_failed(record: TaskRecord, ctx: Context, error: str) -> Decision:
    """A lasting fault in the current forward step: undo the task."""
    if allows(Operation.STEP_FAILED, record, ctx) is None:
        return REFUSED
    return _step_failed(record, ctx, error, record.state.current_step)


def _step_failed(record: TaskRecord, ctx: Context, error: str, index: int) -> Decision:
    step = record.steps[index]
    step.status = StepStatus.FAILED
    step.last_error = error
    step.retry_at = None
    record.state.last_error = f"{step.name}: {error}"
    record.state.phase = Phase.COMPENSATE
    record.state.process_state = ProcessState.COMPENSATING
    _fresh_failure_counts(record)
    if _group_in_flight(record, ctx, index):
        return _group_failed(record, ctx, index, error)
    grouped = index if ctx.grouped(index) else None
    compensating = status(record, ctx, StatusEvent.COMPENSATING, step=step.name, detail=error, index=grouped)
    # A group is undone from its last step: each of its steps that may have had an effect, then those before.
    return _dispatch_compensation(record, ctx, start=ctx.group(index).stop - 1).after(compensating)
