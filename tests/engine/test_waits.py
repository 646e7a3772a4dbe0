"""Waits as pure transitions: a timer, an approval, their deadlines, and what may and may not end them."""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from engine import telemetry, transitions
from engine.clock import ManualClock
from engine.decisions import Decision, Outcome
from engine.errors import InvalidState
from engine.messages import (
    AgentReply,
    AgentRequest,
    CommandKind,
    ReplyOutcome,
    SchedulerCommand,
    StatusEvent,
    StatusMessage,
)
from engine.parts import EngineParts
from engine.scheduler import Scheduler
from engine.settings import EngineSettings
from engine.state import Phase, ProcessState, StepState, StepStatus, TaskRecord, TaskState
from engine.supervisor import Supervisor
from engine.tasks import Caller, TaskService
from engine.transitions import Context
from engine.workflow import Approval, StepDefinition, Timer, WorkflowCatalog, WorkflowDefinition
from tests.engine.fakes import MemoryStore, RecordingSender


class Shipping(BaseModel):
    """An input with a time to ship after."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    ship_after: AwareDatetime | None = Field(default=None, alias="shipAfter")


class Lax(BaseModel):
    """Times a timer cannot wait for: any text, a time without its zone, a date."""

    model_config = ConfigDict(extra="forbid")

    text: str
    naive: datetime
    day: date
    stamped: str = Field(pattern=r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")  # a strict text: a time


T0 = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = EngineSettings(step_complete_by_seconds=10, supervisor_max_failures=2, cancel_grace_seconds=1)
RESERVE = StepDefinition(name="reserve", agent="stock", action="reserve", compensation="release")
CHARGE = StepDefinition(name="charge", agent="pay", action="charge", compensation="refund")


def workflow(*waits: StepDefinition) -> WorkflowDefinition:
    """reserve, the waits, charge."""
    return WorkflowDefinition(name="w", steps=(RESERVE, *waits, CHARGE))


WINDOW = StepDefinition(name="window", wait=Timer(after_seconds=30, setting="WINDOW_SECONDS"))
REVIEW = StepDefinition(name="review", wait=Approval(deadline_seconds=60))
STRICT_REVIEW = StepDefinition(name="review", wait=Approval(deadline_seconds=60, on_deadline="error"))


def ctx(definition: WorkflowDefinition, now: datetime = T0, settings: EngineSettings = SETTINGS) -> Context:
    return Context(definition, settings, now, "sched-1")


def submitted(definition: WorkflowDefinition, task_input: dict[str, object] | None = None) -> TaskRecord:
    record = TaskRecord(
        state=TaskState(order_id="o-1", workflow=definition.name, created_at=T0, updated_at=T0),
        steps=[StepState(index=i, name=s.name) for i, s in enumerate(definition.steps)],
        input=task_input or {},
        input_hash="h",
    )
    transitions.new_record_state(record, ctx(definition))
    return record


def reserved(definition: WorkflowDefinition, now: datetime = T0, **kw: object) -> tuple[TaskRecord, Decision]:
    """Claimed, and the reserve step's success applied at ``now``: what comes after it is decided."""
    record = submitted(definition, **kw)  # type: ignore[arg-type]
    transitions.claim(record, ctx(definition))
    reply = AgentReply(order_id="o-1", step_index=0, attempt=1, outcome=ReplyOutcome.SUCCEEDED)
    return record, transitions.apply_reply(record, ctx(definition, now), reply)


def bodies[M](decision: Decision, kind: type[M]) -> list[M]:
    return [m.body for m in decision.messages if isinstance(m.body, kind)]


# ---- timers --------------------------------------------------------------------------------------------
def test_a_timer_waits_until_its_time_then_the_next_step_runs_and_nothing_runs_before() -> None:
    definition = workflow(WINDOW)
    record, decision = reserved(definition)
    state = record.state
    due = T0 + timedelta(seconds=30)
    assert (state.process_state, state.waiting_for, state.wait_until) == (ProcessState.WAITING, "timer", due)
    assert record.steps[1].status is StepStatus.WAITING and state.locked_by is None
    # The Supervisor looks a window after the time: by then the wake-up should have come.
    assert state.complete_by == due + timedelta(seconds=10)
    (wake,) = [m for m in decision.messages if isinstance(m.body, SchedulerCommand)]
    assert wake.scheduled_at == due
    assert (wake.body.kind, wake.body.step_index, wake.body.attempt) == (CommandKind.WAKE, 1, 1)
    assert [s.event for s in bodies(decision, StatusMessage)] == [
        StatusEvent.STEP_COMPLETED,
        StatusEvent.WAITING,
    ]
    assert not bodies(decision, AgentRequest), "nothing is called while the timer runs"

    # Early (a broker's clock ahead of ours): refused, and asked to come again at the time.
    early = ctx(definition, due - timedelta(milliseconds=5))
    assert transitions.wake(record, early, 1, 1).outcome is Outcome.REFUSED
    assert transitions.wake_early(record, early, 1, 1) == due
    # For another attempt, or another step: refused, and not rescheduled.
    assert transitions.wake(record, ctx(definition, due), 1, 2).outcome is Outcome.REFUSED
    assert transitions.wake_early(record, early, 1, 2) is None
    assert transitions.wake(record, ctx(definition, due), 0, 1).outcome is Outcome.REFUSED

    woken = transitions.wake(record, ctx(definition, due), 1, 1)
    assert woken.outcome is Outcome.MOVED
    assert [r.step for r in bodies(woken, AgentRequest)] == ["charge"]
    assert record.steps[1].status is StepStatus.COMPLETED and record.steps[1].reason == "timer due"
    assert (state.process_state, state.waiting_for, state.wait_until) == (ProcessState.PROCESSING, None, None)
    # A duplicate wake-up changes nothing.
    assert transitions.wake(record, ctx(definition, due), 1, 1).outcome is Outcome.REFUSED


def test_a_timer_s_setting_gives_its_duration_and_zero_means_no_wait_at_all() -> None:
    definition = workflow(WINDOW)
    shorter = EngineSettings(step_complete_by_seconds=10, wait_seconds={"WINDOW_SECONDS": 2})
    record = submitted(definition)
    transitions.claim(record, ctx(definition, settings=shorter))
    reply = AgentReply(order_id="o-1", step_index=0, attempt=1, outcome=ReplyOutcome.SUCCEEDED)
    transitions.apply_reply(record, ctx(definition, settings=shorter), reply)
    assert record.state.wait_until == T0 + timedelta(seconds=2)

    none = EngineSettings(step_complete_by_seconds=10, wait_seconds={"WINDOW_SECONDS": 0})
    record = submitted(definition)
    transitions.claim(record, ctx(definition, settings=none))
    decision = transitions.apply_reply(record, ctx(definition, settings=none), reply)
    assert [r.step for r in bodies(decision, AgentRequest)] == ["charge"], "the window is over at once"
    assert record.steps[1].status is StepStatus.COMPLETED
    assert not [m for m in decision.messages if isinstance(m.body, SchedulerCommand)]


@pytest.mark.parametrize(
    ("value", "waits_until"),
    [
        ("2026-01-01T00:05:00+00:00", T0 + timedelta(minutes=5)),
        ("2025-12-31T00:00:00+00:00", None),  # already past: no wait
        ("2026-01-01T00:05:00", None),  # no time zone: not a time to wait for
        ("soon", None),
        (None, None),
    ],
)
def test_a_timer_until_a_time_in_the_input(value: str | None, waits_until: datetime | None) -> None:
    definition = WorkflowDefinition(
        name="w",
        input=Shipping,
        steps=(RESERVE, StepDefinition(name="until", wait=Timer(until="input.shipAfter")), CHARGE),
    )
    record, decision = reserved(definition, task_input={"shipAfter": value} if value is not None else {})
    assert record.state.wait_until == waits_until
    waited = record.state.process_state is ProcessState.WAITING
    assert waited == (waits_until is not None)
    assert bool(bodies(decision, AgentRequest)) != waited


def test_a_lost_wake_up_is_sent_again_by_the_supervisor_without_counting_a_failure() -> None:
    definition = workflow(WINDOW)
    record, _ = reserved(definition)
    assert record.state.complete_by is not None
    late = record.state.complete_by + timedelta(seconds=1)
    decision = transitions.recover_expired(record, ctx(definition, late))
    assert decision.outcome is Outcome.KICKED
    (wake,) = bodies(decision, SchedulerCommand)
    assert (wake.kind, wake.step_index, wake.attempt) == (CommandKind.WAKE, 1, 1)
    assert record.state.failure_count == 0 and record.state.process_state is ProcessState.WAITING
    assert record.state.complete_by == late + timedelta(seconds=10)


def test_a_cancel_in_the_window_undoes_what_was_done_and_the_wake_up_then_changes_nothing() -> None:
    definition = WorkflowDefinition(
        name="w", steps=(RESERVE, CHARGE, WINDOW, RESERVE.model_copy(update={"name": "ship"}))
    )
    record = submitted(definition)
    transitions.claim(record, ctx(definition))
    for index in (0, 1):
        reply = AgentReply(order_id="o-1", step_index=index, attempt=1, outcome=ReplyOutcome.SUCCEEDED)
        transitions.apply_reply(record, ctx(definition), reply)
    assert record.state.process_state is ProcessState.WAITING
    cancelled = transitions.cancel(record, ctx(definition, T0 + timedelta(seconds=5)))
    assert cancelled.outcome is Outcome.MOVED
    assert record.state.process_state is ProcessState.COMPENSATING and record.state.waiting_for is None
    assert (
        record.steps[2].status is StepStatus.FAILED
        and record.steps[2].last_error == "cancelled while waiting"
    )
    assert (
        transitions.wake(record, ctx(definition, T0 + timedelta(seconds=30)), 2, 1).outcome is Outcome.REFUSED
    )
    # The Scheduler resumes: the payment is refunded first (the wait has nothing to undo); no shipment ever.
    resumed = transitions.claim(record, ctx(definition, T0 + timedelta(seconds=6)))
    assert [(r.step, r.compensating) for r in bodies(resumed, AgentRequest)] == [("charge", True)]


def test_an_operator_may_push_a_wait_later_or_end_it() -> None:
    definition = workflow(WINDOW)
    record, _ = reserved(definition)
    pushed = transitions.extend_step(record, ctx(definition), 1, 60)
    assert pushed.outcome is Outcome.MOVED and not pushed.messages
    assert record.state.wait_until == T0 + timedelta(seconds=90)
    due = T0 + timedelta(seconds=30)
    assert transitions.wake(record, ctx(definition, due), 1, 1).outcome is Outcome.REFUSED
    assert transitions.wake_early(record, ctx(definition, due), 1, 1) == T0 + timedelta(seconds=90)
    ended = transitions.skip_step(record, ctx(definition), 1, "the customer asked to ship now")
    assert (
        record.state.process_state is ProcessState.PENDING and record.steps[1].status is StepStatus.COMPLETED
    )
    assert [c.kind for c in bodies(ended, SchedulerCommand)] == [CommandKind.START]


# ---- approvals -----------------------------------------------------------------------------------------
def test_an_approval_waits_for_a_person_and_an_approval_hands_the_order_to_a_scheduler() -> None:
    definition = workflow(REVIEW)
    record, decision = reserved(definition)
    state = record.state
    assert (state.process_state, state.waiting_for) == (ProcessState.WAITING, "approval")
    assert state.complete_by == state.wait_until == T0 + timedelta(seconds=60)
    assert not bodies(decision, SchedulerCommand), "nothing is scheduled: a person ends it"
    # A timer's wake-up cannot end an approval; an approval of another step is refused.
    assert transitions.wake(record, ctx(definition, T0 + timedelta(hours=1)), 1, 1).outcome is Outcome.REFUSED
    assert transitions.approve(record, ctx(definition), 0).outcome is Outcome.REFUSED
    approved = transitions.approve(record, ctx(definition), 1)
    assert approved.outcome is Outcome.MOVED
    assert state.process_state is ProcessState.PENDING and record.steps[1].status is StepStatus.COMPLETED
    assert [c.kind for c in bodies(approved, SchedulerCommand)] == [CommandKind.START]
    assert not bodies(approved, AgentRequest), "only a Scheduler dispatches"
    # Approved twice, or rejected after: refused.
    assert transitions.approve(record, ctx(definition), 1).outcome is Outcome.REFUSED
    assert transitions.reject(record, ctx(definition), 1, "late").outcome is Outcome.REFUSED
    claimed = transitions.claim(record, ctx(definition))
    assert [r.step for r in bodies(claimed, AgentRequest)] == ["charge"]


def test_a_rejection_undoes_the_order_and_never_reaches_the_next_step() -> None:
    definition = workflow(REVIEW)
    record, _ = reserved(definition)
    rejected = transitions.reject(record, ctx(definition), 1, "card looks stolen")
    assert rejected.outcome is Outcome.MOVED
    assert record.state.process_state is ProcessState.COMPENSATING and record.state.phase is Phase.COMPENSATE
    assert record.steps[1].last_error == "rejected: card looks stolen"
    assert [c.kind for c in bodies(rejected, SchedulerCommand)] == [CommandKind.RESUME]
    undo = transitions.claim(record, ctx(definition))
    assert [(r.step, r.compensating) for r in bodies(undo, AgentRequest)] == [("reserve", True)]
    assert record.steps[2].status is StepStatus.NOT_STARTED


def test_an_approval_past_its_deadline_follows_its_policy() -> None:
    record, _ = reserved(workflow(REVIEW))
    late = ctx(workflow(REVIEW), T0 + timedelta(seconds=61))
    assert transitions.recover_expired(record, ctx(workflow(REVIEW), T0 + timedelta(seconds=59))).outcome is (
        Outcome.REFUSED
    )
    undone = transitions.recover_expired(record, late)
    assert undone.outcome is Outcome.DEADLINE and not undone.alerts
    assert record.state.process_state is ProcessState.COMPENSATING
    assert record.steps[1].last_error == "no approval by its deadline"
    assert transitions.approve(record, late, 1).outcome is Outcome.REFUSED, "too late: it is being undone"

    strict = workflow(STRICT_REVIEW)
    record, _ = reserved(strict)
    errored = transitions.recover_expired(record, ctx(strict, T0 + timedelta(seconds=61)))
    assert errored.outcome is Outcome.ERRORED and errored.alerts
    assert record.state.process_state is ProcessState.ERROR and record.state.waiting_for == "approval"
    # An operator may still decide: approved, the order goes on with its failures forgotten.
    approved = transitions.approve(record, ctx(strict, T0 + timedelta(seconds=90)), 1)
    assert approved.outcome is Outcome.MOVED
    assert record.state.process_state is ProcessState.PENDING and record.state.alert_pending is False


def test_a_cancel_while_an_approval_waits_undoes_and_a_late_approval_is_refused() -> None:
    definition = workflow(REVIEW)
    record, _ = reserved(definition)
    transitions.cancel(record, ctx(definition))
    assert record.state.process_state is ProcessState.COMPENSATING
    assert transitions.approve(record, ctx(definition), 1).outcome is Outcome.REFUSED
    assert transitions.reject(record, ctx(definition), 1, "").outcome is Outcome.REFUSED


def test_two_waits_in_a_row_and_a_wait_last() -> None:
    definition = WorkflowDefinition(name="w", steps=(RESERVE, WINDOW, REVIEW))
    record, _ = reserved(definition)
    due = T0 + timedelta(seconds=30)
    woken = transitions.wake(record, ctx(definition, due), 1, 1)
    assert record.state.process_state is ProcessState.WAITING and record.state.waiting_for == "approval"
    assert [s.event for s in bodies(woken, StatusMessage)] == [
        StatusEvent.STEP_COMPLETED,
        StatusEvent.WAITING,
    ]
    transitions.approve(record, ctx(definition, due), 2)
    done = transitions.claim(record, ctx(definition, due))
    assert record.state.process_state is ProcessState.PROCESSED
    assert [s.event for s in bodies(done, StatusMessage)] == [StatusEvent.PROCESSED]


def test_a_wait_declares_no_call_and_a_call_declares_no_wait() -> None:
    with pytest.raises(ValueError, match="a wait calls nothing"):
        StepDefinition(name="x", agent="a", action="b", wait=Timer(after_seconds=1))
    with pytest.raises(ValueError, match="names an agent and an action, or declares a wait"):
        StepDefinition(name="x")
    with pytest.raises(ValueError, match="either after_seconds or until"):
        Timer()
    with pytest.raises(ValueError, match=r"the timer on input\.when.*needs an input model"):
        WorkflowDefinition(name="w", steps=(StepDefinition(name="t", wait=Timer(until="input.when")),))
    with pytest.raises(ValueError, match="step t: a wait takes no complete_by_seconds"):
        StepDefinition(name="t", wait=Timer(after_seconds=1), complete_by_seconds=5)


@pytest.mark.parametrize(
    ("field", "refused"),
    [
        ("text", "accepts 'soon'"),
        ("naive", "accepts '2026-01-01T00:00:00'"),
        ("day", ""),
        ("stamped", None),
    ],
)
def test_a_timer_waits_only_on_a_field_that_holds_a_time_with_its_zone(
    field: str, refused: str | None
) -> None:
    def declare() -> WorkflowDefinition:
        step = StepDefinition(name="t", wait=Timer(until=f"input.{field}"))
        return WorkflowDefinition(name="w", input=Lax, steps=(step,))

    if refused is None:
        declare()
        return
    with pytest.raises(
        ValueError,
        match=rf"w version 1, step t: the timer on input\.{field}: .*a time with its zone.*{refused}",
    ):
        declare()


# ---- the engine's actors on a store in memory ---------------------------------------------------------
class Actors:
    """A Scheduler, a Supervisor and the task service on one store, one sender and a manual clock."""

    def __init__(self, definition: WorkflowDefinition) -> None:
        self.clock = ManualClock(T0)
        self.store = MemoryStore()
        self.sender = RecordingSender()
        parts = EngineParts(WorkflowCatalog.of(definition), self.store, self.sender, self.clock, SETTINGS)
        self.tasks = TaskService(parts)
        self.scheduler = Scheduler(parts, instance="sched-1")
        self.supervisor = Supervisor(parts)

    def taken(self, kind: type[Any]) -> list[Any]:
        return [s.body for s in self.sender.take() if isinstance(s.body, kind)]

    async def to_the_wait(self) -> None:
        """Submitted, claimed, its first step done: the wait is under way."""
        await self.tasks.submit("o-1", {}, "h")
        (kick,) = self.taken(SchedulerCommand)
        assert await self.scheduler.handle_command(kick)
        (request,) = self.taken(AgentRequest)
        reply = AgentReply(
            order_id="o-1", step_index=0, attempt=request.attempt, outcome=ReplyOutcome.SUCCEEDED
        )
        assert await self.scheduler.handle_reply(reply)


@pytest.mark.anyio
async def test_the_scheduler_ends_a_timer_only_at_its_time_and_schedules_an_early_wake_up_again() -> None:
    actors = Actors(workflow(WINDOW))
    await actors.to_the_wait()
    sent = actors.sender.take()
    (wake,) = [s for s in sent if isinstance(s.body, SchedulerCommand)]
    assert wake.scheduled_at == T0 + timedelta(seconds=30)
    actors.clock.advance(10)  # delivered early: the broker's clock runs ahead
    assert await actors.scheduler.handle_command(wake.body)
    (again,) = [s for s in actors.sender.take() if isinstance(s.body, SchedulerCommand)]
    assert again.scheduled_at == T0 + timedelta(seconds=30) and again.body.kind is CommandKind.WAKE
    assert actors.store.state("o-1").state.process_state is ProcessState.WAITING
    actors.clock.advance(20)
    assert await actors.scheduler.handle_command(again.body)
    assert [r.step for r in actors.taken(AgentRequest)] == ["charge"]
    assert not await actors.scheduler.handle_command(again.body), "a duplicate changes nothing"


@pytest.mark.anyio
async def test_the_supervisor_applies_an_approval_s_deadline_and_says_it_was_overdue(
    caplog: pytest.LogCaptureFixture,
) -> None:
    actors = Actors(workflow(REVIEW))
    await actors.to_the_wait()
    actors.sender.take()
    actors.clock.advance(61)
    with caplog.at_level(logging.INFO, logger="engine"):
        report = await actors.supervisor.sweep()
    assert (report.expired, report.deadlines) == (1, 1)
    (event,) = [r for r in caplog.records if telemetry.APPROVAL_OVERDUE in r.getMessage()]
    assert (event.orderId, event.step, event.processState) == ("o-1", "review", "Compensating")
    assert [c.kind for c in actors.taken(SchedulerCommand)] == [CommandKind.RESUME]
    with pytest.raises(InvalidState, match="approve needs Waiting or Error with an approval that waits"):
        await actors.tasks.approve("o-1", "review", Caller(actor="ada", note="sorry, late"))


@pytest.mark.anyio
async def test_an_approval_is_audited_with_who_and_why() -> None:
    actors = Actors(workflow(REVIEW))
    await actors.to_the_wait()
    record = await actors.tasks.approve("o-1", "review", Caller(actor="ada", note="called the customer"))
    assert record.state.process_state is ProcessState.PENDING
    (entry,) = [e for e in await actors.store.audit("o-1") if e.action == "approve"]
    assert (entry.actor, entry.note, entry.step) == ("ada", "called the customer", "review")
    assert (entry.step_state_before, entry.step_state_after) == (StepStatus.WAITING, StepStatus.COMPLETED)
    with pytest.raises(InvalidState):
        await actors.tasks.reject("o-1", "review", Caller(actor="bob"))


# ---- a service that answers later (202 Accepted, then a callback) --------------------------------------
def accepted(definition: WorkflowDefinition) -> tuple[TaskRecord, Decision]:
    """Claimed, and the first step's service took the call to answer later."""
    record = submitted(definition)
    transitions.claim(record, ctx(definition))
    reply = AgentReply(order_id="o-1", step_index=0, attempt=1, outcome=ReplyOutcome.ACCEPTED)
    return record, transitions.apply_reply(record, ctx(definition, T0 + timedelta(seconds=1)), reply)


def test_an_accepted_call_waits_for_its_callback_and_its_outcome_is_applied_once() -> None:
    definition = workflow()
    record, decision = accepted(definition)
    state = record.state
    assert (state.process_state, state.waiting_for) == (ProcessState.WAITING, "callback")
    assert state.wait_until == record.steps[0].complete_by == state.complete_by == T0 + timedelta(seconds=10)
    assert [s.event for s in bodies(decision, StatusMessage)] == [StatusEvent.WAITING]
    # An outcome for another attempt is fenced out; the one for this dispatch is applied, once.
    stale = AgentReply(order_id="o-1", step_index=0, attempt=2, outcome=ReplyOutcome.SUCCEEDED)
    assert transitions.apply_reply(record, ctx(definition), stale).outcome is Outcome.REFUSED
    outcome = AgentReply(
        order_id="o-1", step_index=0, attempt=1, outcome=ReplyOutcome.SUCCEEDED, result={"a": 1}
    )
    done = transitions.apply_reply(record, ctx(definition), outcome)
    assert [r.step for r in bodies(done, AgentRequest)] == ["charge"] and record.steps[0].result == {"a": 1}
    assert transitions.apply_reply(record, ctx(definition), outcome).outcome is Outcome.REFUSED
    assert state.waiting_for is None


def test_a_refused_callback_undoes_the_order_and_a_late_accept_changes_nothing() -> None:
    definition = workflow()
    record, _ = accepted(definition)
    again = AgentReply(order_id="o-1", step_index=0, attempt=1, outcome=ReplyOutcome.ACCEPTED)
    assert transitions.apply_reply(record, ctx(definition), again).outcome is Outcome.REFUSED
    refused = AgentReply(
        order_id="o-1", step_index=0, attempt=1, outcome=ReplyOutcome.FAILED, error="declined"
    )
    undo = transitions.apply_reply(record, ctx(definition), refused)
    assert record.state.process_state is ProcessState.COMPENSATING
    assert [(r.step, r.compensating) for r in bodies(undo, AgentRequest)] == [("reserve", True)]
    # The undo's service may answer later too: nothing to record, its callback finishes the undo.
    later = AgentReply(
        order_id="o-1", step_index=0, attempt=1, compensating=True, outcome=ReplyOutcome.ACCEPTED
    )
    assert transitions.apply_reply(record, ctx(definition), later).outcome is Outcome.UNCHANGED
    finished = AgentReply(
        order_id="o-1", step_index=0, attempt=1, compensating=True, outcome=ReplyOutcome.SUCCEEDED
    )
    transitions.apply_reply(record, ctx(definition), finished)
    assert record.state.process_state is ProcessState.COMPENSATED


def test_no_callback_by_complete_by_is_a_failure_the_supervisor_retries_with_the_same_key() -> None:
    definition = workflow()
    record, _ = accepted(definition)
    late = ctx(definition, T0 + timedelta(seconds=11))
    retried = transitions.recover_expired(record, late)
    assert retried.outcome is Outcome.RETRIED
    assert record.state.process_state is ProcessState.PENDING and record.steps[0].failures == 1
    claimed = transitions.claim(record, ctx(definition, T0 + timedelta(seconds=20)))
    (request,) = bodies(claimed, AgentRequest)
    assert (request.attempt, request.idempotency_key) == (2, "o-1:reserve")


def test_a_cancel_while_a_callback_is_awaited_undoes_the_step_once_its_answer_can_no_longer_come() -> None:
    definition = workflow()
    record, _ = accepted(definition)
    cancelled = transitions.cancel(record, ctx(definition, T0 + timedelta(seconds=2)))
    (resume,) = bodies(cancelled, SchedulerCommand)
    assert resume.kind is CommandKind.RESUME
    # Its CompleteBy (10 s) plus the grace (1 s): the undo cannot overtake a late apply.
    assert record.state.next_attempt_at == T0 + timedelta(seconds=11)
    assert record.steps[0].status is StepStatus.FAILED
    undo = transitions.claim(record, ctx(definition, T0 + timedelta(seconds=11)))
    assert [(r.step, r.compensating) for r in bodies(undo, AgentRequest)] == [("reserve", True)]


def test_an_approval_past_its_deadline_is_refused_before_the_supervisor_comes() -> None:
    # Finding 13 of the simulation: the deadline is the approval's, not the Supervisor's next sweep's.
    definition = workflow(REVIEW)
    record, _ = reserved(definition)
    late = ctx(definition, T0 + timedelta(seconds=60))
    assert transitions.approve(record, late, 1).outcome is Outcome.REFUSED
    assert record.state.process_state is ProcessState.WAITING, "refused: nothing changed"
    # A reject says what the deadline's policy would: undo.
    assert transitions.reject(record, late, 1, "too late anyway").outcome is Outcome.MOVED
    assert record.state.process_state is ProcessState.COMPENSATING


@pytest.mark.anyio
async def test_a_late_approval_is_refused_saying_why() -> None:
    actors = Actors(workflow(REVIEW))
    await actors.to_the_wait()
    actors.clock.advance(61)
    with pytest.raises(InvalidState, match="is past its deadline"):
        await actors.tasks.approve("o-1", "review", Caller(actor="ada"))
