"""The table ledger on Azurite: two simulator instances sharing one table behave as one ledger.

Each "instance" is a separate simulators app (its own Starlette app, ledger object and table client),
as two Function App instances would be; they share nothing but the table.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
from azure.data.tables import TableClient, TableServiceClient
from starlette.applications import Starlette

from devhost import azurite
from simulators.app import create_app
from simulators.hosted import hosted_app
from simulators.models import MAX_TRACE_IDS
from simulators.table_ledger import TableLedger, ledger_table_name, row_key
from tests.simulators.helpers import FIRST, LAST, SECOND, empty, entry, without_seq
from tests.support import free_port


def table_ledger(connection: str, table: str) -> TableLedger:
    """A ledger with a client of its own, as another instance would have."""
    return TableLedger(TableClient.from_connection_string(connection, table), create_table=True)


def instance(connection: str, table: str) -> Starlette:
    return create_app(None, ledger=table_ledger(connection, table))


def client(app: Starlette) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://simulators")


async def apply(http: httpx.AsyncClient, key: str, order_id: str = "order-1") -> httpx.Response:
    """Apply an effect of one declared service (the second) with ``key``."""
    body = {**SECOND.body, "orderId": order_id}
    return await http.post(SECOND.collection, json=body, headers={"Idempotency-Key": key})


def test_an_apply_retried_on_the_other_instance_is_applied_once(
    azurite_connection_string: str, new_table: Callable[[], str]
) -> None:
    table = new_table()
    first, second = instance(azurite_connection_string, table), instance(azurite_connection_string, table)

    async def scenario() -> tuple[httpx.Response, httpx.Response, dict[str, object]]:
        async with client(first) as a, client(second) as b:
            applied = await apply(a, "o-1:step", "o-1")
            retried = await apply(b, "o-1:step", "o-1")
            return applied, retried, (await b.get("/ledger")).json()

    applied, retried, ledger = asyncio.run(scenario())

    assert applied.status_code == 201, applied.text
    assert retried.status_code == 200, "the second instance saw the first one's effect: a replay"
    # The values the first instance answered, read back from the table.
    assert retried.json() == applied.json() == SECOND.answer("o-1:step", "o-1")
    assert ledger == {**empty(), SECOND.name: ledger[SECOND.name]}
    assert without_seq(ledger[SECOND.name]) == {"o-1:step": entry(SECOND, "o-1:step", order_id="o-1")}
    rows = list(TableClient.from_connection_string(azurite_connection_string, table).list_entities())
    assert len(rows) == 1


def test_concurrent_applies_of_one_key_from_both_instances_apply_it_once(
    azurite_connection_string: str, new_table: Callable[[], str]
) -> None:
    table = new_table()
    first, second = instance(azurite_connection_string, table), instance(azurite_connection_string, table)
    keys = [f"o-{n}:step" for n in range(8)]

    async def scenario() -> list[tuple[str, int]]:
        async with client(first) as a, client(second) as b:
            calls = [(key, http) for key in keys for http in (a, b, a, b)]
            responses = await asyncio.gather(*(apply(http, key) for key, http in calls))
            return [(key, r.status_code) for (key, _), r in zip(calls, responses, strict=True)]

    results = asyncio.run(scenario())

    assert {status for _, status in results} <= {200, 201}, results
    created = Counter(key for key, status in results if status == 201)
    assert created == dict.fromkeys(keys, 1), "every key applied exactly once across both instances"


def test_a_compensation_is_visible_from_the_other_instance(
    azurite_connection_string: str, new_table: Callable[[], str]
) -> None:
    table = new_table()
    first, second = instance(azurite_connection_string, table), instance(azurite_connection_string, table)

    async def scenario() -> tuple[int, str, str, dict[str, object]]:
        async with client(first) as a, client(second) as b:
            applied = await apply(a, "o-2:step", "o-2")
            undone = await b.post(SECOND.compensation_path("o-2:step"))
            again = await a.post(SECOND.compensation_path("o-2:step"))
            return (
                applied.status_code,
                undone.json()["status"],
                again.json()["status"],
                (await a.get("/ledger")).json(),
            )

    applied, undone, again, ledger = asyncio.run(scenario())

    assert (applied, undone, again) == (201, SECOND.compensated, SECOND.compensated)
    (recorded,) = ledger[SECOND.name].values()
    assert without_seq({"o-2:step": recorded}) == {
        "o-2:step": entry(SECOND, "o-2:step", order_id="o-2", compensated=1)
    }
    assert recorded["compensatedSeq"] >= recorded["appliedSeq"]


def test_concurrent_compensations_change_an_entry_once(
    azurite_connection_string: str, new_table: Callable[[], str]
) -> None:
    table = new_table()
    one, other = (
        table_ledger(azurite_connection_string, table),
        table_ledger(azurite_connection_string, table),
    )
    keys = [f"o-{n}:step" for n in range(8)]

    async def scenario() -> list[tuple[str, bool]]:
        for key in keys:
            assert (await one.apply(LAST.name, key, key.split(":")[0])).changed
        calls = [(key, ledger) for key in keys for ledger in (one, other, one, other)]
        changes = await asyncio.gather(*(ledger.compensate(LAST.name, key) for key, ledger in calls))
        return [(key, change.changed) for (key, _), change in zip(calls, changes, strict=True)]

    results = asyncio.run(scenario())

    assert Counter(key for key, changed in results if changed) == dict.fromkeys(keys, 1)
    entries = asyncio.run(other.entries())[LAST.name]
    assert {entry["compensated"] for entry in entries.values()} == {1}


def test_keys_a_row_key_may_not_hold_are_kept_as_sent(
    azurite_connection_string: str, new_table: Callable[[], str]
) -> None:
    ledger = table_ledger(azurite_connection_string, new_table())
    key = "o/3#x?y\\z\t" + "k" * 150

    async def scenario() -> tuple[bool, bool, dict[str, dict[str, Any]]]:
        applied = await ledger.apply(LAST.name, key, "o-3", result={"a": "x"}, carried={"b": None})
        compensated = await ledger.compensate(LAST.name, key, carried={"a": "x"})
        return applied.changed, compensated.changed, (await ledger.entries())[LAST.name]

    applied, compensated, entries = asyncio.run(scenario())
    assert (applied, compensated) == (True, True)
    assert without_seq(entries) == {
        key: {
            "orderId": "o-3",
            "applied": 1,
            "compensated": 1,
            "result": {"a": "x"},
            "carried": {"b": None},
            "undoCarried": {"a": "x"},
            "traceIds": [],
        }
    }
    # Ordered by the time each change was made, in microseconds.
    assert 0 < entries[key]["appliedSeq"] <= entries[key]["compensatedSeq"]


def test_an_entity_written_before_results_reads_with_them_unknown(
    azurite_connection_string: str, new_table: Callable[[], str]
) -> None:
    table = new_table()
    ledger = table_ledger(azurite_connection_string, table)
    asyncio.run(ledger.entries())  # creates the table
    older = {"PartitionKey": LAST.name, "RowKey": row_key("o-6:step"), "Key": "o-6:step", "OrderId": "o-6"}
    TableClient.from_connection_string(azurite_connection_string, table).create_entity(
        {**older, "Applied": 1, "Compensated": 0}
    )

    async def scenario() -> tuple[bool, dict[str, dict[str, Any]]]:
        undone = await ledger.compensate(LAST.name, "o-6:step", carried={})
        return undone.changed, (await ledger.entries())[LAST.name]

    changed, entries = asyncio.run(scenario())
    assert changed
    recorded = entries["o-6:step"]
    assert (recorded["result"], recorded["carried"], recorded["appliedSeq"]) == (None, None, None)
    assert (recorded["compensated"], recorded["undoCarried"]) == (1, {})
    assert recorded["traceIds"] is None
    # A call in a trace adds it to an older entity too.
    assert not asyncio.run(ledger.compensate(LAST.name, "o-6:step", trace_id="f" * 32)).changed
    assert asyncio.run(ledger.entries())[LAST.name]["o-6:step"]["traceIds"] == ["f" * 32]


def test_both_instances_record_the_distinct_traces_of_a_keys_calls_a_few_at_most(
    azurite_connection_string: str, new_table: Callable[[], str]
) -> None:
    table = new_table()
    one, other = (
        table_ledger(azurite_connection_string, table),
        table_ledger(azurite_connection_string, table),
    )
    traces = [f"{n:x}" * 32 for n in range(1, MAX_TRACE_IDS + 3)]

    async def scenario() -> list[list[str] | None]:
        key, seen = "o-7:step", []
        seen.append(await one.apply(LAST.name, key, "o-7", trace_id=traces[0]))
        seen.append(await other.apply(LAST.name, key, "o-7", trace_id=traces[0]))  # a duplicate
        seen.append(await other.apply(LAST.name, key, "o-7", trace_id=traces[1]))  # a replay elsewhere
        seen.append(await one.compensate(LAST.name, key, trace_id=traces[2]))
        seen.append(await other.compensate(LAST.name, key, trace_id=traces[3]))  # an undo again
        seen.append(await one.apply(LAST.name, key, "o-7", trace_id=traces[4]))  # one too many
        recorded = [None if change.entry is None else change.entry.trace_ids for change in seen]
        return [None if ids is None else list(ids) for ids in recorded] + [
            (await other.entries())[LAST.name][key]["traceIds"]
        ]

    assert asyncio.run(scenario()) == [
        traces[:1],
        traces[:1],
        traces[:2],
        traces[:3],
        traces[:4],
        traces[:MAX_TRACE_IDS],
        traces[:MAX_TRACE_IDS],
    ]


def test_replays_racing_in_new_traces_on_both_instances_record_each_trace(
    azurite_connection_string: str, new_table: Callable[[], str]
) -> None:
    """Each adds its trace with an ETag-conditional update; one that loses a race reads again."""
    table = new_table()
    one, other = (
        table_ledger(azurite_connection_string, table),
        table_ledger(azurite_connection_string, table),
    )
    traces = ["a" * 32, "b" * 32]

    async def scenario() -> tuple[list[bool], list[str]]:
        assert (await one.apply(LAST.name, "o-8:step", "o-8")).changed
        replays = await asyncio.gather(
            *(
                ledger.apply(LAST.name, "o-8:step", "o-8", trace_id=trace)
                for trace in traces
                for ledger in (one, other)
            )
        )
        return [change.changed for change in replays], (await one.entries())[LAST.name]["o-8:step"][
            "traceIds"
        ]

    changed, recorded = asyncio.run(scenario())
    assert changed == [False] * 4
    assert sorted(recorded) == traces


def test_two_hosted_apps_share_the_ledger_table_next_to_the_state_table(
    azurite_connection_string: str, new_table: Callable[[], str]
) -> None:
    state_table = new_table()
    settings = {
        "STATE_STORE_CONNECTION": azurite_connection_string,
        "STATE_TABLE_NAME": state_table,
        "SIMULATORS_KEY": "k",
    }
    first, second = hosted_app(settings), hosted_app(settings)

    async def scenario() -> tuple[int, int]:
        async with client(first) as a, client(second) as b:
            body = {**FIRST.body, "orderId": "o-4"}
            headers = {"Idempotency-Key": "o-4:step", "x-simulators-key": "k"}
            created = await a.post(f"/api/sim{FIRST.collection}", json=body, headers=headers)
            replayed = await b.post(f"/api/sim{FIRST.collection}", json=body, headers=headers)
            return created.status_code, replayed.status_code

    assert asyncio.run(scenario()) == (201, 200)
    service = TableServiceClient.from_connection_string(azurite_connection_string)
    rows = list(service.get_table_client(ledger_table_name(state_table)).list_entities())
    assert [(row["PartitionKey"], row["Key"], row["Applied"]) for row in rows] == [
        (FIRST.name, "o-4:step", 1)
    ]


def test_an_unreachable_table_is_a_retryable_error_and_records_nothing(
    azurite_connection_string: str, new_table: Callable[[], str]
) -> None:
    table = new_table()
    # A port nobody listens on, and no SDK retries, so the failure is immediate.
    unreachable = azurite.table_connection_string(free_port())
    broken = TableLedger(TableClient.from_connection_string(unreachable, table, retry_total=0))

    async def scenario() -> httpx.Response:
        async with client(create_app(None, ledger=broken)) as http:
            return await apply(http, "o-5:step")

    response = asyncio.run(scenario())

    assert response.status_code == 503, response.text
    # The storage client's error stays in the log: the body says only what to do.
    assert response.json()["error"] == {
        "code": "LedgerUnavailable",
        "message": "the ledger did not answer; try again",
    }
    assert list(TableClient.from_connection_string(azurite_connection_string, table).list_entities()) == []
