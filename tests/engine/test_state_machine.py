"""The Scheduler, Supervisor and task service, driven step by step with a manual clock."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from engine import queues, telemetry
from engine.agent import Agent, TransientError
from engine.breaker import BreakerRecord, BreakerState, MemoryBreakerStore, opened, probe_claimed, probe_ended
from engine.clock import ManualClock
from engine.costs import processed_order
from engine.errors import ConcurrencyError, Conflict, InvalidState
from engine.messages import (
    AgentReply,
    AgentRequest,
    CommandKind,
    ReplyOutcome,
    SchedulerCommand,
    StatusMessage,
)
from engine.parts import EngineParts
from engine.scheduler import Scheduler
from engine.settings import EngineSettings
from engine.state import Phase, ProcessState, StepState, StepStatus, TaskRecord, TaskState
from engine.supervisor import Supervisor
from engine.tasks import TaskService
from engine.workflow import RetryPolicy, StepDefinition, Timer, WorkflowCatalog, WorkflowDefinition
from tests.engine.fakes import MemoryStore, RecordingSender

pytestmark = pytest.mark.anyio

WORKFLOW = WorkflowDefinition(
    name="three-steps",
    steps=(
        StepDefinition(name="first", agent="alpha", action="do-a", compensation="undo-a"),
        StepDefinition(name="second", agent="beta", action="do-b", compensation="undo-b"),
        StepDefinition(name="third", agent="gamma", action="do-c", compensation="undo-c"),
    ),
)
SETTINGS = EngineSettings(
    step_complete_by_seconds=10, supervisor_max_failures=3, backoff_base_seconds=2, backoff_max_seconds=5
)


class World:
    """One store, one sender, one clock, and the engine's actors on them."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.store = MemoryStore()
        self.sender = RecordingSender()
        self.breakers = MemoryBreakerStore()
        parts = EngineParts(
            WorkflowCatalog.of(WORKFLOW), self.store, self.sender, self.clock, SETTINGS, self.breakers
        )
        self.tasks = TaskService(parts)
        self.scheduler = Scheduler(parts, instance="sched-1")
        self.other_scheduler = Scheduler(parts, instance="sched-2")
        self.supervisor = Supervisor(parts)

    async def submit(self, order_id: str = "o-1") -> None:
        created, _ = await self.tasks.submit(order_id, {"n": 1}, "hash-1")
        assert created

    def commands(self) -> list[SchedulerCommand]:
        return [s.body for s in self.sender.take(queues.SCHEDULER_QUEUE)]

    def requests(self) -> list[AgentRequest]:
        return [s.body for s in self.sender.sent if isinstance(s.body, AgentRequest)]

    def take_request(self) -> AgentRequest:
        sent = [s for s in self.sender.sent if isinstance(s.body, AgentRequest)]
        assert len(sent) == 1, f"expected one agent request, got {[s.message_id for s in sent]}"
        self.sender.sent.remove(sent[0])
        return sent[0].body

    def statuses(self) -> list[str]:
        return [
            s.body.event.value
            for s in self.sender.take(queues.STATUS_QUEUE)
            if isinstance(s.body, StatusMessage)
        ]

    async def reply(
        self, request: AgentRequest, outcome: ReplyOutcome = ReplyOutcome.SUCCEEDED, **kw: object
    ) -> bool:
        return await self.scheduler.handle_reply(
            AgentReply(
                order_id=request.order_id,
                step_index=request.step_index,
                attempt=request.attempt,
                compensating=request.compensating,
                outcome=outcome,
                saved_task=request.saved_task,  # returned as the Agent returns it
                **kw,  # type: ignore[arg-type]
            )
        )

    async def kick(self) -> None:
        for command in self.commands():
            await self.scheduler.handle_command(command)


async def test_submit_records_pending_state_and_steps_then_kicks_the_scheduler() -> None:
    world = World()
    await world.submit()
    record = world.store.state("o-1")
    assert record.state.process_state is ProcessState.PENDING
    assert record.state.locked_by is None and record.state.failure_count == 0
    assert [s.status for s in record.steps] == [StepStatus.NOT_STARTED] * 3
    assert [c.kind for c in world.commands()] == [CommandKind.START]


class ClaimingWorld(World):
    """The world as the app builds it: the submission claims its new task with a Scheduler of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.submitting = Scheduler(self.tasks.parts, instance="api-1")
        self.tasks = TaskService(self.tasks.parts, self.submitting)


async def test_a_submission_with_a_scheduler_writes_the_task_claimed_and_sends_the_first_request() -> None:
    world = ClaimingWorld()
    created, answer = await world.tasks.submit("o-1", {"n": 1}, "hash-1")
    assert created and answer.state.process_state is ProcessState.PROCESSING
    # One write for the whole submission: the insert, with the task claimed (no second save to claim it).
    assert world.store.operations == 1
    record = world.store.state("o-1")
    assert record.state.process_state is ProcessState.PROCESSING and record.state.locked_by == "api-1"
    assert record.steps[0].status is StepStatus.RUNNING and record.state.complete_by is not None
    assert world.commands() == []
    [request] = world.requests()
    assert (request.step, request.attempt) == ("first", 1) and request.saved_task
    assert world.statuses() == ["received"]
    # The rest of the order runs as it would after a kick: the request carries the task as saved.
    assert await world.reply(world.take_request(), result={})
    assert world.take_request().step == "second"
    # A duplicate submission changes nothing and claims nothing.
    created, again = await world.tasks.submit("o-1", {"n": 1}, "hash-1")
    assert not created and again.state.process_state is ProcessState.PROCESSING
    assert world.commands() == [] and world.requests() == []


async def test_a_first_dispatch_that_fails_at_submission_leaves_the_claimed_task_to_the_supervisor() -> None:
    world = ClaimingWorld()
    world.sender.failing.add(queues.agent_queue("alpha"))
    created, answer = await world.tasks.submit("o-1", {"n": 1}, "hash-1")
    world.sender.failing.clear()
    assert created and answer.state.process_state is ProcessState.PROCESSING
    assert world.requests() == [] and world.commands() == []
    # The task is stored claimed, its first step running: once its CompleteBy passes, the Supervisor
    # counts the failure and re-queues it with backoff, as after a Scheduler's crash between save and send.
    world.clock.advance(SETTINGS.step_complete_by_seconds + 1)
    report = await world.supervisor.sweep()
    assert report.retried == 1
    assert world.store.state("o-1").state.failure_count == 1


async def test_a_task_that_waits_from_its_start_is_written_pending_and_the_scheduler_kicked() -> None:
    waits_first = WorkflowDefinition(
        name="later",
        steps=(
            StepDefinition(name="hold", wait=Timer(after_seconds=30)),
            StepDefinition(name="go", agent="alpha", action="do-a", compensation="undo-a"),
        ),
    )
    world = World()
    parts = EngineParts(
        WorkflowCatalog.of(waits_first), world.store, world.sender, world.clock, SETTINGS, world.breakers
    )
    tasks = TaskService(parts, Scheduler(parts, instance="api-1"))
    created, answer = await tasks.submit("o-1", {}, "hash-1")
    assert created and answer.state.process_state is ProcessState.PENDING and answer.state.locked_by is None
    assert world.store.state("o-1").steps[0].status is StepStatus.NOT_STARTED
    assert [c.kind for c in world.commands()] == [CommandKind.START] and world.requests() == []


async def test_a_claim_that_would_not_leave_a_step_running_is_not_taken_at_the_insert() -> None:
    world = ClaimingWorld()
    record = TaskRecord(
        state=TaskState(
            order_id="o-1",
            workflow=WORKFLOW.name,
            workflow_version=WORKFLOW.version,
            created_at=world.clock.now(),
            updated_at=world.clock.now(),
        ),
        steps=[StepState(index=i, name=s.name) for i, s in enumerate(WORKFLOW.steps)],
        input={},
        input_hash="hash-1",
    )
    for step in record.steps:
        step.status = StepStatus.COMPLETED  # nothing left to run: the claim would finish the task
    assert world.submitting.claim_new(record) is None


async def test_same_id_same_body_is_idempotent_and_other_body_conflicts() -> None:
    world = World()
    await world.submit()
    world.commands()
    created, _ = await world.tasks.submit("o-1", {"n": 1}, "hash-1")
    assert not created and world.commands() == []
    with pytest.raises(Conflict):
        await world.tasks.submit("o-1", {"n": 2}, "hash-2")


async def test_happy_path_runs_steps_in_order_and_records_results() -> None:
    world = World()
    await world.submit()
    await world.kick()
    seen = []
    for _ in range(3):
        request = world.take_request()
        seen.append((request.step, request.action, request.attempt, request.idempotency_key))
        assert await world.reply(request, result={"ref": request.step})
    assert seen == [
        ("first", "do-a", 1, "o-1:first"),
        ("second", "do-b", 1, "o-1:second"),
        ("third", "do-c", 1, "o-1:third"),
    ]
    record = world.store.state("o-1")
    assert record.state.process_state is ProcessState.PROCESSED
    assert record.state.locked_by is None and record.state.complete_by is None
    assert [s.result for s in record.steps] == [{"ref": "first"}, {"ref": "second"}, {"ref": "third"}]
    assert world.statuses() == ["received", "step-completed", "step-completed", "step-completed", "processed"]


async def test_a_straight_run_sends_what_the_cost_formula_predicts() -> None:
    """engine.costs is the one formula the tests and the Capacity figures use: the engine is held to it."""
    world = World()
    await world.submit()
    sent: Counter[str] = Counter()
    replies = 0
    while batch := world.sender.take():
        for message in batch:
            sent[message.queue] += 1
            if isinstance(message.body, SchedulerCommand):
                await world.scheduler.handle_command(message.body)
            elif isinstance(message.body, AgentRequest):
                replies += 1  # an Agent's reply, handed to the Scheduler here rather than queued
                assert await world.reply(message.body, result={})
    assert world.store.state("o-1").state.process_state is ProcessState.PROCESSED
    traffic = processed_order(WORKFLOW, kicked=True)  # this world's submission kicks the Scheduler
    assert {**sent, queues.REPLY_QUEUE: replies} == traffic.messages()
    assert replies == len(WORKFLOW.steps)


async def test_claim_is_exclusive_and_records_locked_by_and_complete_by() -> None:
    world = World()
    await world.submit()
    (command,) = world.commands()
    assert await world.scheduler.handle_command(command)
    assert not await world.other_scheduler.handle_command(command)  # duplicate delivery: not claimable
    state = world.store.state("o-1").state
    assert state.locked_by == "sched-1" and state.process_state is ProcessState.PROCESSING
    assert state.complete_by == world.clock.now().replace() + __import__("datetime").timedelta(seconds=10)
    assert len(world.requests()) == 1


async def test_request_ttl_is_the_time_left_to_complete_by() -> None:
    world = World()
    await world.submit()
    await world.kick()
    sent = [s for s in world.sender.sent if isinstance(s.body, AgentRequest)]
    assert sent[0].time_to_live_seconds == pytest.approx(10)
    assert sent[0].queue == "agent-alpha" and sent[0].reply_to == queues.REPLY_QUEUE


async def test_stale_and_duplicate_replies_are_fenced_out() -> None:
    world = World()
    await world.submit()
    await world.kick()
    first = world.take_request()
    assert await world.reply(first)
    assert not await world.reply(first)  # duplicate: the task moved on to the second step
    second = world.take_request()
    stale = second.model_copy(update={"attempt": 7})
    assert not await world.reply(stale)
    assert world.store.state("o-1").steps[1].status is StepStatus.RUNNING


async def test_permanent_failure_at_last_step_compensates_in_reverse_order() -> None:
    world = World()
    await world.submit()
    await world.kick()
    await world.reply(world.take_request())
    await world.reply(world.take_request())
    await world.reply(world.take_request(), ReplyOutcome.FAILED, error="address not deliverable")
    undone = []
    for _ in range(3):
        request = world.take_request()
        assert request.compensating
        undone.append((request.step, request.action, request.idempotency_key))
        assert await world.reply(request)
    # The failed step is compensated too: it may have been applied before a lost reply.
    assert undone == [
        ("third", "undo-c", "o-1:third"),
        ("second", "undo-b", "o-1:second"),
        ("first", "undo-a", "o-1:first"),
    ]
    record = world.store.state("o-1")
    assert record.state.process_state is ProcessState.COMPENSATED
    assert [s.status for s in record.steps] == [StepStatus.COMPENSATED] * 3
    assert "address not deliverable" in (record.state.last_error or "")
    assert world.statuses()[-1] == "compensated"


async def test_permanent_failure_at_first_step_compensates_only_that_step() -> None:
    world = World()
    await world.submit()
    await world.kick()
    await world.reply(world.take_request(), ReplyOutcome.FAILED, error="no stock")
    request = world.take_request()
    assert (request.step, request.compensating) == ("first", True)
    await world.reply(request)
    assert world.store.state("o-1").state.process_state is ProcessState.COMPENSATED
    assert world.store.state("o-1").steps[1].status is StepStatus.NOT_STARTED


async def undo_of_a_failed_first_step(world: World) -> AgentRequest:
    """Submit an order whose first step fails for good: the request to undo that step."""
    await world.submit()
    await world.kick()
    await world.reply(world.take_request(), ReplyOutcome.FAILED, error="no stock")
    return world.take_request()


async def test_failed_compensation_sets_error_and_alerts(caplog: pytest.LogCaptureFixture) -> None:
    world = World()
    undo = await undo_of_a_failed_first_step(world)
    with caplog.at_level(logging.ERROR, logger="engine"):
        await world.reply(undo, ReplyOutcome.FAILED, error="cannot release")
    assert world.store.state("o-1").state.process_state is ProcessState.ERROR
    assert any(telemetry.ORDER_ENTERED_ERROR in r.getMessage() for r in caplog.records)


def _alerts(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith(f"event {telemetry.ORDER_ENTERED_ERROR}")]


async def test_an_alert_lost_between_the_save_and_its_raising_is_raised_by_the_supervisor(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World()
    undo = await undo_of_a_failed_first_step(world)
    world.sender.failing.add(queues.STATUS_QUEUE)  # the process dies, as it were, between save and alert
    with caplog.at_level(logging.INFO, logger="engine"), pytest.raises(ConnectionError):
        await world.reply(undo, ReplyOutcome.FAILED, error="cannot release")
    state = world.store.state("o-1").state
    assert state.process_state is ProcessState.ERROR and state.alert_pending
    assert not _alerts(caplog)
    world.sender.failing.clear()
    # The task's watch entry comes due: the Supervisor raises the alert, says so, and stops watching.
    world.clock.advance(SETTINGS.step_complete_by_seconds + 1)
    with caplog.at_level(logging.INFO, logger="engine"):
        report = await world.supervisor.sweep()
    assert report.alerted == 1 and report.unwatched == 1
    [alert] = _alerts(caplog)
    assert alert.orderId == "o-1" and "cannot release" in alert.reason
    assert not world.store.state("o-1").state.alert_pending
    caplog.clear()
    world.clock.advance(100)
    with caplog.at_level(logging.INFO, logger="engine"):
        assert (await world.supervisor.sweep()).alerted == 0
    assert not _alerts(caplog)


async def test_an_entry_into_error_raises_one_alert_though_a_sweep_comes_before_it_is_recorded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The process that enters Error raises the alert and records it moments after its save; a sweep that
    comes in between (another worker's, as every worker sweeps) leaves it to that process, and raises it
    only if it is still owed once that process has had a step's budget to do so (it died)."""
    world = World()
    undo = await undo_of_a_failed_first_step(world)
    world.clock.advance(5)
    send, swept = world.sender.send, []

    async def sweep_between(queue: str, body: Any, **kwargs: Any) -> None:
        await send(queue, body, **kwargs)
        if isinstance(body, StatusMessage) and body.event.value == "error" and not swept:
            world.clock.advance(6)  # the watch entry is due; the Error is 6 s old
            swept.append(await world.supervisor.sweep())

    world.sender.send = sweep_between  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="engine"):
        await world.reply(undo, ReplyOutcome.FAILED, error="cannot release")
        [report] = swept
        assert report.alerted == 0 and report.rewatched == 1
        world.clock.advance(100)
        assert (await world.supervisor.sweep()).unwatched == 1
    assert len(_alerts(caplog)) == 1
    assert not world.store.state("o-1").state.alert_pending


async def test_an_alert_raised_is_recorded_so_the_supervisor_does_not_raise_it_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World()
    await world.reply(await undo_of_a_failed_first_step(world), ReplyOutcome.FAILED, error="cannot release")
    assert not world.store.state("o-1").state.alert_pending
    world.clock.advance(SETTINGS.step_complete_by_seconds + 1)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="engine"):
        report = await world.supervisor.sweep()
    assert report.alerted == 0 and report.unwatched == 1
    assert not _alerts(caplog)


async def test_supervisor_retries_a_timed_out_step_with_growing_backoff_then_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World()
    await world.submit()
    await world.kick()
    first = world.take_request()
    waits = []
    for failure in (1, 2):
        world.clock.advance(10)  # complete-by passes: the agent went silent
        report = await world.supervisor.sweep()
        assert report.retried == 1
        state = world.store.state("o-1").state
        assert state.process_state is ProcessState.PENDING and state.locked_by is None
        assert state.failure_count == failure
        (scheduled,) = [s for s in world.sender.take(queues.SCHEDULER_QUEUE)]
        assert scheduled.scheduled_at is not None
        waits.append((scheduled.scheduled_at - world.clock.now()).total_seconds())
        # A command that arrives before the retry time is ignored; at the time it claims again.
        assert not await world.scheduler.handle_command(scheduled.body)
        world.clock.advance(waits[-1])
        assert await world.scheduler.handle_command(scheduled.body)
        again = world.take_request()
        assert again.step == "first" and again.attempt == failure + 1
        assert again.idempotency_key == first.idempotency_key
    assert waits == [2, 4]
    world.clock.advance(10)
    with caplog.at_level(logging.ERROR, logger="engine"):
        report = await world.supervisor.sweep()
    assert report.errored == 1
    state = world.store.state("o-1").state
    assert state.process_state is ProcessState.ERROR and state.failure_count == 3
    assert any(telemetry.ORDER_ENTERED_ERROR in r.getMessage() for r in caplog.records)
    assert world.statuses()[-1] == "error"
    # Error is terminal for the Supervisor: it no longer finds the task.
    world.clock.advance(100)
    assert (await world.supervisor.sweep()).expired == 0


async def test_late_reply_after_supervisor_recovery_is_dropped() -> None:
    world = World()
    await world.submit()
    await world.kick()
    late = world.take_request()
    world.clock.advance(10)
    await world.supervisor.sweep()
    assert not await world.reply(late)
    assert world.store.state("o-1").state.process_state is ProcessState.PENDING


async def test_resubmit_after_error_resets_failure_count_and_processes() -> None:
    world = World()
    await world.submit()
    await world.kick()
    world.take_request()
    for _ in range(3):
        world.clock.advance(10)  # the step times out
        await world.supervisor.sweep()
        world.clock.advance(5)  # past the backoff: the Scheduler claims the retry
        await world.kick()
        world.sender.sent.clear()
    assert world.store.state("o-1").state.process_state is ProcessState.ERROR
    with pytest.raises(InvalidState):
        await world.tasks.cancel("o-1")
    await world.tasks.resubmit("o-1")
    state = world.store.state("o-1").state
    assert state.process_state is ProcessState.PENDING and state.failure_count == 0
    await world.kick()
    for _ in range(3):
        await world.reply(world.take_request())
    assert world.store.state("o-1").state.process_state is ProcessState.PROCESSED
    with pytest.raises(InvalidState):
        await world.tasks.resubmit("o-1")


async def test_lost_kick_is_rekicked_by_the_supervisor() -> None:
    world = World()
    await world.submit()
    world.commands()  # the kick is lost
    world.clock.advance(10)
    report = await world.supervisor.sweep()
    assert report.kicked == 1
    assert world.store.state("o-1").state.failure_count == 0
    await world.kick()
    assert world.take_request().step == "first"


async def test_concurrent_supervisors_recover_a_task_once() -> None:
    world = World()
    await world.submit()
    await world.kick()
    world.take_request()
    world.clock.advance(10)
    entries = [e async for e in world.store.expired(world.clock.now())]
    loaded = [await world.store.load(e.order_id) for e in entries for _ in range(2)]
    from engine import transitions
    from engine.transitions import Context

    wins = 0
    for record in loaded:
        assert record is not None
        transitions.recover_expired(record, Context(WORKFLOW, SETTINGS, world.clock.now()))
        try:
            await world.store.save(record)
            wins += 1
        except ConcurrencyError:
            pass
    assert wins == 1 and world.store.state("o-1").state.failure_count == 1


async def test_cancel_while_a_step_runs_waits_for_its_deadline_then_compensates() -> None:
    world = World()
    await world.submit()
    await world.kick()
    await world.reply(world.take_request())
    running = world.take_request()  # second step is running
    await world.tasks.cancel("o-1")
    state = world.store.state("o-1").state
    assert state.process_state is ProcessState.COMPENSATING and state.phase is Phase.COMPENSATE
    (resume,) = world.sender.take(queues.SCHEDULER_QUEUE)
    assert resume.scheduled_at is not None and resume.scheduled_at > running.complete_by
    assert not await world.reply(running)  # the running step's late reply is fenced out
    world.clock.advance((resume.scheduled_at - world.clock.now()).total_seconds())
    assert await world.scheduler.handle_command(resume.body)
    order = []
    for _ in range(2):
        request = world.take_request()
        order.append(request.step)
        await world.reply(request)
    assert order == ["second", "first"]
    assert world.store.state("o-1").state.process_state is ProcessState.COMPENSATED


async def test_cancel_just_after_a_running_steps_deadline_still_waits_out_the_grace() -> None:
    """The Agent gave up at CompleteBy, but the call it gave up on can land within the grace after it: a
    cancel that comes in between (before the Supervisor has swept) must not undo the step at once."""
    world = World()
    await world.submit()
    await world.kick()
    await world.reply(world.take_request())
    running = world.take_request()  # the second step is running
    world.clock.advance((running.complete_by - world.clock.now()).total_seconds() + 0.2)
    await world.tasks.cancel("o-1")
    assert not world.requests()  # no undo yet
    (resume,) = world.sender.take(queues.SCHEDULER_QUEUE)
    assert resume.scheduled_at == running.complete_by + timedelta(seconds=SETTINGS.cancel_grace_seconds)


async def test_cancel_before_any_step_started_compensates_at_once() -> None:
    world = World()
    await world.submit()
    world.commands()
    await world.tasks.cancel("o-1")
    assert world.store.state("o-1").state.process_state is ProcessState.COMPENSATED
    with pytest.raises(InvalidState):
        await world.tasks.cancel("o-1")


async def test_timed_out_compensation_is_retried_then_errors() -> None:
    world = World()
    await world.submit()
    await world.kick()
    await world.reply(world.take_request(), ReplyOutcome.FAILED, error="no stock")
    first = world.take_request()
    world.clock.advance(10)
    await world.supervisor.sweep()
    state = world.store.state("o-1").state
    assert state.process_state is ProcessState.COMPENSATING and state.locked_by is None
    (resume,) = world.sender.take(queues.SCHEDULER_QUEUE)
    world.clock.advance(2)
    assert await world.scheduler.handle_command(resume.body)
    again = world.take_request()
    assert again.compensating and again.attempt == first.attempt + 1
    await world.reply(again)
    assert world.store.state("o-1").state.process_state is ProcessState.COMPENSATED


async def test_sweep_ignores_work_that_is_not_expired() -> None:
    world = World()
    for i in range(3):
        await world.submit(f"o-{i}")
    await world.kick()
    world.clock.advance(9)
    assert (await world.supervisor.sweep()).expired == 0


async def test_the_sweep_event_reports_every_count(caplog: pytest.LogCaptureFixture) -> None:
    world = World()
    await world.submit()
    world.commands()  # the kick is lost
    world.clock.advance(10)
    with caplog.at_level(logging.INFO, logger="engine"):
        await world.supervisor.sweep()
    (event,) = [r for r in caplog.records if telemetry.SUPERVISOR_SWEEP_COMPLETED in r.getMessage()]
    counts = {k: getattr(event, k) for k in ("expired", "kicked", "retried", "errored", "lostRaces")}
    assert counts == {"expired": 1, "kicked": 1, "retried": 0, "errored": 0, "lostRaces": 0}


async def test_the_failure_count_that_decides_error_is_per_step() -> None:
    # The pattern's Supervisor keeps a failure count per step: one timeout on each of the three steps is
    # not a step that keeps failing, so the order finishes; the task's FailureCount keeps the total.
    world = World()
    await world.submit()
    await world.kick()
    for step in ("first", "second", "third"):
        request = world.take_request()
        assert request.step == step and request.attempt == 1
        world.clock.advance(10)  # complete-by passes once
        report = await world.supervisor.sweep()
        assert report.retried == 1 and report.errored == 0
        (retry,) = world.commands()
        world.clock.advance(5)
        assert await world.scheduler.handle_command(retry)
        again = world.take_request()
        assert again.step == step and again.attempt == 2
        assert await world.reply(again)
    record = world.store.state("o-1")
    assert record.state.process_state is ProcessState.PROCESSED
    assert record.state.failure_count == 3
    assert [s.failures for s in record.steps] == [1, 1, 1]


async def test_timeouts_of_a_step_before_its_undo_do_not_count_against_the_undo() -> None:
    world = World()
    await world.submit()
    await world.kick()
    world.take_request()
    world.clock.advance(10)
    assert (await world.supervisor.sweep()).retried == 1
    (retry,) = world.commands()
    world.clock.advance(5)
    await world.scheduler.handle_command(retry)
    again = world.take_request()
    assert again.attempt == 2 and world.store.state("o-1").steps[0].failures == 1
    assert await world.reply(again, ReplyOutcome.FAILED, error="declined")
    record = world.store.state("o-1")
    assert record.state.phase is Phase.COMPENSATE and [s.failures for s in record.steps] == [0, 0, 0]


# ---- the Supervisor and open circuit breakers ------------------------------------------------------------
async def open_breaker(world: World, service: str, seconds: float) -> BreakerRecord:
    """Open (or re-open after a failed trial call) a service's breaker for ``seconds`` from now."""
    now = world.clock.now()
    current = await world.breakers.load(service) or BreakerRecord(service)
    changed = opened(current, now, 5, 5, seconds)
    if changed is None:  # open already: a trial call that failed
        probing = probe_claimed(current, now, "agent-1", 3)
        assert probing is not None
        changed = probe_ended(probing, now, "agent-1", False, seconds)
    assert changed is not None
    return await world.breakers.save(changed)


async def test_an_open_breaker_holds_expired_work_without_counting_failures_for_a_long_outage() -> None:
    world = World()
    await world.submit()
    await world.kick()
    world.take_request()
    breaker = await open_breaker(world, "alpha", 30)
    world.clock.advance(10)  # complete-by passes while the service is down
    report = await world.supervisor.sweep()
    assert (report.expired, report.held, report.retried, report.errored) == (1, 1, 0, 0)
    assert world.commands() == []  # not re-queued
    record = world.store.state("o-1")
    assert record.state.process_state is ProcessState.PROCESSING
    assert record.state.failure_count == 0 and record.steps[0].failures == 0
    assert breaker.open_until is not None
    assert record.state.complete_by == breaker.open_until + timedelta(seconds=SETTINGS.hold_margin_seconds)
    assert record.state.hold_end == record.state.complete_by  # what operators see as heldUntil
    # Ten minutes of outage: at each openUntil a trial call fails and re-opens the breaker; the hold ends
    # a margin later, finds it open again, and holds again.
    margin = SETTINGS.hold_margin_seconds
    for _ in range(20):
        hold_end = world.store.state("o-1").state.complete_by
        assert hold_end is not None
        world.clock.advance((hold_end - world.clock.now()).total_seconds() - margin)
        await open_breaker(world, "alpha", 30)
        world.clock.advance(margin)
        assert (await world.supervisor.sweep()).held == 1
    record = world.store.state("o-1")
    assert record.state.process_state is ProcessState.PROCESSING and record.state.failure_count == 0
    assert world.commands() == [] and world.requests() == []


async def close_breaker(world: World, service: str) -> None:
    """A trial call that succeeded."""
    current = await world.breakers.load(service)
    assert current is not None
    probing = probe_claimed(current, world.clock.now(), "agent-1", 3)
    assert probing is not None
    probing = await world.breakers.save(probing)
    closed = probe_ended(probing, world.clock.now(), "agent-1", True, 5)
    assert closed is not None
    await world.breakers.save(closed)


async def test_held_work_is_given_back_uncharged_when_the_breaker_wants_a_trial_or_the_hold_ends() -> None:
    world = World()
    await world.submit()
    await world.kick()
    world.take_request()
    await open_breaker(world, "alpha", 5)
    world.clock.advance(10)  # complete-by passes; the breaker's open interval is over: a trial is due
    report = await world.supervisor.sweep()
    assert (report.released, report.held, report.retried) == (1, 0, 0)
    (resume,) = world.commands()
    state = world.store.state("o-1").state
    assert state.process_state is ProcessState.PENDING and state.failure_count == 0
    assert state.hold_end is None
    assert await world.scheduler.handle_command(resume)  # at once: no backoff
    assert world.take_request().attempt == 2  # it carries the trial call
    # The trial call fails: held; then another trial call succeeds before the hold ends.
    await open_breaker(world, "alpha", 20)
    world.clock.advance(10)
    assert (await world.supervisor.sweep()).held == 1
    world.clock.advance(10)
    await close_breaker(world, "alpha")
    world.clock.advance(SETTINGS.hold_margin_seconds)
    report = await world.supervisor.sweep()  # the hold is over: no failure, the step goes again
    assert (report.released, report.retried) == (1, 0)
    assert world.store.state("o-1").state.failure_count == 0
    assert world.store.state("o-1").state.hold_end is None  # given back: no longer held
    (resume,) = world.commands()
    assert await world.scheduler.handle_command(resume)
    assert world.take_request().attempt == 3
    # A timeout with the service healthy counts as before.
    world.clock.advance(10)
    assert (await world.supervisor.sweep()).retried == 1
    assert world.store.state("o-1").steps[0].failures == 1


async def test_a_hung_call_that_opens_the_breaker_gets_its_step_a_second_attempt_uncharged() -> None:
    """A call that hangs until CompleteBy counts against its service's breaker, after the failed calls of
    other orders in the same process. When it is the call that opens the breaker, the Supervisor holds the
    task and then releases it without counting a failure: the step runs again, and the order can finish
    with FailureCount 0 although its step ran twice."""
    world = World()
    service_up = False

    async def do_c(request: AgentRequest, timeout: float) -> dict[str, Any]:
        if not service_up:
            world.clock.advance(timeout)  # no answer within the call's timeout, which is CompleteBy
            raise TransientError("gamma: timed out")
        return {"ref": request.idempotency_key}

    async def sleep(seconds: float) -> None:
        world.clock.advance(seconds)

    # The default policy, with the open interval of the end-to-end stack (BREAKER_RESET_SECONDS=1).
    policy = RetryPolicy(breaker_reset_seconds=1)
    agent = Agent("gamma", {"do-c": do_c}, world.sender, world.clock, policy, sleep, breakers=world.breakers)
    for n in range(2, policy.breaker_fail_max + 1):  # attempts of other orders that gave up the same way
        other = AgentRequest(
            order_id=f"o-{n}",
            step="third",
            step_index=2,
            attempt=1,
            action="do-c",
            idempotency_key=f"o-{n}:third",
            complete_by=world.clock.now() + timedelta(seconds=3),
        )
        assert await agent.handle(other) is None
    assert agent.breaker.state is BreakerState.CLOSED
    await world.submit()
    await world.kick()
    for _ in range(2):
        assert await world.reply(world.take_request())
    hung = world.take_request()
    assert await agent.handle(hung) is None
    assert agent.breaker.state is BreakerState.OPEN  # opened by the hung call, at CompleteBy
    world.clock.advance(0.5)
    assert (await world.supervisor.sweep()).held == 1
    world.clock.advance(policy.breaker_reset_seconds + SETTINGS.hold_margin_seconds)
    report = await world.supervisor.sweep()
    assert (report.released, report.retried) == (1, 0)
    (resume,) = world.commands()
    assert await world.scheduler.handle_command(resume)
    again = world.take_request()
    assert again.attempt == 2
    service_up = True
    reply = await agent.handle(again)  # the trial call: it closes the breaker
    assert reply is not None and reply.outcome is ReplyOutcome.SUCCEEDED
    assert await world.reply(again, result=reply.result)
    record = world.store.state("o-1")
    assert record.state.process_state is ProcessState.PROCESSED
    assert (record.state.failure_count, record.steps[2].attempts) == (0, 2)
    assert agent.breaker.state is BreakerState.CLOSED


async def test_the_sweep_reads_the_breakers_once_and_only_when_something_expired() -> None:
    world = World()
    for i in range(3):
        await world.submit(f"o-{i}")
    await world.kick()
    await open_breaker(world, "alpha", 60)
    before = world.breakers.operations
    assert (await world.supervisor.sweep()).expired == 0
    assert world.breakers.operations == before  # nothing expired: nothing read
    world.clock.advance(10)
    assert (await world.supervisor.sweep()).held == 3
    assert world.breakers.operations == before + 1


async def test_a_submitter_s_order_reports_to_its_own_status_queue_under_the_id_it_gave() -> None:
    world = World()
    task_id = queues.scoped_id("o-1", "web")
    assert task_id == "web.o-1" and queues.unscoped_id(task_id, "web") == "o-1"
    created, record = await world.tasks.submit(task_id, {"n": 1}, "hash-1", submitter="web")
    assert created and (record.state.submitter, record.state.status_queue) == ("web", "order-status-web")
    await world.kick()
    await world.reply(world.take_request())
    assert world.statuses() == []  # nothing on the shared queue
    mine = world.sender.take(queues.status_queue("web"))
    assert [s.body.event.value for s in mine] == ["received", "step-completed"]
    assert {(s.body.order_id, s.correlation_id) for s in mine} == {("o-1", "o-1")}
    assert all(s.message_id.startswith("web.o-1:") for s in mine)  # unique across storefronts
