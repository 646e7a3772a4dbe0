"""The state machine's moves: pure changes to a loaded task record, each returning a :class:`Decision`.

Each move first asks the table in :mod:`engine.machine` whether it is allowed; a refused move changes
nothing. An allowed one mutates the :class:`TaskRecord` in memory and returns the messages that must go
out once the record is saved, the alerts to raise, and the kind of move it made. Callers follow the rule
"update state, then send": a crash in between leaves a record whose CompleteBy will pass, and the
Supervisor recovers it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from . import calls, machine, queues, sealing
from .breaker import BreakerRecord, BreakerState, hold_until
from .conditions import value_at
from .decisions import REFUSED, UNCHANGED, Decision, OrderEnteredError, Outcome, Outgoing
from .machine import Operation
from .messages import (
    AgentReply,
    AgentRequest,
    CommandKind,
    ReplyOutcome,
    SchedulerCommand,
    StatusEvent,
    StatusMessage,
    request_message_id,
)
from .settings import EngineSettings
from .state import AuditEntry, Phase, ProcessState, StepStatus, TaskRecord
from .waits import CALLBACK
from .workflow import Approval, StepDefinition, Timer, WorkflowDefinition

__all__ = ["Context", "Decision", "EngineSettings", "Outgoing"]


# Steps that may have had an effect and so are undone when the task is compensated. A step that
# failed or was running may still have been applied (a lost reply), and undoing an effect that never
# happened is a no-op for an idempotent service.
_MAY_HAVE_EFFECT = (StepStatus.COMPLETED, StepStatus.RUNNING, StepStatus.FAILED, StepStatus.COMPENSATING)


def random_id() -> str:
    """A fresh random id: where the unique part of a command's message id comes from by default."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Context:
    """What a transition needs besides the record."""

    workflow: WorkflowDefinition | None  # the task's workflow version; None when it is not deployed
    settings: EngineSettings
    now: datetime
    instance_id: str = ""
    # Where unique ids come from (a seeded source makes a simulated run reproducible).
    new_id: Callable[[], str] = random_id
    # Whether sensitive values are sealed now (engine.formats: after the deployment's switch).
    seals: bool = True

    @property
    def steps(self) -> tuple[StepDefinition, ...]:
        """The steps of the task's workflow version (a move is only made on a deployed one)."""
        if self.workflow is None:
            raise RuntimeError("the task's workflow version is not deployed")
        return self.workflow.steps

    def budget(self, step: StepDefinition) -> timedelta:
        """A step's complete-by budget."""
        return timedelta(seconds=step.complete_by_seconds or self.settings.step_complete_by_seconds)

    def group(self, index: int) -> range:
        """The steps that run side by side with step ``index``, itself included (just it, in no group)."""
        if self.workflow is None or index >= len(self.workflow.steps):
            return range(index, index + 1)
        return self.workflow.group_range(index)

    def grouped(self, index: int) -> bool:
        """Whether step ``index`` is one of a group."""
        return len(self.group(index)) > 1


# ---- the table -------------------------------------------------------------------------------------
def allows(
    operation: Operation, record: TaskRecord, ctx: Context | None = None, index: int | None = None
) -> machine.Rule | None:
    """The table's row that allows ``operation`` on this record now, or None: on step ``index`` (by
    default the current step), which ``ctx`` says is one of a group or not (without it: not)."""
    at = record.state.current_step if index is None else index
    status = record.steps[at].status if at < len(record.steps) else None
    grouped = ctx is not None and ctx.grouped(at)
    return machine.rule(operation, record.state, status, grouped)


def reply_operation(reply: AgentReply) -> Operation:
    """Which operation an Agent's reply asks for."""
    if reply.outcome is ReplyOutcome.ACCEPTED:
        return Operation.ACCEPT
    succeeded = reply.outcome is ReplyOutcome.SUCCEEDED
    if reply.compensating:
        return Operation.COMPENSATION_SUCCEEDED if succeeded else Operation.COMPENSATION_FAILED
    return Operation.STEP_SUCCEEDED if succeeded else Operation.STEP_FAILED


# ---- helpers ---------------------------------------------------------------------------------------
def _engine(ctx: Context, role: str) -> str:
    """Who an automatic change is audited as: the engine's role, and its instance when known."""
    return f"{role}:{ctx.instance_id}" if ctx.instance_id else role


def _touch(record: TaskRecord, ctx: Context) -> None:
    state = record.state
    state.updated_at = ctx.now
    record.note_position(ctx.now)
    current = record.steps[state.current_step] if state.current_step < len(record.steps) else None
    if current is None or current.status is not StepStatus.WAITING:
        # What a task waits for is said only while its current step waits (in Error too: an approval
        # past its deadline can still be given).
        state.waiting_for = state.wait_until = None
    # Every move passes here: a sensitive input field this move leaves unneeded goes with its save (one kept
    # in clear by an older release is sealed, once the switch says the formats that seal are written).
    sealing.settle_input(record, ctx.workflow, ctx.settings.input_keys if ctx.seals else None)


def _moved(*messages: Outgoing) -> Decision:
    return Decision(Outcome.MOVED, messages)


# ---- the steps' call records (engine.calls) ----------------------------------------------------------
def _log_dispatch(record: TaskRecord, ctx: Context, index: int, kind: calls.Kind) -> None:
    """Record a new dispatch of step ``index`` (its attempt and CompleteBy as just set)."""
    step = record.steps[index]
    attempt = step.compensation_attempts if kind == "undo" else step.attempts
    entry = calls.CallEntry(attempt=attempt, kind=kind, dispatched=ctx.now, complete_by=step.complete_by)
    step.calls = calls.appended(step.calls, entry)


def _current_entry(record: TaskRecord, index: int) -> calls.CallEntry | None:
    """The record of step ``index``'s dispatch under way (its latest), if kept."""
    entries = record.steps[index].calls
    return entries[-1] if entries else None


def _log_end(record: TaskRecord, ctx: Context, index: int, outcome: str, reason: str | None = None) -> None:
    """The dispatch under way of step ``index`` ended (a wait over, a step given up on)."""
    entry = _current_entry(record, index)
    if entry is not None and entry.outcome is None:
        entry.outcome, entry.ended = outcome, ctx.now
        if reason:
            entry.reason = reason[:1000]


def _log_timeout(record: TaskRecord, ctx: Context, index: int, recovery: str) -> None:
    """The Supervisor found step ``index``'s dispatch past its CompleteBy, and did ``recovery``."""
    entry = _current_entry(record, index)
    if entry is None:
        return
    if entry.outcome is None or entry.outcome == "accepted":
        entry.outcome, entry.ended = "timed out", ctx.now
    entry.recovery = recovery[:300]


def _log_reply(record: TaskRecord, ctx: Context, reply: AgentReply) -> None:
    """What an applied reply (or callback) says about its dispatch."""
    kind: calls.Kind = "undo" if reply.compensating else "call"
    entry = calls.entry_for(record.steps[reply.step_index].calls, reply.attempt, kind)
    if entry is None:
        return
    call = reply.call
    if call is not None and call.callback:
        entry.answered = entry.ended = ctx.now
    elif call is not None:
        entry.instance, entry.started, entry.tries = call.instance or None, call.started, call.tries
        entry.status, entry.body, entry.ended = call.status, call.body, call.ended
    else:
        entry.ended = ctx.now
    entry.outcome = reply.outcome.value
    entry.result = reply.result or None
    entry.reason = (reply.error or "")[:1000] or None


def status(
    record: TaskRecord,
    ctx: Context,
    event: StatusEvent,
    step: str | None = None,
    detail: str | None = None,
    index: int | None = None,
) -> Outgoing:
    """A status message for the submitting application, on its own status queue if it named one, with the
    order id as that application gave it (without its :func:`engine.queues.scoped_id` prefix).

    ``index`` names the step of a group the message is about: its id then says that step and its own
    attempt, so the messages of two steps of one group are not taken for duplicates of each other."""
    state = record.state
    at, attempt = state.current_step, state.attempt
    if index is not None:
        at, attempt = index, record.steps[index].attempts
    body = StatusMessage(
        order_id=queues.unscoped_id(state.order_id, state.submitter),
        event=event,
        process_state=state.process_state.value,
        step=step,
        detail=detail,
        at=ctx.now,
    )
    return Outgoing(
        queue=state.status_queue or queues.STATUS_QUEUE,
        body=body,
        message_id=f"{state.order_id}:{event.value}:{at}:{state.phase.value}:{attempt}",
        correlation_id=body.order_id,
    )


def command(
    order_id: str,
    kind: CommandKind,
    reason: str,
    at: datetime | None = None,
    new_id: Callable[[], str] = random_id,
    dispatch: tuple[int, int] | None = None,
) -> Outgoing:
    """A message asking the Scheduler to look at a task (now, or at ``at``); ``dispatch`` (step index,
    attempt) names the one wait a wake-up is for."""
    step_index, attempt = dispatch if dispatch is not None else (None, None)
    named = f"{step_index}:{attempt}:" if dispatch is not None else ""
    return Outgoing(
        queue=queues.SCHEDULER_QUEUE,
        body=SchedulerCommand(
            order_id=order_id, kind=kind, reason=reason, step_index=step_index, attempt=attempt
        ),
        message_id=f"{order_id}:{kind.value}:{named}{new_id()}",
        correlation_id=order_id,
        scheduled_at=at,
    )


def wake_command(
    record: TaskRecord, at: datetime, reason: str, new_id: Callable[[], str] = random_id
) -> Outgoing:
    """The wake-up of the task's current wait (a timer), scheduled for ``at``."""
    state = record.state
    return command(state.order_id, CommandKind.WAKE, reason, at, new_id, (state.current_step, state.attempt))


def document(record: TaskRecord, upto: int, before: int | None = None) -> dict[str, Any]:
    """What a step's condition and its calls' bodies read: the order's input, and the values the steps
    up to ``upto`` returned (an undo of a step sees the step's own result), by name; a later step's value
    of the same name wins (the declaration refuses such clashes in one workflow).

    ``before``: the first step of the group ``upto`` is in. The steps of a group run side by side, so a
    step of it reads only what the steps before the group returned (and, for its undo, its own result),
    never a value a step beside it happened to return first."""
    results: dict[str, Any] = {}
    steps = record.steps[: upto + 1] if before is None else [*record.steps[:before], record.steps[upto]]
    for step in steps:
        if step.result:
            results.update(step.result)
    return {"input": record.input, "results": results}


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


# ---- forward -----------------------------------------------------------------------------------------
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


_DONE = (StepStatus.COMPLETED, StepStatus.LEFT_OUT)


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


# ---- groups: steps side by side -------------------------------------------------------------------
_IN_FLIGHT = (StepStatus.RUNNING, StepStatus.WAITING)


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


# ---- waits ---------------------------------------------------------------------------------------
def timer_due(record: TaskRecord, ctx: Context, index: int, timer: Timer) -> datetime:
    """When the timer of step ``index`` ends, started now: ``after_seconds`` (or its setting) from now, or
    the time its input field holds (an absent or unreadable value: now)."""
    if timer.until is None:
        seconds = ctx.settings.wait_seconds.get(timer.setting or "", timer.after_seconds)
        return ctx.now + timedelta(seconds=seconds or 0.0)
    value = value_at(document(record, index - 1), timer.until)
    try:
        at = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        return ctx.now  # nothing to wait for: the input says no time (the input model should refuse it)
    return at


def _start_wait(record: TaskRecord, ctx: Context, index: int, wait: Timer | Approval) -> Decision | None:
    """Step ``index`` starts waiting: Waiting with its deadline as CompleteBy; a timer's wake-up is
    scheduled for its time. None (the step marked done) for a timer whose time has already come."""
    state = record.state
    step = record.steps[index]
    if isinstance(wait, Timer):
        until = timer_due(record, ctx, index, wait)
        if until <= ctx.now:
            step.status = StepStatus.COMPLETED
            step.reason = "timer: its time had come when its turn came"
            return None
        # The wake-up is scheduled for ``until``; the Supervisor re-sends it if not come a window later.
        complete_by = until + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    else:
        seconds = ctx.settings.wait_seconds.get(wait.setting or "", wait.deadline_seconds)
        until = complete_by = ctx.now + timedelta(seconds=seconds)
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
    state.waiting_for, state.wait_until = wait.kind, until
    _touch(record, ctx)
    note = status(
        record, ctx, StatusEvent.WAITING, step=step.name, detail=f"{wait.kind} until {until.isoformat()}"
    )
    if isinstance(wait, Timer):
        return _moved(note, wake_command(record, until, f"timer of {step.name}", new_id=ctx.new_id))
    return _moved(note)


def _waiting(record: TaskRecord, ctx: Context, index: int, kind: type[Timer] | type[Approval]) -> bool:
    """Whether step ``index`` is the task's current step, a wait of ``kind``, and waiting now."""
    state = record.state
    return (
        index == state.current_step
        and index < len(record.steps)
        and isinstance(ctx.steps[index].wait, kind)
        and record.steps[index].status is StepStatus.WAITING
    )


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
    if step is None or state.attempt != attempt or not _waiting(record, ctx, index, Timer):
        return None
    due = step.complete_by
    return due if due is not None and due > ctx.now else None


def wake(record: TaskRecord, ctx: Context, index: int, attempt: int) -> Decision:
    """A timer's wake-up: end the wait if it is for the current wait (step and attempt) and its time has
    come. A late, duplicate or early one is refused and changes nothing."""
    state = record.state
    if state.attempt != attempt or not _waiting(record, ctx, index, Timer):
        return REFUSED
    due = record.steps[index].complete_by
    if due is None or due > ctx.now or allows(Operation.WAKE, record) is None:
        return REFUSED
    return _end_wait(record, ctx, "timer due", scheduler=True)


def approve(record: TaskRecord, ctx: Context, index: int) -> Decision:
    """A person approves the waiting approval of step ``index``; the task moves on (out of Error too, when
    its deadline put it there). Past its deadline a Waiting approval can no longer be given: its policy
    applies, whether or not the Supervisor has come yet."""
    if not _waiting(record, ctx, index, Approval) or allows(Operation.APPROVE, record) is None:
        return REFUSED
    if deadline_passed(record, ctx):
        return REFUSED
    return _end_wait(record, ctx, "approved", scheduler=False)


def deadline_passed(record: TaskRecord, ctx: Context) -> bool:
    """Whether the task is Waiting and its current wait's time (an approval's deadline) has come."""
    step = record.steps[record.state.current_step]
    waiting = record.state.process_state is ProcessState.WAITING
    return waiting and step.complete_by is not None and step.complete_by <= ctx.now


def reject(record: TaskRecord, ctx: Context, index: int, reason: str) -> Decision:
    """A person rejects the waiting approval of step ``index``: what was done is undone."""
    if not _waiting(record, ctx, index, Approval) or allows(Operation.REJECT, record) is None:
        return REFUSED
    if record.state.process_state is ProcessState.ERROR:
        _operator_took_over(record)
    return _wait_failed(record, ctx, f"rejected: {reason}" if reason else "rejected")


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
    detail = f"callback until {step.complete_by.isoformat() if step.complete_by else '?'}"
    if ctx.grouped(index):
        step.status = StepStatus.WAITING
        _touch(record, ctx)
        return _moved(status(record, ctx, StatusEvent.WAITING, step=step.name, detail=detail, index=index))
    step.status = StepStatus.WAITING
    state.process_state = ProcessState.WAITING
    state.waiting_for, state.wait_until = CALLBACK, step.complete_by
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


def _fresh_failure_counts(record: TaskRecord) -> None:
    """Undoing a step is new work: the timeouts of its forward attempts do not count against the undo."""
    for step in record.steps:
        step.failures = 0


# ---- compensation --------------------------------------------------------------------------------
def _dispatch_compensation(record: TaskRecord, ctx: Context, start: int) -> Decision:
    """Undo the highest step at or below ``start`` that may have had an effect, or finish as Compensated."""
    index = next(
        (
            i
            for i in range(min(start, len(record.steps) - 1), -1, -1)
            if record.steps[i].status in _MAY_HAVE_EFFECT and ctx.steps[i].compensation
        ),
        None,
    )
    if index is None:
        return _finish(record, ctx, ProcessState.COMPENSATED, StatusEvent.COMPENSATED)
    # The undo waits for the call of a step skipped while running to settle: the step's own, or that of a
    # step passed over because it cannot be undone (its effect must not land after an undo of the order).
    waits = [
        step.undo_not_before
        for step in record.steps[index : start + 1]
        if step.undo_not_before is not None and step.undo_not_before > ctx.now
    ]
    if waits:
        return _undo_later(record, ctx, index, max(waits))
    return _dispatch(record, ctx, index, compensating=True)


def _undo_later(record: TaskRecord, ctx: Context, index: int, at: datetime) -> Decision:
    """Give the task back unlocked, Compensating at step ``index``, with a resume scheduled for ``at``.

    The step was skipped while its call was in flight; an undo sent now could reach the service before
    that call lands, and the call would then apply an effect nothing undoes. Whoever claims the task
    before ``at`` (a duplicate resume, the Supervisor's kick) finds the same wait and defers again.
    """
    state = record.state
    step = record.steps[index]
    state.phase, state.process_state = Phase.COMPENSATE, ProcessState.COMPENSATING
    state.current_step = index
    state.attempt = step.compensation_attempts
    state.locked_by = None
    state.next_attempt_at = at
    state.complete_by = at + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    _touch(record, ctx)
    reason = f"undo of {step.name} waits for the call in flight when it was skipped"
    return _moved(command(state.order_id, CommandKind.RESUME, reason, at=at, new_id=ctx.new_id))


def _compensation_succeeded(record: TaskRecord, ctx: Context) -> Decision:
    """The current step is undone: undo the one before it."""
    index = record.state.current_step
    step = record.steps[index]
    step.status = StepStatus.COMPENSATED
    step.last_error = None
    undone = status(record, ctx, StatusEvent.STEP_COMPENSATED, step=step.name)
    return _dispatch_compensation(record, ctx, start=index - 1).after(undone)


def _compensation_failed(record: TaskRecord, ctx: Context, error: str) -> Decision:
    """A compensation cannot be done: an operator must look."""
    step = record.steps[record.state.current_step]
    step.last_error = error
    return _enter_error(
        record, ctx, f"compensation of {step.name} failed: {error}", _engine(ctx, "scheduler")
    )


# ---- endings -------------------------------------------------------------------------------------
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


# ---- Supervisor ----------------------------------------------------------------------------------
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
    if state.process_state is ProcessState.WAITING and state.waiting_for != CALLBACK:
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
    """A wait past its CompleteBy. A timer's wake-up did not come: it is sent again (nothing failed, so
    nothing is counted). An approval's deadline passed: its declared policy applies."""
    state = record.state
    index = state.current_step
    wait = ctx.steps[index].wait
    step = record.steps[index]
    if isinstance(wait, Timer) and allows(Operation.REWAKE, record):
        state.complete_by = ctx.now + timedelta(seconds=ctx.settings.step_complete_by_seconds)
        entry = _current_entry(record, index)
        if entry is not None:
            entry.recovery = "wake-up lost: sent again"
        _touch(record, ctx)
        # Its time passed a window before the CompleteBy that brought the Supervisor here: due now.
        return Decision(
            Outcome.KICKED, (wake_command(record, ctx.now, "supervisor: wake-up lost", ctx.new_id),)
        )
    if not isinstance(wait, Approval) or allows(Operation.DEADLINE, record) is None:
        return REFUSED
    reason = "no approval by its deadline"
    if wait.on_deadline == "error":
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


def settled(complete_by: datetime, ctx: Context) -> datetime:
    """When a call of a step running until ``complete_by`` can no longer land at its service: the Agent
    stops at CompleteBy, and a call it gave up on may still arrive within the grace (the network's bound).
    The grace counts even when CompleteBy has passed: a call can be on its way then too."""
    return complete_by + timedelta(seconds=ctx.settings.cancel_grace_seconds)


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
        # A later time or deadline: a wake-up already scheduled for the old time finds it early and
        # schedules itself again.
        wait = ctx.steps[index].wait
        margin = ctx.settings.step_complete_by_seconds if isinstance(wait, Timer) else 0.0
        state.complete_by = step.complete_by + timedelta(seconds=margin)
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
