"""Step-level operator actions (retry, extend, skip), version guards and the audit trail, on the real
engine over in-memory ports with a manual clock."""

from __future__ import annotations

from datetime import timedelta

import pytest

from engine import transitions
from engine.decisions import Outcome
from engine.errors import InvalidState, NotFound, PreconditionFailed, UnknownStep
from engine.messages import AgentRequest, ReplyOutcome, SchedulerCommand
from engine.state import Phase, ProcessState, StepStatus
from engine.tasks import Caller
from tests.engine.test_state_machine import SETTINGS, World
from tests.engine.test_transitions import ctx, new_record

pytestmark = pytest.mark.anyio


async def running(world: World, order_id: str = "o-1") -> AgentRequest:
    """Submit and claim: the first step is running; its request is returned."""
    await world.submit(order_id)
    await world.kick()
    world.statuses()
    return world.take_request()


async def errored(world: World) -> AgentRequest:
    """Let the first step time out until the Supervisor puts the task in Error."""
    request = await running(world)
    for _ in range(SETTINGS.supervisor_max_failures):
        world.clock.advance(SETTINGS.step_complete_by_seconds + 1)
        await world.supervisor.sweep()
        world.clock.advance(SETTINGS.backoff_max_seconds + 1)  # past the retry time
        await world.kick()
    assert world.store.state("o-1").state.process_state is ProcessState.ERROR
    world.sender.sent.clear()
    return request


# ---- transitions, pure ---------------------------------------------------------------------------------
def test_step_actions_only_touch_the_current_step() -> None:
    record = new_record()
    transitions.claim(record, ctx())
    before = record.model_dump()
    for decision in (
        transitions.retry_step(record, ctx(), 1),
        transitions.extend_step(record, ctx(), 1, 5),
        transitions.skip_step(record, ctx(), 1, "n"),
        transitions.extend_step(record, ctx(), 9, 5),
    ):
        assert decision.outcome is Outcome.REFUSED
    assert record.model_dump() == before


def test_extend_refuses_a_step_already_past_its_complete_by_and_nonpositive_seconds() -> None:
    record = new_record()
    transitions.claim(record, ctx())
    late = record.steps[0].complete_by + timedelta(seconds=1)  # type: ignore[operator]
    assert transitions.extend_step(record, ctx(late), 0, 30).outcome is Outcome.REFUSED
    assert transitions.extend_step(record, ctx(), 0, 0).outcome is Outcome.REFUSED


def test_an_automatic_error_carries_its_audit_entry() -> None:
    record = new_record()
    transitions.claim(record, ctx())
    now = ctx().now
    for _ in range(SETTINGS.supervisor_max_failures):
        now = record.state.complete_by + timedelta(seconds=1)  # type: ignore[operator]
        decision = transitions.recover_expired(record, ctx(now, instance=""))
        if decision.outcome is Outcome.ERRORED:
            break
        transitions.claim(record, ctx(now))
    [entry] = record.pending_audit()
    assert (entry.actor, entry.action, entry.step) == ("supervisor", "error", "first")
    assert (entry.process_state_before, entry.process_state_after) == (
        ProcessState.PROCESSING,
        ProcessState.ERROR,
    )
    assert entry.detail and "deadline" in entry.detail
    record.mark_saved()
    assert record.pending_audit() == []


# ---- through the task service --------------------------------------------------------------------------
async def test_retry_redispatches_the_running_step_and_fences_the_old_attempt() -> None:
    world = World()
    old = await running(world)
    record = await world.tasks.get("o-1")
    saved = await world.tasks.retry_step("o-1", "first", Caller("ops", "service is back", record.version))
    assert saved.state.process_state is ProcessState.PENDING and saved.state.failure_count == 0
    await world.kick()
    new = world.take_request()
    assert (new.step, new.attempt, new.idempotency_key) == ("first", old.attempt + 1, old.idempotency_key)
    assert not await world.reply(old)  # the old attempt's answer is fenced out
    assert await world.reply(new)
    assert world.store.state("o-1").steps[0].status is StepStatus.COMPLETED


async def test_retry_from_error_resets_failure_count_and_runs_the_step() -> None:
    world = World()
    await errored(world)
    record = await world.tasks.get("o-1")
    await world.tasks.retry_step("o-1", "first", Caller("ops", None, record.version))
    stored = world.store.state("o-1").state
    assert (stored.process_state, stored.failure_count) == (ProcessState.PENDING, 0)
    await world.kick()
    assert world.take_request().step == "first"


async def test_retry_of_a_failed_undo_resumes_compensation() -> None:
    world = World()
    request = await running(world)
    await world.reply(request)  # first done, second running
    second = world.take_request()
    await world.reply(second, ReplyOutcome.FAILED, error="declined")
    undo = world.take_request()
    await world.reply(undo, ReplyOutcome.FAILED, error="cannot undo")
    assert world.store.state("o-1").state.process_state is ProcessState.ERROR
    version = (await world.tasks.get("o-1")).version
    await world.tasks.retry_step("o-1", "second", Caller("ops", None, version))
    assert world.store.state("o-1").state.process_state is ProcessState.COMPENSATING
    await world.kick()
    again = world.take_request()
    assert again.compensating and again.step == "second" and again.attempt == undo.attempt + 1


async def test_extend_pushes_complete_by_and_resends_the_same_attempt_with_the_new_deadline() -> None:
    world = World()
    old = await running(world)
    version = (await world.tasks.get("o-1")).version
    await world.tasks.extend_step("o-1", "first", 60, Caller("ops", "slow today", version))
    resent = [s for s in world.sender.sent if isinstance(s.body, AgentRequest)]
    assert len(resent) == 1
    body = resent[0].body
    assert (body.attempt, body.idempotency_key) == (old.attempt, old.idempotency_key)
    assert body.complete_by == old.complete_by + timedelta(seconds=60)
    assert resent[0].message_id != f"o-1:0:f:{old.attempt}"  # not swallowed by duplicate detection
    stored = world.store.state("o-1")
    assert stored.state.complete_by == stored.steps[0].complete_by == body.complete_by
    # The Supervisor leaves it alone past the old deadline.
    world.clock.advance(SETTINGS.step_complete_by_seconds + 1)
    report = await world.supervisor.sweep()
    assert report.expired == 0
    assert await world.reply(body)  # the same attempt's reply is accepted


async def test_skip_marks_the_step_done_by_hand_and_continues() -> None:
    world = World()
    await running(world)
    version = (await world.tasks.get("o-1")).version
    await world.tasks.skip_step("o-1", "first", "reserved by phone", Caller("ops", None, version))
    assert world.statuses() == ["step-completed"]
    await world.kick()
    nxt = world.take_request()
    assert nxt.step == "second" and nxt.payload["results"] == {}, "a skipped step returned nothing"
    skipped = world.store.state("o-1").steps[0]
    assert skipped.status is StepStatus.COMPLETED and skipped.result is None
    assert skipped.reason == "skipped by an operator: reserved by phone"


async def test_the_undo_of_a_step_skipped_while_running_waits_for_its_call_to_settle() -> None:
    """Skipped while its call was in flight, the step's call can still land until its CompleteBy plus the
    grace: an undo sent earlier would reach the service first and leave that effect applied."""
    world = World()
    first = await running(world)
    world.clock.advance(2)
    version = (await world.tasks.get("o-1")).version
    await world.tasks.skip_step("o-1", "first", "reserved by phone", Caller("ops", None, version))
    await world.kick()
    second = world.take_request()
    world.statuses()
    await world.reply(second, ReplyOutcome.FAILED, error="declined")  # a lasting failure: undo
    undo_second = world.take_request()
    assert undo_second.compensating and undo_second.step == "second"
    await world.reply(undo_second)
    settled = first.complete_by + timedelta(seconds=SETTINGS.cancel_grace_seconds)
    # No undo of the first step yet: the task waits, unlocked, for a resume at the settle time.
    assert not world.requests()
    [resume] = [s for s in world.sender.sent if s.queue == "scheduler"]
    assert resume.scheduled_at == settled
    record = world.store.state("o-1")
    assert record.state.process_state is ProcessState.COMPENSATING and record.state.locked_by is None
    assert record.state.current_step == 0 and record.steps[0].status is StepStatus.COMPLETED
    assert record.state.complete_by is not None and record.state.complete_by > settled
    # A resume that comes early (a duplicate) changes nothing and sends nothing.
    world.statuses()
    await world.kick()
    assert not world.sender.sent
    assert world.store.state("o-1").model_dump() == record.model_dump()
    assert not await world.reply(first)  # the skipped call's own reply changes nothing
    world.clock.advance((settled - world.clock.now()).total_seconds())
    assert isinstance(resume.body, SchedulerCommand)
    await world.scheduler.handle_command(resume.body)
    undo_first = world.take_request()
    assert undo_first.compensating and undo_first.step == "first"
    await world.reply(undo_first)
    assert world.store.state("o-1").state.process_state is ProcessState.COMPENSATED


async def test_a_step_skipped_after_its_deadline_is_undone_at_once() -> None:
    world = World()
    await errored(world)  # the first step's last call stopped at its CompleteBy, long ago
    version = (await world.tasks.get("o-1")).version
    await world.tasks.skip_step("o-1", "first", "done by hand", Caller("ops", None, version))
    assert world.store.state("o-1").steps[0].undo_not_before is None
    await world.kick()
    second = world.take_request()
    await world.reply(second, ReplyOutcome.FAILED, error="declined")
    await world.reply(world.take_request())  # the second step's undo
    assert world.take_request().step == "first"  # no wait


async def test_a_stale_version_changes_nothing_and_a_wrong_state_says_why() -> None:
    world = World()
    await running(world)
    stale = (await world.tasks.get("o-1")).version
    await world.tasks.extend_step("o-1", "first", 5, Caller("ops", None, stale))
    before = world.store.state("o-1").model_dump()
    audits = len(await world.store.audit("o-1"))
    world.sender.sent.clear()
    with pytest.raises(PreconditionFailed):
        await world.tasks.retry_step("o-1", "first", Caller("ops", None, stale))
    with pytest.raises(PreconditionFailed):
        await world.tasks.cancel("o-1", Caller("ops", None, stale))
    assert world.store.state("o-1").model_dump() == before and not world.sender.sent
    assert len(await world.store.audit("o-1")) == audits
    current = (await world.tasks.get("o-1")).version
    with pytest.raises(InvalidState, match="second is not the current step"):
        await world.tasks.skip_step("o-1", "second", "n", Caller("ops", None, current))
    with pytest.raises(InvalidState, match="needs"):
        await world.tasks.resubmit("o-1", Caller("ops", None, current))
    with pytest.raises(UnknownStep):
        await world.tasks.retry_step("o-1", "nope", Caller("ops", None, current))
    with pytest.raises(NotFound):
        await world.tasks.retry_step("o-2", "nope", Caller("ops", None, current))
    assert world.store.state("o-1").model_dump() == before


async def test_every_action_and_the_automatic_error_are_audited_in_order() -> None:
    world = World()
    await errored(world)
    version = (await world.tasks.get("o-1")).version
    await world.tasks.resubmit("o-1", Caller("user:ann", "fixed the cause", version))
    await world.kick()
    version = (await world.tasks.get("o-1")).version
    await world.tasks.extend_step("o-1", "first", 30, Caller("key:abc", None, version))
    version = (await world.tasks.get("o-1")).version
    await world.tasks.cancel("o-1", Caller("local", "customer asked", version))
    entries = await world.tasks.audit("o-1")
    assert [(e.action, e.actor) for e in entries] == [
        ("error", "supervisor"),
        ("resubmit", "user:ann"),
        ("extend", "key:abc"),
        ("cancel", "local"),
    ]
    resubmit = entries[1]
    assert (resubmit.process_state_before, resubmit.process_state_after, resubmit.note) == (
        ProcessState.ERROR,
        ProcessState.PENDING,
        "fixed the cause",
    )
    assert entries[2].step_state_before is entries[2].step_state_after is StepStatus.RUNNING
    assert entries[2].detail == "CompleteBy pushed by 30 s"
    assert entries[3].process_state_after is ProcessState.COMPENSATING
    assert world.store.state("o-1").state.phase is Phase.COMPENSATE
    with pytest.raises(NotFound):
        await world.tasks.audit("o-2")


async def test_without_a_version_a_change_still_applies_to_the_current_task() -> None:
    world = World()
    await running(world)
    await world.tasks.cancel("o-1")
    [entry] = await world.tasks.audit("o-1")
    assert (entry.action, entry.actor) == ("cancel", "application")
