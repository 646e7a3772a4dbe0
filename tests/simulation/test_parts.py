"""The simulation's parts on their own: virtual time, the tables, the broker, the services."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.core import MatchConditions
from azure.core.exceptions import ResourceExistsError, ResourceModifiedError, ResourceNotFoundError
from azure.data.tables import TableTransactionError

from engine import queues
from engine.messages import AgentRequest, SchedulerCommand
from engine.workflow import StepDefinition
from orders.catalog import CATALOG, SERVICES
from orders.services.client import RemoteServices
from simulation.bus import Bus, Message
from simulation.loop import EPOCH, VirtualLoop
from simulation.profile import draw
from simulation.services import Declarations
from simulation.table_client import SimTableClient
from simulation.tables import Tables
from simulation.world import Crash, Worker, World
from tests.orders.test_services import Service


def test_virtual_time_jumps_to_the_next_timer() -> None:
    loop = VirtualLoop()

    async def main() -> float:
        await asyncio.sleep(3600)
        try:
            async with asyncio.timeout(5):
                await asyncio.sleep(10)
        except TimeoutError:
            return loop.time()
        raise AssertionError("the timeout did not fire")

    try:
        assert loop.run_until_complete(main()) == 3605.0
    finally:
        loop.close()


IF_MATCH = MatchConditions.IfNotModified


def _client(label: str = "t") -> SimTableClient:
    class Instant:
        def before(self, kind: str) -> asyncio.Future[None]:
            future = asyncio.get_running_loop().create_future()
            future.set_result(None)
            return future

        def after(self, kind: str) -> None:
            pass

    return SimTableClient(Tables().table("t"), Instant(), label)


def _entity(rk: str, **props: Any) -> dict[str, Any]:
    return {"PartitionKey": "p", "RowKey": rk, **props}


def test_a_transaction_is_all_or_nothing_and_conditional_on_etags() -> None:
    client = _client()

    async def main() -> None:
        first = (await client.create_entity(_entity("a|1", V="one")))["etag"]
        with pytest.raises(TableTransactionError) as refused:
            await client.submit_transaction(
                [
                    ("create", _entity("a|2", V="two")),
                    ("update", _entity("a|1", V="uno"), {"etag": 'W/"stale"', "match_condition": IF_MATCH}),
                ]
            )
        assert (refused.value.status_code, refused.value.error_code) == (412, "UpdateConditionNotSatisfied")
        with pytest.raises(ResourceNotFoundError):
            await client.get_entity("p", "a|2")
        results = await client.submit_transaction(
            [
                ("create", _entity("a|2", V="two")),
                ("update", _entity("a|1", V="uno"), {"etag": first, "match_condition": IF_MATCH}),
            ]
        )
        assert results[1]["etag"] != first
        with pytest.raises(ResourceExistsError):
            await client.create_entity(_entity("a|1", V="again"))
        with pytest.raises(TableTransactionError) as split:
            await client.submit_transaction(
                [("create", _entity("a|3")), ("create", {**_entity("b"), "PartitionKey": "q"})]
            )
        assert split.value.status_code == 400
        await client.delete_entity("p", "absent")  # the SDK answers an absent entity's delete as done
        with pytest.raises(ResourceModifiedError):
            await client.delete_entity("p", "a|1", etag=first, match_condition=IF_MATCH)

    asyncio.run(main())


def test_queries_read_their_filter_page_by_page_as_the_sdk_does() -> None:
    client = _client()
    at = datetime(2026, 1, 1, tzinfo=UTC)

    async def main() -> None:
        for i in range(5):
            await client.upsert_entity(
                _entity(f"k|{i}", Kind="x" if i % 2 else "y", At=at + timedelta(seconds=i))
            )
        await client.upsert_entity({**_entity("k|9"), "PartitionKey": "other"})
        ranged = client.query_entities(
            "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
            parameters={"pk": "p", "lo": "k|1", "hi": "k|4"},
            results_per_page=2,
        ).by_page()
        first = [e["RowKey"] async for e in await anext(ranged)]
        assert first == ["k|1", "k|2"] and ranged.continuation_token == {"PartitionKey": "p", "RowKey": "k|3"}
        rest = client.query_entities(
            "PartitionKey eq @pk and RowKey ge @lo and RowKey lt @hi",
            parameters={"pk": "p", "lo": "k|1", "hi": "k|4"},
        ).by_page(continuation_token=ranged.continuation_token)
        assert [e["RowKey"] async for e in await anext(rest)] == ["k|3"] and rest.continuation_token is None
        due = client.query_entities(
            "PartitionKey eq @pk and At le @now",
            parameters={"pk": "p", "now": at + timedelta(seconds=1)},
            select=["At"],
        )
        found = [e async for e in due]
        assert [dict(e) for e in found] == [{"At": at}, {"At": at + timedelta(seconds=1)}]
        assert found[0].metadata["etag"]
        kinds = client.query_entities("PartitionKey eq 'p' and Kind eq 'x'")
        assert [e["RowKey"] async for e in kinds] == ["k|1", "k|3"]
        with pytest.raises(NotImplementedError):
            client.query_entities("PartitionKey eq 'p' or Kind eq 'x'")

    asyncio.run(main())


def _bus(consume: Any, *, faults: bool = True) -> tuple[VirtualLoop, World, Bus]:
    loop = VirtualLoop()
    profile = replace(
        draw(0, ["x"]), crash_rate=0.0, store_error_rate=0.0, settle_loss_rate=0.0, lock_loss_rate=0.0
    )
    world = World(profile, random.Random(0), loop)
    world.faults = faults
    world.workers = [Worker(0, 0), Worker(1, 0)]
    world.on_restart = lambda worker: None
    bus = Bus(world, _Quiet(), consume, {queues.SCHEDULER_QUEUE})
    return loop, world, bus


class _Quiet:
    def sent(self, message: Message) -> None:
        pass

    def settled(self, message: Message) -> None:
        pass


def _command() -> SchedulerCommand:
    return SchedulerCommand(order_id="o1", kind="start")


def test_duplicate_detection_and_dead_lettering_after_the_delivery_count() -> None:
    deliveries: list[int] = []

    async def failing(worker: Worker, message: Message) -> None:
        deliveries.append(message.deliveries)
        raise RuntimeError("always")

    loop, _, bus = _bus(failing)
    first = bus.enqueue(queues.SCHEDULER_QUEUE, _command(), "m1", "o1")
    assert bus.enqueue(queues.SCHEDULER_QUEUE, _command(), "m1", "o1") is None
    loop.run_until_complete(asyncio.sleep(60))
    loop.close()
    assert first is not None
    limit = queues.queue_properties(queues.SCHEDULER_QUEUE).max_delivery_count
    assert deliveries == list(range(1, limit + 1))
    assert (first.state, first.reason) == ("dead-lettered", "MaxDeliveryCountExceeded")


def test_a_message_of_a_process_that_died_comes_back_when_its_lock_expires() -> None:
    seen: list[tuple[str, float]] = []

    async def dies_once(worker: Worker, message: Message) -> None:
        seen.append((worker.name, loop.time()))
        if len(seen) == 1:
            world.kill(worker)
            raise Crash("simulated")

    loop, world, bus = _bus(dies_once)
    message = bus.enqueue(queues.SCHEDULER_QUEUE, _command(), "m1", "o1")
    loop.run_until_complete(asyncio.sleep(120))
    loop.close()
    assert message is not None and message.state == "completed"
    assert len(seen) == 2
    assert seen[1][1] - seen[0][1] >= 50  # after the lock period, not at once


def test_a_scheduled_message_comes_at_its_time_and_a_wake_up_under_faults_a_little_early_or_late() -> None:
    """A scheduled command is delivered at its time (its time to live counted from then), after the usual
    delay; under faults a timer's wake-up may come up to ``wake_early_seconds`` before it, or up to two
    budgets late."""
    seen: dict[str, float] = {}

    async def record(worker: Worker, message: Message) -> None:
        seen[message.message_id] = loop.time()

    loop, world, bus = _bus(record)
    profile = world.profile = replace(
        world.profile, wake_early_rate=0.5, wake_early_seconds=1.0, wake_late_rate=0.4
    )
    at = EPOCH + timedelta(seconds=100)
    wake = SchedulerCommand(order_id="o1", kind="wake", step_index=1, attempt=1)
    for i in range(40):
        bus.enqueue(queues.SCHEDULER_QUEUE, wake, f"w{i}", "o1", scheduled_at=at)
    command = bus.enqueue(queues.SCHEDULER_QUEUE, _command(), "c", "o1", 60.0, at)
    loop.run_until_complete(asyncio.sleep(300))
    loop.close()
    assert command is not None and command.state == "completed"  # not expired: 60 s from its time
    assert 100 <= seen["c"] <= 100 + profile.delivery_delay_seconds
    times = [seen[f"w{i}"] for i in range(40)]
    assert min(times) < 100 < max(times)
    assert all(
        99 <= t <= 100 + 2 * profile.complete_by_seconds + profile.delivery_delay_seconds for t in times
    )
    assert bus.wakes_early and bus.wakes_late


def _request(
    step: StepDefinition, index: int, order: dict[str, Any], known: dict[str, Any], undo: bool
) -> AgentRequest:
    """A request of the step's action (or its undo) on order ``o-1``, with the values known so far."""
    action = step.compensation if undo else step.action
    assert action is not None
    return AgentRequest(
        order_id="o-1",
        step=step.name,
        step_index=index,
        attempt=1,
        compensating=undo,
        action=action,
        idempotency_key=f"o-1:{step.name}",
        complete_by=datetime(2026, 1, 1, tzinfo=UTC),
        payload={"input": order, "results": dict(known)},
    )


def _requests() -> list[tuple[str, AgentRequest]]:
    """A request of every action of the declared workflows (a wait calls nothing), on each example input,
    with the values every step before it returned (an undo: its own too, and once without them, as after a
    lost answer)."""
    declarations = Declarations(SERVICES)
    made: list[tuple[str, AgentRequest]] = []
    for workflow in CATALOG.workflows:
        assert workflow.input is not None
        for example in workflow.examples():
            fields = workflow.input.model_validate(example).model_dump(by_alias=True, mode="json")
            order = {"orderId": "o-1", **fields}
            results: dict[str, Any] = {}
            for index, step in enumerate(workflow.steps):
                if not step.calls:  # a wait: no call
                    continue
                agent = step.call_agent
                apply = _request(step, index, order, results, undo=False)
                made.append((agent, apply))
                own = declarations.result(agent, apply)
                if step.compensation is not None:
                    made.append((agent, _request(step, index, order, results, undo=True)))
                    made.append((agent, _request(step, index, order, {**results, **own}, undo=True)))
                results.update(own)
    return made


def test_a_simulated_call_carries_the_body_the_client_sends_and_answers_what_the_client_passes_on() -> None:
    """The simulation records, for each call, the body the real client (``orders.services.client``) sends for
    the same request, and a simulated apply answers with values the client passes on unchanged."""
    declarations = Declarations(SERVICES)
    service = Service()  # a real local HTTP service: records each body, answers what it is scripted to

    async def main() -> None:
        remote = RemoteServices(SERVICES, {s.name: service.url for s in SERVICES})
        try:
            actions = remote.actions()
            for agent, request in _requests():
                built = declarations.body(agent, request)
                assert built is not None, f"{agent}.{request.action} is declared"
                answer = declarations.result(agent, request)
                service.answer(200, {"status": "done", **answer})
                passed_on = await actions[agent][request.action](request, 5.0)
                sent = service.seen[-1][2]
                assert sent == built[0], f"{agent}.{request.action}: the body the client sends"
                assert passed_on == ({} if request.compensating else answer), f"{agent}.{request.action}"
                for name, value in built[1].items():
                    assert sent.get(name) == value, f"{agent}.{request.action} carries {name}"
        finally:
            await remote.client.aclose()

    try:
        asyncio.run(main())
    finally:
        service.close()
    assert len(service.seen) == len(_requests())
