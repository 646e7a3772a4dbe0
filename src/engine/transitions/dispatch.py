"""One step's turn: its request to its Agent (:func:`_request`), its dispatch forward or as an undo
(:func:`_dispatch`), or its leaving out when its condition does not hold (:func:`_leave_out`)."""

from __future__ import annotations

from .. import queues
from ..decisions import Decision, Outgoing
from ..messages import (
    AgentRequest,
    request_message_id,
)
from ..state import AuditEntry, Phase, ProcessState, StepStatus, TaskRecord
from .call_log import _log_dispatch
from .context import (
    Context,
    _engine,
    _moved,
    _touch,
    document,
)


def _request(record: TaskRecord, ctx: Context, index: int, compensating: bool, resend: str = "") -> Outgoing:
    definition = ctx.steps[index]
    step = record.steps[index]
    action = definition.compensation if compensating else definition.action
    assert action is not None
    attempt = step.compensation_attempts if compensating else step.attempts
    assert step.complete_by is not None
    body = AgentRequest(
        order_id=record.order_id,
        workflow=record.state.workflow,
        workflow_version=record.state.workflow_version,
        step=definition.name,
        step_index=index,
        attempt=attempt,
        compensating=compensating,
        action=action,
        # The same key on every retry and re-dispatch of this step, so the service drops duplicates.
        idempotency_key=f"{record.order_id}:{definition.name}",
        complete_by=step.complete_by,
        payload=document(record, index, ctx.group(index).start if ctx.grouped(index) else None),
    )
    return Outgoing(
        queue=queues.agent_queue(definition.call_agent),
        body=body,
        # A re-send of the same attempt (a new deadline) needs its own id, or duplicate detection drops it.
        message_id=request_message_id(record.order_id, index, compensating, attempt) + resend,
        correlation_id=record.order_id,
        reply_to=queues.REPLY_QUEUE,
        # The request is worthless after complete-by: let the broker drop it.
        time_to_live_seconds=max((step.complete_by - ctx.now).total_seconds(), 0.001),
    )


def _dispatch(record: TaskRecord, ctx: Context, index: int, compensating: bool) -> Decision:
    """Mark a step running (or being undone) with a fresh complete-by, and ask its Agent."""
    state = record.state
    step = record.steps[index]
    if compensating:
        step.status = StepStatus.COMPENSATING
        step.compensation_attempts += 1
        state.phase, state.process_state = Phase.COMPENSATE, ProcessState.COMPENSATING
    else:
        step.status = StepStatus.RUNNING
        step.attempts += 1
        state.phase, state.process_state = Phase.FORWARD, ProcessState.PROCESSING
    step.complete_by = ctx.now + ctx.budget(ctx.steps[index])
    _log_dispatch(record, ctx, index, "undo" if compensating else "call")
    state.current_step = index
    state.attempt = step.compensation_attempts if compensating else step.attempts
    state.complete_by = step.complete_by
    if state.locked_by is None:
        state.locked_by = ctx.instance_id
    _touch(record, ctx)
    return _moved(_request(record, ctx, index, compensating))


def _leave_out(record: TaskRecord, ctx: Context, index: int, reason: str) -> AuditEntry:
    step = record.steps[index]
    entry = AuditEntry(
        at=ctx.now,
        actor=_engine(ctx, "scheduler"),
        action="left out",
        step=step.name,
        process_state_before=record.state.process_state,
        process_state_after=record.state.process_state,
        step_state_before=step.status,
        step_state_after=StepStatus.LEFT_OUT,
        detail=reason[:2000],
    )
    step.status = StepStatus.LEFT_OUT
    step.reason = reason[:1000]
    record.audit(entry)
    return entry
