"""Orders that wait long, parked out of the live and watch tables, on Azurite: the Supervisor parks them,
anything that changes one brings it back, the calendar brings it back before it is due, and every move
survives a crash or a race half way."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from azure.data.tables.aio import TableServiceClient

from adapters import table_store
from adapters.table_store import CALENDAR, TableStateStore, shard_of
from engine import transitions
from engine.errors import ConcurrencyError
from engine.messages import AgentReply, ReplyOutcome, SchedulerCommand
from engine.parts import EngineParts
from engine.ports import CreateOutcome
from engine.scheduler import Scheduler
from engine.settings import EngineSettings
from engine.state import AuditEntry, ProcessState, StepState, TaskRecord, TaskState
from engine.supervisor import Supervisor
from engine.tasks import Caller, TaskService
from engine.transitions import Context
from engine.workflow import Approval, StepDefinition, Timer, WorkflowCatalog, WorkflowDefinition
from tests.adapters.test_formats import merge
from tests.adapters.test_history import live_keys, rows
from tests.adapters.test_table_store import NOW, FixedClock
from tests.engine.fakes import RecordingSender

pytestmark = pytest.mark.anyio

HORIZON = 60.0  # parks what is due more than two minutes off; brings it back a minute before
SETTINGS = EngineSettings(step_complete_by_seconds=10, park_horizon_seconds=HORIZON)
RESERVE = StepDefinition(name="reserve", agent="stock", action="reserve", compensation="release")
CHARGE = StepDefinition(name="charge", agent="pay", action="charge", compensation="refund")
REVIEW = WorkflowDefinition(
    name="reviewed",
    steps=(RESERVE, StepDefinition(name="review", wait=Approval(deadline_seconds=3600)), CHARGE),
)
WINDOW = WorkflowDefinition(
    name="windowed", steps=(RESERVE, StepDefinition(name="window", wait=Timer(after_seconds=600)), CHARGE)
)
CATALOG = WorkflowCatalog.of(REVIEW, WINDOW)


@pytest.fixture
async def store(azurite_connection_string: str) -> AsyncIterator[TableStateStore]:
    async with TableServiceClient.from_connection_string(azurite_connection_string) as service:
        store = await TableStateStore.from_service(service, "p" + uuid.uuid4().hex[:16], shards=2)
        yield store
        await store.close()


class Engine:
    """The Supervisor and the operator's actions over one store, on a clock the test moves."""

    def __init__(self, store: TableStateStore) -> None:
        self.store = store
        self.clock = FixedClock(NOW)
        self.parts = EngineParts(CATALOG, store, RecordingSender(), self.clock, SETTINGS)
        self.supervisor = Supervisor(self.parts)
        self.tasks = TaskService(self.parts)

    def at(self, seconds: float) -> None:
        self.clock.at = NOW + timedelta(seconds=seconds)


async def waiting(store: TableStateStore, order_id: str, definition: WorkflowDefinition) -> TaskRecord:
    """An order submitted, claimed and past its first step at NOW: waiting at its second."""
    record = TaskRecord(
        state=TaskState(order_id=order_id, workflow=definition.name, created_at=NOW, updated_at=NOW),
        steps=[StepState(index=i, name=s.name) for i, s in enumerate(definition.steps)],
        input={"id": order_id},
        input_hash=f"h-{order_id}",
    )
    ctx = Context(definition, SETTINGS, NOW, "sched-1")
    transitions.new_record_state(record, ctx)
    _, record = await store.create(record)
    transitions.claim(record, ctx)
    reply = AgentReply(order_id=order_id, step_index=0, attempt=1, outcome=ReplyOutcome.SUCCEEDED)
    transitions.apply_reply(record, ctx, reply)
    record.audit(_entry(order_id))
    await store.save(record)
    assert record.state.process_state is ProcessState.WAITING
    return record


def _entry(order_id: str) -> AuditEntry:
    return AuditEntry(
        at=NOW,
        actor="ada",
        action="note",
        process_state_before=ProcessState.WAITING,
        process_state_after=ProcessState.WAITING,
        note=f"about {order_id}",
    )


async def parked(store: TableStateStore, order_id: str, definition: WorkflowDefinition) -> Engine:
    """An order waiting at its second step, parked by the Supervisor's sweep at 11 s (its watch entry due);
    the engine, its clock there."""
    engine = Engine(store)
    await waiting(store, order_id, definition)
    engine.at(11)
    await engine.supervisor.sweep()
    return engine


async def history_keys(store: TableStateStore, order_id: str) -> list[str]:
    """The order's rows in the history table, a marker of an order back in the live records left out (its
    kind checked)."""
    assert store.history is not None
    found = {k: v for k, v in (await rows(store.history)).items() if order_id in k}
    markers = [k for k, v in found.items() if v.get("Kind") == "returned"]
    assert markers in ([], [f"order|{order_id}"])
    return sorted(k for k in found if k not in markers)


async def parked_counts(store: TableStateStore) -> tuple[int, dict[str, int]]:
    found = await store.count_by_state(1000)
    return found.counts[ProcessState.WAITING], found.waiting


async def test_the_supervisor_parks_a_long_wait_where_it_is_still_read_listed_counted_and_audited(
    store: TableStateStore,
) -> None:
    engine = Engine(store)
    await waiting(store, "a-1", REVIEW)
    await waiting(store, "t-1", WINDOW)
    engine.at(11)  # the watch entries (the first step's CompleteBy) come due
    report = await engine.supervisor.sweep()
    assert report.parked == 2
    for order_id in ("a-1", "t-1"):
        assert await live_keys(store, order_id) == []
        loaded = await store.load(order_id)
        assert loaded is not None and loaded.parked and loaded.state.process_state is ProcessState.WAITING
        assert [e.note for e in await engine.tasks.audit(order_id)] == [f"about {order_id}"]
    assert await rows(store.watch) == {}
    assert {e["OrderID"] for e in (await rows(store.history, CALENDAR)).values() if "OrderID" in e} == {
        "a-1",
        "t-1",
    }
    assert await parked_counts(store) == (2, {"approval": 1, "timer": 1})
    page = await store.list_by_state(ProcessState.WAITING, 10, None, "approval")
    assert [s.order_id for s in page.states] == ["a-1"]
    # Nothing more happens to them while they wait: the next sweeps read an empty watch table.
    engine.at(20)
    assert (await engine.supervisor.sweep()).expired == 0


async def test_an_approval_brings_a_parked_order_back_to_the_live_records_watched_with_its_trail(
    store: TableStateStore,
) -> None:
    engine = await parked(store, "a-1", REVIEW)
    version = (await engine.tasks.get("a-1")).version
    engine.at(100)
    record = await engine.tasks.approve("a-1", "review", Caller(actor="ada", note="ok", version=version))
    assert record.state.process_state is ProcessState.PENDING and not record.parked
    loaded = await store.load("a-1")
    assert loaded is not None and not loaded.parked and loaded.version == record.version
    assert [k.split("|")[1] for k in await live_keys(store, "a-1") if k.startswith("index|")] == ["Pending"]
    assert [e.action for e in await engine.tasks.audit("a-1")] == ["note", "approve"]
    assert await history_keys(store, "a-1") == [f"{table_store._stamp(NOW + timedelta(seconds=3600))}|a-1"]
    assert list(await rows(store.watch)) == ["a-1"]
    assert await parked_counts(store) == (0, {})
    # Its calendar entry, now stale, goes at its reading and brings nothing back.
    engine.at(3600 - HISTORY_MARGIN)
    assert (await engine.supervisor.sweep()).promoted == 0
    assert await history_keys(store, "a-1") == []


HISTORY_MARGIN = HORIZON / 2


async def test_the_calendar_brings_a_parked_order_back_before_it_is_due_and_is_read_once_per_half_horizon(
    store: TableStateStore,
) -> None:
    engine = Engine(store)
    await waiting(store, "t-1", WINDOW)  # the timer ends at 600 s: its CompleteBy is 610 s
    engine.at(11)
    await engine.supervisor.sweep()
    engine.at(500)  # the calendar is read (nothing due by 560 s), and next at 530 s
    assert (await engine.supervisor.sweep()).promoted == 0
    engine.at(520)
    reads = dict(store.counter.requests)
    assert (await engine.supervisor.sweep()).promoted == 0
    assert store.counter.requests["history"] - reads["history"] == 1  # the cursor only
    engine.at(540)  # read: nothing due by 600 s
    assert (await engine.supervisor.sweep()).promoted == 0
    engine.at(575)  # read: due by 635 s
    assert (await engine.supervisor.sweep()).promoted == 1
    record = await store.load("t-1")
    assert record is not None and not record.parked and record.state.process_state is ProcessState.WAITING
    assert list(await rows(store.watch)) == ["t-1"] and await parked_counts(store) == (1, {"timer": 1})
    assert await history_keys(store, "t-1") == []


async def test_a_park_that_loses_a_race_leaves_the_order_live_and_nothing_parked(
    store: TableStateStore,
) -> None:
    engine = Engine(store)
    await waiting(store, "a-1", REVIEW)
    engine.at(11)
    stale = await store.load("a-1")
    [entry] = [e async for e in store.expired(engine.clock.at)]
    await engine.tasks.approve("a-1", "review", Caller(actor="ada"))
    assert stale is not None and not await store.park(stale, entry)
    record = await store.load("a-1")
    assert record is not None and not record.parked and record.state.process_state is ProcessState.PENDING
    assert await parked_counts(store) == (0, {})
    assert [k for k in await history_keys(store, "a-1") if not k[0].isdigit()] == []


async def test_a_crash_half_way_through_a_park_leaves_the_order_live_and_parked_again_after_its_next_save(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine(store)
    await waiting(store, "a-1", REVIEW)
    engine.at(11)

    async def crash(*_: Any) -> bool:
        raise RuntimeError("the process died")

    monkeypatch.setattr(store.archives, "delete_live", crash)
    with pytest.raises(RuntimeError):
        await engine.supervisor.sweep()
    loaded = await store.load("a-1")
    assert loaded is not None and not loaded.parked  # live and parked: the live records are the order
    monkeypatch.undo()
    # Its mark stays: the next sweep cannot tell a park that died from one under way, and leaves it live,
    # watched at its deadline.
    report = await engine.supervisor.sweep()
    assert (report.parked, report.rewatched) == (0, 1)
    assert [e.order_id async for e in store.expired(NOW + timedelta(seconds=3600))] == ["a-1"]
    # Its next save clears the mark; parked again, it is counted once.
    record = await store.load("a-1")
    assert record is not None
    record.audit(_entry("a-1"))
    await store.save(record)
    [entry] = [e async for e in store.expired(NOW + timedelta(seconds=3600))]
    assert await store.park(record, entry)
    assert await live_keys(store, "a-1") == [] and await parked_counts(store) == (1, {"approval": 1})


async def test_a_crash_half_way_back_leaves_a_stale_copy_that_the_move_to_the_history_replaces(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = await parked(store, "a-1", REVIEW)

    async def crash(*_: Any) -> bool:
        raise RuntimeError("the process died")

    monkeypatch.setattr(store.parking, "_remove_parked", crash)
    with pytest.raises(RuntimeError):
        await engine.tasks.approve("a-1", "review", Caller(actor="ada"))
    monkeypatch.undo()
    record = await store.load("a-1")
    assert record is not None and not record.parked and record.state.process_state is ProcessState.PENDING
    # The order runs on and finishes; moving it to the history takes the stale copy's place.
    ctx = Context(REVIEW, SETTINGS, engine.clock.at, "sched-1")
    transitions.claim(record, ctx)
    transitions.step_succeeded(record, ctx, {})
    await store.save(record)
    assert record.state.process_state is ProcessState.PROCESSED
    assert await store.archive(record)
    assert await parked_counts(store) == (0, {})
    counts = (await store.count_by_state(1000)).counts
    assert counts[ProcessState.PROCESSED] == 1
    archived = await store.load("a-1")
    assert archived is not None and archived.archived
    pk = shard_of("a-1", 2)
    assert [k for k in await rows(store.history, pk) if k.startswith("index|")] == [
        f"index|Processed|{table_store._stamp(engine.clock.at)}|a-1|"
    ]


async def test_two_that_bring_a_parked_order_back_at_once_one_wins_and_the_other_reads_it_again(
    store: TableStateStore,
) -> None:
    await parked(store, "a-1", REVIEW)
    first, second = await store.load("a-1"), await store.load("a-1")
    assert first is not None and second is not None
    await store.save(first)
    with pytest.raises(ConcurrencyError):
        await store.save(second)
    assert (await store.load("a-1")).etags == first.etags  # type: ignore[union-attr]
    assert await parked_counts(store) == (1, {"approval": 1})  # live, still waiting
    assert len([k for k in await live_keys(store, "a-1") if k.startswith("index|Waiting|approval|")]) == 1


async def test_a_submission_of_a_parked_id_is_answered_from_the_parked_order_and_writes_nothing(
    store: TableStateStore,
) -> None:
    engine = Engine(store)
    parked = await waiting(store, "a-1", REVIEW)
    engine.at(11)
    await engine.supervisor.sweep()
    again = TaskRecord(
        state=TaskState(order_id="a-1", workflow=REVIEW.name, created_at=NOW, updated_at=NOW),
        steps=[StepState(index=i, name=s.name) for i, s in enumerate(REVIEW.steps)],
        input={"id": "a-1"},
        input_hash=parked.input_hash,
    )
    transitions.new_record_state(again, Context(REVIEW, SETTINGS, NOW))
    outcome, answer = await store.create(again)
    assert outcome is CreateOutcome.EXISTS_SAME and answer.parked
    again.input_hash = "other"
    assert (await store.create(again))[0] is CreateOutcome.EXISTS_DIFFERENT
    assert await live_keys(store, "a-1") == [] and await rows(store.watch) == {}


async def test_a_parked_approval_past_its_deadline_comes_back_and_its_policy_applies(
    store: TableStateStore,
) -> None:
    engine = await parked(store, "a-1", REVIEW)
    engine.at(3600 - HISTORY_MARGIN)  # the calendar's reading brings it back, watched at its deadline
    assert (await engine.supervisor.sweep()).promoted == 1
    engine.at(3611)
    report = await engine.supervisor.sweep()
    assert report.deadlines == 1
    record = await store.load("a-1")
    assert record is not None and record.state.process_state is ProcessState.COMPENSATING


async def test_a_wake_up_that_comes_to_a_parked_timer_brings_it_back_and_ends_the_wait(
    store: TableStateStore,
) -> None:
    engine = Engine(store)
    await waiting(store, "t-1", WINDOW)
    stale = await store.load("t-1")
    engine.at(11)
    assert (await engine.supervisor.sweep()).parked == 1
    engine.at(600)
    assert stale is not None
    wake = transitions.wake_command(stale, NOW + timedelta(seconds=600), "timer")
    command = SchedulerCommand.model_validate_json(wake.body.model_dump_json())
    assert await Scheduler(engine.parts, "sched-2").handle_command(command)
    record = await store.load("t-1")
    assert record is not None and not record.parked
    assert record.state.process_state is ProcessState.PROCESSING, record.state  # the next step dispatched


async def test_two_supervisors_that_park_the_same_order_at_once_leave_it_parked_once(
    store: TableStateStore,
) -> None:
    engine = Engine(store)
    await waiting(store, "a-1", REVIEW)
    engine.at(11)
    [entry] = [e async for e in store.expired(engine.clock.at)]
    first, second = await store.load("a-1"), await store.load("a-1")
    assert first is not None and second is not None
    results = await asyncio.gather(store.park(first, entry), store.park(second, entry))
    assert sorted(results) == [False, True]
    assert not await store.park(second, entry)  # and once the first is done, the second finds nothing
    record = await store.load("a-1")
    assert record is not None and record.parked and record.state.process_state is ProcessState.WAITING
    assert await live_keys(store, "a-1") == [] and await parked_counts(store) == (1, {"approval": 1})


async def test_a_returned_order_s_marker_is_written_over_when_it_is_parked_again_or_finishes(
    store: TableStateStore,
) -> None:
    await parked(store, "t-1", WINDOW)
    back = await store.load("t-1")
    assert back is not None and back.parked
    await store.save(back)  # back in the live records: its key holds the marker
    assert (await rows(store.history, shard_of("t-1", 2)))["order|t-1"]["Kind"] == "returned"
    loaded = await store.load("t-1")
    assert loaded is not None and not loaded.parked
    # Parked again over the marker, and counted once.
    [entry] = [e async for e in store.expired(NOW + timedelta(days=1))]
    assert await store.park(loaded, entry)
    assert await parked_counts(store) == (1, {"timer": 1})
    again = await store.load("t-1")
    assert again is not None and again.parked
    # Back, then finished: the history's copy takes the marker's place, counted as finished.
    ctx = Context(WINDOW, SETTINGS, NOW + timedelta(seconds=600), "sched-1")
    transitions.wake(again, ctx, 1, again.state.attempt)
    await store.save(again)
    transitions.claim(again, ctx)
    transitions.step_succeeded(again, ctx, {})
    await store.save(again)
    assert again.state.process_state is ProcessState.PROCESSED and await store.archive(again)
    kept = await store.load("t-1")
    assert kept is not None and kept.archived
    counts = await store.count_by_state(1000)
    assert counts.counts[ProcessState.PROCESSED] == 1 and counts.counts[ProcessState.WAITING] == 0


async def test_what_a_later_release_stored_on_an_order_s_records_survives_its_parking_and_return(
    store: TableStateStore,
) -> None:
    engine = Engine(store)
    await waiting(store, "a-1", REVIEW)
    await merge(store, "a-1", "|state", Priority="high")
    await merge(store, "a-1", "|step|00", Carrier="dhl", Parcels=2)
    await merge(store, "a-1", "|input", Locale="de")
    engine.at(11)
    assert (await engine.supervisor.sweep()).parked == 1
    version = (await engine.tasks.get("a-1")).version
    engine.at(100)
    await engine.tasks.approve("a-1", "review", Caller(actor="ada", note="ok", version=version))
    live = await rows(store.table)
    state, step, body = (live[f"order|a-1|{row}"] for row in ("state", "step|00", "input"))
    assert (state["Priority"], step["Carrier"], step["Parcels"], body["Locale"]) == ("high", "dhl", 2, "de")
    # Each on the record it came from, no other.
    assert "Carrier" not in state and "Locale" not in step and "Priority" not in body
