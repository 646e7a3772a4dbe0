"""The Scheduler: claims tasks, runs their steps in order through Agents, and handles the replies."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from datetime import timedelta

from . import saved_task, telemetry, tracing, transitions
from .decisions import Decision, Outcome
from .errors import ConcurrencyError
from .messages import AgentReply, CommandKind, SchedulerCommand
from .outbox import carry_out
from .parts import EngineParts
from .state import ProcessState, TaskRecord
from .transitions import Context

log = logging.getLogger("engine.scheduler")

# A scheduled message may arrive a little before its time; within this, it counts as on time.
_EARLY_TOLERANCE = timedelta(seconds=1)
# How often a reply to a step of a group is applied again after losing a race to a reply beside it.
_GROUP_REPLY_TRIES = 5
# Steps and audit entries a task written claimed may carry: its insert is one transaction (at most 100
# entities in Table Storage, with the input, the state and the listing entry). A claim that leaves more
# steps out than fit is written Pending and claimed by a save of its own.
_NEW_TASK_ENTRIES = 60


def instance_id() -> str:
    """A Scheduler instance id for LockedBy: host, process and a random part (processes restart)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Scheduler:
    """Moves tasks through their workflow. Safe to run as many instances as you like."""

    def __init__(self, parts: EngineParts, instance: str | None = None) -> None:
        self.parts = parts
        self.instance = instance or instance_id()

    async def _commit(self, record: TaskRecord, decision: Decision, *, copy: bool = False) -> bool:
        """Update state, then send. Returns False if another instance moved the task first (or, for a
        saved copy, if the task changed since the copy was taken)."""
        try:
            await self.parts.store.save(record)
        except ConcurrencyError:
            if not copy:
                telemetry.info(
                    log, "lost a race; another instance moved the task", **telemetry.context(record.order_id)
                )
            return False
        await carry_out(self.parts.sender, decision, record, self.parts.store)
        return True

    async def handle_command(self, command: SchedulerCommand) -> bool:
        """Claim the task if it is free and due, and dispatch its current work. True if it did.

        The task is the copy the command carries when that copy claims it; otherwise (no copy, or the task
        changed since, or the copy says it cannot be claimed) the task as read from the store decides.
        """
        tracing.annotate(**{tracing.ORDER_ID: command.order_id, tracing.COMMAND_KIND: command.kind.value})
        act = {CommandKind.WAKE: self._wake, CommandKind.RETRY: self._retry}.get(
            command.kind, self._claim_for
        )
        copy = saved_task.decode(command.saved_task, command.order_id)
        if copy is not None and await act(copy, command, copy=True):
            return True
        record = await self.parts.store.load(command.order_id)
        if record is None:
            telemetry.warning(
                log, "command for an unknown task dropped", **telemetry.context(command.order_id)
            )
            return False
        return await act(record, command)

    def claim_new(self, record: TaskRecord) -> Decision | None:
        """Claim a task its submission is about to write, before it is written: the task is then stored
        claimed by this instance (Processing, ``LockedBy``, its first step's ``CompleteBy``) in the
        submission's own insert, and :meth:`dispatch_new` sends its first work once that insert is in.

        This is the claim a Scheduler makes of a Pending task, made on the task before its first write
        instead of in a second, conditional one: an insert is exclusive already (the id is free, or the
        submission answers with the task that has it), so no other instance can hold the task, and a crash
        before the sends leaves a claimed task whose ``CompleteBy`` the Supervisor acts on, as after any
        Scheduler's crash between its save and its sends. Returns the claim's decision, ``record`` claimed
        in place; None when the claim would not leave the task running a step (its first steps are all
        left out, or it waits from the start): ``record`` is then changed but not claimed, not to be
        written (the submission writes a fresh one Pending, and a Scheduler claims it as before).
        """
        decision = transitions.claim(record, self.parts.context(self.instance, record))
        running = record.state.process_state is ProcessState.PROCESSING and not record.parked
        entries = len(record.steps) + len(record.pending_audit())
        if not decision.changed or not running or entries > _NEW_TASK_ENTRIES:
            return None
        return decision

    async def dispatch_new(self, record: TaskRecord, decision: Decision) -> None:
        """Send the first work of a task written claimed (see :meth:`claim_new`); ``record`` is the task as
        stored. Raises if a send fails: the Supervisor re-dispatches once the step's ``CompleteBy`` passes."""
        with tracing.span(
            tracing.SCHEDULER_COMMAND,
            attributes={tracing.ORDER_ID: record.order_id, tracing.COMMAND_KIND: CommandKind.START.value},
        ):
            tracing.annotate_task(record, record.state.current_step, record.state.attempt)
            await carry_out(self.parts.sender, decision, record, self.parts.store)
        state = record.state
        fields = telemetry.context(record.order_id, record.steps[state.current_step].name, state.attempt)
        telemetry.info(log, "claimed", **fields, phase=state.phase.value)

    async def _claim_for(self, record: TaskRecord, command: SchedulerCommand, *, copy: bool = False) -> bool:
        return await self._claim(record, copy=copy)

    async def _wake(self, record: TaskRecord, command: SchedulerCommand, *, copy: bool = False) -> bool:
        """A timer's wake-up: end the wait it names if its time has come. One that came early schedules
        another for the time (nothing runs before its timer); one for another wait changes nothing."""
        index, attempt = command.step_index, command.attempt
        ctx = self.parts.context(self.instance, record)
        if ctx.workflow is None:
            return await self._workflow_gone(record, ctx, copy=copy)
        if index is None or attempt is None or index >= len(record.steps):
            telemetry.warning(log, "wake-up naming no wait dropped", **telemetry.context(record.order_id))
            return False
        tracing.annotate_task(record, index, attempt)
        decision = transitions.wake(record, ctx, index, attempt)
        if decision.changed:
            return await self._commit(record, decision, copy=copy)
        early = transitions.wake_early(record, ctx, index, attempt)
        if early is None:
            if not copy:
                telemetry.info(
                    log, "stale or duplicate wake-up dropped", **telemetry.context(record.order_id)
                )
            return False
        if copy:
            return False  # the task as stored decides: it may have moved on since the copy was taken
        again = transitions.wake_command(record, early, "wake-up came early", new_id=self.parts.new_id)
        await carry_out(self.parts.sender, Decision(Outcome.MOVED, (again,)), record, self.parts.store)
        telemetry.info(log, "early wake-up scheduled again", **telemetry.context(record.order_id))
        return True

    async def _retry(self, record: TaskRecord, command: SchedulerCommand, *, copy: bool = False) -> bool:
        """Dispatch one step of a group again, if the retry the command names is still that step's next
        move; the other steps of the group run on."""
        index, attempt = command.step_index, command.attempt
        ctx = self.parts.context(self.instance, record)
        if ctx.workflow is None:
            return await self._workflow_gone(record, ctx, copy=copy)
        if index is None or attempt is None:
            telemetry.warning(log, "retry naming no step dropped", **telemetry.context(record.order_id))
            return False
        tracing.annotate_task(record, index, attempt)
        decision = transitions.redispatch(record, ctx, index, attempt)
        if not decision.changed:
            if not copy:
                telemetry.info(log, "stale or duplicate retry dropped", **telemetry.context(record.order_id))
            return False
        return await self._commit(record, decision, copy=copy)

    async def _claim(self, record: TaskRecord, *, copy: bool = False) -> bool:
        ctx = self.parts.context(self.instance, record)
        state = record.state
        if ctx.workflow is None:
            return await self._workflow_gone(record, ctx, copy=copy)
        if state.next_attempt_at is not None and state.next_attempt_at - _EARLY_TOLERANCE > ctx.now:
            if not copy:
                telemetry.info(
                    log, "command before the task's retry time ignored", **telemetry.context(record.order_id)
                )
            return False
        decision = transitions.claim(record, ctx)
        if not decision.changed:
            if not copy:
                telemetry.info(
                    log,
                    "task not claimable; command ignored",
                    **telemetry.context(
                        record.order_id, state=state.process_state.value, lockedBy=state.locked_by
                    ),
                )
            return False
        claimed = await self._commit(record, decision, copy=copy)
        if claimed:
            tracing.annotate_task(record, record.state.current_step, record.state.attempt)
            step = record.steps[record.state.current_step]
            telemetry.info(
                log,
                "claimed",
                **telemetry.context(
                    record.order_id, step.name, record.state.attempt, phase=record.state.phase.value
                ),
            )
        return claimed

    async def handle_reply(self, reply: AgentReply) -> bool:
        """Apply an Agent's reply if it is for the task's current step and attempt (fencing).

        As with commands, the copy of the task the reply carries is tried first, and the task as read
        from the store decides whenever the copy does not take the reply.
        """
        copy = saved_task.decode(reply.saved_task, reply.order_id)
        if copy is not None and await self._apply(copy, reply, copy=True):
            return True
        for _ in range(_GROUP_REPLY_TRIES):
            record = await self.parts.store.load(reply.order_id)
            if record is None:
                telemetry.warning(
                    log, "reply for an unknown task dropped", **telemetry.context(reply.order_id)
                )
                return False
            applied = await self._apply(record, reply)
            if applied is not None:
                return applied
        return False

    async def _apply(self, record: TaskRecord, reply: AgentReply, *, copy: bool = False) -> bool | None:
        """True if the reply moved the task, False if not; None when it lost a race to another reply of
        the same group (the steps of a group answer close together), so it is applied again on a fresh
        read rather than dropped and left for the Supervisor."""
        # The step the reply is for (a step of a group is not the task's current step).
        at = reply.step_index if reply.step_index < len(record.steps) else record.state.current_step
        current = record.steps[at] if at < len(record.steps) else None
        fields = telemetry.context(
            reply.order_id,
            current.name if current else None,
            reply.attempt,
            stepIndex=reply.step_index,
            outcome=reply.outcome.value,
        )
        ctx = self.parts.context(self.instance, record)
        if ctx.workflow is None:
            return await self._workflow_gone(record, ctx, copy=copy)
        if tracing.recording():
            tracing.annotate_task(record, at, reply.attempt)
            tracing.annotate(
                **{tracing.COMPENSATING: reply.compensating, tracing.OUTCOME: reply.outcome.value}
            )
        decision = transitions.apply_reply(record, ctx, reply)
        if not decision.changed:
            if not copy:
                telemetry.info(log, "stale or duplicate reply dropped", **fields)
            return False
        applied = await self._commit(record, decision, copy=copy)
        if applied:
            telemetry.info(log, "reply applied", **fields, processState=record.state.process_state.value)
        elif not copy and ctx.grouped(reply.step_index):
            return None
        return applied

    async def _workflow_gone(self, record: TaskRecord, ctx: Context, *, copy: bool) -> bool:
        """Error, with an alert, for a task whose workflow version this deployment does not have."""
        decision = transitions.workflow_not_deployed(record, ctx)
        return decision.changed and await self._commit(record, decision, copy=copy)
