"""The Scheduler: claims tasks, runs their steps in order through Agents, and handles the replies."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from datetime import timedelta

from . import telemetry, transitions
from .messages import AgentReply, ReplyOutcome, SchedulerCommand
from .outbox import deliver
from .parts import EngineParts
from .ports import ConcurrencyError
from .state import Phase, ProcessState, StepStatus, TaskRecord
from .transitions import Context, Outgoing

log = logging.getLogger("engine.scheduler")

# A scheduled message may arrive a little before its time; within this, it counts as on time.
_EARLY_TOLERANCE = timedelta(seconds=1)


def instance_id() -> str:
    """A Scheduler instance id for LockedBy: host, process and a random part (processes restart)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Scheduler:
    """Moves tasks through their workflow. Safe to run as many instances as you like."""

    def __init__(self, parts: EngineParts, instance: str | None = None) -> None:
        self.parts = parts
        self.workflow, self.store, self.sender = parts.workflow, parts.store, parts.sender
        self.clock, self.settings = parts.clock, parts.settings
        self.instance = instance or instance_id()

    def _context(self) -> Context:
        return Context(self.workflow, self.settings, self.clock.now(), self.instance)

    def _commit(self, record: TaskRecord, ctx: Context, out: list[Outgoing]) -> bool:
        """Update state, then send. Returns False if another instance moved the task first."""
        try:
            self.store.save(record)
        except ConcurrencyError:
            telemetry.info(
                log, "lost a race; another instance moved the task", **telemetry.context(record.order_id)
            )
            return False
        deliver(self.sender, out, ctx.alerts)
        return True

    def handle_command(self, command: SchedulerCommand) -> bool:
        """Claim the task if it is free and due, and dispatch its current work. True if it did."""
        record = self.store.load(command.order_id)
        if record is None:
            telemetry.warning(
                log, "command for an unknown task dropped", **telemetry.context(command.order_id)
            )
            return False
        ctx = self._context()
        state = record.state
        if state.next_attempt_at is not None and state.next_attempt_at - _EARLY_TOLERANCE > ctx.now:
            telemetry.info(
                log, "command before the task's retry time ignored", **telemetry.context(record.order_id)
            )
            return False
        out = transitions.claim(record, ctx)
        if not out:
            telemetry.info(
                log,
                "task not claimable; command ignored",
                **telemetry.context(
                    record.order_id, state=state.process_state.value, lockedBy=state.locked_by
                ),
            )
            return False
        claimed = self._commit(record, ctx, out)
        if claimed:
            step = record.steps[record.state.current_step]
            telemetry.info(
                log,
                "claimed",
                **telemetry.context(
                    record.order_id, step.name, record.state.attempt, phase=record.state.phase.value
                ),
            )
        return claimed

    def handle_reply(self, reply: AgentReply) -> bool:
        """Apply an Agent's reply if it is for the task's current step and attempt (fencing)."""
        record = self.store.load(reply.order_id)
        if record is None:
            telemetry.warning(log, "reply for an unknown task dropped", **telemetry.context(reply.order_id))
            return False
        state = record.state
        expected_phase = Phase.COMPENSATE if reply.compensating else Phase.FORWARD
        expected_state = ProcessState.COMPENSATING if reply.compensating else ProcessState.PROCESSING
        expected_step = StepStatus.COMPENSATING if reply.compensating else StepStatus.RUNNING
        current = record.steps[state.current_step] if state.current_step < len(record.steps) else None
        fields = telemetry.context(
            reply.order_id,
            current.name if current else None,
            reply.attempt,
            stepIndex=reply.step_index,
            outcome=reply.outcome.value,
        )
        if (
            state.phase is not expected_phase
            or state.process_state is not expected_state
            or state.current_step != reply.step_index
            or state.attempt != reply.attempt
            or current is None
            or current.status is not expected_step
        ):
            telemetry.info(log, "stale or duplicate reply dropped", **fields)
            return False
        ctx = self._context()
        if reply.compensating:
            if reply.outcome is ReplyOutcome.SUCCEEDED:
                out = transitions.compensation_succeeded(record, ctx)
            else:
                out = transitions.compensation_failed(record, ctx, reply.error or "compensation failed")
        elif reply.outcome is ReplyOutcome.SUCCEEDED:
            out = transitions.step_succeeded(record, ctx, reply.result)
        else:
            out = transitions.step_failed(record, ctx, reply.error or "step failed")
        applied = self._commit(record, ctx, out)
        if applied:
            telemetry.info(log, "reply applied", **fields, processState=record.state.process_state.value)
        return applied
