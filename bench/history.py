"""What operator reads and searches, the Supervisor and a submission cost as the history of finished orders
grows.

Run with ``make bench-history`` (or ``python bench/history.py --sizes 1000 10000 100000``). It starts a
throwaway Azurite and, in this process, the engine over the Table Storage store with the API's own
handlers (``orders.api.OrdersApi``; no HTTP host, and a sender that drops messages). It keeps a constant
set of live orders (Pending, Processing, Error; half the Processing ones at their first step for half an
hour), then fills the history with finished orders written directly through the store's own mapping, as
the engine leaves them (Processed, and one in ten Compensated after a declined payment; each step's
dispatch kept in its Calls, the body as sent and the result; their Search values and search entries), in
steps up to each size. The first orders filled are the ones the searches find, the same at every size:
20 probe customers with 10 finished orders each (2 of them Compensated), 10 orders of the storefront
``kiosk``, and the first 100 submitted in a window of 100 ms; the rest are spread over 50,000 other
customers, one in three through the storefront ``web``. At each size it checks every search's answer
(the expected order ids, exactly) and what it cost in table requests and entities, then times,
alternating one sample of each in turn:

- one order's GET: a finished order (in the history) and an order in flight;
- the listing of orders in Error and of orders in Processing (a page of 50);
- the counts by state;
- a Supervisor sweep that finds ten just-finished orders due and moves them to the history;
- a submission (the watch entry, the search entries, the order's transaction and the check of the history);
- the searches, each read whole (pages of 50, following the continuation token to the end): by customer,
  by customer and state, by the step the orders are at for over 20 minutes (the 50 Processing live orders
  there for half an hour), by workflow and a submission window, by storefront;
- a control: one range query of the search table that finds nothing (what Azurite's scan of the whole
  table costs a query there, whatever it returns).

It prints the median (and the 90th percentile) of each at each size, and each median at the largest size
over its median at the smallest, against the target (at most 1.2); then each search's pages, requests and
entities at each size, and what the search entries and the Calls add to a finished order's storage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from azure.data.tables import UpdateMode
from azure.data.tables.aio import TableServiceClient
from pydantic import BaseModel

from adapters.table_batch import submit_transaction
from adapters.table_store import TableStateStore, shard_of
from devhost import azurite
from engine import calls, queues, transitions
from engine.calls import AgentCall, CallEntry
from engine.decisions import Decision
from engine.messages import AgentReply, AgentRequest, ReplyOutcome
from engine.parts import EngineParts
from engine.settings import EngineSettings
from engine.state import Phase, ProcessState, StepState, StepStatus, TaskRecord, TaskState
from engine.supervisor import Supervisor
from engine.tasks import TaskService
from engine.workflow import StepDefinition, Timer, WorkflowCatalog
from orders.api import OrdersApi
from orders.catalog import FULFILMENT, SERVICES
from orders.models import body_hash, order_document, order_input
from orders.services.client import request_body
from servicebus_emulator.launcher import free_port

TARGET_RATIO = 1.2
SHARDS = 8
LIVE = {ProcessState.PENDING: 50, ProcessState.PROCESSING: 100, ProcessState.ERROR: 50}
DUE_PER_SWEEP = 10
# What each order carries: the workflow's first declared example.
ORDER = FULFILMENT.examples()[0]
CATALOG = WorkflowCatalog.of(FULFILMENT)
SETTINGS = EngineSettings(step_complete_by_seconds=3600)
SERVICE = {s.name: s for s in SERVICES}

# The finished orders the searches find, filled first and the same at every size; the rest of the
# history is spread over many other customers, so a search that read what grows would show it.
PROBES, PER_PROBE, PROBE_COMPENSATED = 20, 10, 2  # customers, their orders, how many of those undone
KIOSK, PER_KIOSK = "kiosk", 10  # a storefront with a constant number of finished orders
WEB = "web"  # the storefront one in three of the other orders came through (grows with the history)
OTHER_CUSTOMERS = 50_000
WINDOW = 100  # the first orders filled are submitted 1 ms apart: a window of 100 ms holds 100
FIRST_FILL = PROBES * PER_PROBE + PER_KIOSK  # the smallest size
FILL_CHUNK = 5_000  # orders built and written at a time (the memory a fill holds)
# Live Processing orders claimed half an hour before the bench's clock (within their hour's budget, so
# no sweep finds them expired): the step search's hits.
STUCK, STUCK_FOR, AT_STEP_SECONDS = 50, timedelta(minutes=30), 1200
AT_STEP = FULFILMENT.steps[0].name

# How a finished order's calls went, as an Agent reports them: the request's time on the queue, the call,
# the reply's way back; the payment service answers at its callback a few seconds later.
QUEUED = timedelta(milliseconds=40)
CALL_TOOK = timedelta(milliseconds=160)
REPLIED = timedelta(milliseconds=30)
CALLBACK_AFTER = timedelta(seconds=3)
# The processes that made the calls (engine.scheduler.instance_id: host, process, random part).
INSTANCES = ("10-30-1-17:412:9f3a61c2", "10-30-1-23:388:04be7d15", "10-30-2-5:407:c2a9e830")
# A Compensated order's payment was declined: what was done is undone.
DECLINED = "charge-payment"
DECLINE_REASON = "payment: card declined"

FIGURES = (
    "GET a finished order",
    "GET an order in flight",
    "list in Error (page of 50)",
    "list in Processing (page of 50)",
    "counts by state",
    f"Supervisor sweep ({DUE_PER_SWEEP} finished orders due)",
    "submission",
)
SEARCHES = (
    f"search: a customer ({PER_PROBE} finished)",
    f"search: a customer, Compensated ({PROBE_COMPENSATED} of {PER_PROBE})",
    f"search: at {AT_STEP} > {AT_STEP_SECONDS} s ({STUCK} live)",
    f"search: workflow, submitted in a window ({WINDOW} finished)",
    f"search: a storefront ({PER_KIOSK} finished)",
)
CONTROL = "control: one range query of the search table, 0 found"
ALL_FIGURES = (*FIGURES, *SEARCHES, CONTROL)


class DropSender:
    """Sends nothing: the figures are the store's and the engine's, not the broker's."""

    async def send(self, queue: str, body: BaseModel, **kwargs: Any) -> None:
        return None


class FixedClock:
    """A clock the bench moves: sweeps see what is due."""

    def __init__(self) -> None:
        self.at = datetime.now(UTC)

    def now(self) -> datetime:
        return self.at


def document(order_id: str, customer: str | None = None) -> tuple[dict[str, Any], str]:
    fields = ORDER if customer is None else {**ORDER, "customerId": customer}
    body = order_document(order_id, order_input(FULFILMENT, fields))
    return body, body_hash(body)


def declared_result(step: StepDefinition, key: str) -> dict[str, Any] | None:
    """What the simulators return for a step's effect under ``key``: its service's declared result values
    (None for a wait, which calls nothing)."""
    if not step.calls:
        return None
    service = next(s for s in SERVICES if s.name == step.agent)
    resource, _ = service.resource(step.action)
    return None if resource.result is None else resource.result.simulated(key).model_dump(by_alias=True)


def recorded_body(request: AgentRequest) -> dict[str, Any]:
    """The body an Agent sends for ``request``, as the call's record keeps it: built by the Agent's own
    code, its sensitive fields redacted as ``orders.services.client`` does before it leaves the process."""
    definition = next(s for s in FULFILMENT.steps if s.name == request.step)
    service = SERVICE[definition.call_agent]
    resource, undoes = service.resource(request.action)
    body = request_body(service.name, resource, undoes, request)
    model = resource.undo_body if undoes else resource.body
    return calls.redacted(body, model.sensitive if model is not None else ())


def _call(
    order_id: str,
    index: int,
    undo: bool,
    payload: dict[str, Any],
    at: datetime,
    result: dict[str, Any] | None,
    declined: bool = False,
) -> CallEntry:
    """One dispatch of step ``index`` (or its undo) at ``at``, as the Scheduler and its Agent record it."""
    definition = FULFILMENT.steps[index]
    action = definition.compensation if undo else definition.action
    assert action is not None
    complete_by = at + timedelta(seconds=SETTINGS.step_complete_by_seconds)
    request = AgentRequest(
        order_id=order_id,
        workflow=FULFILMENT.name,
        workflow_version=FULFILMENT.version,
        step=definition.name,
        step_index=index,
        attempt=1,
        compensating=undo,
        action=action,
        idempotency_key=f"{order_id}:{definition.name}",
        complete_by=complete_by,
        payload=payload,
    )
    started = at + QUEUED
    ended = started + CALL_TOOK
    accepted = not undo and not declined and SERVICE[definition.call_agent].resource(action)[0].asynchronous
    entry = CallEntry(
        attempt=1,
        kind="undo" if undo else "call",
        dispatched=at,
        complete_by=complete_by,
        instance=random.choice(INSTANCES),
        body=recorded_body(request),
        started=started,
        tries=1,
        status=402 if declined else 202 if accepted else 200,
        outcome="failed" if declined else "succeeded",
        result=result or None,
        reason=DECLINE_REASON if declined else None,
        ended=ended,
    )
    if accepted:
        # Its service answered at the callback route: the entry ends then.
        entry.answered = entry.ended = ended + CALLBACK_AFTER
    return entry


def finished_record(
    order_id: str,
    created: datetime,
    compensated: bool,
    customer: str | None = None,
    submitter: str | None = None,
) -> TaskRecord:
    """A finished order as the engine leaves it, submitted at ``created``: every step run in turn (one
    dispatch each, kept in its Calls with the body as sent and the result), a step whose condition does
    not hold left out, the cancellation window waited through; Compensated: the payment declined, and
    what was done undone, last first. ``check_shapes`` holds it to what the engine writes."""
    given = queues.unscoped_id(order_id, submitter)
    body, digest = document(given, customer)
    steps = [StepState(index=i, name=s.name) for i, s in enumerate(FULFILMENT.steps)]
    results: dict[str, Any] = {}
    at = since = created + QUEUED  # claimed by a Scheduler
    failed = None
    for i, definition in enumerate(FULFILMENT.steps):
        step = steps[i]
        since = at
        if definition.when is not None and not definition.when.holds({"input": body, "results": results}):
            step.status, step.reason = StepStatus.LEFT_OUT, f"condition not met: {definition.when.describe()}"
            continue
        step.attempts = 1
        if definition.wait is not None:
            assert isinstance(definition.wait, Timer)  # an approval: ORDER is too small to be reviewed
            until = at + timedelta(seconds=definition.wait.after_seconds)
            step.status, step.complete_by, step.reason = StepStatus.COMPLETED, until, "timer due"
            step.calls = [
                CallEntry(
                    attempt=1, kind="wait", dispatched=at, complete_by=until, outcome="timer due", ended=until
                )
            ]
            at = until
            continue
        declined = compensated and definition.name == DECLINED
        result = {} if declined else declared_result(definition, f"{order_id}:{definition.name}") or {}
        entry = _call(order_id, i, False, {"input": body, "results": dict(results)}, at, result, declined)
        step.complete_by, step.calls = entry.complete_by, [entry]
        assert entry.ended is not None
        at = entry.ended + REPLIED
        if declined:
            step.status, failed = StepStatus.FAILED, i
            break
        step.status, step.result = StepStatus.COMPLETED, result
        results.update(result)
    if failed is not None:
        # Undone from the declined step back (it too: its call may have had an effect), left-out steps
        # passed over.
        for i in range(failed, -1, -1):
            step, definition = steps[i], FULFILMENT.steps[i]
            if step.status is StepStatus.LEFT_OUT or definition.compensation is None:
                continue
            done = {k: v for s in steps[: i + 1] if s.result for k, v in s.result.items()}
            entry = _call(order_id, i, True, {"input": body, "results": done}, at, None)
            step.status, step.compensation_attempts = StepStatus.COMPENSATED, 1
            step.complete_by, step.calls = entry.complete_by, [*step.calls, entry]
            assert entry.ended is not None
            since, at = at, entry.ended + REPLIED
    return TaskRecord(
        state=TaskState(
            order_id=order_id,
            workflow=FULFILMENT.name,
            workflow_version=FULFILMENT.version,
            process_state=ProcessState.COMPENSATED if compensated else ProcessState.PROCESSED,
            phase=Phase.COMPENSATE if compensated else Phase.FORWARD,
            current_step=0 if compensated else len(FULFILMENT.steps) - 1,
            attempt=1,
            last_error=f"{DECLINED}: {DECLINE_REASON}" if compensated else None,
            submitter=submitter,
            status_queue=queues.status_queue(submitter) if submitter else None,
            search={"customerId": body["customerId"]},
            step_since=since,
            created_at=created,
            updated_at=at,
        ),
        steps=steps,
        input=body,
        input_hash=digest,
    )


def probe_customer(n: int) -> str:
    return f"probe-{n:02d}"


def profile(n: int, probes: bool) -> tuple[str, str | None, bool]:
    """The ``n``-th order of a fill: its customer, the storefront it came through, whether it was undone.
    With ``probes`` (the first fill), the first PROBES x PER_PROBE are the probe customers' (in turn; the
    first PROBE_COMPENSATED rounds undone), the next PER_KIOSK came through the kiosk."""
    if probes and n < PROBES * PER_PROBE:
        return probe_customer(n % PROBES), None, n // PROBES < PROBE_COMPENSATED
    other = f"cust-{random.randrange(OTHER_CUSTOMERS):05d}"
    if probes and n < FIRST_FILL:
        return other, KIOSK, False
    return other, WEB if n % 3 == 0 else None, n % 10 == 9


async def fill_history(
    store: TableStateStore, count: int, start: datetime, probes: bool = False
) -> list[str]:
    """Write ``count`` finished orders, submitted 1 ms apart from ``start``, with the store's own mapping:
    into the history, 50 per transaction (the order and its listing entry), and their search entries into
    the search table, 100 per transaction, a shard at a time as the history; then raise each shard's tally
    by what it got. ``probes``: the orders the searches find come first (:func:`profile`). Returns the ids
    (task ids: a storefront's are ``<storefront>.<id>``)."""
    assert store.history is not None
    added: dict[str, dict[str, int]] = {}
    ids = []
    semaphore = asyncio.Semaphore(2)  # Azurite resets connections under more

    async def write(table: Any, batch: list[dict[str, Any]]) -> None:
        async with semaphore:
            await submit_transaction(table, [("upsert", e, {"mode": UpdateMode.REPLACE}) for e in batch])

    for first in range(0, count, FILL_CHUNK):
        kept: dict[str, list[dict[str, Any]]] = {}
        found_by: dict[str, list[dict[str, Any]]] = {}
        for n in range(first, min(count, first + FILL_CHUNK)):
            customer, submitter, compensated = profile(n, probes)
            order_id = queues.scoped_id(f"h-{uuid.uuid4().hex[:20]}", submitter)
            ids.append(order_id)
            record = finished_record(
                order_id, start + timedelta(milliseconds=n), compensated, customer, submitter
            )
            pk = shard_of(order_id, store.shards)
            kept.setdefault(pk, []).extend(store.archive_entities(record))
            found_by.setdefault(pk, []).extend(store.codec.search_entities(record.state))
            tally = added.setdefault(pk, {})
            tally[record.state.process_state.value] = tally.get(record.state.process_state.value, 0) + 1
        batches = [
            (table, rows[i : i + 100])
            for table, by_shard in ((store.history, kept), (store.search, found_by))
            for rows in by_shard.values()
            for i in range(0, len(rows), 100)
        ]
        await asyncio.gather(*(write(table, batch) for table, batch in batches))
    for pk, counts in added.items():
        current = await store.tallies.tally(pk, fresh=True)
        total = {k: current[1].get(k, 0) + counts.get(k, 0) for k in current[1]}
        await store.history.upsert_entity(store.tally_entity(pk, total), mode=UpdateMode.REPLACE)
        await store.tallies.tally(pk, fresh=True)
    return ids


def engine_run(parts: EngineParts, record: TaskRecord, decline: bool = False) -> None:
    """Take a submitted order to its end in memory as a Scheduler does on its Agents' replies: each call
    answered as sent (the body built and redacted by the Agent's code), the payment's at its callback, the
    timer woken at its time; ``decline``: the payment's call is refused, and the order undone."""
    ctx = parts.context("bench", record)
    decision = transitions.claim(record, ctx)
    while not record.state.process_state.finished:
        state = record.state
        index = state.current_step
        definition = FULFILMENT.steps[index]
        if state.process_state is ProcessState.WAITING and state.waiting_for == "timer":
            due = record.steps[index].complete_by
            assert due is not None
            ctx = replace(ctx, now=due)
            decision = transitions.wake(record, ctx, index, state.attempt)
        elif state.process_state is ProcessState.WAITING:  # the payment's answer, at its callback
            ctx = replace(ctx, now=ctx.now + CALLBACK_AFTER)
            result = declared_result(definition, f"{record.order_id}:{definition.name}") or {}
            call = AgentCall(started=ctx.now, ended=ctx.now, callback=True)
            reply = AgentReply(
                order_id=record.order_id,
                step_index=index,
                attempt=state.attempt,
                outcome=ReplyOutcome.SUCCEEDED,
                result=result,
                call=call,
            )
            decision = transitions.apply_reply(record, ctx, reply)
        else:
            reply = _answer(ctx.now, decision, decline)
            ctx = replace(ctx, now=ctx.now + QUEUED + CALL_TOOK + REPLIED)  # when the reply is applied
            decision = transitions.apply_reply(record, ctx, reply)
        assert decision.changed, (record.order_id, state)


def _answer(now: datetime, decision: Decision, decline: bool) -> AgentReply:
    """The Agent's reply to the one request ``decision`` sent at ``now``."""
    (request,) = [m.body for m in decision.messages if isinstance(m.body, AgentRequest)]
    definition = FULFILMENT.steps[request.step_index]
    resource, undoes = SERVICE[definition.call_agent].resource(request.action)
    started = now + QUEUED
    call = AgentCall(
        instance=random.choice(INSTANCES),
        started=started,
        ended=started + CALL_TOOK,
        tries=1,
        status=200,
        body=recorded_body(request),
    )
    reply = AgentReply(
        order_id=request.order_id,
        step_index=request.step_index,
        attempt=request.attempt,
        compensating=undoes,
        outcome=ReplyOutcome.SUCCEEDED,
        call=call,
    )
    if undoes:
        return reply
    if decline and definition.name == DECLINED:
        call.status, reply.outcome, reply.error = 402, ReplyOutcome.FAILED, DECLINE_REASON
    elif resource.asynchronous:
        call.status, reply.outcome = 202, ReplyOutcome.ACCEPTED
    else:
        reply.result = declared_result(definition, f"{request.order_id}:{definition.name}") or {}
    return reply


def shape(record: TaskRecord) -> list[Any]:
    """What a finished record says, without what differs from order to order (ids, times, values)."""
    state = record.state
    found: list[Any] = [
        state.process_state,
        state.phase,
        state.current_step,
        state.attempt,
        state.last_error,
        sorted(state.model_dump(by_alias=True, exclude_none=True)),
    ]
    for step in record.steps:
        entries = [
            (
                sorted(e.model_dump(by_alias=True, exclude_none=True)),
                e.kind,
                e.outcome,
                e.status,
                sorted(e.body or {}),
            )
            for e in step.calls
        ]
        found.append(
            (step.status, step.reason, sorted(step.model_dump(by_alias=True, exclude_none=True)), entries)
        )
    return found


class Bench:
    """The engine over one store, with the live orders every size shares."""

    def __init__(self, store: TableStateStore) -> None:
        self.store = store
        self.clock = FixedClock()
        self.parts = EngineParts(CATALOG, store, DropSender(), self.clock, SETTINGS)
        self.tasks = TaskService(self.parts)
        self.api = OrdersApi(self._tasks)
        self.supervisor = Supervisor(self.parts)
        self.in_flight: list[str] = []
        self.submitted: list[str] = []
        self.stuck: list[str] = []
        # Each search's query and the ids it must find (set after the first fill), by figure.
        self.expected: dict[str, list[tuple[dict[str, str], set[str]]]] = {}

    async def _tasks(self) -> TaskService:
        return self.tasks

    async def live_orders(self) -> None:
        """Pending, Processing (claimed) and Error orders, through the engine, due in an hour (the first
        STUCK Processing ones submitted and claimed STUCK_FOR before the clock, due in half an hour)."""
        now = self.clock.at
        for state, count in LIVE.items():
            for n in range(count):
                stuck = state is ProcessState.PROCESSING and n < STUCK
                self.clock.at = now - STUCK_FOR if stuck else now
                order_id = f"l-{uuid.uuid4().hex[:20]}"
                body, digest = document(order_id)
                _, record = await self.tasks.submit(order_id, body, digest)
                if state is not ProcessState.PENDING:
                    ctx = self.parts.context("bench", record)
                    transitions.claim(record, ctx)
                    if state is ProcessState.ERROR:
                        transitions.workflow_not_deployed(record, ctx, "supervisor")  # any way into Error
                    await self.store.save(record)
                    assert record.state.process_state is state
                if state.in_flight:
                    self.in_flight.append(order_id)
                if stuck:
                    self.stuck.append(order_id)
        self.clock.at = now

    async def just_finished(self, count: int) -> None:
        """Orders that finished a moment ago and whose watch entries are due: the next sweep moves them."""
        for _ in range(count):
            order_id = f"f-{uuid.uuid4().hex[:20]}"
            body, digest = document(order_id)
            _, record = await self.tasks.submit(order_id, body, digest)
            engine_run(self.parts, record)
            await self.store.save(record)
            # Its watch entry due now, as it is a step's budget after the order finished.
            entry = {
                "PartitionKey": shard_of(order_id, SHARDS),
                "RowKey": order_id,
                "CompleteBy": self.clock.at,
            }
            await self.store.watch.upsert_entity(entry, mode=UpdateMode.REPLACE)

    async def check_shapes(self) -> None:
        """Hold the filled orders to what the engine writes: an order run by the engine in memory on its
        Agents' replies (Processed, and one with its payment declined) against one filled alike."""
        for decline in (False, True):
            order_id = f"r-{uuid.uuid4().hex[:20]}"
            self.submitted.append(order_id)  # deleted with the submission samples' orders
            body, digest = document(order_id)
            _, record = await self.tasks.submit(order_id, body, digest)
            engine_run(self.parts, record, decline)
            filled = finished_record(order_id, record.state.created_at, decline, ORDER["customerId"])
            assert shape(filled) == shape(record), (shape(filled), shape(record))

    async def forget_submitted(self) -> None:
        """Delete the orders the submission samples wrote (and their search entries), so every size starts
        with the same live set."""
        for order_id in self.submitted:
            record = await self.store.load(order_id)
            if record is None:
                continue
            pk = shard_of(order_id, self.store.shards)
            keys = [*record.etags, record.listed]
            await submit_transaction(
                self.store.table, [("delete", {"PartitionKey": pk, "RowKey": k}) for k in keys]
            )
            await self.store.watch.delete_entity(pk, order_id)
            await self.store.searches.delete_entries(self.store.searches.entry_keys(record.state))
        self.submitted.clear()

    def expect(self, first: list[str], start: datetime) -> None:
        """What each search must find, from the first fill (``start``: when its first order was submitted)."""
        probes = [(n, probe_customer(n % PROBES)) for n in range(PROBES * PER_PROBE)]

        def of(customer: str, compensated_only: bool = False) -> set[str]:
            return {
                first[n]
                for n, c in probes
                if c == customer and (not compensated_only or n // PROBES < PROBE_COMPENSATED)
            }

        customers = [probe_customer(k) for k in range(PROBES)]
        window = {
            "workflow": FULFILMENT.name,
            "submittedFrom": start.isoformat(),
            "submittedTo": (start + timedelta(milliseconds=WINDOW)).isoformat(),
        }
        self.expected = {
            SEARCHES[0]: [({"customerId": c}, of(c)) for c in customers],
            SEARCHES[1]: [({"customerId": c, "processState": "Compensated"}, of(c, True)) for c in customers],
            SEARCHES[2]: [({"step": AT_STEP, "atStepSeconds": str(AT_STEP_SECONDS)}, set(self.stuck))],
            SEARCHES[3]: [(window, set(first[:WINDOW]))],
            SEARCHES[4]: [({"storefront": KIOSK}, set(first[PROBES * PER_PROBE : FIRST_FILL]))],
        }

    async def whole(self, query: dict[str, str]) -> tuple[list[str], int]:
        """A search's whole answer through the API (pages of 50, to the end): the ids and the pages."""
        ids: list[str] = []
        token, pages = None, 0
        while True:
            asked = {**query, "pageSize": "50", **({"continuationToken": token} if token else {})}
            reply = await self.api.list_by_state(asked)
            assert reply.status == 200, reply.body
            pages += 1
            ids += [item["orderId"] for item in reply.body["items"]]
            token = reply.body["continuationToken"]
            if not token:
                return ids, pages

    async def check_searches(self) -> dict[str, tuple[int, dict[str, int], dict[str, int]]]:
        """Every search's answer against the ids it must find, exactly; and what the first of each cost:
        its pages, and the table requests and entities the store counted, by table."""
        costs = {}
        counter = self.store.counter
        for name, cases in self.expected.items():
            for n, (query, expected) in enumerate(cases):
                requests, entities = dict(counter.requests), dict(counter.entities)
                ids, pages = await self.whole(query)
                assert len(ids) == len(set(ids)) and set(ids) == expected, (name, query, sorted(ids))
                if n == 0:
                    costs[name] = (
                        pages,
                        {
                            t: v - requests.get(t, 0)
                            for t, v in counter.requests.items()
                            if v != requests.get(t, 0)
                        },
                        {
                            t: v - entities.get(t, 0)
                            for t, v in counter.entities.items()
                            if v != entities.get(t, 0)
                        },
                    )
        return costs

    async def samples(self, finished: list[str], rounds: int) -> dict[str, list[float]]:
        """``rounds`` samples of each figure, one of each in turn."""
        times: dict[str, list[float]] = {name: [] for name in ALL_FIGURES}
        api = self.api
        assert self.store.search is not None
        search_table = self.store.search

        async def sweep() -> None:
            report = await self.supervisor.sweep()
            assert report.archived == DUE_PER_SWEEP, report

        async def submit() -> None:
            order_id = f"s-{uuid.uuid4().hex[:20]}"
            self.submitted.append(order_id)
            body = {**ORDER, "orderId": order_id}
            reply = await api.submit(json.dumps(body).encode(), "application/json")
            assert reply.status == 202, reply.body

        async def get(order_id: str) -> None:
            assert (await api.get(order_id)).status == 200

        async def listing(state: str) -> None:
            reply = await api.list_by_state({"processState": state, "pageSize": "50"})
            assert reply.status == 200 and len(reply.body["items"]) == 50, reply.body

        async def counts() -> None:
            reply = await api.counts()
            assert reply.status == 200 and not reply.body["atLeast"]

        async def search(name: str) -> None:
            # One case at random (a probe customer); its answer counted here, checked whole once a size.
            query, expected = random.choice(self.expected[name])
            ids, _ = await self.whole(query)
            assert len(ids) == len(expected), (name, query, len(ids))

        async def control() -> None:
            found = search_table.query_entities(
                "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
                parameters={"pk": "s00", "lo": "none|", "hi": "none|~"},
            )
            assert [e async for e in found] == []

        def searching(name: str) -> Callable[[], Awaitable[None]]:
            return lambda: search(name)

        for _ in range(rounds):
            await self.just_finished(DUE_PER_SWEEP)  # untimed: what the timed sweep will find
            actions: list[tuple[str, Callable[[], Awaitable[None]]]] = [
                (FIGURES[0], lambda: get(random.choice(finished))),
                (FIGURES[1], lambda: get(random.choice(self.in_flight))),
                (FIGURES[2], lambda: listing("Error")),
                (FIGURES[3], lambda: listing("Processing")),
                (FIGURES[4], counts),
                (FIGURES[5], sweep),
                (FIGURES[6], submit),
                *((name, searching(name)) for name in SEARCHES),
                (CONTROL, control),
            ]
            for name, action in actions:
                started = time.perf_counter()
                await action()
                times[name].append(time.perf_counter() - started)
        await self.forget_submitted()
        return times


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(0.9 * len(ordered)) - 1))]


Costs = dict[str, tuple[int, dict[str, int], dict[str, int]]]


async def run(
    connection: str, sizes: list[int], rounds: int
) -> tuple[dict[int, dict[str, list[float]]], dict[int, Costs], TableStateStore]:
    async with TableServiceClient.from_connection_string(connection) as service:
        store = await TableStateStore.from_service(service, "hist" + uuid.uuid4().hex[:10], shards=SHARDS)
        try:
            bench = Bench(store)
            await bench.live_orders()
            await bench.check_shapes()
            results: dict[int, dict[str, list[float]]] = {}
            costs: dict[int, Costs] = {}
            finished: list[str] = []
            start = datetime.now(UTC) - timedelta(days=20)
            for size in sizes:
                started = time.perf_counter()
                filled = await fill_history(
                    store, size - len(finished), start + timedelta(seconds=len(finished)), probes=not finished
                )
                if not finished:
                    bench.expect(filled, start)
                finished += filled
                print(
                    f"history filled to {size:,} finished orders in {time.perf_counter() - started:.0f} s",
                    flush=True,
                )
                started = time.perf_counter()
                costs[size] = await bench.check_searches()
                print(f"  searches checked in {time.perf_counter() - started:.0f} s", flush=True)
                await bench.samples(finished, 5)  # warm-up
                started = time.perf_counter()
                results[size] = await bench.samples(finished, rounds)
                print(f"  sampled in {time.perf_counter() - started:.0f} s", flush=True)
            return results, costs, store
        finally:
            await store.close()


def table(results: dict[int, dict[str, list[float]]]) -> str:
    sizes = sorted(results)
    first, last = sizes[0], sizes[-1]
    head = "| figure | " + " | ".join(f"{s:,} finished" for s in sizes) + f" | {last:,} / {first:,} |"
    lines = [head, "|" + "---|" * (len(sizes) + 2)]
    ratios = {}
    for name in ALL_FIGURES:
        cells = [
            f"{statistics.median(results[s][name]) * 1000:.1f} ms (p90 {p90(results[s][name]) * 1000:.1f})"
            for s in sizes
        ]
        ratios[name] = statistics.median(results[last][name]) / statistics.median(results[first][name])
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {ratios[name]:.2f} |")
    worst = max(ratios[name] for name in (*FIGURES, *SEARCHES))
    verdict = "meets" if worst <= TARGET_RATIO else "misses"
    lines.append(f"\nlargest ratio {worst:.2f} (target <= {TARGET_RATIO}: {verdict}); ")
    lines[-1] += (
        f"without the searches {max(ratios[n] for n in FIGURES):.2f}, the searches "
        f"{max(ratios[n] for n in SEARCHES):.2f}, the control {ratios[CONTROL]:.2f}"
    )
    return "\n".join(lines)


def cost_table(costs: dict[int, Costs]) -> str:
    sizes = sorted(costs)
    tables = ("search", "state", "history")
    head = "| search (whole answer) | " + " | ".join(f"{s:,} finished" for s in sizes) + " |"
    lines = [head, "|" + "---|" * (len(sizes) + 1)]
    for name in SEARCHES:
        cells = []
        for size in sizes:
            pages, requests, entities = costs[size][name]
            split = ["/".join(str(counts.get(t, 0)) for t in tables) for counts in (requests, entities)]
            cells.append(
                f"{pages} p, {sum(requests.values())} req ({split[0]}), "
                f"{sum(entities.values())} ent ({split[1]})"
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def billed_bytes(entity: Mapping[str, Any]) -> int:
    """An entity's size as Table Storage bills it: 4 bytes, its keys in UTF-16, and per property 8 bytes,
    its name in UTF-16 and its value (text 4 + UTF-16, a time or a double 8, a number 4 or 8, a flag 1);
    the service's own Timestamp left out."""
    size = 4 + 2 * (len(entity["PartitionKey"]) + len(entity["RowKey"]))
    for name, value in entity.items():
        if name in ("PartitionKey", "RowKey"):
            continue
        size += 8 + 2 * len(name)
        if isinstance(value, bool):
            size += 1
        elif isinstance(value, int):
            size += 4 if -(2**31) <= value < 2**31 else 8
        elif isinstance(value, float | datetime):
            size += 8
        else:
            size += 4 + 2 * len(str(value))
    return size


def storage(store: TableStateStore) -> str:
    """What search and Calls add to a typical filled order (Processed, no storefront)."""
    created = datetime.now(UTC)
    record = finished_record(f"h-{uuid.uuid4().hex[:20]}", created, False, "cust-01234")
    bare = record.model_copy(deep=True)
    bare.state.search = bare.state.step_since = None
    for step in bare.steps:
        step.calls = []
    no_calls = record.model_copy(deep=True)
    for step in no_calls.steps:
        step.calls = []
    entries = store.codec.search_entities(record.state)
    web = finished_record(
        queues.scoped_id(f"h-{uuid.uuid4().hex[:20]}", WEB), created, False, "cust-01234", WEB
    )
    web_entries = store.codec.search_entities(web.state)

    def kept(r: TaskRecord) -> int:
        return sum(billed_bytes(e) for e in store.archive_entities(r))

    calls_json = sum(
        len(
            json.dumps(
                [e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in s.calls],
                separators=(",", ":"),
            )
        )
        for s in record.steps
    )
    dispatches = sum(len(s.calls) for s in record.steps)
    search_bytes = sum(billed_bytes(e) for e in entries)
    return "\n".join(
        [
            "Extra storage per finished order (the filled one: Processed, no storefront; "
            "billed entity sizes, see billed_bytes):",
            f"- search entries: {len(entries)} entities, {search_bytes:,} bytes "
            f"(an order through a storefront: {len(web_entries)}, "
            f"{sum(billed_bytes(e) for e in web_entries):,} bytes)",
            f"- Calls ({dispatches} dispatches, {calls_json:,} characters of JSON in the history's order "
            f"entity, UTF-16): {kept(record) - kept(no_calls):,} bytes",
            "- Search and StepSince on the order entity and its listing entry: "
            f"{kept(no_calls) - kept(bare):,} bytes",
            f"- the order's history entities: {kept(bare):,} bytes without these, {kept(record):,} with; "
            f"with the search entries {kept(record) + search_bytes:,} "
            f"(+{(kept(record) + search_bytes) / kept(bare) - 1:.0%})",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=60, help="samples of each figure at each size")
    args = parser.parse_args()
    sizes = sorted(args.sizes)
    if sizes[0] < FIRST_FILL or args.rounds < 1:
        parser.error(f"sizes must be at least {FIRST_FILL} (the orders the searches find), rounds at least 1")
    with tempfile.TemporaryDirectory(prefix="orders-history-") as tmp:
        port = free_port()
        process = azurite.launch(Path(tmp) / "azurite", port, in_memory=True)
        try:
            results, costs, store = asyncio.run(
                run(azurite.table_connection_string(port), sizes, args.rounds)
            )
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)
    print(f"\n{args.rounds} samples of each figure per size, medians (p90), on Azurite in memory:")
    print(table(results))
    print(
        "\nWhat each search read, counted in the store (pages of 50; requests: a query page or a point read, "
        "and entities read, each by table: search/state/history):"
    )
    print(cost_table(costs))
    print()
    print(storage(store))


if __name__ == "__main__":
    main()
