"""The state machine's table and its transitions as pure functions on in-memory records (no I/O)."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from engine import machine, telemetry, transitions
from engine.breaker import BreakerRecord, BreakerState
from engine.decisions import REFUSED, Decision, Outcome
from engine.errors import InvalidState
from engine.machine import Operation
from engine.messages import AgentReply, AgentRequest, ReplyOutcome, reply_message_id, request_message_id
from engine.settings import EngineSettings
from engine.state import Phase, ProcessState, StepState, StepStatus, TaskRecord, TaskState
from engine.transitions import Context
from engine.workflow import Approval, RetryPolicy, StepDefinition, Timer, Update, WorkflowDefinition

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
WORKFLOW = WorkflowDefinition(
    name="two-steps",
    steps=(
        StepDefinition(name="first", agent="alpha", action="do-a", compensation="undo-a"),
        StepDefinition(name="second", agent="beta", action="do-b", compensation="undo-b"),
    ),
)
SETTINGS = EngineSettings(step_complete_by_seconds=10, supervisor_max_failures=2, cancel_grace_seconds=1)


class Counted(BaseModel):
    """An input whose number may change until the second call reads it."""

    model_config = ConfigDict(extra="forbid")
    n: int


def waiting_workflow(on_deadline: str) -> WorkflowDefinition:
    """A call, a timer then an approval with the given deadline policy (a wait after a wait), a timer then
    a call, and a timer last (a wait ends the order); its input may be updated until the second call."""
    return WorkflowDefinition(
        name="waits",
        input=Counted,
        updates=(Update(fields=("n",), until="second"),),
        steps=(
            StepDefinition(name="first", agent="alpha", action="do-a", compensation="undo-a"),
            StepDefinition(name="window", wait=Timer(after_seconds=30)),
            StepDefinition(name="review", wait=Approval(deadline_seconds=60, on_deadline=on_deadline)),
            StepDefinition(name="hold", wait=Timer(after_seconds=5)),
            StepDefinition(name="second", agent="beta", action="do-b", compensation="undo-b"),
            StepDefinition(name="cool-off", wait=Timer(after_seconds=5)),
        ),
    )


def grouped_workflow() -> WorkflowDefinition:
    """A call, three calls side by side (a group), then a call."""
    return WorkflowDefinition(
        name="side-by-side",
        steps=(
            StepDefinition(name="first", agent="alpha", action="do-a", compensation="undo-a"),
            *(
                StepDefinition(
                    name=f"side-{n}", agent=f"svc-{n}", action="do", compensation="undo", group="g"
                )
                for n in range(3)
            ),
            StepDefinition(name="last", agent="beta", action="do-b", compensation="undo-b"),
        ),
    )


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def new_record(order_id: str = "o-1") -> TaskRecord:
    record = TaskRecord(
        state=TaskState(order_id=order_id, workflow=WORKFLOW.name, created_at=T0, updated_at=T0),
        steps=[StepState(index=i, name=s.name) for i, s in enumerate(WORKFLOW.steps)],
        input={"n": 1},
        input_hash="h",
    )
    transitions.new_record_state(record, Context(WORKFLOW, SETTINGS, T0))
    return record


def ctx(now: datetime = T0, instance: str = "sched-1") -> Context:
    return Context(WORKFLOW, SETTINGS, now, instance)


def reply(record: TaskRecord, outcome: ReplyOutcome, compensating: bool, **kw: object) -> AgentReply:
    state = record.state
    return AgentReply(
        order_id=state.order_id,
        step_index=state.current_step,
        attempt=max(state.attempt, 1),
        compensating=compensating,
        outcome=outcome,
        **kw,  # type: ignore[arg-type]
    )


def requests(decision: Decision) -> list[AgentRequest]:
    return [m.body for m in decision.messages if isinstance(m.body, AgentRequest)]


# ---- the table ---------------------------------------------------------------------------------------
def _disjoint(a: machine.Rule, b: machine.Rule) -> bool:
    """Whether no task can meet both rows' guards."""
    return (
        a.source is not b.source
        or (a.phase is not None and b.phase is not None and a.phase is not b.phase)
        or (a.step is not None and b.step is not None and a.step is not b.step)
        or (a.wait is not None and b.wait is not None and a.wait != b.wait)
        or (a.grouped is not None and b.grouped is not None and a.grouped is not b.grouped)
    )


def test_every_operation_has_a_row_and_rows_never_overlap() -> None:
    assert {r.operation for r in machine.TABLE} == set(Operation)
    for a in machine.TABLE:
        for b in machine.TABLE:
            if a is not b and a.operation is b.operation:
                assert _disjoint(a, b), f"two rows for {a.operation} from {a.source} meet the same task"


def test_every_in_flight_state_can_be_recovered_by_the_supervisor_and_terminal_ones_are_left_alone() -> None:
    supervisor_ops = {Operation.KICK, Operation.EXPIRE, Operation.REWAKE, Operation.DEADLINE}
    for state in ProcessState:
        recoverable = any(r.operation in supervisor_ops and r.source is state for r in machine.TABLE)
        assert recoverable == state.in_flight, state
    # Processed and Compensated are final; Error only goes back through an operator.
    outgoing = {(r.source, r.operation) for r in machine.TABLE if r.changes}
    assert not [op for state, op in outgoing if state in (ProcessState.PROCESSED, ProcessState.COMPENSATED)]
    operator = {
        Operation.RESUBMIT,
        Operation.RETRY_STEP,
        Operation.SKIP_STEP,
        Operation.APPROVE,
        Operation.REJECT,
        Operation.UPDATE_INPUT,
    }
    assert {op for state, op in outgoing if state is ProcessState.ERROR} == operator


def test_every_state_is_reachable_from_submission() -> None:
    reached = {machine.INITIAL}
    frontier = [machine.INITIAL]
    while frontier:
        source = frontier.pop()
        for a, b, _ in machine.edges():
            if a is source and b not in reached:
                reached.add(b)
                frontier.append(b)
    assert reached == set(ProcessState)


def test_guards_lock_phase_and_step() -> None:
    record = new_record()
    assert machine.rule(Operation.CLAIM, record.state) is not None
    record.state.locked_by = "someone"
    assert machine.rule(Operation.CLAIM, record.state) is None  # held by another Scheduler
    record.state.locked_by = None
    record.state.process_state = ProcessState.PROCESSING
    assert machine.rule(Operation.STEP_SUCCEEDED, record.state, StepStatus.RUNNING) is not None
    assert machine.rule(Operation.STEP_SUCCEEDED, record.state, StepStatus.COMPLETED) is None
    record.state.phase = Phase.COMPENSATE
    assert machine.rule(Operation.STEP_SUCCEEDED, record.state, StepStatus.RUNNING) is None


def test_the_architecture_diagram_is_the_table() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    found = re.search(r"```mermaid\n(stateDiagram-v2\n.*?)\n```", text, re.DOTALL)
    assert found, "docs/architecture.md has no state diagram"
    assert found.group(1) == machine.diagram(), "regenerate it with: python -m engine.machine"


# ---- every move, explored ---------------------------------------------------------------------------
Move = tuple[Operation | None, int | None, Callable[[TaskRecord], Decision]]


def open_breakers(
    now: datetime, seconds_left: float, workflow: WorkflowDefinition = WORKFLOW
) -> dict[str, BreakerRecord]:
    until = now + timedelta(seconds=seconds_left)
    return {
        agent: BreakerRecord(agent, BreakerState.OPEN, 5, now - timedelta(seconds=60), until)
        for agent in workflow.agents
    }


def moves(record: TaskRecord, workflow: WorkflowDefinition = WORKFLOW) -> list[Move]:
    """Everything that could happen to a task in any state, right or wrong; each with the step it acts
    on (None: the task's current step)."""
    later = (record.state.complete_by or T0) + timedelta(seconds=1)

    def at(now: datetime = T0) -> Context:
        return Context(workflow, SETTINGS, now, "sched-1")

    out: list[Move] = [
        (Operation.CLAIM, None, lambda r: transitions.claim(r, at())),
        (None, None, lambda r: transitions.recover_expired(r, at(later))),
        (
            Operation.HOLD,
            None,
            lambda r: transitions.recover_expired(r, at(later), open_breakers(later, 5, workflow)),
        ),
        (
            Operation.RELEASE,
            None,
            lambda r: transitions.recover_expired(r, at(later), open_breakers(later, -1, workflow)),
        ),
        (Operation.RESUBMIT, None, lambda r: transitions.resubmit(r, at())),
        (Operation.CANCEL, None, lambda r: transitions.cancel(r, at())),
        (
            Operation.WORKFLOW_GONE,
            None,
            lambda r: transitions.workflow_not_deployed(r, Context(None, SETTINGS, T0, "sched-1")),
        ),
    ]
    if workflow.updates:

        def update(r: TaskRecord) -> Decision:
            try:
                return transitions.update_input(r, at(), {"n": r.input["n"] + 1})
            except InvalidState:  # fenced: the step that reads it has started
                return REFUSED

        out.append((Operation.UPDATE_INPUT, None, update))
    # The current step, or each step of the group it is in (other steps are refused whatever the state:
    # tested below).
    for index in at().group(record.state.current_step):
        step = record.steps[index]
        due = step.complete_by or T0
        retry = step.retry_at or T0
        out += [
            (Operation.RETRY_STEP, index, lambda r, i=index: transitions.retry_step(r, at(), i)),
            (Operation.EXTEND_STEP, index, lambda r, i=index: transitions.extend_step(r, at(), i, 5)),
            (Operation.SKIP_STEP, index, lambda r, i=index: transitions.skip_step(r, at(), i, "by hand")),
            (Operation.WAKE, index, lambda r, i=index, d=due: transitions.wake(r, at(d), i, r.state.attempt)),
            (Operation.APPROVE, index, lambda r, i=index: transitions.approve(r, at(), i)),
            (Operation.REJECT, index, lambda r, i=index: transitions.reject(r, at(), i, "no")),
            (
                Operation.REDISPATCH,
                index,
                lambda r, i=index, t=retry: transitions.redispatch(r, at(t), i, r.steps[i].attempts),
            ),
        ]
        for compensating in (False, True):
            for outcome in ReplyOutcome:
                answer = reply(record, outcome, compensating, result={"id": 1}, error="no")
                if not compensating and at().grouped(index):  # a group's step is fenced by its own attempt
                    attempt = max(step.attempts, 1)
                    answer = answer.model_copy(update={"step_index": index, "attempt": attempt})
                elif index != record.state.current_step:
                    continue
                out.append(
                    (
                        transitions.reply_operation(answer),
                        index,
                        lambda r, a=answer: transitions.apply_reply(r, at(), a),
                    )
                )
    return out


def key(record: TaskRecord) -> tuple[object, ...]:
    s = record.state
    return (
        s.process_state,
        s.phase,
        s.current_step,
        s.locked_by is None,
        s.failure_count,
        tuple(step.status for step in record.steps),
        tuple(step.retry_at is not None for step in record.steps),
    )


def _explore(workflow: WorkflowDefinition) -> set[tuple[Operation, ProcessState, ProcessState]]:
    """Every move from every state reachable from submission; the table's rows each move used."""
    used: set[tuple[Operation, ProcessState, ProcessState]] = set()
    plan = Context(workflow, SETTINGS, T0)

    def submitted() -> TaskRecord:
        record = TaskRecord(
            state=TaskState(order_id="o-1", workflow=workflow.name, created_at=T0, updated_at=T0),
            steps=[StepState(index=i, name=s.name) for i, s in enumerate(workflow.steps)],
            input={"n": 1},
            input_hash="h",
        )
        transitions.new_record_state(record, Context(workflow, SETTINGS, T0))
        return record

    seen = {key(submitted())}
    queue = deque([submitted()])
    while queue:
        record = queue.popleft()
        before = record.model_dump()  # what each copy of it holds before its move
        for operation, index, move in moves(record, workflow):
            after = record.model_copy(deep=True)
            supervisor = operation in (None, Operation.HOLD, Operation.RELEASE)
            group_runs = after.state.process_state is ProcessState.PROCESSING and plan.grouped(
                after.state.current_step
            )
            if supervisor and transitions.allows(Operation.KICK, after):  # it picks kick itself
                operation = Operation.KICK
            elif supervisor and after.state.process_state is ProcessState.WAITING:  # and a wait's own
                kinds = {"timer": Operation.REWAKE, "approval": Operation.DEADLINE}
                operation = kinds.get(after.state.waiting_for or "", Operation.EXPIRE)
            elif operation is None or (supervisor and group_runs):  # a group's steps: one recovery each
                operation = Operation.EXPIRE
            assert operation is not None
            rule = transitions.allows(operation, after, plan, index)
            decision = move(after)
            if not decision.changed:
                assert after.model_dump() == before, f"{operation} changed a record it refused"
                assert not decision.messages and not decision.alerts
                fenced = (Operation.REDISPATCH, Operation.UPDATE_INPUT)  # by the move, past the table's row
                assert rule is None or not rule.changes or operation in fenced, (
                    f"{operation} refused what the table allows"
                )
                continue
            assert rule is not None, f"{operation} moved a {record.state.process_state} task"
            assert after.state.process_state in rule.target_states, (operation, after.state.process_state)
            entered_error = ProcessState.ERROR is after.state.process_state is not record.state.process_state
            assert (decision.outcome is Outcome.ERRORED) == entered_error
            assert bool(decision.alerts) == (decision.outcome is Outcome.ERRORED)
            used.add((operation, rule.source, after.state.process_state))
            if key(after) not in seen:
                seen.add(key(after))
                queue.append(after)
    return used


def test_every_move_does_what_the_table_says_and_every_row_is_used() -> None:
    used = _explore(WORKFLOW) | _explore(waiting_workflow("compensate")) | _explore(waiting_workflow("error"))
    used |= _explore(grouped_workflow())
    declared = {(r.operation, r.source, t) for r in machine.TABLE if r.changes for t in r.target_states}
    unused = declared - used
    # Only an all-done or nothing-to-undo task claimed from Pending is unreachable with this workflow.
    assert unused <= {
        (Operation.CLAIM, ProcessState.PENDING, ProcessState.PROCESSED),
        (Operation.CLAIM, ProcessState.PENDING, ProcessState.COMPENSATED),
        (Operation.CLAIM, ProcessState.COMPENSATING, ProcessState.COMPENSATED),
        (Operation.STEP_FAILED, ProcessState.PROCESSING, ProcessState.COMPENSATED),
        (Operation.STEP_FAILED, ProcessState.WAITING, ProcessState.COMPENSATED),
    }, unused


# ---- single transitions ------------------------------------------------------------------------------
def test_claim_dispatches_the_first_step_and_announces_the_order() -> None:
    record = new_record()
    decision = transitions.claim(record, ctx())
    assert decision.outcome is Outcome.MOVED
    assert [type(m.body).__name__ for m in decision.messages] == ["StatusMessage", "AgentRequest"]
    (request,) = requests(decision)
    assert (request.step, request.attempt, request.idempotency_key) == ("first", 1, "o-1:first")
    assert decision.messages[1].message_id == request_message_id("o-1", 0, False, 1)
    assert record.state.locked_by == "sched-1" and record.steps[0].status is StepStatus.RUNNING
    assert record.changed_steps() == [0]


def test_a_claimed_task_cannot_be_claimed_again() -> None:
    record = new_record()
    transitions.claim(record, ctx())
    assert transitions.claim(record, ctx(instance="sched-2")).outcome is Outcome.REFUSED
    assert record.state.locked_by == "sched-1"


def test_a_reply_for_another_attempt_or_phase_is_fenced_out() -> None:
    record = new_record()
    transitions.claim(record, ctx())
    stale = reply(record, ReplyOutcome.SUCCEEDED, False).model_copy(update={"attempt": 2})
    assert transitions.apply_reply(record, ctx(), stale).outcome is Outcome.REFUSED
    wrong_phase = reply(record, ReplyOutcome.SUCCEEDED, True)
    assert transitions.apply_reply(record, ctx(), wrong_phase).outcome is Outcome.REFUSED
    done = transitions.apply_reply(
        record, ctx(), reply(record, ReplyOutcome.SUCCEEDED, False, result={"r": 1})
    )
    assert done.outcome is Outcome.MOVED and record.steps[0].result == {"r": 1}
    assert [r.step for r in requests(done)] == ["second"]


def test_a_failed_compensation_enters_error_with_a_typed_alert() -> None:
    record = new_record()
    transitions.claim(record, ctx())
    undo = transitions.apply_reply(record, ctx(), reply(record, ReplyOutcome.FAILED, False, error="no stock"))
    assert [r.action for r in requests(undo)] == ["undo-a"]
    failed = transitions.apply_reply(record, ctx(), reply(record, ReplyOutcome.FAILED, True, error="gone"))
    assert failed.outcome is Outcome.ERRORED and record.state.process_state is ProcessState.ERROR
    (alert,) = failed.alerts
    assert alert.name == telemetry.ORDER_ENTERED_ERROR
    assert alert.fields() == {
        "orderId": "o-1",
        "failureCount": 0,
        "phase": "compensate",
        "step": "first",
        "reason": "compensation of first failed: gone",
    }


def test_the_supervisor_kicks_retries_then_errors() -> None:
    record = new_record()
    expired = record.state.complete_by + timedelta(seconds=1)  # type: ignore[operator]
    assert transitions.recover_expired(record, ctx(T0)).outcome is Outcome.REFUSED  # not expired yet
    assert transitions.recover_expired(record, ctx(expired)).outcome is Outcome.KICKED
    assert record.state.failure_count == 0
    transitions.claim(record, ctx(expired))
    later = record.state.complete_by + timedelta(seconds=1)  # type: ignore[operator]
    retried = transitions.recover_expired(record, ctx(later))
    assert retried.outcome is Outcome.RETRIED and record.state.process_state is ProcessState.PENDING
    assert retried.messages[0].scheduled_at == later + timedelta(seconds=SETTINGS.backoff(1))
    transitions.claim(record, ctx(later))
    last = record.state.complete_by + timedelta(seconds=1)  # type: ignore[operator]
    errored = transitions.recover_expired(record, ctx(last))
    assert errored.outcome is Outcome.ERRORED and record.state.failure_count == 2


def test_cancel_and_resubmit_follow_the_table() -> None:
    record = new_record()
    transitions.claim(record, ctx())
    assert transitions.resubmit(record, ctx()).outcome is Outcome.REFUSED
    assert transitions.cancel(record, ctx()).outcome is Outcome.MOVED
    assert record.state.process_state is ProcessState.COMPENSATING
    assert transitions.cancel(record, ctx()).outcome is Outcome.UNCHANGED


def test_a_step_changed_directly_is_still_saved() -> None:
    record = new_record()
    assert record.changed_steps() == []
    record.steps[1].attempts = 3
    assert record.changed_steps() == [1]
    record.mark_saved()
    assert record.changed_steps() == []
    record.steps[0].result = {"a": 1}
    record.steps[0].result["b"] = 2  # a change inside a step's value counts too
    record.mark_saved()
    record.steps[0].result["c"] = 3
    assert record.changed_steps() == [0]


def test_request_and_reply_ids_come_from_one_format() -> None:
    request = AgentRequest(
        order_id="o-1",
        step="second",
        step_index=1,
        attempt=2,
        compensating=True,
        action="undo-b",
        idempotency_key="o-1:second",
        complete_by=T0,
    )
    assert request_message_id("o-1", 1, True, 2) == "o-1:1:c:2"
    assert reply_message_id(request) == "o-1:1:c:2:reply"


def test_steps_on_one_agent_must_agree_on_its_breaker_but_may_retry_differently() -> None:
    WorkflowDefinition(
        name="ok",
        steps=(
            StepDefinition(name="a", agent="x", action="a", retry=RetryPolicy(max_tries=1)),
            StepDefinition(name="b", agent="x", action="b", retry=RetryPolicy(max_tries=9)),
        ),
    )
    with pytest.raises(ValueError, match="breaker"):
        WorkflowDefinition(
            name="bad",
            steps=(
                StepDefinition(name="a", agent="x", action="a", retry=RetryPolicy(breaker_fail_max=1)),
                StepDefinition(name="b", agent="x", action="b", retry=RetryPolicy(breaker_fail_max=2)),
            ),
        )
