"""Groups: steps that run side by side. Their dispatch together, the task's fields while they run, a step of
one dispatched again (:func:`redispatch`), the Supervisor's recovery of its steps past their CompleteBy, and
a step of one that failed for good while others of it are in flight."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from ..breaker import BreakerRecord, BreakerState, hold_until
from ..decisions import REFUSED, Decision, Outcome, Outgoing, command
from ..machine import Operation
from ..messages import (
    CommandKind,
    StatusEvent,
)
from ..state import AuditEntry, Phase, ProcessState, StepStatus, TaskRecord
from .call_log import _log_timeout
from .context import (
    _DONE,
    _IN_FLIGHT,
    Context,
    _engine,
    _moved,
    _touch,
    allows,
    document,
    settled,
    status,
)
from .dispatch import _dispatch, _leave_out
from .endings import _enter_error


def _dispatch_group(
    record: TaskRecord, ctx: Context, group: range, left_out: list[AuditEntry]
) -> Decision | None:
    """Dispatch every step of a group that is not done, together, each with its own CompleteBy, attempt
    and request; a step whose condition does not hold on what the steps before the group returned is left
    out. None when nothing of the group is left to run. The task is Processing at the group's first step
    until all of its steps are done."""
    before = document(record, group.start - 1)
    messages: list[Outgoing] = []
    for index in group:
        step = record.steps[index]
        if step.status in _DONE:
            continue
        condition = ctx.steps[index].when
        if step.status is StepStatus.NOT_STARTED and condition is not None and not condition.holds(before):
            left_out.append(_leave_out(record, ctx, index, f"condition not met: {condition.describe()}"))
            continue
        step.retry_at = None
        messages.extend(_dispatch(record, ctx, index, compensating=False).messages)
    if not messages:
        return None
    _at_group(record, ctx, group)
    return _moved(*messages)


def _at_group(record: TaskRecord, ctx: Context, group: range) -> None:
    """The task's own fields while a group runs: at the group's first step, with the earliest CompleteBy
    of its steps in flight (the Supervisor looks when the first of them passes)."""
    state = record.state
    state.current_step = group.start
    state.attempt = record.steps[group.start].attempts
    times = [
        at
        for i in group
        if record.steps[i].status in _IN_FLIGHT and (at := record.steps[i].complete_by) is not None
    ]
    state.complete_by = (
        min(times) if times else ctx.now + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    )
    _touch(record, ctx)


def _group_in_flight(record: TaskRecord, ctx: Context, index: int) -> list[int]:
    """The other steps of step ``index``'s group still in flight (running, or waiting for a callback)."""
    return [i for i in ctx.group(index) if i != index and record.steps[i].status in _IN_FLIGHT]


def redispatch(record: TaskRecord, ctx: Context, index: int, attempt: int) -> Decision:
    """Dispatch one step of a group again, as a retry asked (the Supervisor's, after its backoff or its
    breaker's hold, or an operator's): a new attempt with a fresh CompleteBy; the others run on. Refused
    unless the retry is still the step's next move (same attempt, still asked, its time come)."""
    step = record.steps[index] if index < len(record.steps) else None
    if (
        step is None
        or not ctx.grouped(index)
        or index not in ctx.group(record.state.current_step)
        or allows(Operation.REDISPATCH, record, ctx, index) is None
        or step.attempts != attempt
        or step.retry_at is None
        or step.retry_at - timedelta(seconds=1) > ctx.now
    ):
        return REFUSED
    step.retry_at = None
    decision = _dispatch(record, ctx, index, compensating=False)
    _at_group(record, ctx, ctx.group(index))
    return decision


def _retry_later(record: TaskRecord, ctx: Context, index: int, at: datetime, reason: str) -> Outgoing:
    """Ask a Scheduler to dispatch step ``index`` of a group again at ``at``; the step's CompleteBy then
    watches that the ask is not lost."""
    step = record.steps[index]
    step.retry_at = at
    step.complete_by = at + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    scheduled = at if at > ctx.now else None
    return command(
        record.order_id,
        CommandKind.RETRY,
        reason,
        at=scheduled,
        new_id=ctx.new_id,
        dispatch=(index, step.attempts),
    )


def _recover_group(
    record: TaskRecord, ctx: Context, group: range, breakers: Mapping[str, BreakerRecord] | None
) -> Decision:
    """The Supervisor, for a group whose earliest CompleteBy passed: each of its steps past its CompleteBy
    is recovered on its own while the others run on. A lost ask to dispatch again is asked again; a step
    whose service's breaker is open is dispatched again when the breaker's hold ends, no failure counted;
    any other counts a failure and is dispatched again after its backoff, or, past the threshold, the
    task goes to Error with an alert."""
    if allows(Operation.EXPIRE, record, ctx, group.start) is None:
        return REFUSED
    state = record.state
    messages: list[Outgoing] = []
    outcome = Outcome.KICKED
    for index in group:
        step = record.steps[index]
        if step.status not in _IN_FLIGHT or step.complete_by is None or step.complete_by > ctx.now:
            continue
        name = ctx.steps[index].name
        if step.retry_at is not None:
            messages.append(_retry_later(record, ctx, index, ctx.now, f"supervisor: ask for {name} lost"))
            continue
        service = ctx.steps[index].call_agent
        breaker = (breakers or {}).get(service)
        until = hold_until(breaker, ctx.now)
        # A step waiting for its callback is never held: its service answered (202), so its timeout counts
        # whatever the breaker, as for a single step (simulation, finding 20).
        running = step.status is StepStatus.RUNNING
        if until is not None and running:
            at = until + timedelta(seconds=ctx.settings.hold_margin_seconds)
            _log_timeout(record, ctx, index, f"held: breaker of {service} open; again at {at.isoformat()}")
            messages.append(
                _retry_later(record, ctx, index, at, f"supervisor: {name} after its breaker's hold")
            )
            outcome = Outcome.HELD if outcome is Outcome.KICKED else outcome
            continue
        if running and breaker is not None and breaker.state is not BreakerState.CLOSED:
            # A trial call is due: the step goes again now to carry it, uncounted, as a single step is
            # released (simulation, finding 19: counted, an outage put the order in Error).
            reason = f"supervisor: breaker of {service} wants a trial call; {name} again"
            _log_timeout(record, ctx, index, f"again now for a trial call of {service}'s breaker")
            messages.append(_retry_later(record, ctx, index, ctx.now, reason))
            outcome = Outcome.RELEASED if outcome is Outcome.KICKED else outcome
            continue
        step.failures += 1
        state.failure_count += 1
        if step.failures >= ctx.settings.supervisor_max_failures:
            reason = f"{step.failures} failures: step {name} did not complete by its deadline"
            _log_timeout(record, ctx, index, f"failure {step.failures}: Error")
            return _enter_error(record, ctx, reason, _engine(ctx, "supervisor"), index=index)
        at = ctx.now + timedelta(seconds=ctx.settings.backoff(step.failures))
        _log_timeout(record, ctx, index, f"failure {step.failures}: again at {at.isoformat()}")
        reason = f"supervisor: retry after failure {step.failures} of {name}"
        messages.append(_retry_later(record, ctx, index, at, reason))
        outcome = Outcome.RETRIED
    if not messages:
        return REFUSED
    _at_group(record, ctx, group)
    return Decision(outcome, tuple(messages))


def _group_failed(record: TaskRecord, ctx: Context, index: int, error: str) -> Decision:
    """Step ``index`` of a group failed for good while others of it are in flight: they are let settle
    (their CompleteBy and the grace, as for a cancel), then every step of the group that may have had an
    effect, and every one before it, is undone, the group's in reverse order of declaration. Meanwhile a
    step of it that completes keeps its result (its undo reads it)."""
    state = record.state
    group = ctx.group(index)
    ends = []
    for i in group:
        step = record.steps[i]
        if step.status in _IN_FLIGHT and step.complete_by is not None:
            ends.append(settled(step.complete_by, ctx))
        if step.status is StepStatus.WAITING:
            step.status = StepStatus.FAILED  # its callback may still come: undone like a running step
            step.last_error = "undone with its group"
        step.retry_at = None
    resume_at = max([ctx.now, *ends])
    state.phase, state.process_state = Phase.COMPENSATE, ProcessState.COMPENSATING
    state.locked_by = None
    state.next_attempt_at = resume_at
    state.complete_by = resume_at + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    state.current_step = group.stop - 1
    state.attempt = record.steps[group.stop - 1].compensation_attempts
    _touch(record, ctx)
    at = resume_at if resume_at > ctx.now else None
    name = record.steps[index].name
    return _moved(
        status(record, ctx, StatusEvent.COMPENSATING, step=name, detail=error, index=index),
        command(
            state.order_id, CommandKind.RESUME, f"{name} failed; its group settles", at=at, new_id=ctx.new_id
        ),
    )
