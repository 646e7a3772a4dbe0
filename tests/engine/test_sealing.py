"""engine.sealing: the envelope of a sensitive input value, its keys, and when the engine drops it."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel, ConfigDict, Field

from engine import sealing, transitions
from engine.conditions import Test
from engine.sealing import InputKey, Keyring, SealError
from engine.settings import EngineSettings
from engine.state import Phase, ProcessState, StepState, StepStatus, TaskRecord, TaskState
from engine.transitions import Context
from engine.workflow import StepDefinition, Timer, WorkflowDefinition, sensitive

OLD, NEW = InputKey.generate("k1"), InputKey.generate("k2")
KEYS = Keyring(NEW, (OLD,))
NOW = datetime(2026, 12, 1, tzinfo=UTC)


class Card(BaseModel):
    model_config = ConfigDict(extra="forbid")
    amount: int = 1
    token: str | None = Field(default=None, json_schema_extra=sensitive(until="pay"))
    pin: str | None = Field(default=None, json_schema_extra=sensitive())


STEPS = (
    StepDefinition(name="hold", agent="a", action="hold", compensation="free"),
    StepDefinition(name="pay", agent="b", action="pay", compensation="refund"),
    StepDefinition(name="ship", agent="c", action="ship", compensation="stop"),
)
WORKFLOW = WorkflowDefinition(name="card", input=Card, steps=STEPS)


def test_a_value_opens_only_for_its_order_and_field_with_a_key_held() -> None:
    sealed = KEYS.seal({"card": "tok-1"}, "o-1", "token")
    assert sealed.startswith("sealed:v1:k2:") and "tok-1" not in sealed
    assert KEYS.open(sealed, "o-1", "token") == {"card": "tok-1"}
    assert KEYS.seal("tok-1", "o-1", "token") != KEYS.seal("tok-1", "o-1", "token")  # a nonce of its own
    for order_id, name in (("o-2", "token"), ("o-1", "pin")):
        with pytest.raises(SealError, match="does not open"):
            KEYS.open(sealed, order_id, name)
    head, _, body = sealed.rpartition(":")
    flipped = body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1]
    with pytest.raises(SealError, match="does not open"):
        KEYS.open(f"{head}:{flipped}", "o-1", "token")
    # Rotation: what the old key sealed still opens; a key no longer held says which setting to give it in.
    assert KEYS.open(Keyring(OLD).seal("tok-2", "o-1", "token"), "o-1", "token") == "tok-2"
    with pytest.raises(SealError, match="INPUT_ENCRYPTION_PREVIOUS_KEYS"):
        Keyring(OLD).open(sealed, "o-1", "token")
    with pytest.raises(ValueError, match="once"):
        Keyring(NEW, (InputKey("k2", OLD.secret),))


def test_a_key_setting_is_checked_and_its_secret_never_quoted() -> None:
    secret = base64.b64encode(bytes(range(32))).decode()
    assert InputKey.parse(f" k-1:{secret} ").secret == bytes(range(32))
    assert InputKey.parse(NEW.text()) == NEW and repr(NEW.secret) not in repr(NEW)
    short = base64.b64encode(bytes(31)).decode()
    for text, problem in (
        (secret, "key id"),
        (f"K1:{secret}", "key id"),
        (f"{'a' * 17}:{secret}", "key id"),
        ("k1:not base64!", "not base64"),
        (f"k1:{short}", "31 bytes"),
    ):
        with pytest.raises(ValueError, match=problem) as refused:
            InputKey.parse(text)
        assert secret not in str(refused.value) and short not in str(refused.value)


def test_the_input_is_sealed_opened_and_redacted_field_by_field() -> None:
    given = {"orderId": "o-1", "amount": 3, "token": "tok-9", "pin": None}
    stored = sealing.seal_input(given, WORKFLOW.sensitive, "o-1", KEYS)
    assert stored["amount"] == 3 and stored["pin"] is None and sealing.is_sealed(stored["token"])
    assert sealing.seal_input(stored, WORKFLOW.sensitive, "o-1", KEYS) == stored  # sealed once
    assert sealing.open_input(stored, "o-1", KEYS) == given
    assert sealing.open_input(given, "o-1", None) == given  # in clear, as an older release kept it
    assert sealing.redacted_input(stored, WORKFLOW.sensitive) == {**given, "token": "[redacted]"}
    assert sealing.redacted_input(given, WORKFLOW.sensitive)["token"] == "[redacted]"
    with pytest.raises(sealing.KeyMissing, match="INPUT_ENCRYPTION_KEY"):
        sealing.seal_input(given, WORKFLOW.sensitive, "o-1", None)
    with pytest.raises(SealError, match="INPUT_ENCRYPTION_KEY"):
        sealing.open_input(stored, "o-1", None)


def test_the_declaration_names_each_field_and_its_step_and_refuses_what_would_read_it_sealed() -> None:
    assert WORKFLOW.sensitive == {"token": "pay", "pin": None}
    # A workflow without the step keeps the field until the order ends.
    assert WorkflowDefinition(name="other", input=Card, steps=STEPS[:1]).sensitive["token"] is None
    for changes, problem in (
        ({"searchable": ("token",)}, "cannot be searchable"),
        (
            {"steps": (STEPS[0].model_copy(update={"when": Test(field="input.pin", op="==", value="1")}),)},
            "read by a condition",
        ),
        (
            {"steps": (StepDefinition(name="pay", wait=Timer(after_seconds=1)),)},
            "a wait",
        ),
    ):
        with pytest.raises(ValueError, match=problem):
            WORKFLOW.revise(**changes)


def record(input_: dict[str, object]) -> TaskRecord:
    made = TaskRecord(
        state=TaskState(order_id="o-1", workflow="card", created_at=NOW, updated_at=NOW),
        steps=[StepState(index=i, name=s.name) for i, s in enumerate(STEPS)],
        input=input_,
        input_hash="h",
    )
    transitions.new_record_state(made, Context(WORKFLOW, EngineSettings(), NOW))
    made.mark_saved()
    return made


def test_a_field_goes_with_the_move_that_leaves_it_unneeded_and_one_in_clear_is_sealed() -> None:
    ctx = Context(WORKFLOW, EngineSettings(input_keys=KEYS), NOW, "s-1")
    task = record({"orderId": "o-1", "amount": 1, "token": "tok-1", "pin": "0000"})
    transitions.claim(task, ctx)  # a move of an order an older release stored in clear: sealed with it
    assert task.input_changed() and all(sealing.is_sealed(task.input[f]) for f in ("token", "pin"))
    task.mark_saved()
    transitions.step_succeeded(task, ctx, {})  # hold done: both still needed
    assert not task.input_changed()
    task.mark_saved()
    transitions.step_succeeded(task, ctx, {})  # pay done: the token goes, with the same save
    assert task.input_changed() and "token" not in task.input and "pin" in task.input
    task.mark_saved()
    transitions.step_succeeded(task, ctx, {})  # the order ends: the rest goes
    assert task.state.process_state is ProcessState.PROCESSED and set(task.input) == {"orderId", "amount"}


def test_an_order_being_undone_drops_what_only_its_forward_steps_read() -> None:
    task = record({"orderId": "o-1", "token": "tok-1", "pin": "0000"})
    task.steps[0].status = StepStatus.COMPLETED
    task.state.phase = Phase.COMPENSATE
    assert sealing.unneeded(task, WORKFLOW) == ["token"]
    task.state.phase = Phase.FORWARD
    task.steps[1].status = StepStatus.LEFT_OUT
    assert sealing.unneeded(task, WORKFLOW) == ["token"]
    task.state.process_state = ProcessState.ERROR  # an operator may resubmit: kept
    task.steps[1].status = StepStatus.RUNNING
    assert sealing.unneeded(task, WORKFLOW) == []
