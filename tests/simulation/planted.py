"""Bugs to plant in the engine, each one a line or two away from the real code: the simulation's fixed seeds
must catch every one of them, each by the invariant it names (tests/simulation/test_planted_bugs.py). Each
runs on the pinned catalog it was found on (tests/simulation/catalogs.py): the first eight on the engine-only
workflows, those of conditions, results and steps without undo on the catalog that has them, those of waits
on the catalog with a fraud review and a cancellation window, those of callbacks on that catalog with a
payment that may answer later."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.data.tables import TableTransactionError, UpdateMode
from pydantic import ValidationError

from adapters import table_store
from adapters.table_store import codec, parking
from adapters.table_store.history import History
from adapters.table_store.parking import Parking
from adapters.table_store.search import Search
from engine import queues, supervisor, tracing, transitions
from engine.breaker import BreakerRecord, BreakerState, hold_until
from engine.decisions import REFUSED, UNCHANGED, Decision, Outcome, Outgoing
from engine.errors import ConcurrencyError, EngineError, NotFound
from engine.machine import Operation
from engine.messages import (
    AgentReply,
    AgentRequest,
    CommandKind,
    ReplyOutcome,
    StatusEvent,
    parse_callback_context,
    request_message_id,
)
from engine.scheduler import Scheduler
from engine.state import Phase, ProcessState, StepStatus, TaskRecord
from engine.transitions import Context
from engine.waits import APPROVAL, TIMER
from engine.waits import timer as timer_kind
from engine.workflow import Approval, Timer, Update, WorkflowDefinition
from orders.callbacks import CallbackBody, Callbacks, Refused, Taken, verify
from tests.simulation.moves import replace


def apply_reply_without_attempt_fence(record: TaskRecord, ctx: Context, reply: AgentReply) -> Decision:
    """``transitions.apply_reply`` that checks the step but not the attempt."""
    if record.state.current_step != reply.step_index:
        return REFUSED
    operation = transitions.reply_operation(reply)
    if transitions.allows(operation, record) is None:
        return REFUSED
    if operation is Operation.STEP_SUCCEEDED:
        return transitions.replies._step_succeeded(record, ctx, reply.result, reply.step_index)
    if operation is Operation.STEP_FAILED:
        return transitions.replies._step_failed(record, ctx, reply.error or "step failed", reply.step_index)
    if operation is Operation.COMPENSATION_SUCCEEDED:
        return transitions.compensation._compensation_succeeded(record, ctx)
    return transitions.compensation._compensation_failed(record, ctx, reply.error or "compensation failed")


async def _commit_without_etags(
    self: Scheduler, record: TaskRecord, decision: Decision, *, copy: bool = False
) -> bool:
    """``Scheduler._commit`` that overwrites whatever is stored: it takes the stored ETags before saving."""
    stored = await self.parts.store.load(record.order_id)
    if stored is not None and not stored.archived:
        record.etags = dict(stored.etags)
        record.listed = stored.listed
    return await _original_commit(self, record, decision, copy=copy)


_original_commit = Scheduler._commit
_original_dispatch_compensation = transitions.compensation._dispatch_compensation
_original_recover_expired = transitions.recover_expired


def dispatch_compensation_forward(record: TaskRecord, ctx: Context, start: int) -> Decision:
    """``transitions.compensation._dispatch_compensation`` that undoes the lowest step first."""
    index = next(
        (
            i
            for i in range(len(record.steps))
            if record.steps[i].status in transitions.context._MAY_HAVE_EFFECT and ctx.steps[i].compensation
        ),
        None,
    )
    if index is None:
        return _original_dispatch_compensation(record, ctx, -1)
    return transitions.dispatch._dispatch(record, ctx, index, compensating=True)


def recover_expired_counting_holds(
    record: TaskRecord, ctx: Context, breakers: Mapping[str, BreakerRecord] | None = None
) -> Decision:
    """``transitions.recover_expired`` that also counts a failure when it holds a task for a breaker."""
    decision = _original_recover_expired(record, ctx, breakers)
    if decision.outcome is not Outcome.HELD:
        return decision
    step = record.steps[record.state.current_step]
    step.failures += 1
    record.state.failure_count += 1
    if step.failures >= ctx.settings.supervisor_max_failures:
        return transitions.endings._enter_error(record, ctx, f"{step.failures} failures: held", "supervisor")
    return decision


def recover_expired_without_counting(
    record: TaskRecord, ctx: Context, breakers: Mapping[str, BreakerRecord] | None = None
) -> Decision:
    """``transitions.recover_expired`` without the line that counts a timeout: a step that keeps timing out
    while its service is healthy is given back for another attempt, again and again, never put in Error."""
    state = record.state
    if (
        state.complete_by is None
        or state.complete_by > ctx.now
        or transitions.allows(Operation.KICK, record)
        or transitions.allows(Operation.EXPIRE, record) is None
    ):
        return _original_recover_expired(record, ctx, breakers)
    breaker = (breakers or {}).get(ctx.steps[state.current_step].agent)
    unhealthy = breaker is not None and breaker.state is not BreakerState.CLOSED
    if hold_until(breaker, ctx.now) is not None or state.hold_end is not None or unhealthy:
        return _original_recover_expired(record, ctx, breakers)  # a hold or a release, as before
    step = record.steps[state.current_step]
    retry_at = ctx.now + timedelta(seconds=ctx.settings.backoff(step.failures + 1))
    reason = f"supervisor: retry after failure {step.failures + 1} of {step.name}"
    return transitions.recovery._give_back(record, ctx, retry_at, reason, Outcome.RETRIED)


def extend_step_without_the_change(record: TaskRecord, ctx: Context, index: int, seconds: float) -> Decision:
    """``transitions.extend_step`` that re-sends the request with the later deadline but never moves the
    step's CompleteBy: the operator is answered, the audit entry written, the deadline unchanged."""
    step = record.steps[index] if index < len(record.steps) else None
    if (
        transitions.operator._on_current_step(Operation.EXTEND_STEP, record, ctx, index) is None
        or step is None
        or step.complete_by is None
        or step.complete_by <= ctx.now
        or seconds <= 0
    ):
        return REFUSED
    transitions.context._touch(record, ctx)
    later = step.complete_by + timedelta(seconds=seconds)
    compensating = record.state.phase is Phase.COMPENSATE
    resend = f":until:{later.timestamp():.3f}"
    return Decision(
        Outcome.MOVED, (transitions.dispatch._request(record, ctx, index, compensating, resend=resend),)
    )


def recover_expired_kicking_silently(
    record: TaskRecord, ctx: Context, breakers: Mapping[str, BreakerRecord] | None = None
) -> Decision:
    """``transitions.recover_expired`` whose re-kick of a task waiting for a Scheduler (its command lost)
    moves the task's CompleteBy but sends no command: the Supervisor comes back after every budget, and no
    Scheduler ever claims the task."""
    decision = _original_recover_expired(record, ctx, breakers)
    return Decision(Outcome.KICKED) if decision.outcome is Outcome.KICKED else decision


# ---- conditions, results passed on, steps without undo ----------------------------------------------
def dispatch_forward_ignoring_conditions(record: TaskRecord, ctx: Context) -> Decision:
    """``transitions.forward._dispatch_forward`` from before conditions: the first step not done runs,
    whatever its condition says."""
    index = next((i for i, s in enumerate(record.steps) if s.status not in transitions.context._DONE), None)
    if index is None:
        return transitions.endings._finish(record, ctx, ProcessState.PROCESSED, StatusEvent.PROCESSED)
    return transitions.dispatch._dispatch(record, ctx, index, compensating=False)


def dispatch_compensation_of_every_step(record: TaskRecord, ctx: Context, start: int) -> Decision:
    """``transitions.compensation._dispatch_compensation`` that undoes every step that may have had an effect,
    one without an undo action too (:func:`request_undoing_by_the_action` sends it)."""
    index = next(
        (
            i
            for i in range(min(start, len(record.steps) - 1), -1, -1)
            if record.steps[i].status in transitions.context._MAY_HAVE_EFFECT
        ),
        None,
    )
    if index is None:
        return _original_dispatch_compensation(record, ctx, -1)
    wait = record.steps[index].undo_not_before
    if wait is not None and wait > ctx.now:
        return transitions.compensation._undo_later(record, ctx, index, wait)
    return transitions.dispatch._dispatch(record, ctx, index, compensating=True)


def request_undoing_by_the_action(
    record: TaskRecord, ctx: Context, index: int, compensating: bool, resend: str = ""
) -> Outgoing:
    """``transitions.dispatch._request`` whose undo of a step without an undo action is the step's action
    again."""
    definition = ctx.steps[index]
    if not compensating or definition.compensation is not None:
        return _original_request(record, ctx, index, compensating, resend)
    step = record.steps[index]
    assert step.complete_by is not None
    body = AgentRequest(
        order_id=record.order_id,
        workflow=record.state.workflow,
        workflow_version=record.state.workflow_version,
        step=definition.name,
        step_index=index,
        attempt=step.compensation_attempts,
        compensating=True,
        action=definition.action,
        idempotency_key=f"{record.order_id}:{definition.name}",
        complete_by=step.complete_by,
        payload=transitions.document(record, index),
    )
    return Outgoing(
        queue=queues.agent_queue(definition.agent),
        body=body,
        message_id=request_message_id(record.order_id, index, True, step.compensation_attempts) + resend,
        correlation_id=record.order_id,
        reply_to=queues.REPLY_QUEUE,
        time_to_live_seconds=max((step.complete_by - ctx.now).total_seconds(), 0.001),
    )


def cancel_waiting_only_for_steps_with_undo(record: TaskRecord, ctx: Context) -> Decision:
    """``transitions.cancel`` that waits only for a running step it will undo: a step without undo is
    never undone, so why wait for it? Because the steps before it are undone meanwhile, and it lands after."""
    rule = transitions.allows(Operation.CANCEL, record)
    if rule is None:
        return REFUSED
    if not rule.changes:
        return UNCHANGED
    state = record.state
    if not any(s.status is not StepStatus.NOT_STARTED for s in record.steps):
        state.phase = Phase.COMPENSATE
        return transitions.endings._finish(record, ctx, ProcessState.COMPENSATED, StatusEvent.COMPENSATED)
    running = [
        s.complete_by
        for i, s in enumerate(record.steps)
        if s.status is StepStatus.RUNNING and s.complete_by and ctx.steps[i].compensation
    ]
    resume_at = max([ctx.now, *(transitions.settled(complete_by, ctx) for complete_by in running)])
    state.phase = Phase.COMPENSATE
    state.process_state = ProcessState.COMPENSATING
    transitions.context._fresh_failure_counts(record)
    state.locked_by = None
    state.next_attempt_at = resume_at
    state.complete_by = resume_at + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    state.current_step = max(i for i, s in enumerate(record.steps) if s.status is not StepStatus.NOT_STARTED)
    transitions.context._touch(record, ctx)
    at = resume_at if resume_at > ctx.now else None
    return transitions.context._moved(
        transitions.status(record, ctx, StatusEvent.COMPENSATING, detail="cancelled"),
        transitions.command(state.order_id, CommandKind.RESUME, "cancel", at=at, new_id=ctx.new_id),
    )


def document_without_the_step_s_own_values(
    record: TaskRecord, upto: int, before: int | None = None
) -> dict[str, Any]:
    """``transitions.document`` that merges the values of the steps before ``upto`` only (before its group,
    for a step of one): a forward call misses nothing (its step has returned nothing yet), but an undo no
    longer names what it undoes."""
    results: dict[str, Any] = {}
    for step in record.steps[: upto if before is None else before]:
        if step.result:
            results.update(step.result)
    return {"input": record.input, "results": results}


_SHARED: dict[str, Any] = {}


def document_with_one_dict_for_every_order(
    record: TaskRecord, upto: int, before: int | None = None
) -> dict[str, Any]:
    """``transitions.document`` whose results dict outlives the call (a mutable default, a cache keyed by
    nothing): an order's own values overwrite another's, but a value it lacks comes from another order."""
    steps = record.steps[: upto + 1] if before is None else [*record.steps[:before], record.steps[upto]]
    for step in steps:
        if step.result:
            _SHARED.update(step.result)
    return {"input": record.input, "results": _SHARED}


_original_request = transitions.dispatch._request


# ---- waits -------------------------------------------------------------------------------------------
def wake_whatever_its_time(record: TaskRecord, ctx: Context, index: int, attempt: int) -> Decision:
    """``transitions.wake`` without its look at the time: a wake-up for the current wait ends it, whenever
    it comes (one delivered early, one scheduled before an extend)."""
    if record.state.attempt != attempt or not transitions.waiting._waiting(record, ctx, index, TIMER):
        return REFUSED
    if transitions.allows(Operation.WAKE, record) is None:
        return REFUSED
    return transitions.wait_ends._end_wait(record, ctx, "timer due", scheduler=True)


def reject_as_approve(record: TaskRecord, ctx: Context, index: int, reason: str) -> Decision:
    """``transitions.reject`` written from ``approve``: the decision is recorded in the step's reason, and
    the wait ends as an approved one does (the order goes on)."""
    if (
        not transitions.waiting._waiting(record, ctx, index, APPROVAL)
        or transitions.allows(Operation.REJECT, record) is None
    ):
        return REFUSED
    return transitions.wait_ends._end_wait(
        record, ctx, f"rejected: {reason}" if reason else "rejected", scheduler=False
    )


def cancel_leaving_the_wait(record: TaskRecord, ctx: Context) -> Decision:
    """``transitions.cancel`` as it was before waits: it undoes the steps before a wait, but leaves the wait
    itself Waiting (the undo passes over it: it has nothing to undo)."""
    waiting = [step for step in record.steps if step.status is StepStatus.WAITING]
    decision = _original_cancel(record, ctx)
    for step in waiting:
        if step.status is StepStatus.FAILED:
            step.status, step.last_error = StepStatus.WAITING, None
    transitions.context._touch(record, ctx)
    return decision


_original_cancel = transitions.cancel


def approve_any_wait(record: TaskRecord, ctx: Context, index: int) -> Decision:
    """``transitions.approve`` that checks that the step waits and its time has not come, not what it waits
    for (nor the table's guard on it): an approve ends a timer too."""
    step = record.steps[index] if index < len(record.steps) else None
    if index != record.state.current_step or step is None or step.status is not StepStatus.WAITING:
        return REFUSED
    if transitions.deadline_passed(record, ctx):
        return REFUSED
    return transitions.wait_ends._end_wait(record, ctx, "approved", scheduler=False)


# ---- callbacks ---------------------------------------------------------------------------------------
async def receive_without_the_attempt_fence(
    self: Callbacks, service: str, headers: Mapping[str, str], body: bytes
) -> Taken | Refused:
    """``Callbacks.receive`` whose fence compares the step and the phase, not the attempt: a callback is
    taken for whichever dispatch of its step the order waits for (the Scheduler still fences its reply)."""
    declared = self.services.get(service)
    secret = self.secrets.get(service)
    if declared is None or secret is None:
        return Refused(404, "NotFound", f"service {service!r} sends no callbacks here")
    refused = verify(headers, body, secret, self._clock())
    if refused is not None:
        return refused
    try:
        callback = CallbackBody.model_validate(json.loads(body))
    except (ValueError, ValidationError, RecursionError):
        return Refused(400, "ValidationFailed", "the body is not a callback: see CallbackBody")
    dispatch = parse_callback_context(callback.context)
    if dispatch is None:
        return Refused(400, "ValidationFailed", "the context is not one this app sent")
    order_id, index, compensating, attempt = dispatch
    tasks = await self._tasks()
    try:
        record = await tasks.get(order_id)
    except NotFound:
        return Refused(404, "NotFound", f"no order {order_id}")
    except EngineError as exc:
        return Refused(409, "Conflict", str(exc))
    state = record.state
    step = record.steps[index] if index < len(record.steps) else None
    awaited = (StepStatus.COMPENSATING,) if compensating else (StepStatus.RUNNING, StepStatus.WAITING)
    current = (
        step is not None
        and state.current_step == index
        and (state.phase is Phase.COMPENSATE) == compensating
        and step.status in awaited
    )
    workflow = tasks.parts.catalog.find(state.workflow, state.workflow_version)
    definition = workflow.steps[index] if workflow is not None and index < len(workflow.steps) else None
    if not current or definition is None or definition.agent != service:
        return Refused(409, "Conflict", f"order {order_id} does not wait for this callback")
    reply = self._reply(declared, definition.action or "", callback, dispatch)
    message_id = request_message_id(order_id, index, compensating, attempt) + ":callback"
    await tasks.parts.sender.send(queues.REPLY_QUEUE, reply, message_id=message_id, correlation_id=order_id)
    return Taken(reply)


def reply_operation_taking_accepted_for_done(reply: AgentReply) -> Operation:
    """``transitions.reply_operation`` as a reply's outcome was read before services could answer later:
    anything but a failure is a success, so a 202 completes the step (with no result)."""
    succeeded = reply.outcome is not ReplyOutcome.FAILED
    if reply.compensating:
        return Operation.COMPENSATION_SUCCEEDED if succeeded else Operation.COMPENSATION_FAILED
    return Operation.STEP_SUCCEEDED if succeeded else Operation.STEP_FAILED


def cancel_waiting_for_running_steps_only(record: TaskRecord, ctx: Context) -> Decision:
    """``transitions.cancel`` as it was before services could answer later: it waits for the steps running,
    not for one waiting for its callback, whose wait ends at once while the service may still be deciding."""
    rule = transitions.allows(Operation.CANCEL, record)
    if rule is None:
        return REFUSED
    if not rule.changes:
        return UNCHANGED
    state = record.state
    if not any(s.status is not StepStatus.NOT_STARTED for s in record.steps):
        state.phase = Phase.COMPENSATE
        return transitions.endings._finish(record, ctx, ProcessState.COMPENSATED, StatusEvent.COMPENSATED)
    for step in record.steps:
        if step.status is StepStatus.WAITING:
            step.status = StepStatus.FAILED
            step.last_error = "cancelled while waiting"
    running = [s.complete_by for s in record.steps if s.status is StepStatus.RUNNING and s.complete_by]
    resume_at = max([ctx.now, *(transitions.settled(complete_by, ctx) for complete_by in running)])
    state.phase = Phase.COMPENSATE
    state.process_state = ProcessState.COMPENSATING
    transitions.context._fresh_failure_counts(record)
    state.locked_by = None
    state.next_attempt_at = resume_at
    state.complete_by = resume_at + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    state.current_step = max(i for i, s in enumerate(record.steps) if s.status is not StepStatus.NOT_STARTED)
    transitions.context._touch(record, ctx)
    at = resume_at if resume_at > ctx.now else None
    return transitions.context._moved(
        transitions.status(record, ctx, StatusEvent.COMPENSATING, detail="cancelled"),
        transitions.command(state.order_id, CommandKind.RESUME, "cancel", at=at, new_id=ctx.new_id),
    )


def _undo_every_step(mp: pytest.MonkeyPatch) -> None:
    replace(mp, transitions.compensation, "_dispatch_compensation", dispatch_compensation_of_every_step)
    replace(mp, transitions.dispatch, "_request", request_undoing_by_the_action)


# ---- parking (the state store's parked orders; on the pinned catalog WAITS, whose waits park) ------------
async def mark_parking_without_writing(self: Parking, record: TaskRecord) -> bool:
    """``Parking._mark_parking`` that writes no mark: two Supervisors that loaded the task both park
    it (the bug ``make demo`` found before the mark existed)."""
    return True


async def unpark_dropping_the_copy_first(self: Parking, record: TaskRecord) -> TaskRecord:
    """``Parking.unpark`` that replaces the parked copy by its marker before it inserts the live
    records (instead of claiming the copy and replacing it once they are in): between the two, and for good
    if its process dies there, the order is in neither place."""
    order_id, pk = record.order_id, self._pk(record.order_id)
    etag = record.etags.get(table_store._archive_key(order_id))
    if etag is None:
        raise ConcurrencyError(order_id)
    parked = {
        "IndexKey": record.listed,
        "WaitingFor": table_store._listed_wait(record.listed or ""),
        "CreatedAt": record.state.created_at,
    }
    trail = await self._audit_rows(self._history(), order_id, table_store.HISTORY) if record.audited else []
    if not await self._remove_parked(pk, order_id, etag, parked):
        raise ConcurrencyError(order_id)
    state_entity = self.codec.state_entity(record)
    listed = self.codec.listing_key_of(record)
    state_entity["IndexKey"] = listed
    entry = {**state_entity, "RowKey": listed, "Kind": "index"}
    del entry["Watched"]
    audits = [dict(e) for e in trail] + [
        self.codec.audit_entity(order_id, e, n) for n, e in enumerate(record.pending_audit())
    ]
    operations: list[Any] = [
        ("create", self.codec.input_entity(record)),
        ("create", state_entity),
        *(("create", self.codec.step_entity(order_id, s)) for s in record.steps),
        ("create", entry),
        *(("create", a) for a in audits),
    ]
    if state_entity["Watched"]:
        await self.watches.put(record.state)
    try:
        results = await self._transact(self.table, operations)
    except TableTransactionError as exc:
        if exc.status_code != 409:
            raise
        raise ConcurrencyError(order_id) from exc
    record.etags = {}
    for (_, entity), result in zip(operations, results, strict=False):
        if entity.get("Kind") in ("state", "step", "input"):
            record.etags[entity["RowKey"]] = result["etag"]
    await self._delete_rows(pk, [e["RowKey"] for e in trail])
    record.parked = record.audited = False
    record.indexed = bool(state_entity["Watched"])
    record.listed = listed
    record.mark_saved()
    return record


async def promote_dropping_entries(self: Parking, now: datetime, horizon: float, limit: int = 1000) -> int:
    """``Parking.promote`` that deletes the calendar's due entries without bringing their orders
    back (it counts them as brought back): a parked order is then never brought back by its time."""
    history = self._history()
    try:
        cursor = await history.get_entity(table_store.CALENDAR, "cursor")
        if cursor["NextAt"] > now:
            return 0
    except ResourceNotFoundError:
        pass
    query = history.query_entities(
        table_store._RANGE,
        parameters={
            "pk": table_store.CALENDAR,
            "lo": "0",
            "hi": table_store._stamp(now + timedelta(seconds=horizon)),
        },
        select=["RowKey", "OrderID"],
        results_per_page=limit,
    ).by_page()
    due = [entity async for entity in await anext(query, table_store._empty_page())][:limit]
    for entity in due:
        with contextlib.suppress(ResourceNotFoundError):
            await history.delete_entity(table_store.CALENDAR, entity["RowKey"])
    await history.upsert_entity(
        {
            "PartitionKey": table_store.CALENDAR,
            "RowKey": "cursor",
            "NextAt": now + timedelta(seconds=horizon / 2),
        },
        mode=UpdateMode.REPLACE,
    )
    return len(due)


def _without_if_match(mp: pytest.MonkeyPatch) -> None:
    """Every unit of the state store that writes conditionally without the match condition (its
    ``_IF_MATCH`` empty)."""
    for module in vars(table_store).values():
        if isinstance(module, types.ModuleType) and hasattr(module, "_IF_MATCH"):
            mp.setattr(module, "_IF_MATCH", {})


# ---- groups: steps side by side ---------------------------------------------------------------------
_STEP_SUCCEEDED = transitions.replies._step_succeeded


def step_succeeded_joining_at_the_first(
    record: TaskRecord, ctx: Context, result: dict[str, Any], index: int
) -> Decision:
    """``transitions.replies._step_succeeded`` whose join moves on when the first step of a group completes:
    the step after the group is dispatched while the others of the group still run."""
    group = ctx.group(index)
    after = group.stop
    if (
        not ctx.grouped(index)
        or not transitions.groups._group_in_flight(record, ctx, index)
        or after >= len(record.steps)
        or record.steps[after].status is not StepStatus.NOT_STARTED
        or ctx.steps[after].wait is not None
    ):
        return _STEP_SUCCEEDED(record, ctx, result, index)
    step = record.steps[index]
    step.status = StepStatus.COMPLETED
    step.result = result
    step.last_error = None
    step.retry_at = None
    done = transitions.status(record, ctx, StatusEvent.STEP_COMPLETED, step=step.name, index=index)
    moved = transitions.dispatch._dispatch(
        record, ctx, after, compensating=False
    )  # the join moves on at once
    transitions.groups._at_group(record, ctx, group)
    return moved.after(done)


def group_failed_without_settling(record: TaskRecord, ctx: Context, index: int, error: str) -> Decision:
    """``transitions.groups._group_failed`` that does not let the others of the group settle: the undo is
    resumed at once, while a step of the group still in flight may land after its own undo."""
    state = record.state
    group = ctx.group(index)
    for i in group:
        step = record.steps[i]
        if step.status is StepStatus.WAITING:
            step.status = StepStatus.FAILED
            step.last_error = "undone with its group"
        step.retry_at = None
    state.phase, state.process_state = Phase.COMPENSATE, ProcessState.COMPENSATING
    state.locked_by = None
    state.next_attempt_at = ctx.now  # no wait for the CompleteBy (and grace) of the steps in flight
    state.complete_by = ctx.now + timedelta(seconds=ctx.settings.step_complete_by_seconds)
    state.current_step = group.stop - 1
    state.attempt = record.steps[group.stop - 1].compensation_attempts
    transitions.context._touch(record, ctx)
    name = record.steps[index].name
    return Decision(
        Outcome.MOVED,
        (
            transitions.status(record, ctx, StatusEvent.COMPENSATING, step=name, detail=error, index=index),
            transitions.command(state.order_id, CommandKind.RESUME, f"{name} failed", new_id=ctx.new_id),
        ),
    )


def step_failed_undoing_from_itself(record: TaskRecord, ctx: Context, error: str, index: int) -> Decision:
    """``transitions.replies._step_failed`` whose undo starts at the failed step, not at the last of its
    group: the steps of the group declared after it are never undone."""
    step = record.steps[index]
    step.status = StepStatus.FAILED
    step.last_error = error
    step.retry_at = None
    record.state.last_error = f"{step.name}: {error}"
    record.state.phase = Phase.COMPENSATE
    record.state.process_state = ProcessState.COMPENSATING
    transitions.context._fresh_failure_counts(record)
    if transitions.groups._group_in_flight(record, ctx, index):
        decision = transitions.groups._group_failed(record, ctx, index, error)
        record.state.current_step = index  # the undo resumes at the failed step
        record.state.attempt = step.compensation_attempts
        return decision
    grouped = index if ctx.grouped(index) else None
    compensating = transitions.status(
        record, ctx, StatusEvent.COMPENSATING, step=step.name, detail=error, index=grouped
    )
    return transitions.compensation._dispatch_compensation(record, ctx, start=index).after(compensating)


class _SweepTracing:
    """``engine.tracing`` as the Supervisor would see it had it opened each recovery under its sweep: the
    span the order keeps is passed over, so what the recovery sends leaves the order's trace."""

    def __getattr__(self, name: str) -> Any:
        return getattr(tracing, name)

    @staticmethod
    def span(name: str, *args: Any, parent: str | None = None, **kwargs: Any) -> Any:
        return tracing.span(name, *args, **kwargs)


_MARK = History.mark


async def mark_taking_a_row_for_a_mark(self: History, state: Any) -> str | None:
    """``History.mark`` that answers as if its insert went in when the id's row was there: the
    submission takes the id for one the history never had, and writes the task without reading it."""
    return await _MARK(self, state) or "refused"


# ---- search entries and storefronts (the declared catalog: only its runs have them) -------------------
async def write_search_doing_nothing(self: Search, state: Any) -> None:
    """``Search.write_entries`` that writes nothing: the order is never found by a search."""


async def delete_search_doing_nothing(self: Search, pk: str, keys: list[str]) -> None:
    """``Search.delete_entries`` that deletes nothing: a purged order's entries stay."""


_SEARCH_KEYED = Search._search_keyed


async def search_keyed_ignoring_the_storefront(
    self: Search, query: Any, page_size: int, continuation: str | None
) -> Any:
    """``Search._search_keyed`` without its storefront condition: a storefront's search answers
    another storefront's order of the same customer."""
    return await _SEARCH_KEYED(self, query.model_copy(update={"storefront": None}), page_size, continuation)


_STATUS = transitions.status


def status_to_the_shared_queue(*args: Any, **kwargs: Any) -> Outgoing:
    """``transitions.status`` that sends every status to the shared queue, a storefront's order's too."""
    return dataclasses.replace(_STATUS(*args, **kwargs), queue=queues.STATUS_QUEUE)


# ---- groups, on the declared catalog (returns version 2 settles a return in a group) -------------------
def dispatch_compensation_stopping_at_the_group(record: TaskRecord, ctx: Context, start: int) -> Decision:
    """``transitions.compensation._dispatch_compensation`` that ends the undo once a group is undone: the
    steps before the group stay applied, the order says Compensated."""
    if 0 <= start + 1 < len(record.steps) and ctx.grouped(start + 1) and not ctx.grouped(start):
        record.state.phase = Phase.COMPENSATE
        return transitions.endings._finish(record, ctx, ProcessState.COMPENSATED, StatusEvent.COMPENSATED)
    return _original_dispatch_compensation(record, ctx, start)


def request_with_the_group_s_key(
    record: TaskRecord, ctx: Context, index: int, compensating: bool, resend: str = ""
) -> Outgoing:
    """``transitions.dispatch._request`` whose steps of a group all call under the key of the group's first
    step (the group's request copied for each step)."""
    outgoing = _original_request(record, ctx, index, compensating, resend)
    if not ctx.grouped(index) or not isinstance(outgoing.body, AgentRequest):
        return outgoing
    first = ctx.steps[ctx.group(index).start].name
    body = outgoing.body.model_copy(update={"idempotency_key": f"{record.order_id}:{first}"})
    return dataclasses.replace(outgoing, body=body)


# ---- parking and the calendar -----------------------------------------------------------------------
async def file_nothing(self: Parking, state: Any) -> None:
    """``Parking._file`` that puts no calendar entry: the parked order is brought back only on
    demand."""


def calendar_entity_a_day_late(state: Any) -> dict[str, Any]:
    """``calendar_entity`` (as :mod:`adapters.table_store.parking` files a parked order) a day after the wait
    ends (a unit slipped): the calendar brings the order back far too late, an approval nobody decides never
    expires."""
    entity = dict(_CALENDAR_ENTITY(state))
    due = state.wait_until or state.complete_by
    entity["RowKey"] = f"{table_store._stamp(due + timedelta(days=1))}|{state.order_id}"
    return entity


_CALENDAR_ENTITY = codec.calendar_entity


# ---- the move to the history --------------------------------------------------------------------------
async def archive_deleting_the_live_records_first(self: History, record: TaskRecord) -> bool:
    """``History.archive`` that deletes the live records before it writes the history: in between
    (and for good if its process dies there) the finished order is nowhere."""
    if record.archived:
        return True
    order_id, pk = record.order_id, self._pk(record.order_id)
    trail = await self._audit_rows(self.table, order_id, table_store.STATE)
    archive, listing = self.codec.archive_entities(record, audited=bool(trail))
    copies = [("upsert", dict(e), {"mode": UpdateMode.REPLACE}) for e in trail]
    if not await self.delete_live(record, trail):
        return False
    return await self._write_archive(pk, order_id, archive, listing, copies)


_ARCHIVE = History.archive


async def archive_leaving_the_trail(self: History, record: TaskRecord) -> bool:
    """``History.archive`` whose delete of the live records leaves the audit entries it copied."""
    rows = self._audit_rows

    async def none(*args: Any) -> list[Any]:
        return []

    trail = await rows(self.table, record.order_id, table_store.STATE)
    if record.archived:
        return True
    archive, listing = self.codec.archive_entities(record, audited=bool(trail))
    copies = [("upsert", dict(e), {"mode": UpdateMode.REPLACE}) for e in trail]
    if not await self._write_archive(self._pk(record.order_id), record.order_id, archive, listing, copies):
        return False
    return await self.delete_live(record, await none())


# ---- callbacks ---------------------------------------------------------------------------------------
_REPLY = Callbacks._reply


def reply_taking_a_refusal_for_done(*args: Any) -> AgentReply:
    """``Callbacks._reply`` that reads a refused callback as done: the step completes on a payment the
    service refused."""
    reply = _REPLY(*args)
    if reply.outcome is ReplyOutcome.FAILED:
        return reply.model_copy(update={"outcome": ReplyOutcome.SUCCEEDED, "error": None})
    return reply


def reply_without_the_result(*args: Any) -> AgentReply:
    """``Callbacks._reply`` that passes on none of the values the service called back with."""
    return _REPLY(*args).model_copy(update={"result": {}})


# ---- approvals and timers ----------------------------------------------------------------------------
def wait_expired_leaving_approvals(record: TaskRecord, ctx: Context) -> Decision:
    """``transitions.recovery._wait_expired`` that applies no approval's deadline: an approval nobody decides
    waits for ever."""
    if isinstance(ctx.steps[record.state.current_step].wait, Approval):
        return REFUSED
    return _WAIT_EXPIRED(record, ctx)


_WAIT_EXPIRED = transitions.recovery._wait_expired
_TIMER_DUE = timer_kind.timer_due


def timer_due_twice_its_setting(record: TaskRecord, timer: Timer, ctx: Context) -> datetime:
    """``engine.waits.timer.timer_due`` that adds the timer's duration twice: the window stays open twice as
    long."""
    due = _TIMER_DUE(record, timer, ctx)
    return due + (due - ctx.now) if timer.until is None else due


# ---- updates of a running order ------------------------------------------------------------------------
def open_updates_whatever_the_fence(record: TaskRecord, workflow: WorkflowDefinition) -> list[Update]:
    """``transitions.operator.open_updates`` that looks at the order's state but not at the step that reads
    the field: an update lands after the shipment started, and its retry carries another address."""
    if transitions.allows(Operation.UPDATE_INPUT, record) is None:
        return []
    return list(workflow.updates)


# ---- conditions and carried results -------------------------------------------------------------------
def dispatch_forward_judging_without_the_input(record: TaskRecord, ctx: Context) -> Decision:
    """``transitions.forward._dispatch_forward`` whose conditions read the results but not the input (the
    document built before the input was put in): a shipment of physical goods is left out."""
    original = transitions.context.document

    def without_input(record: TaskRecord, upto: int, before: int | None = None) -> dict[str, Any]:
        return {**original(record, upto, before), "input": {}}

    with pytest.MonkeyPatch.context() as mp:
        replace(mp, transitions.context, "document", without_input)
        return _DISPATCH_FORWARD(record, ctx)


_DISPATCH_FORWARD = transitions.forward._dispatch_forward


def step_succeeded_without_its_result(
    record: TaskRecord, ctx: Context, result: dict[str, Any], index: int
) -> Decision:
    """``transitions.replies._step_succeeded`` that records no result: the values a later step or an undo
    needs are never passed on."""
    return _STEP_SUCCEEDED(record, ctx, {}, index)


@dataclass(frozen=True)
class Plant:
    """A bug to plant, words of the violation by which the invariant about its consequence reports it (the
    first violation of the seed that catches it), the fixed seed that catches it first (searching them in
    order), and the pinned catalog it runs on."""

    put: Callable[[pytest.MonkeyPatch], None]
    breaks: str
    catalog: str | None = "engine-only"  # None: the declared catalog
    # Tried alone, so that a plant costs one short run, not every seed before it; when an engine change
    # makes it drift, the test searches the fixed seeds in order as before and names the seed to write here.
    seed: int = dataclasses.field(kw_only=True)


PLANTS: dict[str, Plant] = {
    "reply accepted without its attempt's fence": Plant(
        # Seed 14 by "never reported" until the steps kept their calls; now seed 0, by its records.
        lambda mp: replace(mp, transitions.replies, "apply_reply", apply_reply_without_attempt_fence),
        "its records show no call of attempt",
        seed=0,
    ),
    "the Scheduler saves without the ETag condition": Plant(
        lambda mp: mp.setattr(Scheduler, "_commit", _commit_without_etags),
        "no transition",
        seed=0,
    ),
    "compensation in forward order": Plant(
        lambda mp: replace(
            mp, transitions.compensation, "_dispatch_compensation", dispatch_compensation_forward
        ),
        "was still applied",
        seed=2,
    ),
    "a breaker hold counted as a failure": Plant(
        lambda mp: replace(mp, transitions.recovery, "recover_expired", recover_expired_counting_holds),
        "the policy needs",
        seed=9,
    ),
    "a timeout the Supervisor does not count": Plant(
        lambda mp: replace(mp, transitions.recovery, "recover_expired", recover_expired_without_counting),
        "the policy puts it in Error",
        seed=0,
    ),
    "an extend answered as done that moves nothing": Plant(
        lambda mp: replace(mp, transitions.operator, "extend_step", extend_step_without_the_change),
        "was saved as done, but its CompleteBy",
        seed=4,
    ),
    "the state store's writes without If-Match": Plant(
        # An ETag passed without its match condition: azure-data-tables then sends the write unconditionally.
        # Since a new task is written claimed, the first race it loses is the history's tally: two moves of
        # a shard's orders write it over each other, and it no longer counts what the history holds.
        lambda mp: _without_if_match(mp),
        "the tally says",
        seed=1,
    ),
    "a re-kick that sends no command": Plant(
        lambda mp: replace(mp, transitions.recovery, "recover_expired", recover_expired_kicking_silently),
        "at its bound",
        seed=9,
    ),
    "conditions ignored": Plant(
        lambda mp: replace(
            mp, transitions.forward, "_dispatch_forward", dispatch_forward_ignoring_conditions
        ),
        "its condition does not hold",
        "constructs",
        seed=0,
    ),
    "a step without undo undone by its action": Plant(
        _undo_every_step,
        "cannot be undone, but an undo of it was dispatched",
        "constructs",
        seed=0,
    ),
    "a cancel that does not wait for a running step without undo": Plant(
        lambda mp: replace(mp, transitions.operator, "cancel", cancel_waiting_only_for_steps_with_undo),
        "which cannot be undone, was applied after an undo",
        "constructs",
        seed=0,
    ),
    "an undo without its step's own values": Plant(
        lambda mp: replace(mp, transitions.context, "document", document_without_the_step_s_own_values),
        "a result passed on is not the one returned",
        "constructs",
        seed=0,
    ),
    "one results dict for every order": Plant(
        lambda mp: replace(mp, transitions.context, "document", document_with_one_dict_for_every_order),
        "a result passed on is not the one returned",
        "constructs",
        seed=0,
    ),
    "a timer ended whatever its time": Plant(
        lambda mp: replace(mp, transitions.wait_ends, "wake", wake_whatever_its_time),
        "nothing runs before its timer",
        "waits",
        seed=2,
    ),
    "a reject that lets the order go on": Plant(
        lambda mp: replace(mp, transitions.wait_ends, "reject", reject_as_approve),
        "a rejected or expired approval never reaches the next step",
        "waits",
        seed=0,
    ),
    "a cancel that leaves the wait waiting": Plant(
        lambda mp: replace(mp, transitions.operator, "cancel", cancel_leaving_the_wait),
        "with a wait under way",
        "waits",
        seed=0,
    ),
    "an approve that ignores the wait's kind": Plant(
        lambda mp: replace(mp, transitions.wait_ends, "approve", approve_any_wait),
        "nothing runs before its timer",
        "waits",
        seed=0,
    ),
    "a callback route without the attempt's fence": Plant(
        lambda mp: mp.setattr(Callbacks, "receive", receive_without_the_attempt_fence),
        "but the order never waited for it meanwhile",
        "callbacks",
        seed=4,
    ),
    "an accepted call taken for a done one": Plant(
        lambda mp: replace(
            mp, transitions.replies, "reply_operation", reply_operation_taking_accepted_for_done
        ),
        # The step completes on the 202, with no result: its action never reported succeeded.
        "never reported succeeded",
        "callbacks",
        seed=0,
    ),
    "a cancel that does not wait for a callback": Plant(
        lambda mp: replace(mp, transitions.operator, "cancel", cancel_waiting_for_running_steps_only),
        "the undo did not wait for the callback",
        "callbacks",
        seed=2,
    ),
    "a park without its mark": Plant(
        lambda mp: mp.setattr(Parking, "_mark_parking", mark_parking_without_writing),
        "an order in neither place",
        "waits",
        seed=1,
    ),
    "a return that drops the parked copy before the live records are in": Plant(
        lambda mp: mp.setattr(Parking, "unpark", unpark_dropping_the_copy_first),
        "an order in neither place",
        "waits",
        seed=1,
    ),
    "a promotion that drops the calendar's entries": Plant(
        lambda mp: mp.setattr(Parking, "promote", promote_dropping_entries),
        "a parked order forgotten",
        "waits",
        seed=1,
    ),
    # groups (tests/simulation/test_groups.py, on the seeds it names)
    "a recovery traced under the sweep, not the order": Plant(
        lambda mp: mp.setattr(supervisor, "tracing", _SweepTracing()),
        "supervisor.recover span",
        seed=0,
    ),
    "a submission that takes a refused mark for its own": Plant(
        # A submission of a finished id writes a second task: the order runs again.
        lambda mp: mp.setattr(History, "mark", mark_taking_a_row_for_a_mark),
        "became Completed again",
        seed=2,
    ),
    "a join that moves on at the first step of a group": Plant(
        lambda mp: replace(mp, transitions.replies, "_step_succeeded", step_succeeded_joining_at_the_first),
        "before its group's steps had all completed",
        "groups",
        seed=0,
    ),
    "a group failure that does not let the others settle": Plant(
        lambda mp: replace(mp, transitions.groups, "_group_failed", group_failed_without_settling),
        # The charge beside the failed step is still being decided when its undo reaches the payment.
        "the undo did not wait for the callback",
        "groups",
        seed=2,
    ),
    "a group failure that undoes from the failed step only": Plant(
        lambda mp: replace(mp, transitions.replies, "_step_failed", step_failed_undoing_from_itself),
        "was still applied",
        "groups",
        seed=2,
    ),
    # search entries and storefronts, on the declared catalog (the seeds of the pinned ones have neither)
    "a submission that writes no search entries": Plant(
        lambda mp: mp.setattr(Search, "write_entries", write_search_doing_nothing),
        "written at submission",
        None,
        seed=0,
    ),
    "a purge that leaves the search entries": Plant(
        lambda mp: mp.setattr(Search, "delete_entries", delete_search_doing_nothing),
        "outlived its order's purge",
        None,
        seed=1,
    ),
    "a search that ignores the storefront": Plant(
        lambda mp: mp.setattr(Search, "_search_keyed", search_keyed_ignoring_the_storefront),
        "a search never answers an order that does not match",
        None,
        seed=1,
    ),
    "a storefront's status sent to the shared queue": Plant(
        lambda mp: replace(mp, transitions.context, "status", status_to_the_shared_queue),
        "receives only its own orders' statuses",
        None,
        seed=0,
    ),
    "storefront ids not scoped": Plant(
        lambda mp: mp.setattr(queues, "scoped_id", lambda order_id, submitter: order_id),
        "a task the client never submitted was written",
        None,
        seed=0,
    ),
    # the constructs of the last round, on the declared catalog
    "an undo that stops at its group": Plant(
        lambda mp: replace(
            mp,
            transitions.compensation,
            "_dispatch_compensation",
            dispatch_compensation_stopping_at_the_group,
        ),
        "still applied",
        None,
        seed=0,
    ),
    "the steps of a group calling under one key": Plant(
        lambda mp: replace(mp, transitions.dispatch, "_request", request_with_the_group_s_key),
        "the key of no step",
        None,
        seed=0,
    ),
    "a park that files no calendar entry": Plant(
        lambda mp: mp.setattr(Parking, "_file", file_nothing),
        "a parked order forgotten",
        None,
        seed=1,
    ),
    "a calendar entry a day late": Plant(
        lambda mp: mp.setattr(parking, "calendar_entity", calendar_entity_a_day_late),
        "a parked order brought back late",
        None,
        seed=1,
    ),
    "a move to the history that deletes the live records first": Plant(
        lambda mp: mp.setattr(History, "archive", archive_deleting_the_live_records_first),
        "a finished order in neither place",
        None,
        seed=0,
    ),
    "a move to the history that leaves the audit entries": Plant(
        lambda mp: mp.setattr(History, "archive", archive_leaving_the_trail),
        "audit entries left in the live table",
        None,
        seed=0,
    ),
    "a callback's refusal taken for done": Plant(
        lambda mp: mp.setattr(Callbacks, "_reply", staticmethod(reply_taking_a_refusal_for_done)),
        # The route hands the Scheduler a success for a callback that said refused.
        "was handed to the Scheduler as the reply succeeded",
        None,
        seed=2,
    ),
    "a callback's values dropped": Plant(
        lambda mp: mp.setattr(Callbacks, "_reply", staticmethod(reply_without_the_result)),
        "a result passed on is not the one returned",
        None,
        seed=0,
    ),
    "an approval whose deadline never comes": Plant(
        lambda mp: replace(mp, transitions.recovery, "_wait_expired", wait_expired_leaving_approvals),
        # The Supervisor comes to the approval past its deadline and leaves it waiting: a wait never ended.
        "without recovering it",
        None,
        seed=0,
    ),
    "a timer that waits twice its setting": Plant(
        lambda mp: replace(mp, timer_kind, "timer_due", timer_due_twice_its_setting),
        "not from when it started",
        None,
        seed=0,
    ),
    "conditions judged without the input": Plant(
        lambda mp: replace(
            mp, transitions.forward, "_dispatch_forward", dispatch_forward_judging_without_the_input
        ),
        "its condition holds",
        None,
        seed=4,
    ),
    "an update let through after the step that reads it started": Plant(
        lambda mp: replace(mp, transitions.operator, "open_updates", open_updates_whatever_the_fence),
        "which reads it, started",
        "updates",
        seed=1,
    ),
    "a step's result recorded without its values": Plant(
        lambda mp: replace(mp, transitions.replies, "_step_succeeded", step_succeeded_without_its_result),
        "a result passed on is not the one returned",
        None,
        seed=0,
    ),
}
