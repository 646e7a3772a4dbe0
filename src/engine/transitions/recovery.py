"""The Supervisor's recovery of a task past its CompleteBy: kick, hold, release, retry after a backoff, or
Error; a wait past its time; and the task given back to any Scheduler."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from .. import waits
from ..breaker import BreakerRecord, BreakerState, hold_until
from ..decisions import REFUSED, Decision, Outcome, command
from ..machine import Operation
from ..messages import (
    CommandKind,
)
from ..state import ProcessState, TaskRecord
from .call_log import _current_entry, _log_end, _log_timeout
from .context import (
    Context,
    _engine,
    _touch,
    allows,
)
from .endings import _enter_error
from .groups import (
    _recover_group,
)
from .waiting import _wait_failed


def recover_expired(
    record: TaskRecord, ctx: Context, breakers: Mapping[str, BreakerRecord] | None = None
) -> Decision:
    """What the Supervisor does with a task whose CompleteBy has passed.

    It knows no business logic: it counts the failure, then either gives the task back for another
    Scheduler to pick up after a growing backoff, or, past the threshold, sets Error and alerts.
    A task waiting unlocked for a Scheduler (Pending, or Compensating given back) past its CompleteBy lost
    its kick and is simply kicked again. A task not past its CompleteBy, or not in flight, is refused.

    ``breakers`` are the circuit breakers by service (agent), as the sweep read them. When the current
    step's service has an open breaker, the step did not fail, its service is down: the task is held
    (no re-queue, no failure counted) until the breaker's open interval, or the trial call under way,
    ends, plus a small margin. When that hold is over, or the breaker wants a trial call, the task is
    given back at once without counting a failure, so it can carry the trial call. An outage of any
    length therefore never puts a task in Error; a step that times out while its service is healthy
    still counts.
    """
    state = record.state
    if state.complete_by is None or state.complete_by > ctx.now:
        return REFUSED
    window = timedelta(seconds=ctx.settings.step_complete_by_seconds)
    if allows(Operation.KICK, record):
        state.complete_by = ctx.now + window
        _touch(record, ctx)
        kind = CommandKind.START if state.process_state is ProcessState.PENDING else CommandKind.RESUME
        return Decision(
            Outcome.KICKED, (command(state.order_id, kind, "supervisor: kick lost", new_id=ctx.new_id),)
        )
    # A wait expires as its kind says, unless its kind counts it as a step's timeout (a callback: below).
    counted = (waiting := waits.of(state.waiting_for)) is not None and waiting.expires is Operation.EXPIRE
    if state.process_state is ProcessState.WAITING and not counted:
        return _wait_expired(record, ctx)
    if state.process_state is ProcessState.PROCESSING and ctx.grouped(state.current_step):
        return _recover_group(record, ctx, ctx.group(state.current_step), breakers)
    if allows(Operation.EXPIRE, record) is None:
        return REFUSED
    step = record.steps[state.current_step]
    service = ctx.steps[state.current_step].call_agent
    breaker = (breakers or {}).get(service)
    until = hold_until(breaker, ctx.now)
    if until is not None and allows(Operation.HOLD, record):
        state.complete_by = state.held_until = until + timedelta(seconds=ctx.settings.hold_margin_seconds)
        _log_timeout(
            record, ctx, state.current_step, f"held: breaker of {service} open until {until.isoformat()}"
        )
        _touch(record, ctx)
        return Decision(Outcome.HELD)
    was_held = state.hold_end is not None
    trial_due = breaker is not None and breaker.state is not BreakerState.CLOSED
    if (was_held or trial_due) and allows(Operation.RELEASE, record):
        why = "hold over" if was_held else f"breaker of {service} wants a trial call"
        _log_timeout(record, ctx, state.current_step, f"{why}: again now, uncounted")
        return _give_back(record, ctx, ctx.now, f"supervisor: {why}; {step.name} again", Outcome.RELEASED)
    # The pattern keeps a failure count per step: three single timeouts on three different steps are not
    # a step that keeps failing. The task's FailureCount stays the total, for operators.
    step.failures += 1
    state.failure_count += 1
    if step.failures >= ctx.settings.supervisor_max_failures:
        _log_timeout(record, ctx, state.current_step, f"failure {step.failures}: Error")
        return _enter_error(
            record,
            ctx,
            f"{step.failures} failures: step {step.name} did not complete by its deadline",
            _engine(ctx, "supervisor"),
        )
    retry_at = ctx.now + timedelta(seconds=ctx.settings.backoff(step.failures))
    _log_timeout(record, ctx, state.current_step, f"failure {step.failures}: again at {retry_at.isoformat()}")
    reason = f"supervisor: retry after failure {step.failures} of {step.name}"
    return _give_back(record, ctx, retry_at, reason, Outcome.RETRIED)


def _wait_expired(record: TaskRecord, ctx: Context) -> Decision:
    """A wait past its CompleteBy, as its kind expires (``engine.waits``). REWAKE (a timer): what it sends
    did not come, and is sent again (nothing failed, so nothing is counted). DEADLINE (an approval): its
    deadline passed, and its declared policy applies."""
    state = record.state
    index = state.current_step
    wait = ctx.steps[index].wait
    kind = waits.of(wait.kind) if wait is not None else None
    step = record.steps[index]
    if kind is not None and kind.expires is Operation.REWAKE and allows(Operation.REWAKE, record):
        state.complete_by = ctx.now + timedelta(seconds=ctx.settings.step_complete_by_seconds)
        entry = _current_entry(record, index)
        if entry is not None:
            entry.recovery = "wake-up lost: sent again"
        _touch(record, ctx)
        # Its time passed a window before the CompleteBy that brought the Supervisor here: due now.
        return Decision(Outcome.KICKED, kind.sends(record, ctx.now, "supervisor: wake-up lost", ctx.new_id))
    if kind is None or kind.expires is not Operation.DEADLINE or allows(Operation.DEADLINE, record) is None:
        return REFUSED
    reason = f"no {kind.name} by its deadline"
    if kind.policy(wait) == "error":
        _log_end(record, ctx, index, "expired", reason)
        return _enter_error(record, ctx, f"{step.name}: {reason}", _engine(ctx, "supervisor"))
    return Decision(Outcome.DEADLINE, _wait_failed(record, ctx, reason).messages)


def _give_back(record: TaskRecord, ctx: Context, at: datetime, reason: str, outcome: Outcome) -> Decision:
    """Unlock the task for any Scheduler from ``at`` on (Pending, or Compensating to resume the undo)."""
    state = record.state
    state.locked_by = None
    state.held_until = None
    state.next_attempt_at = at
    state.complete_by = at + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    if state.process_state in (ProcessState.PROCESSING, ProcessState.WAITING):
        state.process_state = ProcessState.PENDING
        kind = CommandKind.START
    else:
        kind = CommandKind.RESUME
    _touch(record, ctx)
    scheduled = at if at > ctx.now else None
    return Decision(outcome, (command(state.order_id, kind, reason, at=scheduled, new_id=ctx.new_id),))
