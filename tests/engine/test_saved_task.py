"""The saved copy of a task that commands, requests and replies carry: what it holds, when it is refused,
and that the Scheduler decides from it exactly as from the task read back, reading only when it must."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from engine import queues, saved_task
from engine.decisions import Outgoing
from engine.messages import (
    SAVED_TASK_MAX_CHARS,
    AgentReply,
    AgentRequest,
    CommandKind,
    ReplyOutcome,
    SchedulerCommand,
    StatusEvent,
    StatusMessage,
)
from engine.state import ProcessState, StepState, StepStatus, TaskRecord, TaskState
from tests.engine.test_state_machine import World

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def _record(order_id: str = "o-1", body: str = "x") -> TaskRecord:
    state = TaskState(
        order_id=order_id,
        workflow="three-steps",
        created_at=NOW,
        updated_at=NOW,
        complete_by=NOW,
        locked_by="sched-1",
        process_state=ProcessState.PROCESSING,
        attempt=2,
    )
    steps = [
        StepState(index=0, name="first", status=StepStatus.COMPLETED, result={"id": "r-1", "n": [1, 2.5]}),
        StepState(index=1, name="second", status=StepStatus.RUNNING, attempts=2, complete_by=NOW),
    ]
    return TaskRecord(
        state=state,
        steps=steps,
        input={"body": body, "nested": {"é": "ü"}},
        input_hash="h-1",
        etags={"state": "W/1", "step-0": "W/2", "step-1": "W/3"},
        indexed=True,
        listed="index|Processing|20261123T120000000000Z|o-1|",
    )


def test_a_copy_reads_back_as_the_record_it_was_taken_from() -> None:
    record = _record()
    copy = saved_task.decode(saved_task.encode(record), "o-1")
    assert copy is not None
    assert copy.state == record.state and copy.steps == record.steps
    assert (copy.input, copy.input_hash, copy.etags, copy.indexed, copy.listed) == (
        record.input,
        record.input_hash,
        record.etags,
        True,
        record.listed,
    )
    assert copy.changed_steps() == [] and copy.pending_audit() == []
    assert copy.version == record.version


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(lambda t: t.replace('"W/3"', '"W/4"'), id="edited"),
        pytest.param(lambda t: t[:-5], id="cut"),
        pytest.param(lambda t: "1" + t[1:], id="an older format"),
        pytest.param(lambda t: "not a copy", id="garbage"),
        pytest.param(lambda t: "", id="empty"),
    ],
)
def test_a_copy_that_does_not_check_out_is_ignored(spoil: object) -> None:
    text = saved_task.encode(_record())
    assert text is not None
    assert saved_task.decode(spoil(text), "o-1") is None  # type: ignore[operator]


def test_a_copy_of_another_task_is_ignored(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="engine.saved_task"):
        assert saved_task.decode(saved_task.encode(_record("o-2")), "o-1") is None
    assert "carried a copy of task o-2" in caplog.text


def test_a_task_too_large_to_carry_has_no_copy() -> None:
    assert saved_task.encode(_record(body="x" * SAVED_TASK_MAX_CHARS)) is None
    text = saved_task.encode(_record(body="x" * (SAVED_TASK_MAX_CHARS // 2)))
    assert text is not None and len(text) <= SAVED_TASK_MAX_CHARS


def test_only_a_saved_record_can_be_copied() -> None:
    record = _record()
    record.steps[1].status = StepStatus.COMPLETED
    with pytest.raises(ValueError, match="unsaved changes"):
        saved_task.encode(record)


def test_the_copy_goes_only_to_the_scheduler_and_agents_and_only_about_its_task() -> None:
    record = _record()
    command = SchedulerCommand(order_id="o-1", kind=CommandKind.START)
    request = AgentRequest(
        order_id="o-1",
        step="second",
        step_index=1,
        attempt=2,
        action="do-b",
        idempotency_key="o-1:second",
        complete_by=NOW,
    )
    status = StatusMessage(order_id="o-1", event=StatusEvent.RECEIVED, process_state="Pending", at=NOW)
    other = SchedulerCommand(order_id="o-2", kind=CommandKind.START)
    messages = [
        Outgoing(queues.SCHEDULER_QUEUE, command, "m-1", "o-1"),
        Outgoing("agent-alpha", request, "m-2", "o-1"),
        Outgoing(queues.STATUS_QUEUE, status, "m-3", "o-1"),
        Outgoing(queues.SCHEDULER_QUEUE, other, "m-4", "o-2"),
    ]
    out = saved_task.attach(messages, record)
    carried = [getattr(m.body, "saved_task", None) for m in out]
    assert carried[0] == carried[1] == saved_task.encode(record)
    assert carried[2:] == [None, None]
    assert [m.message_id for m in out] == ["m-1", "m-2", "m-3", "m-4"]
    assert command.saved_task is None  # the decision's own messages are left as they were


def test_messages_refuse_a_copy_longer_than_the_limit() -> None:
    with pytest.raises(ValueError):
        SchedulerCommand(order_id="o-1", kind=CommandKind.START, saved_task="x" * (SAVED_TASK_MAX_CHARS + 1))


# ---- the Scheduler with copies ------------------------------------------------------------------------
async def test_an_order_runs_through_with_no_read_when_every_message_carries_the_copy() -> None:
    world = World()
    await world.submit()
    loads = world.store.loads
    await world.kick()
    for _ in range(3):
        request = world.take_request()
        assert request.saved_task is not None
        assert await world.reply(request, result={"ok": True})
    assert world.store.state("o-1").state.process_state is ProcessState.PROCESSED
    assert world.store.loads == loads  # the claim and three replies: saves only


async def test_without_a_copy_the_scheduler_reads_the_task() -> None:
    world = World()
    await world.submit()
    await world.kick()
    request = world.take_request()
    loads = world.store.loads
    assert await world.scheduler.handle_reply(
        AgentReply(order_id="o-1", step_index=0, attempt=request.attempt, outcome=ReplyOutcome.SUCCEEDED)
    )
    assert world.store.loads == loads + 1
    assert world.store.state("o-1").steps[0].status is StepStatus.COMPLETED


async def test_a_copy_gone_stale_loses_its_save_and_the_task_read_back_decides() -> None:
    world = World()
    await world.submit()
    await world.kick()
    request = world.take_request()
    # An operator pushes the step's CompleteBy after the request went out: the reply's copy is stale.
    await world.tasks.extend_step("o-1", "first", 30)
    extended = world.store.state("o-1").steps[0].complete_by
    loads, operations = world.store.loads, world.store.operations
    assert await world.reply(request, result={"ok": True})
    assert world.store.loads == loads + 1
    assert world.store.operations == operations + 3  # the refused save, the read, the save
    stored = world.store.state("o-1")
    assert stored.steps[0].status is StepStatus.COMPLETED
    assert stored.steps[0].complete_by == extended  # the operator's change was not overwritten
    assert stored.state.current_step == 1


async def test_a_duplicate_reply_with_its_copy_changes_nothing() -> None:
    world = World()
    await world.submit()
    await world.kick()
    request = world.take_request()
    assert await world.reply(request, result={"ok": True})
    after_first = world.store.state("o-1").model_copy(deep=True)
    world.sender.take()
    assert not await world.reply(request, result={"ok": True})
    assert world.sender.take() == []
    stored = world.store.state("o-1")
    assert stored.state == after_first.state and stored.steps == after_first.steps


async def test_a_duplicate_kick_with_its_copy_claims_once() -> None:
    world = World()
    await world.submit()
    [command] = world.commands()
    assert await world.scheduler.handle_command(command)
    assert not await world.other_scheduler.handle_command(command)
    assert world.store.state("o-1").state.locked_by == "sched-1"
    assert len(world.requests()) == 1
