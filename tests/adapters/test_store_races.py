"""The store's protocol under the interleavings the simulation found (docs/simulation.md, "What it found",
findings 2 to 6), each built by hand on Azurite: two submissions of one id driven step by step, a process
that dies at a given point (a step of the store that raises), the Supervisor's sweep or the clean-up run
between two requests of another caller."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from adapters import table_store
from adapters.table_store import TableStateStore, tables
from engine import transitions
from engine.messages import CommandKind, SchedulerCommand
from engine.parts import EngineParts
from engine.ports import CreateOutcome
from engine.state import ProcessState
from engine.supervisor import Supervisor
from engine.workflow import WorkflowCatalog
from tests.adapters.test_history import DAY, archived, counts, finished, live_keys, rows
from tests.adapters.test_history import store as store  # the fixture: a store on its own table, 2 shards
from tests.adapters.test_table_store import NOW, SETTINGS, WORKFLOW, FixedClock, ctx, new_record
from tests.engine.fakes import RecordingSender

pytestmark = pytest.mark.anyio

BODY = {"id": "o-1"}


def supervisor(store: TableStateStore, at: Any, sender: RecordingSender | None = None) -> Supervisor:
    clock = FixedClock(at)
    return Supervisor(
        EngineParts(WorkflowCatalog.of(WORKFLOW), store, sender or RecordingSender(), clock, SETTINGS)
    )


async def watched(store: TableStateStore) -> dict[str, Any]:
    """The watch table's entries: their CompleteBy by order."""
    return {key: entity["CompleteBy"] for key, entity in (await rows(store.watch)).items()}


async def died() -> None:
    raise ConnectionError("the process died here")


# ---- finding 3: a submission of an id the history holds --------------------------------------------------
@pytest.mark.parametrize("failure", ["the write's answer is lost", "the process dies before the take-back"])
async def test_a_submission_of_an_archived_id_that_fails_midway_leaves_no_task_to_start_again(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    """A submission that inserted its watch entry reads the history before it writes anything, so a
    failure after its write cannot leave a second task of a finished order for the Supervisor to start."""
    await archived(store, "o-1")
    await store.unwatch(*[e async for e in store.expired(NOW + DAY)])  # as the Supervisor does after
    if failure == "the write's answer is lost":
        submit = tables.submit_transaction

        async def answer_lost(table: Any, operations: list[Any], **kwargs: Any) -> Any:
            results = await submit(table, operations, **kwargs)
            if table is store.table and operations[0][0] == "create":
                raise ConnectionError("the answer was lost")  # after the transaction took effect
            return results

        monkeypatch.setattr(tables, "submit_transaction", answer_lost)
    else:
        monkeypatch.setattr(store.live, "_delete_created", lambda *args: died())
    again = new_record("o-1", BODY, now=NOW + DAY)
    try:
        outcome: CreateOutcome | None = (await store.create(again))[0]
    except ConnectionError:
        outcome = None  # the client cannot tell whether it was written, and retries
    monkeypatch.undo()
    assert outcome in (CreateOutcome.EXISTS_SAME, None)
    assert await live_keys(store, "o-1") == []
    retried, answer = await store.create(new_record("o-1", BODY, now=NOW + DAY))
    assert retried is CreateOutcome.EXISTS_SAME and answer.archived
    # Past any CompleteBy the submission could have set: nothing of the order is started again.
    sender = RecordingSender()
    report = await supervisor(store, NOW + 2 * DAY, sender).sweep()
    assert (report.kicked, sender.sent) == (0, [])
    assert await live_keys(store, "o-1") == [] and await watched(store) == {}
    assert counts(await store.count_by_state(100)) == {"Processed": 1}


# ---- finding 6: the same, under a watch entry an earlier attempt left ------------------------------------
async def test_a_task_left_by_a_submission_of_an_archived_id_is_taken_back_not_started(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempt A inserts the watch entry and dies; attempt B finds the entry and the id's row, reads the
    history before the earlier task's move has written it (here: the first read answers that task's mark,
    which sends readers to the live records), writes the task once the move
    has deleted the live records, reads the history again, finds the id and dies before taking the task
    back. Nothing was sent about the task: the Supervisor, finding it never started, asks the history
    before starting it, and deletes it instead."""
    await archived(store, "o-1")
    await store.unwatch(*[e async for e in store.expired(NOW + DAY)])  # as the Supervisor does after
    assert await store.watches.add(new_record("o-1", BODY, now=NOW + DAY).state) is not None  # A, then dies
    read_archive, reads = store.archives.read_archive, []

    async def first_read_before_the_move(order_id: str) -> Any:
        reads.append(order_id)
        return {"Kind": "returned", "OrderID": order_id} if len(reads) == 1 else await read_archive(order_id)

    monkeypatch.setattr(store.archives, "read_archive", first_read_before_the_move)
    monkeypatch.setattr(store.live, "_delete_created", lambda *args: died())
    with pytest.raises(ConnectionError):
        await store.create(new_record("o-1", BODY, now=NOW + DAY))  # B
    monkeypatch.undo()
    assert await live_keys(store, "o-1") != []  # B's task is left behind
    sender = RecordingSender()
    report = await supervisor(store, NOW + 2 * DAY, sender).sweep()
    assert (report.taken_back, report.kicked, sender.sent) == (1, 0, [])
    assert await live_keys(store, "o-1") == [] and await watched(store) == {}
    assert counts(await store.count_by_state(100)) == {"Processed": 1}
    again, answer = await store.create(new_record("o-1", BODY, now=NOW + 2 * DAY))
    assert again is CreateOutcome.EXISTS_SAME and answer.archived


async def test_a_submission_under_an_entry_left_behind_writes_nothing_for_an_id_in_the_history(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same retry, when the history already holds the id as it reads it first: answered from the
    history with no task written, so there is nothing to take back and nothing a death could leave."""
    await archived(store, "o-1")
    await store.unwatch(*[e async for e in store.expired(NOW + DAY)])
    assert await store.watches.add(new_record("o-1", BODY, now=NOW + DAY).state) is not None  # A, then dies
    writes: list[Any] = []
    create_live = store.live._create_live

    async def counted(operations: list[Any]) -> Any:
        writes.append(operations)
        return await create_live(operations)

    monkeypatch.setattr(store.live, "_create_live", counted)
    outcome, answer = await store.create(new_record("o-1", BODY, now=NOW + DAY))  # B
    assert outcome is CreateOutcome.EXISTS_SAME and answer.archived
    assert writes == [] and await live_keys(store, "o-1") == []


async def test_a_never_started_task_whose_id_is_not_in_the_history_is_kicked_as_before(
    store: TableStateStore,
) -> None:
    """The question costs one read of the history and changes nothing for a task that is new."""
    outcome, _ = await store.create(new_record("o-2", BODY))
    assert outcome is CreateOutcome.CREATED
    sender = RecordingSender()
    report = await supervisor(store, NOW + DAY, sender).sweep()
    assert (report.taken_back, report.kicked) == (0, 1)
    assert [m.body.kind for m in sender.sent] == [CommandKind.START]
    assert await live_keys(store, "o-2") != []


# ---- finding 2: two submissions of one id at once ---------------------------------------------------------
async def test_the_slower_of_two_submissions_keeps_its_entry_when_the_task_finished_meanwhile(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A inserts the watch entry; B finds it there, writes the task and dies before anything else; the task
    runs to Processed under A's entry; A's write is refused and it finds the live task finished. A's entry
    is the only one the task has: A leaves it, and the Supervisor moves the task to the history."""
    read_archive = store.archives.read_archive
    b_dead = False

    async def read_unless_dead(order_id: str) -> Any:
        if b_dead:
            await died()
        return await read_archive(order_id)

    monkeypatch.setattr(store.archives, "read_archive", read_unless_dead)
    create_live = store.live._create_live
    interleaved = False

    async def b_writes_first(operations: list[Any]) -> Any:
        nonlocal interleaved, b_dead
        if interleaved:  # B's write: B dies at its next request
            written = await create_live(operations)
            b_dead = True
            return written
        # A's write: B's whole submission, then the task's run, happen before it.
        interleaved = True
        with pytest.raises(ConnectionError):
            await store.create(new_record("o-1", BODY, now=NOW + timedelta(milliseconds=1)))
        b_dead = False
        assert await live_keys(store, "o-1") != []
        record = await store.load("o-1")  # the Supervisor kicks it (B sent nothing), and it runs
        assert record is not None
        transitions.claim(record, ctx(NOW + timedelta(seconds=11)))
        for _ in WORKFLOW.steps:
            transitions.step_succeeded(record, ctx(NOW + timedelta(seconds=12)), {"ok": True})
        await store.save(record)
        assert record.state.process_state is ProcessState.PROCESSED
        return await create_live(operations)

    monkeypatch.setattr(store.live, "_create_live", b_writes_first)
    outcome, answer = await store.create(new_record("o-1", BODY))  # A
    monkeypatch.undo()
    assert interleaved and outcome is CreateOutcome.EXISTS_SAME
    assert answer.state.process_state is ProcessState.PROCESSED and not answer.archived
    assert list(await watched(store)) == ["o-1"]
    report = await supervisor(store, NOW + timedelta(minutes=1)).sweep()
    assert (report.archived, report.unwatched) == (1, 1)
    assert (await store.load("o-1")).archived  # type: ignore[union-attr]
    assert await live_keys(store, "o-1") == [] and await watched(store) == {}


# ---- finding 5: a retried submission under the entry of one that died -------------------------------------
async def test_a_task_written_under_an_entry_it_did_not_insert_stays_watched_through_a_sweep(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submission dies after inserting its watch entry, before writing the task. At the entry's time a
    sweep reads it and loads the task: absent. The client's retry finds the entry, so inserts none, and
    writes the task; then the sweep deletes the entry it read. The retry has put the entry again, so that
    delete is refused and the task stays watched (here: its kick was lost, and the Supervisor re-sends
    it)."""
    monkeypatch.setattr(store.live, "_create_live", lambda *args: died())
    with pytest.raises(ConnectionError):
        await store.create(new_record("o-1", BODY))
    monkeypatch.undo()
    assert list(await watched(store)) == ["o-1"] and await live_keys(store, "o-1") == []
    load = store.load
    retried: list[CreateOutcome] = []
    retry_at = NOW + timedelta(seconds=10)

    async def retry_after_the_sweeps_load(order_id: str) -> Any:
        found = await load(order_id)
        if not retried:
            retried.append((await store.create(new_record("o-1", BODY, now=retry_at)))[0])
        return found

    monkeypatch.setattr(store, "load", retry_after_the_sweeps_load)
    report = await supervisor(store, retry_at).sweep()  # the first entry's CompleteBy
    monkeypatch.undo()
    assert retried == [CreateOutcome.CREATED] and report.unwatched == 1  # it tried
    task = await store.load("o-1")
    assert task is not None and task.state.process_state is ProcessState.PENDING
    assert await watched(store) == {"o-1": task.state.complete_by}
    sender = RecordingSender()
    report = await supervisor(store, NOW + timedelta(minutes=1), sender).sweep()
    assert report.kicked == 1
    [kick] = sender.sent
    assert isinstance(kick.body, SchedulerCommand) and kick.body.kind is CommandKind.START


# ---- finding 10: a submission whose own watch insert is slow ---------------------------------------------
async def test_a_task_written_after_its_own_entry_was_swept_is_watched_again(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submission's own watch insert is slow: by the time it answers, the entry is due, and a sweep finds
    it, no task under it, and deletes it as the leftover of a submission that died. The task, written
    after its CompleteBy (here within the clocks' margin of it), puts its entry again: watched, and kicked
    by the Supervisor when its kick is lost."""
    record = new_record("o-1", BODY)
    assert record.state.complete_by is not None
    record.state.complete_by = record.state.created_at + timedelta(seconds=0.1)
    due = record.state.complete_by
    add_watch, swept = store.watches.add, []

    async def slow_insert(state: Any) -> str | None:
        added = await add_watch(state)
        swept.append(await supervisor(store, due).sweep())  # meanwhile, the entry is due
        return added

    monkeypatch.setattr(store.watches, "add", slow_insert)
    outcome, _ = await store.create(record)
    monkeypatch.undo()
    [report] = swept
    assert outcome is CreateOutcome.CREATED and report.unwatched == 1  # the sweep deleted it
    assert await watched(store) == {"o-1": due}
    sender = RecordingSender()
    report = await supervisor(store, NOW + timedelta(minutes=1), sender).sweep()
    assert report.kicked == 1 and [m.body.kind for m in sender.sent] == [CommandKind.START]  # type: ignore[union-attr]


def test_only_a_write_that_came_within_the_clocks_margin_of_its_entry_s_time_puts_the_entry_again() -> None:
    """The one more request is made on the slow path only."""
    state = new_record("o-1", BODY).state  # CompleteBy 10 s after it was made
    assert not table_store._may_have_been_swept(state, 0.2)
    assert not table_store._may_have_been_swept(state, 9.85)
    assert table_store._may_have_been_swept(state, 9.95)


# ---- finding 4: a second attempt at moving a task to the history ----------------------------------------
async def first_move_dies_before_the_live_delete(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> Any:
    """A finished order whose first move wrote the history and died before deleting the live records; the
    order as the second attempt loaded it."""
    await finished(store, "o-1")
    loaded = await store.load("o-1")
    assert loaded is not None
    monkeypatch.setattr(store.archives, "delete_live", lambda *args: died())
    with pytest.raises(ConnectionError):
        await store.archive(loaded)
    monkeypatch.undo()
    assert "order|o-1|state" in await live_keys(store, "o-1")
    return loaded


async def test_a_second_move_does_not_bring_back_an_order_purged_after_it_read_the_history(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = await first_move_dies_before_the_live_delete(store, monkeypatch)
    read_archive = store.archives.read_archive
    purges: list[int] = []

    async def purged_after_the_read(order_id: str) -> Any:
        found = await read_archive(order_id)
        if not purges:  # the retention clean-up runs between the read and the rewrite
            purges.append((await store.purge(NOW + DAY, NOW + 3 * DAY, 100)).purged)
        return found

    monkeypatch.setattr(store.archives, "read_archive", purged_after_the_read)
    assert await store.archive(loaded)
    monkeypatch.undo()
    assert purges == [1]
    assert await live_keys(store, "o-1") == []
    history = await rows(store.history)
    assert history["order|o-1"]["Kind"] == "tombstone"
    assert [k for k in history if "|o-1|" in k and not k.startswith("gone|")] == []
    assert await store.load("o-1") is None
    assert counts(await store.count_by_state(100)) == {}  # the tally agrees with what the history holds
    assert (await store.purge(NOW + DAY, NOW + 3 * DAY, 100)).purged == 0
    assert counts(await store.count_by_state(100)) == {}


async def test_a_second_move_of_an_order_purged_meanwhile_deletes_its_live_records(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = await first_move_dies_before_the_live_delete(store, monkeypatch)
    assert (await store.purge(NOW + DAY, NOW + 3 * DAY, 100)).purged == 1
    assert await store.archive(loaded)
    assert await live_keys(store, "o-1") == []
    assert await store.load("o-1") is None
    assert (await rows(store.history))["order|o-1"]["Kind"] == "tombstone"
    assert counts(await store.count_by_state(100)) == {}


# ---- the id's mark: a submission that need not read the history -------------------------------------------
async def history_row(store: TableStateStore, order_id: str) -> dict[str, Any] | None:
    return (await rows(store._history())).get(f"order|{order_id}")


async def test_a_submission_marks_its_id_in_the_history_reads_nothing_there_and_the_move_writes_over_it(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh id: its mark goes in beside the watch entry, the task is written with no read of the history,
    and the move to the history writes the finished task over the mark, counted once."""
    read_archive, reads = store.archives.read_archive, []

    async def counted(order_id: str) -> Any:
        reads.append(order_id)
        return await read_archive(order_id)

    monkeypatch.setattr(store.archives, "read_archive", counted)
    outcome, record = await store.create(new_record("o-1", BODY))
    assert outcome is CreateOutcome.CREATED and reads == []
    mark = await history_row(store, "o-1")
    assert mark is not None and (mark["Kind"], mark["CreatedAt"]) == ("returned", record.state.created_at)
    monkeypatch.undo()
    assert (await store.load("o-1")) is not None  # read live, as a return's marker sends it
    moved = await archived(store, "o-2")
    kept = await history_row(store, "o-2")
    assert kept is not None and kept["Kind"] == "archive" and moved.state.order_id == "o-2"
    assert counts(await store.count_by_state(100)) == {"Processed": 1, "Pending": 1}
    again, answer = await store.create(new_record("o-2", {"id": "o-2"}, now=NOW + DAY))
    assert again is CreateOutcome.EXISTS_SAME and answer.archived


async def test_a_mark_left_by_a_submission_that_died_is_taken_over_by_the_next_one(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submission that died after its mark and before its transaction leaves the mark alone: the next
    submission of the id finds the row, reads it (a mark: no finished task), writes the task, and the
    task moves to the history over that mark, counted once."""
    assert await store.archives.mark(new_record("o-1", BODY, now=NOW - DAY).state) is not None  # then dies
    read_archive, reads = store.archives.read_archive, []

    async def counted(order_id: str) -> Any:
        reads.append(order_id)
        return await read_archive(order_id)

    monkeypatch.setattr(store.archives, "read_archive", counted)
    record = await finished(store, "o-1")  # its submission, then its steps
    assert reads == ["o-1"] and record.state.process_state is ProcessState.PROCESSED
    monkeypatch.undo()
    assert await store.archive(record)
    assert (await history_row(store, "o-1") or {}).get("Kind") == "archive"
    assert counts(await store.count_by_state(100)) == {"Processed": 1}


async def test_a_submission_refused_by_a_live_task_without_a_mark_deletes_its_own(
    store: TableStateStore,
) -> None:
    """A live task written before marks existed has no row in the history: a submission of its id marks
    it, is refused by the live task, answers from it, and deletes its mark, so the row stays that task's
    to write when it moves."""
    _, first = await store.create(new_record("o-1", BODY))
    mark = await history_row(store, "o-1")
    assert mark is not None
    await store._history().delete_entity(mark["PartitionKey"], mark["RowKey"])  # as written before marks
    outcome, answer = await store.create(new_record("o-1", BODY, now=NOW + timedelta(seconds=1)))
    assert outcome is CreateOutcome.EXISTS_SAME and answer.state.created_at == first.state.created_at
    assert await history_row(store, "o-1") is None


async def test_a_submission_whose_id_row_went_meanwhile_marks_it_again(
    store: TableStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mark is refused (a row was there), then the row is gone when read (a tombstone dropped in
    between): the submission marks the id again before it writes, so the task never lives without its
    row."""
    mark, tries = store.archives.mark, []

    async def refused_once(state: Any) -> str | None:
        tries.append(state.order_id)
        return None if len(tries) == 1 else await mark(state)

    monkeypatch.setattr(store.archives, "mark", refused_once)
    outcome, _ = await store.create(new_record("o-1", BODY))
    assert outcome is CreateOutcome.CREATED and tries == ["o-1", "o-1"]
    assert (await history_row(store, "o-1") or {}).get("Kind") == "returned"
