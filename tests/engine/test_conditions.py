"""Conditions, results passed on and steps without undo: the declaration's checks and the pure transitions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from engine import transitions
from engine.conditions import AllOf, AnyOf, Not, Test, check_input_path
from engine.costs import processed_order
from engine.messages import AgentReply, AgentRequest, ReplyOutcome
from engine.settings import EngineSettings
from engine.state import ProcessState, StepState, StepStatus, TaskRecord, TaskState
from engine.transitions import Context
from engine.workflow import StepDefinition, WorkflowDefinition

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = EngineSettings(step_complete_by_seconds=10, cancel_grace_seconds=1)


class Line(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sku: str
    digital: bool = False


class Basket(BaseModel):
    model_config = ConfigDict(extra="forbid")
    total: float
    lines: list[Line] = Field(min_length=1)
    coupon: str | None = None


SHIPPABLE = Test(field="input.lines[].digital", op="!=", value=True)
WORKFLOW = WorkflowDefinition(
    name="shop",
    input=Basket,
    steps=(
        StepDefinition(name="charge", agent="pay", action="charge", compensation="refund"),
        StepDefinition(name="ship", agent="post", action="ship", compensation="recall", when=SHIPPABLE),
        # Runs only when the shipment returned a tracking number: a condition on an earlier result.
        StepDefinition(
            name="track", agent="post", action="track", when=Test(field="results.tracking", op="exists")
        ),
        StepDefinition(name="mail", agent="mail", action="send"),  # cannot be undone
    ),
)


def doc(**input: Any) -> dict[str, Any]:
    return {"input": input, "results": {}}


# ---- what a condition says ----------------------------------------------------------------------------
def test_a_test_through_a_list_holds_for_any_or_all_of_its_values() -> None:
    mixed = doc(lines=[{"digital": True}, {"digital": False}])
    digital = doc(lines=[{"digital": True}])
    assert SHIPPABLE.holds(mixed) and not SHIPPABLE.holds(digital)
    every = SHIPPABLE.model_copy(update={"each": "all"})
    assert not every.holds(mixed) and every.holds(doc(lines=[{"digital": False}]))
    assert every.holds(doc(lines=[])) and not SHIPPABLE.holds(doc(lines=[])), "all of none, any of none"
    assert SHIPPABLE.describe() == "any input.lines[].digital != true"


@pytest.mark.parametrize(
    ("test", "document", "holds"),
    [
        (Test(field="input.total", op=">", value=100), doc(total=100.5), True),
        (Test(field="input.total", op=">", value=100), doc(total=100), False),
        (Test(field="input.total", op=">", value=100), doc(), False),  # missing fails a comparison
        (Test(field="input.total", op="!=", value=1), doc(), True),  # ... and is not equal
        (Test(field="input.total", op="absent"), doc(total=None), True),  # null is absent
        (Test(field="input.total", op="exists"), doc(total=0), True),
        (Test(field="input.flag", op="==", value=1), doc(flag=True), False),  # JSON's true is not 1
        (Test(field="input.flag", op="==", value=True), doc(flag=True), True),
        (Test(field="input.total", op=">", value=1), doc(total="5"), False),  # text is not comparable
        (Test(field="input.cur", op="in", value=["EUR", "USD"]), doc(cur="EUR"), True),
        (Test(field="input.cur", op="not in", value=["EUR", "USD"]), doc(cur="GBP"), True),
        (Test(field="results.id", op="==", value="a"), {"input": {}, "results": {"id": "a"}}, True),
        (
            AllOf(all_of=(Test(field="input.a", op="exists"), Test(field="input.b", op="exists"))),
            doc(a=1),
            False,
        ),
        (
            AnyOf(any_of=(Test(field="input.a", op="exists"), Test(field="input.b", op="exists"))),
            doc(a=1),
            True,
        ),
        (Not(not_=Test(field="input.a", op="exists")), doc(a=1), False),
    ],
)
def test_each_operator_on_present_missing_and_mistyped_values(
    test: Test | AllOf | AnyOf | Not, document: dict[str, Any], holds: bool
) -> None:
    assert test.holds(document) is holds


def test_an_input_path_is_checked_against_the_input_model() -> None:
    assert check_input_path("input.lines[].digital", Basket) is None
    assert check_input_path("input.coupon", Basket) is None
    assert "declares no field 'weight'" in (check_input_path("input.weight", Basket) or "")
    assert "write lines[]" in (check_input_path("input.lines.digital", Basket) or "")
    assert "is not a list" in (check_input_path("input.total[]", Basket) or "")


# ---- refused at declaration -----------------------------------------------------------------------
def test_unknown_fields_anywhere_in_a_workflow_are_refused_naming_the_workflow_step_and_field() -> None:
    step = WORKFLOW.steps[0]
    cases = [
        (
            {"steps": (StepDefinition(name="x", agent="a", action="b", parallel=True),)},
            "step x: unknown field parallel",
        ),
        (
            {"steps": (step.model_copy(update={"retry": step.retry.model_copy()}),), "delay_seconds": 60},
            "unknown field delay_seconds",
        ),
        (
            {
                "steps": (
                    StepDefinition(
                        name="x", agent="a", action="b", when=Test(field="input.total", op="==", vaule=1)
                    ),
                )
            },
            "step x condition: unknown field vaule",
        ),
    ]
    for changes, message in cases:
        with pytest.raises(ValueError, match=f"shop.*{message}"):
            WorkflowDefinition.model_validate({**dict(WORKFLOW), **changes})


def test_a_condition_on_a_field_the_input_does_not_declare_is_refused() -> None:
    bad = StepDefinition(name="x", agent="a", action="b", when=Test(field="input.weight", op=">", value=1))
    with pytest.raises(ValueError, match=r"step x: the condition on input\.weight.*add the field to Basket"):
        WORKFLOW.revise(steps=(bad,))
    with pytest.raises(ValueError, match="needs an input model"):
        WorkflowDefinition(name="w", steps=(bad,))


def test_an_input_model_must_refuse_unknown_fields() -> None:
    class Loose(BaseModel):
        total: float

    with pytest.raises(ValueError, match="extra='forbid'"):
        WORKFLOW.revise(input=Loose)


# ---- the transitions ------------------------------------------------------------------------------
def record_of(**input: Any) -> TaskRecord:
    record = TaskRecord(
        state=TaskState(order_id="o-1", workflow=WORKFLOW.name, created_at=T0, updated_at=T0),
        steps=[StepState(index=i, name=s.name) for i, s in enumerate(WORKFLOW.steps)],
        input={"orderId": "o-1", **input},
        input_hash="h",
    )
    transitions.new_record_state(record, ctx())
    return record


def ctx() -> Context:
    return Context(WORKFLOW, SETTINGS, T0, "sched-1")


def succeed(record: TaskRecord, **result: Any) -> list[AgentRequest]:
    reply = AgentReply(
        order_id="o-1",
        step_index=record.state.current_step,
        attempt=record.state.attempt,
        compensating=record.state.phase.value == "compensate",
        outcome=ReplyOutcome.SUCCEEDED,
        result=result,
    )
    decision = transitions.apply_reply(record, ctx(), reply)
    return [m.body for m in decision.messages if isinstance(m.body, AgentRequest)]


def test_a_step_whose_condition_fails_is_left_out_audited_and_never_called() -> None:
    record = record_of(total=5, lines=[{"sku": "e", "digital": True}])
    (charge,) = [
        m.body for m in transitions.claim(record, ctx()).messages if isinstance(m.body, AgentRequest)
    ]
    assert charge.step == "charge"
    # The shipment is left out; so is tracking (no tracking number was returned); the mail goes.
    (mail,) = succeed(record, charge="c-1")
    assert mail.step == "mail" and mail.payload == {"input": record.input, "results": {"charge": "c-1"}}
    ship, track = record.steps[1], record.steps[2]
    assert ship.status is track.status is StepStatus.LEFT_OUT and ship.attempts == track.attempts == 0
    assert ship.reason == "condition not met: any input.lines[].digital != true"
    assert track.reason == "condition not met: results.tracking exists"
    audit = record.pending_audit()
    assert [(a.action, a.step, a.actor) for a in audit] == [
        ("left out", "ship", "scheduler:sched-1"),
        ("left out", "track", "scheduler:sched-1"),
    ]
    assert not succeed(record) and record.state.process_state is ProcessState.PROCESSED
    assert len(processed_order(WORKFLOW, {"input": record.input, "results": {}}).status_events) == 4
    assert len(processed_order(WORKFLOW).status_events) == 6


def test_results_are_passed_on_and_an_undo_sees_its_own_step_s_result() -> None:
    record = record_of(total=5, lines=[{"sku": "box"}])
    transitions.claim(record, ctx())
    (ship,) = succeed(record, charge="c-1")
    assert ship.step == "ship" and ship.payload["results"] == {"charge": "c-1"}
    (track,) = succeed(record, tracking="t-9")
    assert track.step == "track", "the condition on the shipment's result holds"
    assert track.payload["results"] == {"charge": "c-1", "tracking": "t-9"}
    decision = transitions.cancel(record, ctx())
    assert decision.outcome.value == "moved"
    # The cancel waits for the running step to settle, then undoes the steps before it, last first.
    later = Context(WORKFLOW, SETTINGS, record.state.next_attempt_at or T0, "sched-2")
    (undo,) = [m.body for m in transitions.claim(record, later).messages if isinstance(m.body, AgentRequest)]
    assert (undo.step, undo.action, undo.compensating) == ("ship", "recall", True)
    assert undo.payload["results"] == {"charge": "c-1", "tracking": "t-9"}


def test_a_step_without_undo_is_never_undone_and_a_left_out_step_never_compensated() -> None:
    record = record_of(total=5, lines=[{"sku": "e", "digital": True}])
    transitions.claim(record, ctx())
    succeed(record, charge="c-1")  # shipment and tracking left out, mail running
    (mail,) = [s for s in record.steps if s.status is StepStatus.RUNNING]
    assert mail.name == "mail"
    decision = transitions.cancel(record, ctx())
    assert decision.outcome.value == "moved" and record.state.next_attempt_at is not None
    assert record.state.next_attempt_at > T0, "the cancel waits for the mail to settle"
    later = Context(WORKFLOW, SETTINGS, record.state.next_attempt_at, "sched-2")
    (undo,) = [m.body for m in transitions.claim(record, later).messages if isinstance(m.body, AgentRequest)]
    assert undo.step == "charge", "the mail, the shipment and tracking are passed over"
    succeed(record)
    assert record.state.process_state is ProcessState.COMPENSATED
    assert [s.status for s in record.steps] == [
        StepStatus.COMPENSATED,
        StepStatus.LEFT_OUT,
        StepStatus.LEFT_OUT,
        StepStatus.RUNNING,
    ]


def test_an_undo_waits_for_the_call_of_a_skipped_step_that_cannot_be_undone() -> None:
    """Skipped while its call was in flight, a step without undo can still land until its CompleteBy plus the
    grace: the undos of the steps before it wait until then, or its effect could land after a refund."""
    record = record_of(total=5, lines=[{"sku": "box"}])
    transitions.claim(record, ctx())
    succeed(record, charge="c-1")
    succeed(record, tracking="t-9")  # tracking (no undo) is running
    track = record.steps[2]
    assert track.status is StepStatus.RUNNING and track.complete_by is not None
    assert transitions.skip_step(record, ctx(), 2, "tracked by hand").outcome.value == "moved"
    transitions.claim(record, ctx())  # the mail goes out
    failed = AgentReply(
        order_id="o-1",
        step_index=3,
        attempt=record.state.attempt,
        outcome=ReplyOutcome.FAILED,
        error="no address",
    )
    decision = transitions.apply_reply(record, ctx(), failed)
    assert not [m for m in decision.messages if isinstance(m.body, AgentRequest)], "no undo yet"
    settled = track.complete_by + timedelta(seconds=SETTINGS.cancel_grace_seconds)
    assert record.state.next_attempt_at == settled and record.state.current_step == 1
    later = Context(WORKFLOW, SETTINGS, settled, "sched-2")
    (undo,) = [m.body for m in transitions.claim(record, later).messages if isinstance(m.body, AgentRequest)]
    assert (undo.step, undo.compensating) == ("ship", True)
