"""Workflow versions: an order keeps the definition it started on across deploys, new orders take the
latest, and an order whose version is no longer deployed goes to Error with the reason and an alert."""

from __future__ import annotations

import logging

import pytest

from engine import formats, queues, telemetry
from engine.agent import Agent
from engine.clock import ManualClock
from engine.errors import InvalidState, NotServedYet, UnknownWorkflow
from engine.messages import AgentReply, AgentRequest, ReplyOutcome
from engine.parts import EngineParts
from engine.scheduler import Scheduler
from engine.settings import EngineSettings
from engine.state import ProcessState
from engine.supervisor import Supervisor
from engine.tasks import Caller, TaskService
from engine.workflow import RetryPolicy, StepDefinition, WorkflowCatalog, WorkflowDefinition
from tests.engine.fakes import MemoryStore, RecordingSender, SwitchKept

pytestmark = pytest.mark.anyio

V1 = WorkflowDefinition(
    name="w",
    version=1,
    steps=(
        StepDefinition(name="first", agent="alpha", action="do-a", compensation="undo-a"),
        StepDefinition(name="second", agent="beta", action="do-b", compensation="undo-b"),
    ),
)
# Version 2 reorders the steps, drops beta, and undoes alpha another way.
V2 = V1.revise(
    version=2,
    steps=(
        StepDefinition(name="third", agent="gamma", action="do-c", compensation="undo-c"),
        StepDefinition(name="first", agent="alpha", action="do-a2", compensation="undo-a2"),
    ),
)
SETTINGS = EngineSettings(step_complete_by_seconds=10, supervisor_max_failures=3)


class Deployment:
    """The engine as one deploy runs it: the store, queues and clock outlive it, the catalog does not."""

    def __init__(
        self,
        catalog: WorkflowCatalog,
        store: MemoryStore,
        sender: RecordingSender,
        clock: ManualClock,
        versions: formats.Formats | None = None,
    ):
        parts = EngineParts(catalog, store, sender, clock, SETTINGS, formats=versions or formats.Formats())
        self.tasks = TaskService(parts)
        self.scheduler = Scheduler(parts, instance="sched")
        self.supervisor = Supervisor(parts)


class World:
    def __init__(self) -> None:
        self.store = MemoryStore()
        self.sender = RecordingSender()
        self.clock = ManualClock()

    def deploy(self, *workflows: WorkflowDefinition) -> Deployment:
        return Deployment(WorkflowCatalog.of(*workflows), self.store, self.sender, self.clock)

    async def kick(self, deployment: Deployment) -> None:
        for sent in self.sender.take(queues.SCHEDULER_QUEUE):
            await deployment.scheduler.handle_command(sent.body)

    def request(self) -> AgentRequest:
        (sent,) = [s for s in self.sender.sent if isinstance(s.body, AgentRequest)]
        self.sender.sent.remove(sent)
        return sent.body

    async def reply(
        self, deployment: Deployment, request: AgentRequest, outcome: ReplyOutcome = ReplyOutcome.SUCCEEDED
    ) -> bool:
        return await deployment.scheduler.handle_reply(
            AgentReply(
                order_id=request.order_id,
                step_index=request.step_index,
                attempt=request.attempt,
                compensating=request.compensating,
                outcome=outcome,
                error="no" if outcome is ReplyOutcome.FAILED else None,
                saved_task=request.saved_task,
            )
        )


async def test_new_orders_take_the_latest_version_and_requests_name_it() -> None:
    world = World()
    deployment = world.deploy(V1, V2)
    await deployment.tasks.submit("o-1", {}, "h")
    record = world.store.state("o-1")
    assert (record.state.workflow, record.state.workflow_version) == ("w", 2)
    assert [s.name for s in record.steps] == ["third", "first"]
    await world.kick(deployment)
    request = world.request()
    assert (request.workflow, request.workflow_version, request.step, request.action) == (
        "w",
        2,
        "third",
        "do-c",
    )


async def test_an_order_in_flight_finishes_on_its_version_after_a_deploy_adds_one() -> None:
    world = World()
    old = world.deploy(V1)
    await old.tasks.submit("o-1", {}, "h")
    await world.kick(old)
    first = world.request()
    new = world.deploy(V1, V2)  # the workers restart with version 2 declared
    assert await world.reply(new, first)
    second = world.request()
    assert (second.step, second.action, second.workflow_version) == ("second", "do-b", 1)
    assert await world.reply(new, second)
    done = world.store.state("o-1")
    assert done.state.process_state is ProcessState.PROCESSED and done.state.workflow_version == 1


async def test_an_order_in_flight_is_undone_with_its_versions_compensations() -> None:
    world = World()
    old = world.deploy(V1)
    await old.tasks.submit("o-1", {}, "h")
    await world.kick(old)
    new = world.deploy(V1, V2)
    assert await world.reply(new, world.request())
    assert await world.reply(new, world.request(), ReplyOutcome.FAILED)  # a lasting fault on "second"
    # Undone in reverse, each with version 1's compensation: "second" (a step version 2 does not have, on
    # a service it does not use), then "first" with undo-a, not version 2's undo-a2.
    undo = world.request()
    assert undo.compensating and (undo.step, undo.action) == ("second", "undo-b")
    assert await world.reply(new, undo)
    undo = world.request()
    assert undo.compensating and (undo.step, undo.action) == ("first", "undo-a")
    assert await world.reply(new, undo)
    assert world.store.state("o-1").state.process_state is ProcessState.COMPENSATED


async def test_a_reply_for_an_order_whose_version_is_gone_sets_error_with_the_reason_and_an_alert(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World()
    old = world.deploy(V1)
    await old.tasks.submit("o-1", {}, "h")
    await world.kick(old)
    request = world.request()
    new = world.deploy(V2)  # version 1 dropped too early
    caplog.set_level(logging.INFO, logger=telemetry.log.name)
    assert await world.reply(new, request)
    record = world.store.state("o-1")
    assert record.state.process_state is ProcessState.ERROR
    assert record.state.last_error is not None and "w version 1 is not deployed" in record.state.last_error
    assert not [s for s in world.sender.sent if isinstance(s.body, AgentRequest)]  # nothing run on v2
    assert any(r.getMessage().startswith("event OrderEnteredError") for r in caplog.records)
    (audit,) = await new.tasks.audit("o-1")
    assert (audit.action, audit.actor) == ("error", "scheduler:sched")
    # Operators cannot run it on another definition either.
    with pytest.raises(InvalidState, match="not deployed"):
        await new.tasks.resubmit("o-1", Caller())


async def test_a_pending_order_and_an_expired_one_whose_version_is_gone_go_to_error() -> None:
    world = World()
    old = world.deploy(V1)
    await old.tasks.submit("pending", {}, "h")
    await old.tasks.submit("running", {}, "h")
    for sent in world.sender.take(queues.SCHEDULER_QUEUE):
        if sent.body.order_id == "running":
            await old.scheduler.handle_command(sent.body)
        else:
            kick = sent.body
    new = world.deploy(V2)
    assert await new.scheduler.handle_command(kick)  # the Scheduler refuses to claim it onto v2
    assert world.store.state("pending").state.process_state is ProcessState.ERROR
    world.clock.advance(11)  # the running step's CompleteBy passes
    report = await new.supervisor.sweep()
    assert report.errored == 1
    expired = world.store.state("running")
    assert expired.state.process_state is ProcessState.ERROR
    assert (await new.tasks.audit("running"))[-1].actor == "supervisor"


async def test_a_submission_naming_no_deployed_workflow_is_refused() -> None:
    world = World()
    with pytest.raises(UnknownWorkflow, match="'other'"):
        await world.deploy(V1).tasks.submit("o-1", {}, "h", "other")
    assert await world.store.load("o-1") is None


def test_an_agent_runs_each_request_with_its_versions_retry_policy() -> None:
    one = V1.revise(
        steps=(StepDefinition(name="s", agent="alpha", action="a", retry=RetryPolicy(max_tries=1)),)
    )
    two = one.revise(
        version=2,
        steps=(StepDefinition(name="s", agent="alpha", action="a", retry=RetryPolicy(max_tries=4)),),
    )
    agent = Agent.for_catalog(WorkflowCatalog.of(one, two), "alpha", {}, RecordingSender(), ManualClock())
    assert agent.policy_for("s", "w", 1).max_tries == 1
    assert agent.policy_for("s", "w", 2).max_tries == 4


async def test_in_a_rolling_deployment_new_orders_take_the_newest_version_every_instance_serves() -> None:
    """An instance that adds version 2 beside one that serves only version 1 sends new orders to version 1
    until the other has gone (silent for UNSEEN_FOR) or serves it too; while the switch has not flipped,
    the release before's instances (which say nothing) count as serving what it declared."""
    world, kept = World(), SwitchKept(tasks=True)
    old_formats = formats.Formats(formats.AFTER_SWITCH, kept, "old", "1.1.0", frozenset({"w@1"}))
    new_formats = formats.Formats(formats.AFTER_SWITCH, kept, "new", "1.2.0", frozenset({"w@1", "w@2"}))
    new = Deployment(WorkflowCatalog.of(V1, V2), world.store, world.sender, world.clock, new_formats)
    await old_formats.refresh(world.clock.now())
    await new_formats.refresh(world.clock.now())
    await new.tasks.submit("during", {}, "h")
    assert world.store.state("during").state.workflow_version == 1  # the other instance lacks v2
    # A workflow only the new instance has is refused, not sent where it would be put in Error.
    other = WorkflowDefinition(name="other", steps=V1.steps)
    newer = Deployment(WorkflowCatalog.of(V1, V2, other), world.store, world.sender, world.clock, new_formats)
    with pytest.raises(NotServedYet, match="'other'"):
        await newer.tasks.submit("refused", {}, "h", "other")
    assert await world.store.load("refused") is None
    # The old instance gone (silent past UNSEEN_FOR): version 2 from the next read of the switch on.
    world.clock.advance(formats.SWITCH_AFTER.total_seconds() + formats.UNSEEN_FOR.total_seconds())
    await new_formats.refresh(world.clock.now())
    await new.tasks.submit("after", {}, "h")
    assert world.store.state("after").state.workflow_version == 2


async def test_before_the_switch_new_orders_take_only_versions_the_release_before_serves() -> None:
    world, kept = World(), SwitchKept(tasks=True)
    mine = formats.Formats(
        formats.BEFORE_SWITCH, kept, "new", "1.1.0", frozenset({"w@1", "w@2"}), frozenset({"w@1"})
    )
    deployment = Deployment(WorkflowCatalog.of(V1, V2), world.store, world.sender, world.clock, mine)
    await mine.refresh(world.clock.now())
    await deployment.tasks.submit("before", {}, "h")
    assert world.store.state("before").state.workflow_version == 1
    world.clock.advance(formats.SWITCH_AFTER.total_seconds())
    await mine.refresh(world.clock.now())  # no older instance seen: the switch flips by itself
    assert mine.writes == formats.AFTER_SWITCH
    await deployment.tasks.submit("after", {}, "h")
    assert world.store.state("after").state.workflow_version == 2
