"""The Table Storage state store against a real Azurite."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from azure.data.tables.aio import TableServiceClient

from adapters.table_store import TableStateStore, shard_of
from engine import saved_task, transitions
from engine.errors import ConcurrencyError
from engine.messages import AgentReply, ReplyOutcome
from engine.parts import EngineParts
from engine.ports import CreateOutcome
from engine.settings import EngineSettings
from engine.state import AuditEntry, ProcessState, StepState, StepStatus, TaskRecord, TaskState
from engine.supervisor import Supervisor
from engine.transitions import Context
from engine.workflow import Approval, StepDefinition, Timer, WorkflowCatalog, WorkflowDefinition
from tests.engine.fakes import RecordingSender

pytestmark = pytest.mark.anyio

WORKFLOW = WorkflowDefinition(
    name="two-steps",
    steps=(
        StepDefinition(name="first", agent="alpha", action="do-a", compensation="undo-a"),
        StepDefinition(name="second", agent="beta", action="do-b", compensation="undo-b"),
    ),
)
SETTINGS = EngineSettings(step_complete_by_seconds=10)


class FixedClock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at


NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def store(azurite_connection_string: str) -> AsyncIterator[TableStateStore]:
    async with TableServiceClient.from_connection_string(azurite_connection_string) as service:
        store = await TableStateStore.from_service(service, "t" + uuid.uuid4().hex[:16], shards=4)
        yield store
        await store.close()


async def expired_ids(store: TableStateStore, at: datetime) -> list[str]:
    return sorted([e.order_id async for e in store.expired(at)])


def new_record(order_id: str, body: dict | None = None, now: datetime = NOW) -> TaskRecord:
    record = TaskRecord(
        state=TaskState(order_id=order_id, workflow=WORKFLOW.name, created_at=now, updated_at=now),
        steps=[StepState(index=i, name=s.name) for i, s in enumerate(WORKFLOW.steps)],
        input=body or {"items": [{"sku": "a", "quantity": 1}]},
        input_hash=str(hash(str(body))),
    )
    transitions.new_record_state(record, Context(WORKFLOW, SETTINGS, now))
    return record


def ctx(now: datetime = NOW, instance: str = "sched-1") -> Context:
    return Context(WORKFLOW, SETTINGS, now, instance)


async def test_create_writes_state_steps_and_input_together(store: TableStateStore) -> None:
    outcome, loaded = await store.create(new_record("o-1", {"big": "x" * 70_000}))
    assert outcome is CreateOutcome.CREATED
    assert loaded.state.process_state is ProcessState.PENDING and loaded.state.complete_by == NOW + timedelta(
        seconds=10
    )
    assert [s.name for s in loaded.steps] == ["first", "second"]
    assert loaded.input == {"big": "x" * 70_000}  # split across properties, joined back
    entity = await store.table.get_entity(shard_of("o-1", 4), "order|o-1|state")
    # The pattern's property names, as stored.
    assert {"OrderID", "CompleteBy", "ProcessState", "FailureCount"} <= set(entity)
    assert "LockedBy" not in entity  # null until claimed
    assert await expired_ids(store, NOW + timedelta(seconds=10)) == ["o-1"]  # watched


async def test_create_is_idempotent_for_the_same_body_and_conflicts_for_another(
    store: TableStateStore,
) -> None:
    await store.create(new_record("o-1", {"a": 1}))
    outcome, _ = await store.create(new_record("o-1", {"a": 1}))
    assert outcome is CreateOutcome.EXISTS_SAME
    outcome, _ = await store.create(new_record("o-1", {"a": 2}))
    assert outcome is CreateOutcome.EXISTS_DIFFERENT
    assert (await store.load("o-1")).input == {"a": 1}  # type: ignore[union-attr]


async def _watch_entries(store: TableStateStore) -> dict[str, tuple[object, str]]:
    return {
        str(e["RowKey"]): (e["CompleteBy"], str(e.metadata["etag"]))
        async for e in store.watch.list_entities()
    }


async def test_a_repeated_or_refused_submission_leaves_an_in_flight_orders_watch_entry_alone(
    store: TableStateStore,
) -> None:
    await store.create(new_record("o-1", {"a": 1}))
    before = await _watch_entries(store)
    later = NOW + timedelta(seconds=5)  # a new record's CompleteBy would be later than the task's
    assert (await store.create(new_record("o-1", {"a": 1}, now=later)))[0] is CreateOutcome.EXISTS_SAME
    assert (await store.create(new_record("o-1", {"a": 2}, now=later)))[0] is CreateOutcome.EXISTS_DIFFERENT
    assert await _watch_entries(store) == before  # still the task's own bound, not moved later


async def test_a_refused_submission_of_a_finished_order_leaves_an_entry_only_while_it_is_live(
    store: TableStateStore,
) -> None:
    _, record = await store.create(new_record("o-1", {"a": 1}))
    transitions.claim(record, ctx())
    record.state.process_state = ProcessState.PROCESSED
    record.state.complete_by = None
    await store.save(record)
    [entry] = [e async for e in store.expired(NOW + timedelta(hours=1))]
    await store.unwatch(entry)  # a finished live order with no watch entry
    assert await _watch_entries(store) == {}
    # The entry a refused submission inserted stays while the order is live (it may be the only one the
    # order has, see tests/adapters/test_store_races.py), and is never moved by a later one.
    assert (await store.create(new_record("o-1", {"a": 2})))[0] is CreateOutcome.EXISTS_DIFFERENT
    kept = await _watch_entries(store)
    assert list(kept) == ["o-1"]
    later = NOW + timedelta(seconds=5)
    assert (await store.create(new_record("o-1", {"a": 1}, now=later)))[0] is CreateOutcome.EXISTS_SAME
    assert await _watch_entries(store) == kept
    # Its sweep moves the order to the history and removes it; refused submissions then leave nothing.
    supervisor = Supervisor(
        EngineParts(
            WorkflowCatalog.of(WORKFLOW),
            store,
            RecordingSender(),
            FixedClock(later + timedelta(minutes=1)),
            SETTINGS,
        )
    )
    report = await supervisor.sweep()
    assert (report.archived, report.unwatched) == (1, 1) and await _watch_entries(store) == {}
    assert (await store.create(new_record("o-1", {"a": 2})))[0] is CreateOutcome.EXISTS_DIFFERENT
    assert (await store.create(new_record("o-1", {"a": 1})))[0] is CreateOutcome.EXISTS_SAME
    assert await _watch_entries(store) == {}


async def test_two_claimers_race_and_exactly_one_wins(store: TableStateStore) -> None:
    await store.create(new_record("o-race"))
    both_loaded = asyncio.Barrier(2)
    results: dict[str, str] = {}

    async def claimer(name: str) -> None:
        record = await store.load("o-race")
        assert record is not None
        transitions.claim(record, ctx(instance=name))
        await both_loaded.wait()
        try:
            await store.save(record)
            results[name] = "won"
        except ConcurrencyError:
            results[name] = "lost"

    await asyncio.gather(claimer("a"), claimer("b"))
    assert sorted(results.values()) == ["lost", "won"]
    winner = next(n for n, r in results.items() if r == "won")
    state = (await store.load("o-race")).state  # type: ignore[union-attr]
    assert state.locked_by == winner and state.process_state is ProcessState.PROCESSING


async def test_a_stale_etag_loses_and_changes_nothing(store: TableStateStore) -> None:
    await store.create(new_record("o-1"))
    first = await store.load("o-1")
    stale = await store.load("o-1")
    assert first is not None and stale is not None
    transitions.claim(first, ctx())
    await store.save(first)
    stale.state.failure_count = 99
    stale.step(1).status = StepStatus.FAILED
    with pytest.raises(ConcurrencyError):
        await store.save(stale)
    again = await store.load("o-1")
    assert (
        again is not None
        and again.state.failure_count == 0
        and again.steps[1].status is StepStatus.NOT_STARTED
    )


async def test_a_saved_copy_saves_like_the_task_read_back_until_the_task_changes(
    store: TableStateStore,
) -> None:
    _, created = await store.create(new_record("o-1", {"body": "é" * 100}))
    claimed = saved_task.decode(saved_task.encode(created), "o-1")  # as the submission's kick carries it
    assert claimed is not None
    transitions.claim(claimed, ctx())
    await store.save(claimed)
    copy = saved_task.decode(saved_task.encode(claimed), "o-1")  # as the step's request carries it
    assert copy is not None and copy.version == (await store.load("o-1")).version  # type: ignore[union-attr]
    stale = saved_task.decode(saved_task.encode(claimed), "o-1")
    assert stale is not None
    copy.step(0).status = StepStatus.COMPLETED
    await store.save(copy)
    stale.step(0).status = StepStatus.FAILED  # a duplicate applied to the same, now stale, copy
    with pytest.raises(ConcurrencyError):
        await store.save(stale)
    stored = await store.load("o-1")
    assert stored is not None and stored.steps[0].status is StepStatus.COMPLETED
    assert stored.input == {"body": "é" * 100} and stored.state.locked_by == "sched-1"


async def test_a_stale_step_etag_loses_even_if_the_state_is_fresh(store: TableStateStore) -> None:
    await store.create(new_record("o-1"))
    record = await store.load("o-1")
    assert record is not None
    record.etags["order|o-1|step|01"] = "W/\"datetime'2000-01-01T00%3A00%3A00.0000000Z'\""
    record.step(1).attempts = 5
    with pytest.raises(ConcurrencyError):
        await store.save(record)


async def test_the_sweep_reads_only_watched_work_and_keeps_the_watch_current(store: TableStateStore) -> None:
    # In flight, and its step's complete-by has passed.
    await store.create(new_record("expired"))
    record = await store.load("expired")
    assert record is not None
    transitions.claim(record, ctx())
    await store.save(record)
    # In flight, not due yet.
    await store.create(new_record("fresh", now=NOW + timedelta(seconds=30)))
    # Finished: its watch entry is left for the Supervisor to remove.
    await store.create(new_record("done"))
    done = await store.load("done")
    assert done is not None
    transitions.claim(done, ctx())
    for _ in range(2):
        transitions.step_succeeded(done, ctx(), {"ok": True})
    await store.save(done)
    assert done.state.process_state is ProcessState.PROCESSED

    later = NOW + timedelta(seconds=20)
    assert await expired_ids(store, later) == ["done", "expired"]
    supervisor = Supervisor(
        EngineParts(WorkflowCatalog.of(WORKFLOW), store, RecordingSender(), FixedClock(later), SETTINGS)
    )
    report = await supervisor.sweep()
    assert (report.expired, report.unwatched, report.retried) == (1, 1, 1)
    assert (await store.load("expired")).state.process_state is ProcessState.PENDING  # type: ignore[union-attr]
    # The finished task is no longer watched; the recovered one is watched at its new CompleteBy.
    report = await supervisor.sweep()
    assert (report.expired, report.unwatched, report.rewatched) == (0, 0, 1)
    assert await expired_ids(store, later) == []
    new_complete_by = (await store.load("expired")).state.complete_by  # type: ignore[union-attr]
    assert await expired_ids(store, new_complete_by) == ["expired"]  # type: ignore[arg-type]


async def test_a_stale_watch_update_is_refused(store: TableStateStore) -> None:
    await store.create(new_record("o-1"))
    (entry,) = [e async for e in store.expired(NOW + timedelta(seconds=10))]
    await store.rewatch(entry, NOW + timedelta(seconds=50))
    await store.unwatch(entry)  # read before the rewatch: refused, the task stays watched
    assert await expired_ids(store, NOW + timedelta(seconds=50)) == ["o-1"]


async def test_a_step_transition_costs_two_table_operations(store: TableStateStore) -> None:
    await store.create(new_record("o-1"))
    record = await store.load("o-1")
    assert record is not None
    transitions.claim(record, ctx())
    await store.save(record)
    before = store.counter.count
    record = await store.load("o-1")
    assert record is not None
    transitions.step_succeeded(record, ctx(), {"reservation": "r-1"})
    await store.save(record)
    assert store.counter.count - before == 2
    reloaded = await store.load("o-1")
    assert reloaded is not None
    assert (
        reloaded.steps[0].result == {"reservation": "r-1"} and reloaded.steps[1].status is StepStatus.RUNNING
    )


async def test_list_by_state_pages_with_a_continuation_token(store: TableStateStore) -> None:
    ids = [f"o-{i}" for i in range(7)]
    for order_id in ids:
        await store.create(new_record(order_id))
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = await store.list_by_state(ProcessState.PENDING, 2, token)
        assert len(page.states) <= 2
        seen.extend(s.order_id for s in page.states)
        pages += 1
        token = page.continuation
        if token is None:
            break
    assert sorted(seen) == sorted(ids) and pages >= 4
    assert (await store.list_by_state(ProcessState.ERROR, 10, None)).states == []
    with pytest.raises(ValueError):
        await store.list_by_state(ProcessState.PENDING, 2, "not-a-token!")


async def test_count_by_state_counts_every_shard_and_stops_at_its_limit(store: TableStateStore) -> None:
    for i in range(6):
        await store.create(new_record(f"o-{i}"))
    _, claimed = await store.create(new_record("o-claimed"))
    transitions.claim(claimed, ctx())
    await store.save(claimed)
    _, audited = await store.create(new_record("o-audited"))
    audited.audit(_entry(NOW, "cancel"))  # audit and input rows are not orders
    await store.save(audited)
    found = await store.count_by_state(100)
    assert found.complete and found.counts[ProcessState.PENDING] == 7
    assert found.counts[ProcessState.PROCESSING] == 1 and found.counts[ProcessState.ERROR] == 0
    # The limit is per shard: a shard with more live orders than that is counted up to it.
    per_shard = max(
        sum(1 for i in [*map(str, range(6)), "claimed", "audited"] if shard_of(f"o-{i}", 4) == f"s{s:02d}")
        for s in range(4)
    )
    capped = await store.count_by_state(per_shard - 1)
    assert not capped.complete and sum(capped.counts.values()) < 8
    assert (await store.count_by_state(per_shard)).complete


def _entry(at: datetime, action: str) -> AuditEntry:
    return AuditEntry(
        at=at,
        actor="user:ann",
        action=action,
        step="first",
        process_state_before=ProcessState.PROCESSING,
        process_state_after=ProcessState.PENDING,
        step_state_before=StepStatus.RUNNING,
        step_state_after=StepStatus.RUNNING,
        note="why",
    )


async def test_audit_entries_are_written_with_the_change_or_not_at_all(store: TableStateStore) -> None:
    _, record = await store.create(new_record("o-1"))
    version = record.version
    stale = record.model_copy(deep=True)
    record.audit(_entry(NOW, "retry"))
    record.state.failure_count = 1
    await store.save(record)
    assert record.version != version and record.pending_audit() == []
    stale.audit(_entry(NOW + timedelta(seconds=1), "cancel"))
    stale.state.failure_count = 2
    with pytest.raises(ConcurrencyError):
        await store.save(stale)  # the change loses its race: its audit entry is not written either
    record.audit(_entry(NOW + timedelta(seconds=2), "extend"))
    await store.save(record)
    entries = await store.audit("o-1")
    assert [e.action for e in entries] == ["retry", "extend"]
    assert entries[0] == _entry(NOW, "retry")
    # The history lives outside the task's key range: loading the task does not read it.
    before = store.counter.entities.get("state", 0)
    loaded = await store.load("o-1")
    assert loaded is not None and store.counter.entities["state"] - before == 1 + 1 + len(WORKFLOW.steps)
    assert loaded.version == record.version
    assert await store.audit("o-2") == []


WAITS = WorkflowDefinition(
    name="waits",
    steps=(
        StepDefinition(name="first", agent="alpha", action="do-a", compensation="undo-a"),
        StepDefinition(name="review", wait=Approval(deadline_seconds=60, on_deadline="error")),
        StepDefinition(name="window", wait=Timer(after_seconds=600)),
    ),
)


async def test_waiting_orders_are_listed_and_counted_by_what_they_wait_for(store: TableStateStore) -> None:
    def waits(now: datetime = NOW) -> Context:
        return Context(WAITS, SETTINGS, now, "sched-1")

    async def waiting(order_id: str, approved: bool) -> TaskRecord:
        record = TaskRecord(
            state=TaskState(order_id=order_id, workflow=WAITS.name, created_at=NOW, updated_at=NOW),
            steps=[StepState(index=i, name=s.name) for i, s in enumerate(WAITS.steps)],
            input={},
            input_hash="h",
        )
        transitions.new_record_state(record, waits())
        _, record = await store.create(record)
        transitions.claim(record, waits())
        reply = AgentReply(order_id=order_id, step_index=0, attempt=1, outcome=ReplyOutcome.SUCCEEDED)
        transitions.apply_reply(record, waits(), reply)
        record = await store.save(record)
        if approved:  # on to the timer, through a Scheduler's claim
            transitions.approve(record, waits(), 1)
            record = await store.save(record)
            transitions.claim(record, waits())
            record = await store.save(record)
        return record

    for i in range(3):
        await waiting(f"a-{i}", approved=False)
    for i in range(2):
        await waiting(f"t-{i}", approved=True)
    overdue = await waiting("late", approved=False)
    transitions.recover_expired(overdue, waits(NOW + timedelta(seconds=61)))
    await store.save(overdue)

    async def listed(state: ProcessState, kind: str | None) -> list[str]:
        return sorted(s.order_id for s in (await store.list_by_state(state, 50, None, kind)).states)

    assert await listed(ProcessState.WAITING, "approval") == ["a-0", "a-1", "a-2"]
    assert await listed(ProcessState.WAITING, "timer") == ["t-0", "t-1"]
    assert await listed(ProcessState.WAITING, None) == ["a-0", "a-1", "a-2", "t-0", "t-1"]
    # An approval past its deadline that put its order in Error is still found by what it waits for.
    assert await listed(ProcessState.ERROR, "approval") == ["late"]
    assert await listed(ProcessState.ERROR, "timer") == []
    found = await store.count_by_state(1000)
    assert found.counts[ProcessState.WAITING] == 5 and found.counts[ProcessState.ERROR] == 1
    assert found.waiting == {"approval": 3, "timer": 2}
    (timer,) = [s for s in (await store.list_by_state(ProcessState.WAITING, 1, None, "timer")).states][:1]
    assert timer.wait_until == NOW + timedelta(seconds=600)
