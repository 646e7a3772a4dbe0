"""How a task stops being worked on: Processed or Compensated (:func:`_finish`), or Error with an alert for
an operator (:func:`_enter_error`, :func:`error_alert`, :func:`workflow_not_deployed`)."""

from __future__ import annotations

from ..decisions import REFUSED, Decision, OrderEnteredError, Outcome
from ..machine import Operation
from ..messages import (
    StatusEvent,
)
from ..state import AuditEntry, ProcessState, TaskRecord
from .context import (
    Context,
    _engine,
    _moved,
    _touch,
    allows,
    status,
)


def _finish(record: TaskRecord, ctx: Context, final: ProcessState, event: StatusEvent) -> Decision:
    """Processed or Compensated: unlock, clear CompleteBy (the Supervisor stops watching)."""
    state = record.state
    state.process_state = final
    state.locked_by = None
    state.complete_by = None
    state.next_attempt_at = None
    _touch(record, ctx)
    return _moved(status(record, ctx, event))


def _enter_error(
    record: TaskRecord, ctx: Context, reason: str, actor: str, index: int | None = None
) -> Decision:
    """Error: unlock, stop watching, raise an alert for an operator, and leave an audit entry; ``index``
    names the step of a group that put it there (by default the current step)."""
    state = record.state
    at = state.current_step if index is None else index
    before = state.process_state
    state.process_state = ProcessState.ERROR
    state.locked_by = None
    state.complete_by = None
    state.next_attempt_at = None
    state.last_error = reason
    state.alert_pending = True
    _touch(record, ctx)
    step = record.steps[at].name
    alert = error_alert(record, at)
    message = status(record, ctx, StatusEvent.ERROR, step=step, detail=reason, index=index)
    current = record.steps[at].status
    record.audit(
        AuditEntry(
            at=ctx.now,
            actor=actor,
            action="error",
            step=step,
            process_state_before=before,
            process_state_after=ProcessState.ERROR,
            step_state_before=current,
            step_state_after=current,
            detail=reason[:2000],
        )
    )
    return Decision(Outcome.ERRORED, (message,), (alert,))


def error_alert(record: TaskRecord, index: int | None = None) -> OrderEnteredError:
    """The alert for a task in Error, from what its record says (raised again from it if it was lost);
    ``index``: the step that put it there, when not the current one (a step of a group)."""
    state = record.state
    return OrderEnteredError(
        order_id=state.order_id,
        failure_count=state.failure_count,
        phase=state.phase.value,
        step=record.steps[state.current_step if index is None else index].name,
        reason=state.last_error or "",
    )


def workflow_not_deployed(record: TaskRecord, ctx: Context, role: str = "scheduler") -> Decision:
    """A task whose workflow version this deployment no longer has: Error with the reason, and an alert.

    Run on another definition, its steps, policies and compensations could be silently wrong; an
    operator decides (redeploy that version, or compensate by hand).
    """
    if allows(Operation.WORKFLOW_GONE, record) is None:
        return REFUSED
    state = record.state
    reason = (
        f"workflow {state.workflow} version {state.workflow_version} is not deployed; "
        "deploy it again to finish or undo this order"
    )
    return _enter_error(record, ctx, reason, _engine(ctx, role))
