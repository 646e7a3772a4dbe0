"""What the submitting application and operators do with tasks: submit, read, list, resubmit, cancel."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from . import machine, telemetry, transitions
from .decisions import Decision, Outcome
from .errors import ConcurrencyError, Conflict, InvalidState, NotFound
from .machine import Operation
from .messages import CommandKind
from .outbox import carry_out, deliver
from .parts import EngineParts
from .ports import CreateOutcome, Page
from .state import ProcessState, StepState, TaskRecord, TaskState
from .transitions import Context

log = logging.getLogger("engine.tasks")

_RETRIES_ON_RACE = 5


class TaskService:
    """The application side of the engine."""

    def __init__(self, parts: EngineParts) -> None:
        self.parts = parts

    async def submit(
        self, order_id: str, task_input: dict[str, Any], input_hash: str
    ) -> tuple[bool, TaskRecord]:
        """Record the task and its steps (not started) in one transaction, then kick the Scheduler.

        Returns (created, record). The same id with the same input again changes nothing; with other
        input it raises :class:`~engine.errors.Conflict`.
        """
        ctx = self.parts.context()
        workflow = self.parts.workflow
        record = TaskRecord(
            state=TaskState(
                order_id=order_id, workflow=workflow.name, created_at=ctx.now, updated_at=ctx.now
            ),
            steps=[StepState(index=i, name=s.name) for i, s in enumerate(workflow.steps)],
            input=task_input,
            input_hash=input_hash,
        )
        transitions.new_record_state(record, ctx)
        outcome, stored = await self.parts.store.create(record)
        if outcome is CreateOutcome.EXISTS_DIFFERENT:
            raise Conflict(order_id)
        if outcome is CreateOutcome.EXISTS_SAME:
            return False, stored
        # If this send is lost, the Supervisor re-kicks the Pending task once its CompleteBy passes.
        await deliver(self.parts.sender, [transitions.command(order_id, CommandKind.START, "submitted")])
        telemetry.info(log, "submitted", **telemetry.context(order_id))
        return True, stored

    async def get(self, order_id: str) -> TaskRecord:
        """The task, or :class:`~engine.errors.NotFound`."""
        record = await self.parts.store.load(order_id)
        if record is None:
            raise NotFound(order_id)
        return record

    async def list_by_state(self, state: ProcessState, page_size: int, continuation: str | None) -> Page:
        """Tasks in one state, a page at a time."""
        return await self.parts.store.list_by_state(state, page_size, continuation)

    async def resubmit(self, order_id: str) -> TaskRecord:
        """Operator: an order in Error goes back to Pending with FailureCount reset."""
        return await self._change(order_id, Operation.RESUBMIT, transitions.resubmit, "resubmitted")

    async def cancel(self, order_id: str) -> TaskRecord:
        """Compensate a task that is not terminal (a task already compensating is left as it is)."""
        return await self._change(order_id, Operation.CANCEL, transitions.cancel, "cancelled")

    async def _change(
        self,
        order_id: str,
        operation: Operation,
        change: Callable[[TaskRecord, Context], Decision],
        what: str,
    ) -> TaskRecord:
        allowed = [s.value for s in machine.sources(operation)]
        for _ in range(_RETRIES_ON_RACE):
            record = await self.get(order_id)
            decision = change(record, self.parts.context())
            if decision.outcome is Outcome.REFUSED:
                raise InvalidState(order_id, record.state.process_state.value, allowed)
            if not decision.changed:
                return record  # allowed and already under way: nothing to do
            try:
                saved = await self.parts.store.save(record)
            except ConcurrencyError:
                continue  # the Scheduler moved it meanwhile: look again
            await carry_out(self.parts.sender, decision)
            telemetry.info(log, what, **telemetry.context(order_id))
            return saved
        raise InvalidState(
            order_id,
            record.state.process_state.value,
            allowed,
            reason=f"order {order_id} keeps changing; try again",
        )
