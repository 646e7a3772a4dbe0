"""Steps side by side (a group): dispatch together, join, per-step fencing and recovery, failure and undo."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engine import transitions
from engine.breaker import BreakerRecord, BreakerState
from engine.decisions import Decision, Outcome
from engine.messages import (
    AgentReply,
    AgentRequest,
    CommandKind,
    ReplyOutcome,
    SchedulerCommand,
    StatusMessage,
)
from engine.settings import EngineSettings
from engine.state import Phase, ProcessState, StepState, StepStatus, TaskRecord, TaskState
from engine.transitions import Context
from engine.workflow import StepDefinition, Timer, WorkflowDefinition

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = EngineSettings(step_complete_by_seconds=10, supervisor_max_failures=3, cancel_grace_seconds=2)
WORKFLOW = WorkflowDefinition(
    name="side-by-side",
    steps=(
        StepDefinition(name="first", agent="alpha", action="do-a", compensation="undo-a"),
        StepDefinition(name="left", agent="beta", action="do-b", compensation="undo-b", group="g"),
        StepDefinition(name="middle", agent="gamma", action="do-c", compensation="undo-c", group="g"),
        StepDefinition(name="right", agent="delta", action="do-d", group="g"),  # cannot be undone
        StepDefinition(name="last", agent="omega", action="do-z", compensation="undo-z"),
    ),
)
GROUP = range(1, 4)


def ctx(now: datetime = T0) -> Context:
    return Context(WORKFLOW, SETTINGS, now, "sched-1")


def new_record() -> TaskRecord:
    record = TaskRecord(
        state=TaskState(order_id="o-1", workflow=WORKFLOW.name, created_at=T0, updated_at=T0),
        steps=[StepState(index=i, name=s.name) for i, s in enumerate(WORKFLOW.steps)],
        input={"n": 1},
        input_hash="h",
    )
    transitions.new_record_state(record, ctx())
    return record


def requests(decision: Decision) -> list[AgentRequest]:
    return [m.body for m in decision.messages if isinstance(m.body, AgentRequest)]


def commands(decision: Decision) -> list[SchedulerCommand]:
    return [m.body for m in decision.messages if isinstance(m.body, SchedulerCommand)]


def answer(
    index: int, attempt: int, outcome: ReplyOutcome = ReplyOutcome.SUCCEEDED, **kw: object
) -> AgentReply:
    return AgentReply(
        order_id="o-1",
        step_index=index,
        attempt=attempt,
        compensating=bool(kw.pop("compensating", False)),
        outcome=outcome,
        **kw,  # type: ignore[arg-type]
    )


def at_group(now: datetime = T0) -> TaskRecord:
    """An order whose first step is done and whose group was just dispatched."""
    record = new_record()
    transitions.claim(record, ctx(now))
    decision = transitions.apply_reply(record, ctx(now), answer(0, 1, result={"a": 1}))
    assert [r.step for r in requests(decision)] == ["left", "middle", "right"]
    return record


def test_the_group_is_dispatched_together_each_step_with_its_own_key_deadline_and_record() -> None:
    record = new_record()
    transitions.claim(record, ctx())
    decision = transitions.apply_reply(record, ctx(), answer(0, 1, result={"a": 1}))
    sent = requests(decision)
    assert [(r.step, r.step_index, r.attempt) for r in sent] == [
        ("left", 1, 1),
        ("middle", 2, 1),
        ("right", 3, 1),
    ]
    assert len({r.idempotency_key for r in sent}) == 3
    assert all(r.payload["results"] == {"a": 1} for r in sent)  # what came before the group
    state = record.state
    assert (state.process_state, state.current_step) == (ProcessState.PROCESSING, 1)
    assert all(record.steps[i].status is StepStatus.RUNNING for i in GROUP)
    assert state.complete_by == min(record.steps[i].complete_by for i in GROUP)  # type: ignore[type-var]
    assert sorted(record.changed_steps()) == [0, 1, 2, 3]  # one save marks them all Running


def test_the_order_moves_on_only_when_every_step_of_the_group_is_done() -> None:
    record = at_group()
    first = transitions.apply_reply(record, ctx(), answer(2, 1, result={"c": 3}))
    assert first.changed and not requests(first)
    assert record.state.process_state is ProcessState.PROCESSING
    second = transitions.apply_reply(record, ctx(), answer(1, 1, result={"b": 2}))
    assert not requests(second)
    last = transitions.apply_reply(record, ctx(), answer(3, 1))
    (request,) = requests(last)
    assert request.step == "last"
    assert request.payload["results"] == {"a": 1, "b": 2, "c": 3}  # the group's results passed on
    # Each step's completion is its own status message: none is taken for a duplicate of another.
    ids = [
        m.message_id for d in (first, second, last) for m in d.messages if isinstance(m.body, StatusMessage)
    ]
    assert len(ids) == len(set(ids)) == 3


def test_a_reply_is_fenced_by_its_own_steps_attempt() -> None:
    record = at_group()
    assert not transitions.apply_reply(record, ctx(), answer(2, 2)).changed  # an attempt never made
    assert not transitions.apply_reply(record, ctx(), answer(4, 1)).changed  # a step after the group
    assert transitions.apply_reply(record, ctx(), answer(2, 1)).changed
    assert not transitions.apply_reply(record, ctx(), answer(2, 1)).changed  # a duplicate


def test_a_failure_lets_the_others_settle_then_undoes_the_group_last_declared_first() -> None:
    record = at_group()
    transitions.apply_reply(record, ctx(), answer(1, 1, result={"b": 2}))
    failed = transitions.apply_reply(record, ctx(), answer(2, 1, ReplyOutcome.FAILED, error="no"))
    state = record.state
    assert (state.process_state, state.phase, state.locked_by) == (
        ProcessState.COMPENSATING,
        Phase.COMPENSATE,
        None,
    )
    assert not requests(failed)  # nothing is undone while "right" may still land
    (resume,) = commands(failed)
    settle = record.steps[3].complete_by + timedelta(seconds=SETTINGS.cancel_grace_seconds)  # type: ignore[operator]
    assert resume.kind is CommandKind.RESUME and state.next_attempt_at == settle
    # The step still in flight completes meanwhile: its result is kept for its undo; nothing else moves.
    kept = transitions.apply_reply(record, ctx(), answer(3, 1, result={"d": 4}))
    assert kept.changed and not kept.messages
    assert record.steps[3].status is StepStatus.COMPLETED and record.steps[3].result == {"d": 4}
    # Once settled, undo: middle (failed: its call may have landed), left, then first; right cannot be undone.
    now = settle + timedelta(seconds=1)
    undone = []
    decision = transitions.claim(record, ctx(now))
    while requests(decision):
        (request,) = requests(decision)
        assert request.compensating
        undone.append(request.step)
        decision = transitions.apply_reply(record, ctx(now), answer(request.step_index, 1, compensating=True))
    assert undone == ["middle", "left", "first"]
    assert record.state.process_state is ProcessState.COMPENSATED


def test_a_claim_before_the_group_settled_dispatches_nothing() -> None:
    record = at_group()
    transitions.apply_reply(record, ctx(), answer(1, 1, ReplyOutcome.FAILED, error="no"))
    assert record.state.next_attempt_at is not None and record.state.next_attempt_at > T0


def test_the_supervisor_recovers_each_expired_step_of_a_group_on_its_own() -> None:
    record = at_group()
    record.steps[3].complete_by = T0 + timedelta(seconds=60)  # "right" still has time
    transitions.apply_reply(record, ctx(), answer(1, 1))  # "left" done
    later = T0 + timedelta(seconds=11)
    decision = transitions.recover_expired(record, ctx(later))
    assert decision.outcome is Outcome.RETRIED
    (retry,) = commands(decision)
    assert (retry.kind, retry.step_index, retry.attempt) == (CommandKind.RETRY, 2, 1)
    middle = record.steps[2]
    assert (middle.failures, record.state.failure_count, middle.status) == (1, 1, StepStatus.RUNNING)
    assert middle.retry_at is not None and middle.retry_at > later
    assert record.steps[3].failures == 0 and record.state.process_state is ProcessState.PROCESSING
    # The retry's time comes: that step alone is dispatched again, a new attempt.
    due = middle.retry_at
    assert not transitions.redispatch(record, ctx(due - timedelta(seconds=5)), 2, 1).changed  # too early
    again = transitions.redispatch(record, ctx(due), 2, 1)
    (request,) = requests(again)
    assert (request.step, request.attempt) == ("middle", 2) and middle.retry_at is None
    assert not transitions.redispatch(record, ctx(due), 2, 1).changed  # a duplicate of the retry
    assert not transitions.apply_reply(record, ctx(due), answer(2, 1)).changed  # the old attempt, fenced


def test_a_lost_retry_is_asked_again_without_counting_a_failure() -> None:
    record = at_group()
    later = T0 + timedelta(seconds=11)
    transitions.recover_expired(record, ctx(later))
    assert [s.failures for s in record.steps[1:4]] == [1, 1, 1]
    lost = record.state.complete_by
    assert lost is not None
    decision = transitions.recover_expired(record, ctx(lost + timedelta(seconds=1)))
    assert decision.outcome is Outcome.KICKED and len(commands(decision)) == 3
    assert [s.failures for s in record.steps[1:4]] == [1, 1, 1]


def test_a_step_of_a_group_failing_too_often_puts_the_order_in_error_naming_it() -> None:
    record = at_group()
    now = T0
    for failure in range(1, SETTINGS.supervisor_max_failures + 1):
        record.steps[1].complete_by = record.steps[2].complete_by = now + timedelta(seconds=999)
        now = record.steps[3].complete_by + timedelta(seconds=1)  # type: ignore[operator]
        decision = transitions.recover_expired(record, ctx(now))
        if failure < SETTINGS.supervisor_max_failures:
            record.steps[3].retry_at = None  # as if the retry ran and timed out again
    assert decision.outcome is Outcome.ERRORED
    (alert,) = decision.alerts
    assert alert.step == "right" and record.state.process_state is ProcessState.ERROR


def test_an_open_breaker_holds_a_step_of_a_group_without_counting_a_failure() -> None:
    record = at_group()
    later = T0 + timedelta(seconds=11)
    breakers = {
        a: BreakerRecord(a, BreakerState.OPEN, 5, later, later + timedelta(seconds=30))
        for a in ("beta", "gamma", "delta")
    }
    decision = transitions.recover_expired(record, ctx(later), breakers)
    assert decision.outcome is Outcome.HELD and len(commands(decision)) == 3
    assert all(record.steps[i].failures == 0 for i in GROUP)
    assert all(record.steps[i].retry_at > later + timedelta(seconds=30) for i in GROUP)  # type: ignore[operator]


def test_a_cancel_during_a_group_waits_for_its_steps_to_settle() -> None:
    record = at_group()
    transitions.apply_reply(record, ctx(), answer(1, 1))
    decision = transitions.cancel(record, ctx())
    assert decision.changed and not requests(decision)
    latest = max(record.steps[i].complete_by for i in (2, 3))  # type: ignore[type-var]
    assert record.state.next_attempt_at == latest + timedelta(seconds=SETTINGS.cancel_grace_seconds)


def test_operators_act_on_any_step_of_the_running_group_alone() -> None:
    record = at_group()
    retried = transitions.retry_step(record, ctx(), 2)
    (retry,) = commands(retried)
    assert (retry.kind, retry.step_index) == (CommandKind.RETRY, 2)
    assert record.state.process_state is ProcessState.PROCESSING
    skipped = transitions.skip_step(record, ctx(), 3, "done by hand")
    assert skipped.changed and not commands(skipped)  # the others run on
    assert record.steps[3].status is StepStatus.COMPLETED
    extended = transitions.extend_step(record, ctx(), 1, 30)
    (request,) = requests(extended)
    assert request.step == "left" and record.steps[1].complete_by == T0 + timedelta(seconds=40)
    assert not transitions.retry_step(record, ctx(), 4).changed  # a step after the group


def test_a_step_of_a_group_whose_service_answers_later_waits_on_its_own() -> None:
    record = at_group()
    accepted = transitions.apply_reply(record, ctx(), answer(2, 1, ReplyOutcome.ACCEPTED))
    assert accepted.changed
    assert record.steps[2].status is StepStatus.WAITING
    assert record.state.process_state is ProcessState.PROCESSING and record.state.waiting_for is None
    transitions.apply_reply(record, ctx(), answer(1, 1))
    transitions.apply_reply(record, ctx(), answer(3, 1))
    (request,) = requests(transitions.apply_reply(record, ctx(), answer(2, 1, result={"c": 1})))
    assert request.step == "last"


def test_the_declaration_refuses_split_single_and_waiting_groups() -> None:
    call = {"agent": "a", "action": "x", "compensation": "y"}
    with pytest.raises(ValueError, match="next to each other"):
        WorkflowDefinition(
            name="w",
            steps=(
                StepDefinition(name="a", group="g", **call),
                StepDefinition(name="b", **call),
                StepDefinition(name="c", group="g", **call),
                StepDefinition(name="d", group="g", **call),
            ),
        )
    with pytest.raises(ValueError, match="at least two steps"):
        WorkflowDefinition(name="w", steps=(StepDefinition(name="a", group="g", **call),))
    with pytest.raises(ValueError, match="a wait cannot be in a group"):
        StepDefinition(name="t", wait=Timer(after_seconds=1), group="g")


def test_a_trial_call_is_carried_uncounted_and_a_callback_wait_is_never_held() -> None:
    record = at_group()
    transitions.apply_reply(
        record, ctx(), answer(3, 1, ReplyOutcome.ACCEPTED)
    )  # "right" waits for its callback
    later = T0 + timedelta(seconds=11)
    # Open past its interval: a trial call is due, and a running step goes again at once to carry it.
    trial = {
        a: BreakerRecord(a, BreakerState.OPEN, 5, later - timedelta(seconds=60), later - timedelta(seconds=1))
        for a in ("beta", "gamma", "delta")
    }
    decision = transitions.recover_expired(record, ctx(later), trial)
    asked = {c.step_index: c for c in commands(decision)}
    assert set(asked) == {1, 2, 3}
    assert [record.steps[i].failures for i in GROUP] == [0, 0, 1]  # the callback's wait counts
    assert all(asked[i].kind is CommandKind.RETRY and record.steps[i].retry_at == later for i in (1, 2))
