"""The operator's moves on a task (resubmit, cancel) and on its current step (retry, extend, skip), and how a
task is handed back to a Scheduler after one."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from .. import machine, waits
from ..decisions import REFUSED, UNCHANGED, Decision, command
from ..errors import InvalidState, InvalidUpdate
from ..machine import Operation
from ..messages import (
    CommandKind,
    StatusEvent,
)
from ..state import Phase, ProcessState, StepStatus, TaskRecord
from ..workflow import Update, WorkflowDefinition
from .call_log import _log_end
from .context import (
    _IN_FLIGHT,
    Context,
    _fresh_failure_counts,
    _moved,
    _touch,
    allows,
    settled,
    status,
)
from .dispatch import _request
from .endings import _finish
from .groups import (
    _at_group,
    _group_in_flight,
    _retry_later,
)


# ---- operator and application requests --------------------------------------------------------
def _operator_took_over(record: TaskRecord) -> None:
    """An operator takes a task out of Error: the Supervisor counts its failures afresh (the current step's,
    and those of every step in flight: the step of a group that put it there is not the current one), and
    the alert, raised or not, has done its job."""
    state = record.state
    state.failure_count = 0
    state.alert_pending = False
    record.steps[state.current_step].failures = 0
    for step in record.steps:
        if step.status in _IN_FLIGHT:
            step.failures = 0


def resubmit(record: TaskRecord, ctx: Context) -> Decision:
    """An operator sends an Error task back to Pending with FailureCount reset."""
    if allows(Operation.RESUBMIT, record) is None:
        return REFUSED
    state = record.state
    _operator_took_over(record)
    state.process_state = ProcessState.PENDING
    state.locked_by = None
    state.next_attempt_at = None
    state.complete_by = ctx.now + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    _touch(record, ctx)
    return _moved(command(state.order_id, CommandKind.START, "operator: resubmit", new_id=ctx.new_id))


def cancel(record: TaskRecord, ctx: Context) -> Decision:
    """Undo a task that is not terminal (a task already being undone is left as it is).

    A step that is running may still land at the remote service until its complete-by plus a grace
    period (:func:`settled`), even when that complete-by has just passed, so its compensation waits until
    then rather than racing the Agent.
    """
    rule = allows(Operation.CANCEL, record)
    if rule is None:
        return REFUSED
    if not rule.changes:
        return UNCHANGED
    state = record.state
    if not any(s.status is not StepStatus.NOT_STARTED for s in record.steps):
        state.phase = Phase.COMPENSATE
        return _finish(record, ctx, ProcessState.COMPENSATED, StatusEvent.COMPENSATED)
    # A call whose service answers later can land until its CompleteBy, as a running one can.
    answering = [
        s.complete_by
        for i, s in enumerate(record.steps)
        if s.status is StepStatus.WAITING and ctx.steps[i].calls and s.complete_by
    ]
    for step in record.steps:
        step.retry_at = None  # a step of a group asked to run again runs no more: it is undone
        if step.status is StepStatus.WAITING:
            # A wait ends here. A timer or an approval had no effect; a call whose service answers later
            # may have, and is undone like a running step, once its answer can no longer come.
            step.status = StepStatus.FAILED
            step.last_error = "cancelled while waiting"
    running = [s.complete_by for s in record.steps if s.status is StepStatus.RUNNING and s.complete_by]
    running += answering
    resume_at = max([ctx.now, *(settled(complete_by, ctx) for complete_by in running)])
    state.phase = Phase.COMPENSATE
    state.process_state = ProcessState.COMPENSATING
    _fresh_failure_counts(record)
    state.locked_by = None
    state.next_attempt_at = resume_at
    state.complete_by = resume_at + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    state.current_step = max(i for i, s in enumerate(record.steps) if s.status is not StepStatus.NOT_STARTED)
    _touch(record, ctx)
    at = resume_at if resume_at > ctx.now else None
    return _moved(
        status(record, ctx, StatusEvent.COMPENSATING, detail="cancelled"),
        command(state.order_id, CommandKind.RESUME, "cancel", at=at, new_id=ctx.new_id),
    )


# ---- step-level operator actions ---------------------------------------------------------------
def _on_current_step(
    operation: Operation, record: TaskRecord, ctx: Context, index: int
) -> machine.Rule | None:
    """The row allowing ``operation`` on step ``index``: only the task's current step can be acted on, or
    any step of the group that is the current step."""
    current = record.state.current_step
    if index != current and not (ctx.grouped(current) and index in ctx.group(current)):
        return None
    return allows(operation, record, ctx, index)


def _group_runs(record: TaskRecord, ctx: Context, index: int) -> bool:
    """Whether step ``index`` is one of a group that runs now (the task Processing, forward)."""
    state = record.state
    return (
        ctx.grouped(index) and state.process_state is ProcessState.PROCESSING and state.phase is Phase.FORWARD
    )


def _hand_back(record: TaskRecord, ctx: Context, reason: str) -> Decision:
    """Give the task back unlocked with a kick now, so a Scheduler claims it and dispatches as usual."""
    state = record.state
    if state.process_state is ProcessState.ERROR:
        _operator_took_over(record)
    forward = state.phase is Phase.FORWARD
    state.process_state = ProcessState.PENDING if forward else ProcessState.COMPENSATING
    state.locked_by = None
    state.next_attempt_at = None
    state.complete_by = ctx.now + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    _touch(record, ctx)
    kind = CommandKind.START if forward else CommandKind.RESUME
    return _moved(command(state.order_id, kind, reason, new_id=ctx.new_id))


def retry_step(record: TaskRecord, ctx: Context, index: int) -> Decision:
    """Re-dispatch the current step (or its undo) now, without waiting for its CompleteBy or backoff.

    The new dispatch is a new attempt with a fresh CompleteBy; a reply to the old attempt is fenced out.
    """
    if _on_current_step(Operation.RETRY_STEP, record, ctx, index) is None:
        return REFUSED
    name = record.steps[index].name
    if _group_runs(record, ctx, index):
        again = _retry_later(record, ctx, index, ctx.now, f"operator: retry {name}")
        _at_group(record, ctx, ctx.group(index))
        return _moved(again)
    return _hand_back(record, ctx, f"operator: retry {name}")


def extend_step(record: TaskRecord, ctx: Context, index: int, seconds: float) -> Decision:
    """Push the running step's CompleteBy by ``seconds`` and re-send its request with the new deadline.

    The Agent stops at the deadline its request carries, so the same attempt is sent again (same
    idempotency key, its own message id): the remote service sees one operation, and the Agent waits
    for it until the new deadline. A step whose CompleteBy has already passed is not running any more
    (the Supervisor has it): retry it instead.
    """
    step = record.steps[index] if index < len(record.steps) else None
    if (
        _on_current_step(Operation.EXTEND_STEP, record, ctx, index) is None
        or step is None
        or step.complete_by is None
        or step.complete_by <= ctx.now
        or seconds <= 0
    ):
        return REFUSED
    state = record.state
    step.complete_by = step.complete_by + timedelta(seconds=seconds)
    if _group_runs(record, ctx, index):
        _at_group(record, ctx, ctx.group(index))
        if step.status is StepStatus.WAITING:
            return _moved()  # its callback may come until the new CompleteBy: nothing to send
        resend = f":until:{step.complete_by.timestamp():.3f}"
        return _moved(_request(record, ctx, index, False, resend=resend))
    if state.process_state is ProcessState.WAITING:
        # A later time or deadline, with the CompleteBy its kind gives after it: a wake-up already
        # scheduled for the old time finds it early and schedules itself again.
        kind = waits.of(state.waiting_for)
        state.complete_by = kind.complete_by(step.complete_by, ctx) if kind is not None else step.complete_by
        state.wait_until = step.complete_by
        _touch(record, ctx)
        return _moved()
    state.complete_by = step.complete_by
    _touch(record, ctx)
    compensating = state.phase is Phase.COMPENSATE
    resend = f":until:{step.complete_by.timestamp():.3f}"
    return _moved(_request(record, ctx, index, compensating, resend=resend))


def skip_step(record: TaskRecord, ctx: Context, index: int, note: str) -> Decision:
    """Mark the current forward step done by hand (its effect was achieved outside the system), then
    continue with the next step. The step's result records the skip; its compensation still runs if
    the task is undone later, which is harmless for an idempotent service that never applied it.

    A step skipped while running may still have its call in flight, and that call can land until the
    step's CompleteBy plus the cancel grace: an undo of the step waits until then, as a cancel's does
    (docs/simulation.md, finding 7).
    """
    if _on_current_step(Operation.SKIP_STEP, record, ctx, index) is None:
        return REFUSED
    step = record.steps[index]
    in_flight = step.status is StepStatus.RUNNING or (
        step.status is StepStatus.WAITING and ctx.steps[index].calls
    )
    if in_flight and step.complete_by is not None:
        wait = settled(step.complete_by, ctx)
        step.undo_not_before = wait if wait > ctx.now else None
    _log_end(record, ctx, index, "skipped", note)
    step.status = StepStatus.COMPLETED
    # No result: the service returned nothing to pass on (a later body that needs one of its values fails).
    step.result = None
    step.reason = f"skipped by an operator: {note}"[:1000]
    step.last_error = None
    step.retry_at = None
    grouped = index if ctx.grouped(index) else None
    done = status(
        record, ctx, StatusEvent.STEP_COMPLETED, step=step.name, detail=f"skipped: {note}", index=grouped
    )
    if _group_runs(record, ctx, index) and _group_in_flight(record, ctx, index):
        _at_group(record, ctx, ctx.group(index))  # the others of its group run on
        return _moved(done)
    return _hand_back(record, ctx, f"operator: skip {step.name}").after(done)


# ---- an update of the input ------------------------------------------------------------------------
def open_updates(record: TaskRecord, workflow: WorkflowDefinition) -> list[Update]:
    """The updates ``workflow`` (the order's version) declares that may still be made: the order going
    forward, and each update's step (``until``) not started."""
    if allows(Operation.UPDATE_INPUT, record) is None or len(record.steps) != len(workflow.steps):
        return []
    names = [step.name for step in record.steps]
    return [
        update
        for update in workflow.updates
        if update.until in names and record.steps[names.index(update.until)].status is StepStatus.NOT_STARTED
    ]


def update_input(record: TaskRecord, ctx: Context, changes: Mapping[str, Any]) -> Decision:
    """Change input fields of an order going forward, as its workflow's updates declare: each field only
    while the step it is fenced by (``Update.until``) has not started. Sends nothing: every step from the
    fence on reads the new input from the saved record, and a decision made on a copy saved before (a
    message's saved task) is refused at its save by the ETag, as for any change.

    Raises :class:`~engine.errors.InvalidUpdate` for a field the workflow does not let change or a value
    its input model refuses, :class:`~engine.errors.InvalidState` naming the step that fences a field."""
    workflow = ctx.workflow
    order_id = record.order_id
    if workflow is None:
        return REFUSED
    try:
        workflow.check_update_fields(dict(changes))
    except ValueError as exc:
        raise InvalidUpdate(order_id, str(exc)) from None
    if allows(Operation.UPDATE_INPUT, record) is None:
        return REFUSED
    names = [step.name for step in record.steps]
    still = open_updates(record, workflow)
    for field in sorted(changes):
        update = workflow.update_of(field)
        if update is not None and update not in still:
            step = record.steps[names.index(update.until)]
            raise InvalidState(
                order_id,
                record.state.process_state.value,
                [s.value for s in machine.sources(Operation.UPDATE_INPUT)],
                reason=f"order {order_id}: {field} can no longer change: step {step.name}, which reads it, "
                f"is {step.status.value}",
            )
    try:
        updated = workflow.updated_input(record.input, dict(changes))
    except ValueError as exc:
        raise InvalidUpdate(order_id, str(exc)) from None
    if updated == record.input:
        return UNCHANGED
    record.change_input(updated)
    _touch(record, ctx)
    return _moved()
