"""The state store across releases, on Azurite (engine.formats): every record says its format, a save
keeps what a later release stored, and a record of a later format, or a corrupted one, is passed over by
every reader and reported, failing none."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from azure.data.tables import UpdateMode

from adapters.table_store import TableStateStore
from engine import formats, telemetry, transitions
from engine.errors import NotUnderstood
from engine.parts import EngineParts
from engine.state import ProcessState
from engine.supervisor import Supervisor
from engine.workflow import WorkflowCatalog
from tests.adapters.test_history import archived, live_keys, rows
from tests.adapters.test_table_store import NOW, SETTINGS, WORKFLOW, FixedClock, ctx, new_record, store
from tests.engine.fakes import RecordingSender

pytestmark = pytest.mark.anyio
__all__ = ["store"]  # the fixture, used by name

LATER = formats.RECORDS_READ + 1


async def claimed(store: TableStateStore, order_id: str) -> None:
    """An order submitted and claimed at NOW: in flight at its first step, watched."""
    _, record = await store.create(new_record(order_id))
    transitions.claim(record, ctx())
    await store.save(record)


async def merge(store: TableStateStore, order_id: str, row: str, **properties: Any) -> None:
    """What another release wrote on one of an order's live records (``row``: a suffix of its RowKey)."""
    [key] = [k for k in await live_keys(store, order_id) if k.endswith(row)]
    entity = (await rows(store.table))[key]
    await store.table.update_entity(
        {"PartitionKey": entity["PartitionKey"], "RowKey": key, **properties}, mode=UpdateMode.MERGE
    )


@pytest.mark.parametrize("writes", [formats.BEFORE_SWITCH, formats.AFTER_SWITCH])
async def test_every_record_of_a_task_says_the_format_the_switch_says(
    store: TableStateStore, writes: int
) -> None:
    store.formats.writes = writes
    await claimed(store, "o-1")
    live = await rows(store.table)
    records = {k: e for k, e in live.items() if e.get("Kind") in ("state", "input", "step", "index")}
    assert {e["Kind"] for e in records.values()} == {"state", "input", "step", "index"}
    assert {k: e.get("Format") for k, e in records.items()} == dict.fromkeys(records, writes)
    # So do its watch entry and its search entries.
    assert [e.get("Format") for e in (await rows(store.watch)).values()] == [writes]
    assert store.search is not None
    found = (await rows(store.search)).values()
    assert found and {e.get("Format") for e in found} == {writes}
    loaded = await store.load("o-1")  # this release reads both
    assert loaded is not None and loaded.state.order_id == "o-1"


async def test_the_switch_is_kept_once_for_every_instance(store: TableStateStore) -> None:
    assert await store.read_switch() is None and not await store.holds_tasks()
    first = await formats.Formats.settle(store, NOW)
    assert first.writes == formats.AFTER_SWITCH  # nothing stored: a new deployment
    assert await store.write_switch(formats.Switch(formats.BEFORE_SWITCH)) is None  # set already
    stale = formats.Switch(formats.BEFORE_SWITCH, None, first.etag)
    held = await store.write_switch(stale)
    assert held is not None and (await store.read_switch()) == held
    assert await store.write_switch(stale) is None  # an ETag gone stale: refused
    await claimed(store, "o-1")
    assert await store.holds_tasks()


async def test_a_save_keeps_every_property_a_later_release_stored(store: TableStateStore) -> None:
    await claimed(store, "o-1")
    await merge(store, "o-1", "|state", Priority="high", Shipments=3)
    await merge(store, "o-1", "|step|00", Carrier="dhl")
    await merge(store, "o-1", "|input", Locale="de")
    record = await store.load("o-1")
    assert record is not None
    record.change_input({**record.input, "note": "changed"})  # the input record is written again too
    record.state.locked_by = "sched-2"
    record.steps[0].last_error = "changed"
    await store.save(record)
    after = await rows(store.table)
    state, step, body = (after[k] for k in ("order|o-1|state", "order|o-1|step|00", "order|o-1|input"))
    assert (state["Priority"], state["Shipments"], step["Carrier"], body["Locale"]) == (
        "high",
        3,
        "dhl",
        "de",
    )
    # What this release writes is its own: the save's changes are there.
    assert (step["LastError"], state["LockedBy"]) == ("changed", "sched-2")
    again = await store.load("o-1")
    assert again is not None and again.input["note"] == "changed"


@pytest.mark.parametrize(
    ("row", "written"),
    [
        ("|state", {"Format": LATER}),
        ("|state", {"ProcessState": "Paused"}),  # a state this release does not know
        ("|step|01", {"Format": LATER}),
        ("|step|00", {"Result": "{not json"}),  # corrupted
        ("|input", {"Format": LATER}),
    ],
)
async def test_a_record_of_a_later_format_or_corrupted_is_passed_over_and_reported(
    store: TableStateStore, caplog: pytest.LogCaptureFixture, row: str, written: dict[str, Any]
) -> None:
    for order_id in ("o-1", "o-2"):
        await claimed(store, order_id)
    await merge(store, "o-2", row, **written)
    if row == "|state":  # its listing entry is a copy of the state record, written with it
        await merge(store, "o-2", "|o-2|", **written)
    caplog.set_level(logging.INFO, logger="engine.telemetry")
    with pytest.raises(NotUnderstood) as raised:
        await store.load("o-2")
    assert raised.value.order_id == "o-2"
    reported = [
        r for r in caplog.records if getattr(r, "microsoft.custom_event.name", None) == "NotUnderstood"
    ]
    assert reported and all(getattr(r, "orderId", None) == "o-2" for r in reported), caplog.text
    assert telemetry.NOT_UNDERSTOOD in telemetry.ALERT_EVENTS
    # A listing answers the rest; the Supervisor's sweep passes over it, handles the other and goes on.
    listed = await store.list_by_state(ProcessState.PROCESSING, 10, None)
    assert "o-1" in {t.order_id for t in listed.states}
    supervisor = Supervisor(
        EngineParts(
            WorkflowCatalog.of(WORKFLOW),
            store,
            RecordingSender(),
            FixedClock(NOW + timedelta(minutes=1)),
            SETTINGS,
        )
    )
    report = await supervisor.sweep()
    assert report.passed_over == 1 and report.retried + report.kicked + report.errored == 1, report
    loaded = await store.load("o-1")
    assert loaded is not None and loaded.state.failure_count == 1  # recovered as any order


@pytest.mark.parametrize("written", [{"Format": LATER}, {"Steps0": "[{not json"}])
async def test_a_finished_order_of_a_later_format_in_the_history_is_passed_over_and_reported(
    store: TableStateStore, written: dict[str, Any]
) -> None:
    for order_id in ("o-1", "o-2"):
        await archived(store, order_id)
    history = store._history()
    [entity] = [e async for e in history.query_entities("RowKey eq 'order|o-2'")]
    await history.update_entity(
        {"PartitionKey": entity["PartitionKey"], "RowKey": entity["RowKey"], **written}, mode=UpdateMode.MERGE
    )
    index = [e async for e in history.query_entities("Kind eq 'index' and OrderID eq 'o-2'")]
    for e in index:  # its listing entry is a copy of its summary, written with it
        await history.update_entity(
            {"PartitionKey": e["PartitionKey"], "RowKey": e["RowKey"], **written}, mode=UpdateMode.MERGE
        )
    with pytest.raises(NotUnderstood) as raised:
        await store.load("o-2")
    assert raised.value.order_id == "o-2"
    listed = await store.list_by_state(ProcessState.PROCESSED, 10, None)
    assert "o-1" in {t.order_id for t in listed.states}


async def test_instances_say_they_run_and_are_forgotten(store: TableStateStore) -> None:
    one = formats.Instance("host:1:ab", "1.1.0", formats.RECORDS_READ, NOW)
    await store.announce(one)
    await store.announce(
        formats.Instance("host:1:ab", "1.1.0", formats.RECORDS_READ, NOW + timedelta(seconds=30))
    )
    serves = frozenset({"order-fulfilment@3", "order-return@2"})
    await store.announce(formats.Instance("host:2:cd", "1.2.0", formats.RECORDS_READ + 1, NOW, serves))
    seen = {i.name: i for i in await store.instances()}
    # What each serves, as it said (a word that says nothing of it reads as None).
    assert (seen["host:1:ab"].serves, seen["host:2:cd"].serves) == (None, serves)
    assert set(seen) == {"host:1:ab", "host:2:cd"} and seen["host:1:ab"].seen_at == NOW + timedelta(
        seconds=30
    )
    assert await store.read_switch() is None  # the switch's row is not an instance's word, nor the reverse
    await store.forget(one)
    assert [i.name for i in await store.instances()] == ["host:2:cd"]
