"""What the submitting application and operators do with tasks: submit, read, list, resubmit, cancel."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from . import telemetry, transitions
from .messages import CommandKind
from .outbox import deliver
from .parts import EngineParts
from .ports import ConcurrencyError, CreateOutcome, Page
from .state import ProcessState, StepState, TaskRecord, TaskState
from .transitions import Context, Outgoing

log = logging.getLogger("engine.tasks")

_RETRIES_ON_RACE = 5


class NotFound(Exception):
    """No task with that id."""


class InvalidState(Exception):
    """The task is in a state that does not allow the request."""


class Conflict(Exception):
    """A task with that id exists with other input."""


class TaskService:
    """The application side of the engine."""

    def __init__(self, parts: EngineParts) -> None:
        self.parts = parts
        self.workflow, self.store, self.sender = parts.workflow, parts.store, parts.sender
        self.clock, self.settings = parts.clock, parts.settings

    def submit(self, order_id: str, task_input: dict[str, Any], input_hash: str) -> tuple[bool, TaskRecord]:
        """Record the task and its steps (not started) in one transaction, then kick the Scheduler.

        Returns (created, record). The same id with the same input again changes nothing; with other
        input it raises :class:`Conflict`.
        """
        now = self.clock.now()
        ctx = Context(self.workflow, self.settings, now)
        record = TaskRecord(
            state=TaskState(order_id=order_id, workflow=self.workflow.name, created_at=now, updated_at=now),
            steps=[StepState(index=i, name=s.name) for i, s in enumerate(self.workflow.steps)],
            input=task_input,
            input_hash=input_hash,
        )
        transitions.new_record_state(record, ctx)
        outcome, stored = self.store.create(record)
        if outcome is CreateOutcome.EXISTS_DIFFERENT:
            raise Conflict(f"order {order_id} exists with a different body")
        if outcome is CreateOutcome.EXISTS_SAME:
            return False, stored
        # If this send is lost, the Supervisor re-kicks the Pending task once its CompleteBy passes.
        deliver(self.sender, [transitions.command(order_id, CommandKind.START, "submitted")])
        telemetry.info(log, "submitted", **telemetry.context(order_id))
        return True, stored

    def get(self, order_id: str) -> TaskRecord:
        """The task, or :class:`NotFound`."""
        record = self.store.load(order_id)
        if record is None:
            raise NotFound(order_id)
        return record

    def list(self, state: ProcessState, page_size: int, continuation: str | None) -> Page:
        """Tasks in one state, a page at a time."""
        return self.store.list_by_state(state, page_size, continuation)

    def resubmit(self, order_id: str) -> TaskRecord:
        """Operator: an order in Error goes back to Pending with FailureCount reset."""
        return self._change(order_id, (ProcessState.ERROR,), transitions.resubmit, "resubmitted")

    def cancel(self, order_id: str) -> TaskRecord:
        """Compensate a task that is not terminal (a task already compensating is left as it is)."""
        record = self.get(order_id)
        if record.state.process_state is ProcessState.COMPENSATING:
            return record
        allowed = (ProcessState.PENDING, ProcessState.PROCESSING)
        return self._change(order_id, allowed, transitions.cancel, "cancelled")

    def _change(
        self,
        order_id: str,
        allowed: tuple[ProcessState, ...],
        change: Callable[[TaskRecord, Context], list[Outgoing]],
        what: str,
    ) -> TaskRecord:
        for _ in range(_RETRIES_ON_RACE):
            record = self.get(order_id)
            if record.state.process_state not in allowed:
                raise InvalidState(
                    f"order {order_id} is {record.state.process_state.value}; "
                    f"this needs {' or '.join(s.value for s in allowed)}"
                )
            ctx = Context(self.workflow, self.settings, self.clock.now(), instance_id="")
            out = change(record, ctx)
            try:
                saved = self.store.save(record)
            except ConcurrencyError:
                continue  # the Scheduler moved it meanwhile: look again
            deliver(self.sender, out, ctx.alerts)
            telemetry.info(log, what, **telemetry.context(order_id))
            return saved
        raise InvalidState(f"order {order_id} keeps changing; try again")
