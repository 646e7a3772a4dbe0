"""What every move of the state machine shares: its :class:`Context`, the table's verdict (:func:`allows`),
the bookkeeping of a move (:func:`_touch`, :func:`_moved`), the status messages it sends (:func:`status`;
its commands are ``engine.decisions.command``'s), what a step's condition and call read (:func:`document`),
the step statuses the moves sort steps by (may have had an effect, done, in flight), when a call in flight
can no longer land (:func:`settled`), and the failure counts an undo starts afresh."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .. import machine, queues, sealing
from ..decisions import Decision, Outcome, Outgoing, random_id
from ..machine import Operation
from ..messages import (
    StatusEvent,
    StatusMessage,
)
from ..settings import EngineSettings
from ..state import StepStatus, TaskRecord
from ..workflow import StepDefinition, WorkflowDefinition

# Steps that may have had an effect and so are undone when the task is compensated. A step that
# failed or was running may still have been applied (a lost reply), and undoing an effect that never
# happened is a no-op for an idempotent service.
_MAY_HAVE_EFFECT = (StepStatus.COMPLETED, StepStatus.RUNNING, StepStatus.FAILED, StepStatus.COMPENSATING)


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


_DONE = (StepStatus.COMPLETED, StepStatus.LEFT_OUT)


_IN_FLIGHT = (StepStatus.RUNNING, StepStatus.WAITING)


def settled(complete_by: datetime, ctx: Context) -> datetime:
    """When a call of a step running until ``complete_by`` can no longer land at its service: the Agent
    stops at CompleteBy, and a call it gave up on may still arrive within the grace (the network's bound).
    The grace counts even when CompleteBy has passed: a call can be on its way then too."""
    return complete_by + timedelta(seconds=ctx.settings.cancel_grace_seconds)


def _fresh_failure_counts(record: TaskRecord) -> None:
    """Undoing a step is new work: the timeouts of its forward attempts do not count against the undo."""
    for step in record.steps:
        step.failures = 0
