"""The state machine: pure changes to a loaded task record, and the messages to send after saving them.

Every function here mutates a :class:`TaskRecord` in memory and returns the messages that must go out
once the record is saved. Callers follow the rule "update state, then send": a crash in between leaves
a record whose CompleteBy will pass, and the Supervisor recovers it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel

from . import queues, telemetry
from .messages import AgentRequest, CommandKind, SchedulerCommand, StatusEvent, StatusMessage
from .state import Phase, ProcessState, StepStatus, TaskRecord
from .workflow import StepDefinition, WorkflowDefinition

# Steps that may have had an effect and so are undone when the task is compensated. A step that
# failed or was running may still have been applied (a lost reply), and undoing an effect that never
# happened is a no-op for an idempotent service.
_MAY_HAVE_EFFECT = (StepStatus.COMPLETED, StepStatus.RUNNING, StepStatus.FAILED, StepStatus.COMPENSATING)


@dataclass(frozen=True)
class EngineSettings:
    """Timing knobs of the engine."""

    step_complete_by_seconds: float = 30.0
    supervisor_max_failures: int = 3
    backoff_base_seconds: float = 2.0
    backoff_max_seconds: float = 60.0
    cancel_grace_seconds: float = 1.0

    def backoff(self, failure_count: int) -> float:
        """The extended period before a retry: doubles with each failure, bounded."""
        return min(self.backoff_base_seconds * 2 ** max(failure_count - 1, 0), self.backoff_max_seconds)


@dataclass(frozen=True)
class Outgoing:
    """A message to send once the state change that decided it is saved."""

    queue: str
    body: BaseModel
    message_id: str
    correlation_id: str
    reply_to: str | None = None
    time_to_live_seconds: float | None = None
    scheduled_at: datetime | None = None


@dataclass
class Context:
    """What a transition needs besides the record."""

    workflow: WorkflowDefinition
    settings: EngineSettings
    now: datetime
    instance_id: str = ""
    alerts: list[dict[str, Any]] = field(default_factory=list)

    def budget(self, step: StepDefinition) -> timedelta:
        """A step's complete-by budget."""
        return timedelta(seconds=step.complete_by_seconds or self.settings.step_complete_by_seconds)


# ---- helpers ---------------------------------------------------------------------------------------
def _touch(record: TaskRecord, ctx: Context) -> None:
    record.state.updated_at = ctx.now


def status(
    record: TaskRecord, ctx: Context, event: StatusEvent, step: str | None = None, detail: str | None = None
) -> Outgoing:
    """A status message for the submitting application, correlated by order id."""
    state = record.state
    body = StatusMessage(
        order_id=state.order_id,
        event=event,
        process_state=state.process_state.value,
        step=step,
        detail=detail,
        at=ctx.now,
    )
    return Outgoing(
        queue=queues.STATUS_QUEUE,
        body=body,
        message_id=f"{state.order_id}:{event.value}:{state.current_step}:{state.phase.value}:{state.attempt}",
        correlation_id=state.order_id,
    )


def command(order_id: str, kind: CommandKind, reason: str, at: datetime | None = None) -> Outgoing:
    """A message asking the Scheduler to look at a task (now, or at ``at``)."""
    return Outgoing(
        queue=queues.SCHEDULER_QUEUE,
        body=SchedulerCommand(order_id=order_id, kind=kind, reason=reason),
        message_id=f"{order_id}:{kind.value}:{uuid.uuid4().hex}",
        correlation_id=order_id,
        scheduled_at=at,
    )


def _request(record: TaskRecord, ctx: Context, index: int, compensating: bool) -> Outgoing:
    definition = ctx.workflow.steps[index]
    step = record.steps[index]
    action = definition.compensation if compensating else definition.action
    assert action is not None
    attempt = step.compensation_attempts if compensating else step.attempts
    assert step.complete_by is not None
    body = AgentRequest(
        order_id=record.order_id,
        step=definition.name,
        step_index=index,
        attempt=attempt,
        compensating=compensating,
        action=action,
        # The same key on every retry and re-dispatch of this step, so the service drops duplicates.
        idempotency_key=f"{record.order_id}:{definition.name}",
        complete_by=step.complete_by,
        payload={
            "input": record.input,
            "results": {
                record.steps[i].name: record.steps[i].result
                for i in range(len(record.steps))
                if record.steps[i].result
            },
        },
    )
    phase = "c" if compensating else "f"
    return Outgoing(
        queue=queues.agent_queue(definition.agent),
        body=body,
        message_id=f"{record.order_id}:{index}:{phase}:{attempt}",
        correlation_id=record.order_id,
        reply_to=queues.REPLY_QUEUE,
        # The request is worthless after complete-by: let the broker drop it.
        time_to_live_seconds=max((step.complete_by - ctx.now).total_seconds(), 0.001),
    )


def _dispatch(record: TaskRecord, ctx: Context, index: int, compensating: bool) -> list[Outgoing]:
    """Mark a step running (or being undone) with a fresh complete-by, and ask its Agent."""
    state = record.state
    step = record.step(index)
    if compensating:
        step.status = StepStatus.COMPENSATING
        step.compensation_attempts += 1
        state.phase, state.process_state = Phase.COMPENSATE, ProcessState.COMPENSATING
    else:
        step.status = StepStatus.RUNNING
        step.attempts += 1
        state.phase, state.process_state = Phase.FORWARD, ProcessState.PROCESSING
    step.complete_by = ctx.now + ctx.budget(ctx.workflow.steps[index])
    state.current_step = index
    state.attempt = step.compensation_attempts if compensating else step.attempts
    state.complete_by = step.complete_by
    if state.locked_by is None:
        state.locked_by = ctx.instance_id
    _touch(record, ctx)
    return [_request(record, ctx, index, compensating)]


# ---- forward -----------------------------------------------------------------------------------------
def new_record_state(record: TaskRecord, ctx: Context) -> None:
    """A submitted task: Pending, unlocked, with a CompleteBy by which a Scheduler must have claimed it."""
    state = record.state
    state.process_state = ProcessState.PENDING
    state.locked_by = None
    state.complete_by = ctx.now + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    state.created_at = state.updated_at = ctx.now


def claim(record: TaskRecord, ctx: Context) -> list[Outgoing]:
    """A Scheduler takes a free task (Pending, or Compensating and unlocked) and dispatches its work.

    Returns no messages when the task is not claimable, which the caller treats as "someone else has it".
    """
    state = record.state
    free = state.locked_by is None and state.process_state in (
        ProcessState.PENDING,
        ProcessState.COMPENSATING,
    )
    if not free:
        return []
    state.locked_by = ctx.instance_id
    state.next_attempt_at = None
    _touch(record, ctx)
    if state.phase is Phase.COMPENSATE:
        return dispatch_compensation(record, ctx, start=state.current_step)
    out: list[Outgoing] = []
    first_time = state.failure_count == 0 and all(s.attempts == 0 for s in record.steps)
    sends = dispatch_forward(record, ctx)
    if first_time:
        out.append(status(record, ctx, StatusEvent.RECEIVED))
    return out + sends


def dispatch_forward(record: TaskRecord, ctx: Context) -> list[Outgoing]:
    """Run the first step that is not completed, or finish the task."""
    index = next((i for i, s in enumerate(record.steps) if s.status is not StepStatus.COMPLETED), None)
    if index is None:
        return finish(record, ctx, ProcessState.PROCESSED, StatusEvent.PROCESSED)
    return _dispatch(record, ctx, index, compensating=False)


def step_succeeded(record: TaskRecord, ctx: Context, result: dict[str, Any]) -> list[Outgoing]:
    """The current forward step is done: record what compensating it needs, then move on."""
    index = record.state.current_step
    step = record.step(index)
    step.status = StepStatus.COMPLETED
    step.result = result
    step.last_error = None
    done = status(record, ctx, StatusEvent.STEP_COMPLETED, step=step.name)
    return [done, *dispatch_forward(record, ctx)]


def step_failed(record: TaskRecord, ctx: Context, error: str) -> list[Outgoing]:
    """A lasting fault in the current forward step: undo the task."""
    index = record.state.current_step
    step = record.step(index)
    step.status = StepStatus.FAILED
    step.last_error = error
    record.state.last_error = f"{step.name}: {error}"
    record.state.phase = Phase.COMPENSATE
    record.state.process_state = ProcessState.COMPENSATING
    out = [status(record, ctx, StatusEvent.COMPENSATING, step=step.name, detail=error)]
    return out + dispatch_compensation(record, ctx, start=index)


# ---- compensation --------------------------------------------------------------------------------
def dispatch_compensation(record: TaskRecord, ctx: Context, start: int) -> list[Outgoing]:
    """Undo the highest step at or below ``start`` that may have had an effect, or finish as Compensated."""
    index = next(
        (
            i
            for i in range(min(start, len(record.steps) - 1), -1, -1)
            if record.steps[i].status in _MAY_HAVE_EFFECT and ctx.workflow.steps[i].compensation
        ),
        None,
    )
    if index is None:
        return finish(record, ctx, ProcessState.COMPENSATED, StatusEvent.COMPENSATED)
    return _dispatch(record, ctx, index, compensating=True)


def compensation_succeeded(record: TaskRecord, ctx: Context) -> list[Outgoing]:
    """The current step is undone: undo the one before it."""
    index = record.state.current_step
    step = record.step(index)
    step.status = StepStatus.COMPENSATED
    step.last_error = None
    undone = status(record, ctx, StatusEvent.STEP_COMPENSATED, step=step.name)
    return [undone, *dispatch_compensation(record, ctx, start=index - 1)]


def compensation_failed(record: TaskRecord, ctx: Context, error: str) -> list[Outgoing]:
    """A compensation cannot be done: an operator must look."""
    step = record.step(record.state.current_step)
    step.last_error = error
    return enter_error(record, ctx, f"compensation of {step.name} failed: {error}")


# ---- endings -------------------------------------------------------------------------------------
def finish(record: TaskRecord, ctx: Context, final: ProcessState, event: StatusEvent) -> list[Outgoing]:
    """Processed or Compensated: unlock, clear CompleteBy (the Supervisor stops watching)."""
    state = record.state
    state.process_state = final
    state.locked_by = None
    state.complete_by = None
    state.next_attempt_at = None
    _touch(record, ctx)
    return [status(record, ctx, event)]


def enter_error(record: TaskRecord, ctx: Context, reason: str) -> list[Outgoing]:
    """Error: unlock, stop watching, and raise an alert for an operator."""
    state = record.state
    state.process_state = ProcessState.ERROR
    state.locked_by = None
    state.complete_by = None
    state.next_attempt_at = None
    state.last_error = reason
    _touch(record, ctx)
    ctx.alerts.append(
        {
            "name": telemetry.ORDER_ENTERED_ERROR,
            "orderId": state.order_id,
            "failureCount": state.failure_count,
            "phase": state.phase.value,
            "step": record.steps[state.current_step].name,
            "reason": reason,
        }
    )
    return [status(record, ctx, StatusEvent.ERROR, step=record.steps[state.current_step].name, detail=reason)]


# ---- Supervisor ----------------------------------------------------------------------------------
def recover_expired(record: TaskRecord, ctx: Context) -> list[Outgoing]:
    """What the Supervisor does with a task whose CompleteBy has passed.

    It knows no business logic: it counts the failure, then either gives the task back for another
    Scheduler to pick up after a growing backoff, or, past the threshold, sets Error and alerts.
    A Pending task past its CompleteBy lost its kick and is simply kicked again.
    """
    state = record.state
    if state.complete_by is None or state.complete_by > ctx.now or not state.process_state.in_flight:
        return []
    window = timedelta(seconds=ctx.settings.step_complete_by_seconds)
    if state.process_state is ProcessState.PENDING and state.locked_by is None:
        state.complete_by = ctx.now + window
        _touch(record, ctx)
        return [command(state.order_id, CommandKind.START, "supervisor: kick lost")]
    state.failure_count += 1
    if state.failure_count >= ctx.settings.supervisor_max_failures:
        return enter_error(
            record, ctx, f"{state.failure_count} failures: step did not complete by its deadline"
        )
    retry_at = ctx.now + timedelta(seconds=ctx.settings.backoff(state.failure_count))
    state.locked_by = None
    state.next_attempt_at = retry_at
    state.complete_by = retry_at + window
    if state.process_state is ProcessState.PROCESSING:
        state.process_state = ProcessState.PENDING
        kind = CommandKind.START
    else:
        kind = CommandKind.RESUME
    _touch(record, ctx)
    return [
        command(state.order_id, kind, f"supervisor: retry after failure {state.failure_count}", at=retry_at)
    ]


# ---- operator and application requests --------------------------------------------------------
def resubmit(record: TaskRecord, ctx: Context) -> list[Outgoing]:
    """An operator sends an Error task back to Pending with FailureCount reset."""
    state = record.state
    state.process_state = ProcessState.PENDING
    state.failure_count = 0
    state.locked_by = None
    state.next_attempt_at = None
    state.complete_by = ctx.now + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    _touch(record, ctx)
    return [command(state.order_id, CommandKind.START, "operator: resubmit")]


def cancel(record: TaskRecord, ctx: Context) -> list[Outgoing]:
    """Undo a task that is not terminal.

    A step that is running may still land at the remote service until its complete-by, so its
    compensation waits for that deadline (plus a grace period) rather than racing the agent.
    """
    state = record.state
    if not any(s.status is not StepStatus.NOT_STARTED for s in record.steps):
        state.phase = Phase.COMPENSATE
        return finish(record, ctx, ProcessState.COMPENSATED, StatusEvent.COMPENSATED)
    running = [s.complete_by for s in record.steps if s.status is StepStatus.RUNNING and s.complete_by]
    resume_at = max([ctx.now, *running])
    if resume_at > ctx.now:
        resume_at += timedelta(seconds=ctx.settings.cancel_grace_seconds)
    state.phase = Phase.COMPENSATE
    state.process_state = ProcessState.COMPENSATING
    state.locked_by = None
    state.next_attempt_at = resume_at
    state.complete_by = resume_at + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    state.current_step = max(i for i, s in enumerate(record.steps) if s.status is not StepStatus.NOT_STARTED)
    _touch(record, ctx)
    at = resume_at if resume_at > ctx.now else None
    return [
        status(record, ctx, StatusEvent.COMPENSATING, detail="cancelled"),
        command(state.order_id, CommandKind.RESUME, "cancel", at=at),
    ]
