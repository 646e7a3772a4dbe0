"""What the submitting application and operators do with tasks: submit, read, list, cancel, and an
operator's resubmit and step-level retry, extend and skip, each audited."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import (
    machine,
    metrics,
    operator_actions,
    queues,
    saved_task,
    sealing,
    search,
    telemetry,
    tracing,
    transitions,
    waits,
)
from .decisions import Outcome
from .errors import (
    ConcurrencyError,
    Conflict,
    InvalidState,
    NotFound,
    NotServedYet,
    PreconditionFailed,
    UnknownStep,
    UnknownWorkflow,
)
from .machine import Operation
from .messages import CommandKind
from .operator_actions import Given, OperatorAction
from .outbox import carry_out, deliver
from .parts import EngineParts
from .ports import CreateOutcome, Page, StateCounts
from .retention import Purged
from .search import SearchQuery
from .state import AuditEntry, ProcessState, StepState, StepStatus, TaskRecord, TaskState
from .workflow import WorkflowDefinition

if TYPE_CHECKING:
    from .scheduler import Scheduler

log = logging.getLogger("engine.tasks")

_RETRIES_ON_RACE = 5


@dataclass(frozen=True)
class Caller:
    """Who asks for a change, why, and which version of the task they decided on.

    ``version`` is :attr:`TaskRecord.version` as the caller read it; None changes whatever is current
    (for callers without a version to offer).
    """

    actor: str = "application"
    note: str | None = None
    version: str | None = None


class TaskService:
    """The application side of the engine.

    With ``scheduler`` (the submitting process's), each new task is written already claimed by it and its
    first step is dispatched from the submission (:meth:`~engine.scheduler.Scheduler.claim_new`): no kick
    through the Scheduler's queue and no second write. Without it (or when the claim would not leave the
    task running a step), the task is written Pending and the submission kicks the Scheduler.
    """

    def __init__(self, parts: EngineParts, scheduler: Scheduler | None = None) -> None:
        self.parts = parts
        self._scheduler = scheduler

    def workflow_for_new(self, workflow_name: str | None) -> WorkflowDefinition:
        """The version a new order of ``workflow_name`` (None: the default) takes: the newest that every
        instance serves (``WorkflowCatalog.for_new``). Raises :class:`UnknownWorkflow` for a workflow not
        declared, :class:`NotServedYet` for one a deployment under way adds."""
        catalog = self.parts.catalog
        name = workflow_name or catalog.default
        if catalog.current(name) is None:
            raise UnknownWorkflow(name, catalog.names)
        workflow = catalog.for_new(name, self.parts.formats.served_by_all)
        if workflow is None:
            raise NotServedYet(name)
        return workflow

    async def submit(
        self,
        order_id: str,
        task_input: dict[str, Any],
        input_hash: str,
        workflow_name: str | None = None,
        submitter: str | None = None,
        sent: dict[str, Any] | None = None,
    ) -> tuple[bool, TaskRecord]:
        """Record the task and its steps (not started) in one transaction, then claim it with ``start`` (or
        kick the Scheduler).

        The task runs the latest deployed version of ``workflow_name`` (by default the catalog's first
        workflow) and keeps that version until it ends.

        Returns (created, record). The same id with the same input again changes nothing; with other
        input it raises :class:`~engine.errors.Conflict`. The id of a task purged after the retention
        period raises :class:`~engine.retention.Purged` while its tombstone lasts.

        The input fields the workflow declares sensitive are sealed first (:mod:`engine.sealing`, with
        the settings' ``input_keys``), and the body hash keyed, so nothing written or sent holds them in
        clear; :class:`~engine.sealing.KeyMissing` without keys.

        A retry is a retry across releases: ``sent`` is what the client sent, and an order stored
        with another hash (by a release whose input model filled other defaults) is the same order when
        every field it stored agrees with ``task_input`` and the fields only this one has are defaults the
        client did not send (:func:`same_order`).

        ``submitter`` (a storefront) names the submitting application: ``order_id`` is then already its
        scoped id (:func:`engine.queues.scoped_id`), and the task's status messages go to that
        application's own queue (:func:`engine.queues.status_queue`).
        """
        workflow = self.workflow_for_new(workflow_name)
        ctx = self.parts.context()
        same_as = frozenset({input_hash})
        plain = task_input
        if workflow.sensitive:
            # Sealed before anything is written or sent; the body hash keyed too (Keyring.fingerprint). Not
            # before the switch (engine.formats): the release before would misread both.
            keys = self.parts.settings.input_keys
            if keys is not None:
                same_as = keys.fingerprints(input_hash)
            if self.parts.formats.seals:
                task_input = sealing.seal_input(task_input, workflow.sensitive, order_id, keys)
                if keys is not None:
                    input_hash = keys.fingerprint(input_hash)

        def submitted() -> TaskRecord:
            record = TaskRecord(
                state=TaskState(
                    order_id=order_id,
                    workflow=workflow.name,
                    workflow_version=workflow.version,
                    submitter=submitter,
                    status_queue=queues.status_queue(submitter) if submitter else None,
                    search=search.searchable_values(workflow.searchable, task_input),
                    trace_parent=tracing.traceparent(),
                    created_at=ctx.now,
                    updated_at=ctx.now,
                ),
                steps=[StepState(index=i, name=s.name) for i, s in enumerate(workflow.steps)],
                input=task_input,
                input_hash=input_hash,
            )
            transitions.new_record_state(record, ctx)
            return record

        record = submitted()
        claim = self._scheduler.claim_new(record) if self._scheduler is not None else None
        if self._scheduler is not None and claim is None:
            record = submitted()  # not claimed at its insert: written Pending, as submitted
        outcome, stored = await self.parts.store.create(record)
        if outcome is CreateOutcome.EXISTS_DIFFERENT and (
            stored.input_hash in same_as or same_order(stored, plain, sent, workflow)
        ):
            outcome = CreateOutcome.EXISTS_SAME  # hashed under a previous key, or by another release
        if outcome is CreateOutcome.EXISTS_DIFFERENT:
            raise Conflict(order_id)
        if outcome is CreateOutcome.PURGED:
            raise Purged(order_id)
        tracing.annotate_task(stored)
        if outcome is CreateOutcome.EXISTS_SAME:
            return False, stored
        # The order was submitted: it counts as entering Pending even when it is written claimed (the
        # store's write counted the Processing it entered).
        metrics.state_entered(workflow.name, ProcessState.PENDING.value)
        telemetry.info(log, "submitted", **telemetry.context(order_id))
        if claim is not None and self._scheduler is not None:
            try:
                await self._scheduler.dispatch_new(stored, claim)
            except Exception:
                # Saved claimed but not all sent: the Supervisor re-dispatches once CompleteBy passes.
                telemetry.warning(
                    log, "the first step's dispatch at submission failed", **telemetry.context(order_id)
                )
            return True, stored
        # If this send is lost, the Supervisor re-kicks the Pending task once its CompleteBy passes.
        kick = transitions.command(order_id, CommandKind.START, "submitted", new_id=self.parts.new_id)
        await deliver(self.parts.sender, saved_task.attach([kick], stored))
        return True, stored

    async def get(self, order_id: str) -> TaskRecord:
        """The task, or :class:`~engine.errors.NotFound`."""
        record = await self.parts.store.load(order_id)
        if record is None:
            raise NotFound(order_id)
        return record

    async def list_by_state(
        self,
        state: ProcessState,
        page_size: int,
        continuation: str | None,
        waiting_for: str | None = None,
        submitter: str | None = None,
    ) -> Page:
        """Tasks in one state, a page at a time (a finished state: those within the retention period;
        Waiting: only those waiting for ``waiting_for``, when given; only ``submitter``'s, when given)."""
        return await self.parts.store.list_by_state(state, page_size, continuation, waiting_for, submitter)

    async def search(self, query: SearchQuery, page_size: int, continuation: str | None) -> Page:
        """Tasks that meet ``query`` (see :mod:`engine.search`), a page at a time. A step is looked for
        wherever the deployed workflows (of ``query.workflow``, if given) declare one of its name."""
        if query.step is not None:
            positions = tuple(
                (workflow.name, workflow.version, index)
                for workflow in self.parts.catalog.workflows
                if query.workflow in (None, workflow.name)
                and query.workflow_version in (None, workflow.version)
                for index, step in enumerate(workflow.steps)
                if step.name == query.step
            )
            query = query.model_copy(update={"positions": positions})
        return await self.parts.store.search_orders(query, page_size, continuation)

    async def count_by_state(self, limit: int) -> StateCounts:
        """How many tasks are in each state, counting at most ``limit`` tasks."""
        return await self.parts.store.count_by_state(limit)

    async def audit(self, order_id: str) -> list[AuditEntry]:
        """The task's audit entries, oldest first (:class:`~engine.errors.NotFound` if no such task)."""
        record = await self.get(order_id)
        return await self.parts.store.audit(order_id, archived=record.archived or record.parked)

    async def act(
        self,
        order_id: str,
        action: OperatorAction,
        caller: Caller | None = None,
        step: str | None = None,
        seconds: float = 0.0,
        note: str | None = None,
        changes: dict[str, Any] | None = None,
    ) -> TaskRecord:
        """Carry out an operator action (engine.operator_actions) on the order, on its ``step`` if the action
        acts on one; the move is told ``note`` if given, else the caller's note (the audit entry's), and the
        input fields ``changes`` sets, for an update."""
        caller = caller or Caller()
        index: int | None = None
        if action.on_step:
            index = await self._step_index(order_id, step or "")
        given = Given(
            step=index or 0,
            seconds=seconds,
            note=caller.note or "" if note is None else note,
            changes=changes or {},
        )
        return await self._change(order_id, action, given, caller, index)

    # Each action by name, for code that names one.
    async def resubmit(self, order_id: str, action: Caller | None = None) -> TaskRecord:
        """Operator: an order in Error goes back to Pending with FailureCount reset."""
        return await self.act(order_id, operator_actions.RESUBMIT, action)

    async def cancel(self, order_id: str, action: Caller | None = None) -> TaskRecord:
        """Compensate a task that is not terminal (a task already compensating is left as it is)."""
        return await self.act(order_id, operator_actions.CANCEL, action)

    async def retry_step(self, order_id: str, step: str, action: Caller | None = None) -> TaskRecord:
        """Operator: re-dispatch the current step (or its undo) now."""
        return await self.act(order_id, operator_actions.RETRY, action, step)

    async def extend_step(
        self, order_id: str, step: str, seconds: float, action: Caller | None = None
    ) -> TaskRecord:
        """Operator: push the running step's CompleteBy by ``seconds``."""
        return await self.act(order_id, operator_actions.EXTEND, action, step, seconds)

    async def skip_step(
        self, order_id: str, step: str, note: str, action: Caller | None = None
    ) -> TaskRecord:
        """Operator: mark the current step done by hand, then continue (``note``: why)."""
        return await self.act(order_id, operator_actions.SKIP, action, step, note=note)

    async def approve(self, order_id: str, step: str, action: Caller | None = None) -> TaskRecord:
        """A person approves the step's waiting approval: the order goes on (out of Error too, when the
        approval's deadline put it there)."""
        return await self.act(order_id, operator_actions.APPROVE, action, step)

    async def reject(self, order_id: str, step: str, action: Caller | None = None) -> TaskRecord:
        """A person rejects the step's waiting approval: what the order did is undone."""
        return await self.act(order_id, operator_actions.REJECT, action, step)

    async def update(
        self, order_id: str, changes: dict[str, Any], action: Caller | None = None
    ) -> TaskRecord:
        """Change input fields of an order going forward, as its workflow's updates let them change
        (:func:`engine.transitions.update_input`)."""
        return await self.act(order_id, operator_actions.UPDATE, action, changes=changes)

    async def _step_index(self, order_id: str, step: str) -> int:
        # The steps of the version the order runs, as recorded with it.
        names = [s.name for s in (await self.get(order_id)).steps]
        if step not in names:
            raise UnknownStep(order_id, step, names)
        return names.index(step)

    async def _change(
        self, order_id: str, action: OperatorAction, given: Given, caller: Caller, index: int | None
    ) -> TaskRecord:
        """Load, check the version the caller read (if any), make the action's move, audit it and save it in
        one transaction, then send what it decided.

        With a version, a task changed since then raises :class:`~engine.errors.PreconditionFailed`,
        and so does losing a race while saving: the caller decided on what it saw. Without one, a lost
        race is retried on the fresh record.
        """
        allowed = [s.value for s in machine.sources(action.operation)]
        for _ in range(_RETRIES_ON_RACE):
            record = await self.get(order_id)
            if caller.version is not None and record.version != caller.version:
                raise PreconditionFailed(order_id)
            ctx = self.parts.context(record=record)
            if ctx.workflow is None:
                state = record.state
                raise InvalidState(
                    order_id,
                    state.process_state.value,
                    allowed,
                    reason=f"order {order_id} runs workflow {state.workflow} version "
                    f"{state.workflow_version}, which is not deployed; deploy it again to act on the order",
                )
            before = record.state.process_state
            current = record.state.current_step if index is None else index
            step_before = record.steps[current].status if current < len(record.steps) else None
            input_before = dict(record.input)
            decision = action.move(record, ctx, given)
            if decision.outcome is Outcome.REFUSED:
                raise InvalidState(
                    order_id,
                    before.value,
                    allowed,
                    reason=_refusal(
                        record, action.operation, index, allowed, ctx.group(record.state.current_step)
                    ),
                )
            if not decision.changed:
                return record  # allowed and already under way: nothing to do
            record.audit(
                AuditEntry(
                    at=ctx.now,
                    actor=caller.actor,
                    action=action.name,
                    step=record.steps[current].name if current < len(record.steps) else None,
                    process_state_before=before,
                    process_state_after=record.state.process_state,
                    step_state_before=step_before,
                    step_state_after=record.steps[current].status if current < len(record.steps) else None,
                    note=caller.note,
                    detail=action.detail(given, input_before),
                )
            )
            # A span in the order's trace, linked to the request that asked for it: what the action sends
            # stays in the order's trace.
            with tracing.span(
                tracing.OPERATOR_ACTION,
                parent=record.state.trace_parent,
                links=(tracing.traceparent(),),
                attributes={
                    **tracing.task_attributes(record, current),
                    tracing.OPERATION: action.name,
                    "enduser.id": caller.actor,
                },
            ):
                try:
                    saved = await self.parts.store.save(record)
                except ConcurrencyError:
                    if caller.version is not None:
                        raise PreconditionFailed(order_id) from None
                    continue  # the Scheduler moved it meanwhile: look again
                await carry_out(self.parts.sender, decision, saved, self.parts.store)
            telemetry.info(log, action.name, **telemetry.context(order_id), actor=caller.actor)
            return saved
        raise InvalidState(
            order_id,
            record.state.process_state.value,
            allowed,
            reason=f"order {order_id} keeps changing; try again",
        )


def _refusal(
    record: TaskRecord, operation: Operation, index: int | None, allowed: list[str], group: range
) -> str | None:
    """Why a step-level action was refused, in the operator's terms (None: the generic message); ``group``
    is the current step's group (the steps that can be acted on)."""
    if index is None:
        return None
    state = record.state
    current = record.steps[state.current_step]
    waiting = state.process_state is ProcessState.WAITING and current.status is StepStatus.WAITING
    kind = waits.of(state.waiting_for)
    if waiting and index == state.current_step and kind is not None:
        # Refused although the state allows it, for a reason of the wait's kind (an approval past its
        # deadline).
        refused = kind.refusal(operation, current)
        if refused is not None:
            return refused
    if index not in group:
        name = record.steps[index].name
        return f"step {name} is not the current step of order {state.order_id} ({current.name} is)"
    ends = waits.ended_by(operation)  # an operation that ends one kind of wait (approve, reject)
    needs = f"{ends.text} that waits" if ends is not None else "the step in progress"
    return (
        f"order {state.order_id} is {state.process_state.value} ({state.phase.value}) with step "
        f"{current.name} {current.status.value}; {operation.value} needs {' or '.join(allowed)} "
        f"with {needs}"
    )


def same_order(
    stored: TaskRecord, document: dict[str, Any], sent: dict[str, Any] | None, workflow: WorkflowDefinition
) -> bool:
    """Whether a submission whose hash differs from the stored order's is that order all the same: stored
    by another release, whose input model filled other defaults or derived other values. Every value the
    order stored equals this submission's, at every depth, and a value only this submission has is one its
    client did not send (a default or a derived value of this release). Sensitive fields are stored sealed
    or dropped, so only the hash compares them."""
    if sent is None or stored.state.workflow != workflow.name:
        return False
    hidden = set(workflow.sensitive)
    kept = {k: v for k, v in stored.input.items() if k not in hidden}
    ours = {k: v for k, v in document.items() if k not in hidden}
    return _agrees(kept, ours, sent)


def _agrees(stored: Any, ours: Any, sent: Any) -> bool:
    if isinstance(stored, dict) and isinstance(ours, dict):
        given = sent if isinstance(sent, dict) else {}
        for name in stored.keys() | ours.keys():
            if name not in ours:
                return False  # stored, and this release would not store it
            if name not in stored:
                if name in given:
                    return False  # sent now, never stored
                continue  # this release's default or derived value
            if not _agrees(stored[name], ours[name], given.get(name)):
                return False
        return True
    if isinstance(stored, list) and isinstance(ours, list):
        given_items = sent if isinstance(sent, list) and len(sent) == len(ours) else [None] * len(ours)
        return len(stored) == len(ours) and all(map(_agrees, stored, ours, given_items))
    return bool(stored == ours)
