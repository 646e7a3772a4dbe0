"""Updates to a running order: what the declaration refuses, and the move (fenced by the step that reads
the field, validated by the input model, going forward only), on the pure transitions."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from engine import transitions
from engine.conditions import Test
from engine.errors import InvalidState, InvalidUpdate
from engine.messages import AgentReply, AgentRequest, ReplyOutcome
from engine.operator_actions import UPDATE, Given
from engine.settings import EngineSettings
from engine.state import ProcessState, StepState, StepStatus, TaskRecord, TaskState
from engine.transitions import Context
from engine.workflow import StepDefinition, Timer, Update, WorkflowDefinition

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = EngineSettings(step_complete_by_seconds=10, cancel_grace_seconds=1)


class Address(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str = Field(min_length=1)
    postcode: str = Field(pattern=r"^[0-9]{4,5}$")


class Parcel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    customer: str
    weight: float = Field(gt=0)
    address: Address
    note: str | None = None


ADDRESS = Update(fields=("address", "note"), until="ship")
WORKFLOW = WorkflowDefinition(
    name="parcel",
    input=Parcel,
    steps=(
        StepDefinition(name="charge", agent="pay", action="charge", compensation="refund"),
        StepDefinition(name="window", wait=Timer(after_seconds=60)),
        StepDefinition(name="ship", agent="post", action="ship", compensation="recall"),
        StepDefinition(name="mail", agent="mail", action="send"),
    ),
    updates=(ADDRESS,),
)
HOME = {"city": "Lyon", "postcode": "69001"}
WORK = {"city": "Paris", "postcode": "75002"}


def record_of(**input: Any) -> TaskRecord:
    record = TaskRecord(
        state=TaskState(order_id="o-1", workflow=WORKFLOW.name, created_at=T0, updated_at=T0),
        steps=[StepState(index=i, name=s.name) for i, s in enumerate(WORKFLOW.steps)],
        # Stored as a submission stores it: the input model's dump.
        input=Parcel.model_validate({"customer": "c-1", "weight": 2.5, "address": HOME, **input}).model_dump(
            mode="json"
        ),
        input_hash="h",
    )
    transitions.new_record_state(record, ctx())
    return record


def ctx(now: datetime = T0) -> Context:
    return Context(WORKFLOW, SETTINGS, now, "sched-1")


def update(record: TaskRecord, **changes: Any) -> str:
    return UPDATE.move(record, ctx(), Given(changes=changes)).outcome.value


def succeed(record: TaskRecord) -> list[AgentRequest]:
    state = record.state
    reply = AgentReply(
        order_id="o-1",
        step_index=state.current_step,
        attempt=state.attempt,
        compensating=False,
        outcome=ReplyOutcome.SUCCEEDED,
    )
    decision = transitions.apply_reply(record, ctx(), reply)
    return [m.body for m in decision.messages if isinstance(m.body, AgentRequest)]


def test_the_step_that_reads_a_field_sees_it_as_updated_until_it_starts_then_the_update_is_409() -> None:
    record = record_of()
    assert update(record, address=WORK) == "moved", "Pending: nothing has read it yet"
    transitions.claim(record, ctx())
    assert update(record, note="leave it with the neighbour") == "moved", "Processing, the charge running"
    assert record.input_changed() and record.input["address"] == WORK
    assert not succeed(record), "the window waits"
    assert record.state.process_state is ProcessState.WAITING
    assert update(record, address=HOME) == "moved", "while the window is open"
    due = record.steps[1].complete_by or T0
    woken = transitions.wake(record, ctx(due), 1, record.state.attempt)
    (ship,) = [m.body for m in woken.messages if isinstance(m.body, AgentRequest)]
    assert ship.step == "ship" and ship.payload["input"]["address"] == HOME
    assert ship.payload["input"]["note"] == "leave it with the neighbour"
    with pytest.raises(
        InvalidState, match="address can no longer change: step ship, which reads it, is Running"
    ):
        update(record, address=WORK)
    assert record.input["address"] == HOME
    assert transitions.open_updates(record, WORKFLOW) == []


def test_an_update_of_a_field_no_update_declares_or_a_value_the_model_refuses_is_invalid() -> None:
    record = record_of()
    with pytest.raises(InvalidUpdate, match=r"cannot change weight \(it may change: address, note\)"):
        update(record, weight=9, address=WORK)
    with pytest.raises(InvalidUpdate, match=r"address\.postcode: String should match pattern"):
        update(record, address={"city": "Paris", "postcode": "x"})
    with pytest.raises(InvalidUpdate, match=r"address\.street: Extra inputs are not permitted"):
        update(record, address={**WORK, "street": "1 rue"})
    assert record.input["address"] == HOME and not record.input_changed()
    assert update(record, address=HOME) == "unchanged", "the same value: nothing to save"


def test_an_order_being_undone_or_ended_takes_no_update() -> None:
    record = record_of()
    transitions.claim(record, ctx())
    transitions.cancel(record, ctx())
    assert record.state.process_state is ProcessState.COMPENSATING
    assert update(record, address=WORK) == "refused"
    assert transitions.open_updates(record, WORKFLOW) == []
    ended = record_of()
    transitions.cancel(ended, ctx())
    assert ended.state.process_state is ProcessState.COMPENSATED
    assert update(ended, address=WORK) == "refused"


def test_a_left_out_fence_step_fences_as_a_started_one() -> None:
    record = record_of()
    record.steps[2].status = StepStatus.LEFT_OUT
    with pytest.raises(InvalidState, match="step ship, which reads it, is LeftOut"):
        update(record, address=WORK)


def test_the_declaration_refuses_updates_it_could_not_keep() -> None:
    def declare(*updates: Update, **changes: Any) -> None:
        WorkflowDefinition.model_validate({**dict(WORKFLOW), "updates": updates, **changes})

    named = "workflow parcel version 1, updates"
    with pytest.raises(ValueError, match=f"{named}: until names no step of the workflow: 'deliver'"):
        declare(Update(fields=("address",), until="deliver"))
    with pytest.raises(ValueError, match=f"{named}: the field street is not a field of Parcel"):
        declare(Update(fields=("street",), until="ship"))
    with pytest.raises(ValueError, match=f"{named}: the field address is named by two updates"):
        declare(Update(fields=("address",), until="ship"), Update(fields=("address",), until="mail"))
    with pytest.raises(ValueError, match=f"{named}: the field customer is searchable"):
        declare(Update(fields=("customer",), until="ship"), searchable=("customer",))
    with pytest.raises(ValueError, match=f"{named}: unknown field redo"):
        declare(Update(fields=("address",), until="ship", redo=True))
    reads = StepDefinition(
        name="window", wait=Timer(after_seconds=60), when=Test(field="input.address.city", op="==", value="x")
    )
    steps = (WORKFLOW.steps[0], reads, *WORKFLOW.steps[2:])
    with pytest.raises(ValueError, match="address is read by step window, before ship: name until='window'"):
        declare(ADDRESS, steps=steps)
    declare(Update(fields=("address",), until="window"), steps=steps)
