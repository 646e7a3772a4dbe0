"""The listing by state, the history and the retention clean-up of the Table Storage store, on Azurite."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from azure.data.tables import TableTransactionError
from azure.data.tables.aio import TableServiceClient

from adapters import table_store
from adapters.table_store import TableStateStore, shard_of, tables
from engine import transitions
from engine.errors import ConcurrencyError
from engine.parts import EngineParts
from engine.ports import CreateOutcome
from engine.state import ProcessState, StepStatus, TaskRecord
from engine.supervisor import Supervisor
from engine.workflow import WorkflowCatalog
from tests.adapters.test_table_store import NOW, SETTINGS, WORKFLOW, FixedClock, _entry, ctx, new_record
from tests.engine.fakes import RecordingSender

pytestmark = pytest.mark.anyio

SHARDS = 2
DAY = timedelta(days=1)


@pytest.fixture
async def store(azurite_connection_string: str) -> AsyncIterator[TableStateStore]:
    async with TableServiceClient.from_connection_string(azurite_connection_string) as service:
        store = await TableStateStore.from_service(service, "t" + uuid.uuid4().hex[:16], shards=SHARDS)
        yield store
        await store.close()


async def rows(table: Any, pk: str | None = None) -> dict[str, dict[str, Any]]:
    """Every entity of a table (or one partition), by RowKey."""
    return {
        str(e["RowKey"]): dict(e)
        async for e in table.list_entities()
        if pk is None or e["PartitionKey"] == pk
    }


async def live_keys(store: TableStateStore, order_id: str) -> list[str]:
    """The live table's rows that belong to the order (its records, listing entry and audit entries)."""
    return sorted(
        key for key in await rows(store.table) if f"|{order_id}|" in key or key.endswith(f"|{order_id}")
    )


async def finished(
    store: TableStateStore, order_id: str, at: datetime = NOW, compensated: bool = False, audit: int = 0
) -> TaskRecord:
    """An order taken through the store to Processed (or Compensated) at ``at``, with ``audit`` entries."""
    _, record = await store.create(new_record(order_id, {"id": order_id}, now=at))
    transitions.claim(record, ctx(at))
    await store.save(record)
    for n in range(audit):  # at most 50 per save, as a transaction holds 100 entities
        record.audit(_entry(at + timedelta(microseconds=n), f"action-{n}"))
        if n % 50 == 49 or n == audit - 1:
            await store.save(record)
    if compensated:
        transitions.step_failed(record, ctx(at), "refused")
        while record.state.process_state is ProcessState.COMPENSATING:
            transitions.compensation._compensation_succeeded(record, ctx(at))
    else:
        for _ in WORKFLOW.steps:
            transitions.step_succeeded(record, ctx(at), {"ref": f"r-{order_id}"})
    await store.save(record)
    assert record.state.process_state.finished
    return record


async def archived(store: TableStateStore, order_id: str, **kwargs: Any) -> TaskRecord:
    """A finished order moved to the history, as the Supervisor moves it."""
    await finished(store, order_id, **kwargs)
    loaded = await store.load(order_id)
    assert loaded is not None and await store.archive(loaded)
    return loaded


def counts(found: Any) -> dict[str, int]:
    return {state.value: n for state, n in found.counts.items() if n}


# ---- the listing by state ---------------------------------------------------------------------------------
async def test_a_listing_entry_is_written_with_every_change_of_the_state_and_moves_with_it(
    store: TableStateStore,
) -> None:
    _, record = await store.create(new_record("o-1"))
    pk = shard_of("o-1", SHARDS)

    async def listing() -> dict[str, dict[str, Any]]:
        return {k: v for k, v in (await rows(store.table, pk)).items() if k.startswith("index|")}

    state_row = (await rows(store.table, pk))["order|o-1|state"]
    [(key, entry)] = (await listing()).items()
    assert key == state_row["IndexKey"] == record.listed and key.startswith("index|Pending|")
    assert {k: entry[k] for k in ("ProcessState", "CompleteBy", "UpdatedAt")} == {
        k: state_row[k] for k in ("ProcessState", "CompleteBy", "UpdatedAt")
    }
    stale = await store.load("o-1")
    transitions.claim(record, ctx())
    await store.save(record)
    [(key, entry)] = (await listing()).items()
    assert key.startswith("index|Processing|") and entry["LockedBy"] == "sched-1"
    transitions.step_succeeded(record, ctx(NOW + timedelta(seconds=1)), {"ok": True})
    await store.save(record)  # same state: the same entry, rewritten with the record
    [(same, entry)] = (await listing()).items()
    assert same == key and entry["CurrentStep"] == 1 and entry["CompleteBy"] == record.state.complete_by
    # A refused save changes neither the record nor its entry.
    assert stale is not None
    transitions.claim(stale, ctx(instance="sched-2"))
    with pytest.raises(ConcurrencyError):
        await store.save(stale)
    [(still, entry)] = (await listing()).items()
    assert still == key and entry["LockedBy"] == "sched-1" and entry["CurrentStep"] == 1


async def test_a_listing_and_the_counts_read_only_entries_of_the_state_asked_for(
    store: TableStateStore,
) -> None:
    for i in range(6):
        await store.create(new_record(f"p-{i}"))
    _, record = await store.create(new_record("e-1"))
    transitions.claim(record, ctx())
    record.state.process_state = ProcessState.ERROR  # as the Supervisor sets it
    record.state.last_error = "gave up"
    await store.save(record)
    await archived(store, "done-1")
    before = dict(store.counter.entities)
    page = await store.list_by_state(ProcessState.ERROR, 10, None)
    assert [(s.order_id, s.last_error) for s in page.states] == [("e-1", "gave up")]
    assert store.counter.entities["state"] - before["state"] == 1  # one entity read: the one listed
    before = dict(store.counter.entities)
    found = await store.count_by_state(100)
    assert counts(found) == {"Pending": 6, "Error": 1, "Processed": 1} and found.complete
    assert store.counter.entities["state"] - before["state"] == 7  # the live entries' keys
    # Two tallies per shard: the finished orders', and the parked ones'.
    assert store.counter.entities["history"] - before["history"] == 2 * SHARDS
    assert [s.order_id for s in (await store.list_by_state(ProcessState.PROCESSED, 10, None)).states] == [
        "done-1"
    ]


async def test_a_listing_pages_through_the_live_table_then_the_history(store: TableStateStore) -> None:
    for i in range(3):
        await archived(store, f"old-{i}")
    for i in range(2):
        await finished(store, f"new-{i}")
    seen: list[str] = []
    token = None
    while True:
        page = await store.list_by_state(ProcessState.PROCESSED, 2, token)
        seen += [s.order_id for s in page.states]
        token = page.continuation
        if token is None:
            break
    assert sorted(seen) == ["new-0", "new-1", "old-0", "old-1", "old-2"]
    assert seen.index("new-0") < seen.index("old-0")  # live first


# ---- moving finished orders to the history ------------------------------------------------------------
async def test_archiving_moves_the_order_and_its_trail_and_leaves_nothing_live(
    store: TableStateStore,
) -> None:
    record = await finished(store, "o-1", audit=2)
    loaded = await store.load("o-1")
    assert loaded is not None and not loaded.archived
    assert await store.archive(loaded)
    assert await live_keys(store, "o-1") == []
    kept = await store.load("o-1")
    assert kept is not None and kept.archived
    assert (kept.state, kept.steps, kept.input) == (record.state, record.steps, record.input)
    assert [e.action for e in await store.audit("o-1", archived=True)] == ["action-0", "action-1"]
    assert await store.archive(kept)  # already there: nothing to do
    assert counts(await store.count_by_state(100)) == {"Processed": 1}
    with pytest.raises(ConcurrencyError):  # the history is read-only
        await store.save(kept)


async def archive_cut_short(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch, order_id: str
) -> TaskRecord:
    """The order's move to the history, with the worker dying after the history's write and before the
    live delete: the order is in both places. Returns the record the move read."""
    loaded = await store.load(order_id)
    assert loaded is not None

    async def crash(*args: Any) -> bool:
        raise ConnectionError("the worker died here")

    with monkeypatch.context() as patched:
        patched.setattr(store.archives, "delete_live", crash)
        with pytest.raises(ConnectionError):
            await store.archive(loaded)
    return loaded


async def test_a_crash_between_the_history_and_the_live_delete_is_finished_by_the_next_attempt(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await finished(store, "o-1", audit=1)
    loaded = await archive_cut_short(store, monkeypatch, "o-1")
    assert not (await store.load("o-1")).archived  # type: ignore[union-attr]  # read from the live table
    assert (await store.create(new_record("o-1", {"id": "o-1"})))[0] is CreateOutcome.EXISTS_SAME
    assert await store.archive(loaded)
    assert await live_keys(store, "o-1") == []
    assert counts(await store.count_by_state(100)) == {"Processed": 1}  # counted once
    assert [e.action for e in await store.audit("o-1", archived=True)] == ["action-0"]


async def test_an_order_in_the_live_table_and_the_history_at_once_is_listed_once(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await finished(store, "o-1")
    await archive_cut_short(store, monkeypatch, "o-1")  # an entry in the history and one live
    page = await store.list_by_state(ProcessState.PROCESSED, 10, None)
    assert [s.order_id for s in page.states] == ["o-1"]


async def test_an_order_changed_since_it_was_read_is_not_archived_and_its_new_entry_goes_along_next_time(
    store: TableStateStore,
) -> None:
    await finished(store, "o-1")
    loaded = await store.load("o-1")
    assert loaded is not None
    await store.append_audit("o-1", _entry(NOW + DAY, "deadletter-replay"))  # after the read
    assert not await store.archive(loaded)
    assert "order|o-1|state" in await live_keys(store, "o-1")
    again = await store.load("o-1")
    assert again is not None and await store.archive(again)
    assert [e.action for e in await store.audit("o-1", archived=True)] == ["deadletter-replay"]
    assert await live_keys(store, "o-1") == []


async def test_an_audit_entry_for_an_order_in_the_history_goes_to_the_history(store: TableStateStore) -> None:
    await archived(store, "o-1")
    await store.append_audit("o-1", _entry(NOW + DAY, "deadletter-purge"))
    assert await live_keys(store, "o-1") == []
    assert [e.action for e in await store.audit("o-1", archived=True)] == ["deadletter-purge"]


async def test_the_supervisor_archives_a_finished_order_before_it_stops_watching_it(
    store: TableStateStore,
) -> None:
    await finished(store, "done")
    _, error = await store.create(new_record("failed"))
    transitions.claim(error, ctx())
    error.state.process_state = ProcessState.ERROR
    await store.save(error)
    later = NOW + timedelta(seconds=20)
    supervisor = Supervisor(
        EngineParts(WorkflowCatalog.of(WORKFLOW), store, RecordingSender(), FixedClock(later), SETTINGS)
    )
    report = await supervisor.sweep()
    assert (report.archived, report.unwatched) == (1, 2)
    assert (await store.load("done")).archived  # type: ignore[union-attr]
    assert not (await store.load("failed")).archived  # type: ignore[union-attr]  # Error stays live
    assert await rows(store.watch) == {}


# ---- submissions of an id in the history ----------------------------------------------------------------
async def test_a_submission_of_an_archived_id_gets_the_order_back_or_a_conflict_and_leaves_nothing(
    store: TableStateStore,
) -> None:
    kept = await archived(store, "o-1")
    await store.unwatch(*[e async for e in store.expired(NOW + DAY)])  # as the Supervisor does after
    outcome, answer = await store.create(new_record("o-1", {"id": "o-1"}, now=NOW + DAY))
    assert outcome is CreateOutcome.EXISTS_SAME and answer.archived and answer.state == kept.state
    assert (await store.create(new_record("o-1", {"other": 1})))[0] is CreateOutcome.EXISTS_DIFFERENT
    assert await live_keys(store, "o-1") == [] and await rows(store.watch) == {}


async def test_a_submission_during_the_move_is_answered_from_one_place_or_the_other(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await finished(store, "o-1")
    loaded = await store.load("o-1")
    assert loaded is not None
    answers: list[CreateOutcome] = []
    delete_live = store.archives.delete_live

    async def submit_between(record: TaskRecord, trail: Any) -> bool:
        answers.append((await store.create(new_record("o-1", {"id": "o-1"})))[0])  # history written
        moved = await delete_live(record, trail)
        answers.append((await store.create(new_record("o-1", {"id": "o-1"})))[0])  # live deleted
        return moved

    monkeypatch.setattr(store.archives, "delete_live", submit_between)
    assert await store.archive(loaded)
    assert answers == [CreateOutcome.EXISTS_SAME, CreateOutcome.EXISTS_SAME]
    assert await live_keys(store, "o-1") == []


# ---- retention ------------------------------------------------------------------------------------------
async def test_purge_deletes_what_finished_before_the_cutoff_and_keeps_the_rest_and_error(
    store: TableStateStore,
) -> None:
    await archived(store, "old", audit=2)
    await archived(store, "old-undone", compensated=True)
    await archived(store, "recent", at=NOW + 10 * DAY)
    _, error = await store.create(new_record("failed"))
    transitions.claim(error, ctx())
    error.state.process_state = ProcessState.ERROR
    await store.save(error)
    report = await store.purge(NOW + DAY, NOW + 3 * DAY, 100)
    assert (report.purged, report.lost_races, report.more) == (2, 0, False)
    assert await store.load("old") is None and await store.load("old-undone") is None
    assert (await store.load("recent")).archived and (await store.load("failed")) is not None  # type: ignore[union-attr]
    history = await rows(store.history)
    # No trail, no listing entry: only the tombstone and its entry name the order.
    assert [k for k in history if "|old|" in k and not k.startswith("gone|")] == []
    assert history["order|old"]["Kind"] == "tombstone"
    assert {k for k in history if k.startswith("gone|")} == {
        f"gone|{table_store._stamp(NOW + 3 * DAY)}|old|",
        f"gone|{table_store._stamp(NOW + 3 * DAY)}|old-undone|",
    }
    assert counts(await store.count_by_state(100)) == {"Processed": 1, "Error": 1}
    assert (await store.purge(NOW + DAY, NOW + 3 * DAY, 100)).purged == 0  # nothing left to do


async def test_the_idempotency_window_the_order_then_a_refusal_then_a_new_order(
    store: TableStateStore,
) -> None:
    await archived(store, "o-1")
    await store.unwatch(*[e async for e in store.expired(NOW + DAY)])
    same = new_record("o-1", {"id": "o-1"}, now=NOW + DAY)
    assert (await store.create(same))[0] is CreateOutcome.EXISTS_SAME  # within the retention period
    await store.purge(NOW + DAY, NOW + 3 * DAY, 100)
    for body in ({"id": "o-1"}, {"other": 2}):  # purged: any body is refused while the tombstone lasts
        outcome, _ = await store.create(new_record("o-1", body, now=NOW + 2 * DAY))
        assert outcome is CreateOutcome.PURGED
    assert await live_keys(store, "o-1") == [] and await rows(store.watch) == {}
    assert await store.drop_tombstones(NOW + 2 * DAY, 100) == 0  # not yet
    assert await store.drop_tombstones(NOW + 4 * DAY, 100) == 1
    assert not [k for k in await rows(store.history) if k != "count"]
    outcome, record = await store.create(new_record("o-1", {"other": 2}, now=NOW + 4 * DAY))
    assert outcome is CreateOutcome.CREATED and record.state.process_state is ProcessState.PENDING


async def test_purge_runs_in_bounded_batches_and_a_crash_between_them_loses_nothing(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [f"o-{i}" for i in range(9)]
    for i, order_id in enumerate(ids):
        await archived(store, order_id, at=NOW + timedelta(seconds=i), audit=i % 2)
    first = await store.purge(NOW + DAY, NOW + 3 * DAY, 4)
    assert (first.purged, first.more) == (4, True)
    # The next batch dies after its first transaction: what it did is whole, the rest untouched.
    calls = 0
    submit = tables.submit_transaction

    async def dying(table: Any, operations: list[Any], **kwargs: Any) -> Any:
        nonlocal calls
        if table is store.history and any(op[0] == "delete" for op in operations):
            calls += 1
            if calls > 1:
                raise ConnectionError("the worker died here")
        return await submit(table, operations, **kwargs)

    monkeypatch.setattr(tables, "submit_transaction", dying)
    with pytest.raises(ConnectionError):
        await store.purge(NOW + DAY, NOW + 3 * DAY, 4)
    monkeypatch.undo()
    kept = [order_id for order_id in ids if await store.load(order_id) is not None]
    assert 0 < len(kept) < 5
    assert counts(await store.count_by_state(100)) == {"Processed": len(kept)}  # the tally agrees
    while (await store.purge(NOW + DAY, NOW + 3 * DAY, 4)).more:
        pass
    assert [order_id for order_id in ids if await store.load(order_id) is not None] == []
    gone = [k for k in await rows(store.history) if k.startswith("gone|")]
    assert sorted(k.split("|")[2] for k in gone) == ids  # one tombstone each
    assert counts(await store.count_by_state(100)) == {}
    assert not [k for k in await rows(store.history) if k.startswith(("audit|", "index|"))]


async def test_an_order_changed_while_its_batch_is_purged_is_left_for_the_next_batch(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for order_id in ("a", "b", "c"):
        await archived(store, order_id)
    operations = store.archives._purge_operations

    async def change_one_first(pk: str, entry: Any, until: datetime) -> list[Any]:
        if entry["OrderID"] == "b":  # an operator's dead-letter replay lands on it now
            await store.append_audit("b", _entry(NOW + DAY, "deadletter-replay"))
        return await operations(pk, entry, until)

    monkeypatch.setattr(store.archives, "_purge_operations", change_one_first)
    report = await store.purge(NOW + DAY, NOW + 3 * DAY, 100)
    monkeypatch.undo()
    assert (report.purged, report.lost_races) == (2, 1)
    kept = await store.load("b")
    assert kept is not None and [e.action for e in await store.audit("b", archived=True)] == [
        "deadletter-replay"
    ]
    assert (await store.purge(NOW + DAY, NOW + 3 * DAY, 100)).purged == 1
    assert not [k for k in await rows(store.history) if k.startswith("audit|")]


async def test_an_order_resubmitted_while_its_clean_up_runs_is_never_started_twice(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await archived(store, "o-1")
    await store.unwatch(*[e async for e in store.expired(NOW + DAY)])
    answers: list[CreateOutcome] = []
    group = store.archives._purge_group

    async def resubmitted_around(pk: str, batch: Any) -> int | None:
        again = new_record("o-1", {"id": "o-1"}, now=NOW + 2 * DAY)
        answers.append((await store.create(again))[0])  # after the batch read it, before it deletes
        done = await group(pk, batch)
        answers.append((await store.create(again))[0])  # right after
        return done

    monkeypatch.setattr(store.archives, "_purge_group", resubmitted_around)
    assert (await store.purge(NOW + DAY, NOW + 3 * DAY, 100)).purged == 1
    assert answers == [CreateOutcome.EXISTS_SAME, CreateOutcome.PURGED]
    assert await live_keys(store, "o-1") == [] and await rows(store.watch) == {}
    # Submissions racing the purge itself: each is answered from the order or its tombstone.
    await archived(store, "o-2")
    await store.unwatch(*[e async for e in store.expired(NOW + DAY)])
    monkeypatch.undo()
    racing = await asyncio.gather(
        store.purge(NOW + DAY, NOW + 3 * DAY, 100),
        *(store.create(new_record("o-2", {"id": "o-2"}, now=NOW + 2 * DAY)) for _ in range(3)),
    )
    assert {r[0] for r in racing[1:]} <= {CreateOutcome.EXISTS_SAME, CreateOutcome.PURGED}  # type: ignore[index]
    assert await live_keys(store, "o-2") == [] and await store.load("o-2") is None


async def test_many_audit_entries_are_moved_and_purged_in_several_transactions(
    store: TableStateStore,
) -> None:
    await finished(store, "busy", audit=150)
    loaded = await store.load("busy")
    assert loaded is not None and await store.archive(loaded)
    assert len(await store.audit("busy", archived=True)) == 150
    assert await live_keys(store, "busy") == []
    assert (await store.purge(NOW + DAY, NOW + 3 * DAY, 100)).purged == 1
    assert not [k for k in await rows(store.history) if k.startswith("audit|")]


async def test_a_step_failure_is_listed_under_error_only_in_the_transaction_that_sets_it(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, record = await store.create(new_record("o-1"))
    transitions.claim(record, ctx())
    await store.save(record)
    record.state.process_state = ProcessState.ERROR
    record.steps[0].status = StepStatus.FAILED
    submit = tables.submit_transaction

    async def refused(table: Any, operations: list[Any], **kwargs: Any) -> Any:
        error = TableTransactionError(message="refused")
        error.status_code = 412
        raise error

    monkeypatch.setattr(tables, "submit_transaction", refused)
    with pytest.raises(ConcurrencyError):
        await store.save(record)
    monkeypatch.setattr(tables, "submit_transaction", submit)
    assert counts(await store.count_by_state(100)) == {"Processing": 1}
