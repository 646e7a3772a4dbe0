"""What a release does with messages it cannot read (engine.formats, engine.inbound): a later release's
are passed over and sent again later, never dead-lettered; a malformed one is still poison; and what this
release writes, release 1.0.0 reads."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engine import formats
from engine.clock import ManualClock
from engine.errors import NotUnderstood, PoisonMessage
from engine.inbound import PASS_OVER_SECONDS, Inbound, parse, receive
from engine.messages import AgentReply, AgentRequest, CommandKind, ReplyOutcome, SchedulerCommand
from engine.parts import EngineParts
from engine.settings import EngineSettings
from engine.workflow import StepDefinition, WorkflowCatalog, WorkflowDefinition
from tests.engine.fakes import MemoryStore, RecordingSender, SwitchKept

pytestmark = pytest.mark.anyio

COMMAND = {"orderId": "o-1", "kind": "start"}
REPLY = {"orderId": "o-1", "stepIndex": 0, "attempt": 1, "outcome": "succeeded"}
# The fields release 1.0.0's messages have: its readers refuse any other (extra="forbid").
RELEASE_1_0_0 = {
    SchedulerCommand: {"orderId", "kind", "reason", "stepIndex", "attempt", "savedTask"},
    AgentReply: {
        *("orderId", "stepIndex", "attempt", "compensating", "outcome", "result", "error", "savedTask"),
        "call",
    },
    AgentRequest: {
        *("orderId", "workflow", "workflowVersion", "step", "stepIndex", "attempt", "compensating"),
        *("action", "idempotencyKey", "completeBy", "payload", "savedTask"),
    },
}


def body(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def test_a_field_a_later_release_adds_is_ignored() -> None:
    command = parse(SchedulerCommand, body(**COMMAND, priority="high"), "q", "m", 1)
    assert command.order_id == "o-1" and command.kind is CommandKind.START


@pytest.mark.parametrize(
    ("model", "fields", "said"),
    [
        (SchedulerCommand, {**COMMAND, "format": formats.MESSAGES_READ + 1}, "format 2"),
        (SchedulerCommand, {**COMMAND, "kind": "pause"}, "kind"),
        (AgentReply, {**REPLY, "outcome": "held"}, "outcome"),
    ],
)
def test_a_later_format_kind_or_outcome_is_not_understood_not_poison(
    model: type[SchedulerCommand | AgentReply], fields: dict[str, Any], said: str
) -> None:
    with pytest.raises(NotUnderstood) as raised:
        parse(model, body(**fields), "q", "m", 1)
    assert raised.value.order_id == "o-1" and said in raised.value.what


@pytest.mark.parametrize(
    "raw",
    [b"not json", body(kind="start"), body(**{**COMMAND, "kind": 3}), body(**{**COMMAND, "orderId": ""})],
)
def test_what_is_malformed_is_still_poison(raw: bytes) -> None:
    with pytest.raises(PoisonMessage):
        parse(SchedulerCommand, raw, "q", "m", 1)


@pytest.mark.parametrize(
    "message",
    [
        SchedulerCommand(order_id="o-1", kind=CommandKind.WAKE, step_index=1, attempt=2),
        AgentReply(order_id="o-1", step_index=0, attempt=1, outcome=ReplyOutcome.SUCCEEDED),
        AgentRequest(
            order_id="o-1",
            step="charge",
            step_index=0,
            attempt=1,
            action="charge",
            idempotency_key="o-1:charge",
            complete_by=datetime(2026, 1, 1, tzinfo=UTC),
        ),
    ],
)
def test_what_this_release_writes_release_1_0_0_reads(
    message: SchedulerCommand | AgentReply | AgentRequest,
) -> None:
    written = json.loads(message.model_dump_json(by_alias=True))
    assert formats.MESSAGES_WRITTEN == 1 and "format" not in written  # format 1 is the field's absence
    assert set(written) <= RELEASE_1_0_0[type(message)]


def parts(sender: RecordingSender, clock: ManualClock) -> EngineParts:
    workflow = WorkflowDefinition(name="w", steps=(StepDefinition(name="a", agent="x", action="do"),))
    return EngineParts(WorkflowCatalog.of(workflow), MemoryStore(), sender, clock, EngineSettings())


async def test_a_message_not_understood_is_sent_again_later_unchanged_under_a_new_id() -> None:
    sender, clock = RecordingSender(), ManualClock()
    handled: list[SchedulerCommand] = []

    async def handle(command: SchedulerCommand) -> None:
        handled.append(command)

    async def engine() -> EngineParts:
        return parts(sender, clock)

    later = body(**COMMAND, format=2, plan="new")
    await receive(SchedulerCommand, Inbound(later, "scheduler", "m-1", 1, "o-1"), handle, engine)
    [again] = sender.take()
    assert handled == []
    assert (again.queue, again.message_id, again.correlation_id) == ("scheduler", "m-1~p1", "o-1")
    assert again.scheduled_at == clock.now() + timedelta(seconds=PASS_OVER_SECONDS)
    assert json.loads(again.body.model_dump_json()) == json.loads(later)
    # Passed over again (still no instance that reads it): a new id each time, the broker keeps every one.
    await receive(SchedulerCommand, Inbound(later, "scheduler", "m-1~p1", 2, "o-1"), handle, engine)
    assert [s.message_id for s in sender.take()] == ["m-1~p2"]
    # One it reads is handled, and nothing is sent again.
    await receive(SchedulerCommand, Inbound(body(**COMMAND), "scheduler", "m-2", 1, "o-1"), handle, engine)
    assert [c.order_id for c in handled] == ["o-1"] and sender.take() == []


async def test_a_record_the_handler_cannot_read_passes_the_message_over_too() -> None:
    sender, clock = RecordingSender(), ManualClock()

    async def handle(command: SchedulerCommand) -> None:
        raise NotUnderstood("its record is stored in format 2", command.order_id)

    async def engine() -> EngineParts:
        return parts(sender, clock)

    await receive(SchedulerCommand, Inbound(body(**COMMAND), "scheduler", "m-1", 1), handle, engine)
    assert [(s.queue, s.message_id) for s in sender.take()] == [("scheduler", "m-1~p1")]


async def test_a_new_deployment_writes_its_own_formats_at_once() -> None:
    kept = SwitchKept(tasks=False)
    mine = formats.Formats(formats.BEFORE_SWITCH, kept)
    await mine.refresh(ManualClock().now())
    assert mine.writes == formats.AFTER_SWITCH and mine.seals


async def test_an_upgrade_writes_the_previous_formats_until_the_switch_flips_by_itself() -> None:
    kept, clock = SwitchKept(tasks=True), ManualClock()
    first, second = formats.Formats(formats.AFTER_SWITCH, kept), formats.Formats(formats.AFTER_SWITCH, kept)
    await first.refresh(clock.now())
    await second.refresh(clock.now())  # the switch set once: the second instance reads the first's
    assert (first.writes, second.writes, kept.writes) == (formats.BEFORE_SWITCH, formats.BEFORE_SWITCH, 1)
    assert kept.switch is not None and kept.switch.flips_at == clock.now() + formats.SWITCH_AFTER
    clock.advance(formats.SWITCH_REFRESH.total_seconds() - 1)
    await first.refresh(clock.now())  # read again only now and then
    clock.advance(formats.SWITCH_AFTER.total_seconds())
    await first.refresh(clock.now())
    assert first.writes == formats.AFTER_SWITCH and kept.writes == 2
    await second.refresh(clock.now())
    assert second.writes == formats.AFTER_SWITCH and kept.writes == 2  # flipped once


async def test_the_switch_waits_while_an_instance_that_reads_only_the_previous_formats_runs() -> None:
    kept, clock = SwitchKept(tasks=True), ManualClock()
    mine = formats.Formats(formats.AFTER_SWITCH, kept, instance="new-1", release="1.1.0")
    await mine.refresh(clock.now())
    assert kept.seen["new-1"].reads == formats.RECORDS_READ  # it says it runs, and what it reads
    # An instance of a release that reads only the previous formats still says it runs.
    clock.advance(formats.SWITCH_AFTER.total_seconds())
    await kept.announce(formats.Instance("old-1", "1.0.9", formats.BEFORE_SWITCH, clock.now()))
    await mine.refresh(clock.now())
    assert mine.writes == formats.BEFORE_SWITCH  # due, but the older instance was seen lately
    clock.advance(formats.UNSEEN_FOR.total_seconds() + 1)
    await mine.refresh(clock.now())
    assert mine.writes == formats.AFTER_SWITCH  # not seen for UNSEEN_FOR: gone
    clock.advance(formats.FORGOTTEN_AFTER.total_seconds())
    await formats.Formats.settle(kept, clock.now())
    assert set(kept.seen) == {"new-1"}  # silent for a day: forgotten (this one spoke at its last refresh)


async def test_a_held_switch_does_not_flip_by_itself() -> None:
    kept, clock = SwitchKept(tasks=True), ManualClock()
    await kept.write_switch(formats.Switch(formats.BEFORE_SWITCH, None))
    mine = formats.Formats(formats.AFTER_SWITCH, kept)
    clock.advance(formats.SWITCH_AFTER.total_seconds() * 10)
    await mine.refresh(clock.now())
    assert mine.writes == formats.BEFORE_SWITCH and not mine.seals


async def test_a_switch_that_cannot_be_read_keeps_what_the_instance_wrote() -> None:
    class Unreachable(SwitchKept):
        async def read_switch(self) -> formats.Switch | None:
            raise ConnectionError("the table service is unreachable")

    mine = formats.Formats(formats.BEFORE_SWITCH, Unreachable(tasks=False))
    await mine.refresh(ManualClock().now())
    assert mine.writes == formats.BEFORE_SWITCH


async def test_an_instance_that_stops_takes_back_its_word() -> None:
    """A deployment's stop (not a crash) need not wait UNSEEN_FOR for versions only that instance lacked."""
    kept, clock = SwitchKept(tasks=True), ManualClock()
    mine = formats.Formats(formats.AFTER_SWITCH, kept, "new-1", "1.1.0", frozenset({"w@1"}))
    other = formats.Formats(formats.AFTER_SWITCH, kept, "new-2", "1.1.0", frozenset({"w@1", "w@2"}))
    await mine.refresh(clock.now())
    await other.refresh(clock.now())
    assert kept.seen["new-1"].serves == {"w@1"} and not other.served_by_all("w@2")
    await mine.withdraw()
    clock.advance(formats.SWITCH_REFRESH.total_seconds())
    await other.refresh(clock.now())
    assert set(kept.seen) == {"new-2"} and other.served_by_all("w@2")
