"""The store's search entries on Azurite: written at submission, read by key and time of submission with the
other criteria, found live and in the history, purged with the order, passed over when their order is
not theirs; and orders found at a step for a while from the listing entries."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest
from azure.data.tables.aio import TableServiceClient

from adapters.table_store import TableStateStore, _encode_marks, shard_of
from engine import transitions
from engine.errors import InvalidContinuation
from engine.ports import CreateOutcome
from engine.search import SearchQuery
from engine.state import ProcessState, TaskRecord
from tests.adapters.test_history import archived, rows
from tests.adapters.test_table_store import NOW, WORKFLOW, ctx, new_record

pytestmark = pytest.mark.anyio

SHARDS = 2


@pytest.fixture
async def store(azurite_connection_string: str) -> AsyncIterator[TableStateStore]:
    async with TableServiceClient.from_connection_string(azurite_connection_string) as service:
        store = await TableStateStore.from_service(service, "t" + uuid.uuid4().hex[:16], shards=SHARDS)
        yield store
        await store.close()


def searchable(order_id: str, customer: str, at: datetime = NOW, submitter: str | None = None) -> TaskRecord:
    record = new_record(order_id, {"customerId": customer, "id": order_id}, now=at)
    record.state.search = {"customerId": customer}
    record.state.submitter = submitter
    return record


async def ids(store: TableStateStore, query: SearchQuery, page_size: int = 10) -> list[str]:
    """Every order id the search finds, page by page, each once."""
    found: list[str] = []
    token = None
    while True:
        page = await store.search_orders(query, page_size, token)
        assert len(page.states) <= page_size
        found += [state.order_id for state in page.states]
        token = page.continuation
        if token is None:
            assert len(found) == len(set(found))
            return sorted(found)


async def search_keys(store: TableStateStore, order_id: str) -> list[str]:
    assert store.search is not None
    return sorted(key for key in await rows(store.search) if key.endswith(f"|{order_id}|"))


async def test_an_order_is_found_by_each_of_its_entries_live_and_in_the_history_until_purged(
    store: TableStateStore,
) -> None:
    for n in range(3):
        await store.create(searchable(f"a-{n}", "c-1", NOW + timedelta(seconds=n)))
    await store.create(searchable("b-1", "c-2", NOW + timedelta(seconds=1), submitter="north"))
    by_customer = SearchQuery(fields={"customerId": "c-1"})

    assert await search_keys(store, "b-1") == sorted(
        f"{prefix}{(NOW + timedelta(seconds=1)).strftime('%Y%m%dT%H%M%S%fZ')}|b-1|"
        for prefix in (
            "field|customerId|c-2|",
            "storefront|north|",
            f"workflow|{WORKFLOW.name}|",
            "submitted|",
        )
    )
    assert await ids(store, by_customer) == ["a-0", "a-1", "a-2"]
    assert await ids(store, by_customer, page_size=1) == ["a-0", "a-1", "a-2"]
    assert await ids(store, SearchQuery(storefront="north")) == ["b-1"]
    assert await ids(store, SearchQuery(workflow=WORKFLOW.name, workflow_version=2)) == []
    window = SearchQuery(submitted_from=NOW + timedelta(seconds=1), submitted_to=NOW + timedelta(seconds=2))
    assert await ids(store, window) == ["a-1", "b-1"]
    # The other criteria the entries carry, filtered by the table service.
    assert await ids(store, SearchQuery(fields={"customerId": "c-1"}, storefront="north")) == []
    assert await ids(store, SearchQuery(storefront="north", fields={"customerId": "c-2"})) == ["b-1"]

    # Finished and moved to the history: found there, in its final state.
    # (a-0's state record deleted by hand: its entries name an order no longer there.)
    await store.table.delete_entity(shard_of("a-0", SHARDS), "order|a-0|state")
    await archived(store, "a-9")  # no search values: found by its other entries only
    finished = await archived(store, "a-5")
    assert finished.state.process_state is ProcessState.PROCESSED
    assert await ids(store, SearchQuery(workflow=WORKFLOW.name, process_state=ProcessState.PROCESSED)) == [
        "a-5",
        "a-9",
    ]
    # An entry whose order is no longer there is passed over.
    assert await ids(store, by_customer) == ["a-1", "a-2"]

    # Purged: its search entries go with it.
    assert await search_keys(store, "a-5") != []
    report = await store.purge(NOW + timedelta(days=1), NOW + timedelta(days=2), limit=10)
    assert report.purged == 2
    assert await search_keys(store, "a-5") == [] and await search_keys(store, "a-9") == []
    assert await ids(store, SearchQuery(workflow=WORKFLOW.name, process_state=ProcessState.PROCESSED)) == []


async def test_a_submission_that_finds_its_id_taken_leaves_no_entry_of_its_own(
    store: TableStateStore,
) -> None:
    outcome, _ = await store.create(searchable("o-1", "c-1"))
    assert outcome is CreateOutcome.CREATED
    again = searchable("o-1", "c-other", NOW + timedelta(seconds=5))
    outcome, _ = await store.create(again)
    assert outcome is CreateOutcome.EXISTS_DIFFERENT
    assert all("c-other" not in key for key in await search_keys(store, "o-1"))
    assert await ids(store, SearchQuery(fields={"customerId": "c-other"})) == []
    assert await ids(store, SearchQuery(fields={"customerId": "c-1"})) == ["o-1"]


async def test_an_order_is_found_at_its_step_for_as_long_as_it_is_there(store: TableStateStore) -> None:
    _, record = await store.create(searchable("o-1", "c-1"))
    transitions.claim(record, ctx(NOW + timedelta(seconds=1)))
    await store.save(record)
    at_first = SearchQuery(step="first", positions=((WORKFLOW.name, 1, 0),))
    assert record.state.step_since == NOW  # at the first step since its submission
    assert await ids(store, at_first) == ["o-1"]
    assert await ids(store, at_first.model_copy(update={"at_step_before": NOW - timedelta(seconds=1)})) == []
    assert await ids(store, at_first.model_copy(update={"process_state": ProcessState.PENDING})) == []

    transitions.step_succeeded(record, ctx(NOW + timedelta(seconds=30)), {})
    await store.save(record)
    assert record.state.step_since == NOW + timedelta(seconds=30)
    assert await ids(store, at_first) == []
    at_second = SearchQuery(step="second", positions=((WORKFLOW.name, 1, 1),))
    assert await ids(store, at_second.model_copy(update={"at_step_before": NOW + timedelta(seconds=31)})) == [
        "o-1"
    ]
    assert (
        await ids(store, at_second.model_copy(update={"at_step_before": NOW + timedelta(seconds=29)})) == []
    )
    # A key criterion with a step: the key's entries, then the step read from each hit's state.
    keyed = at_second.model_copy(update={"fields": {"customerId": "c-1"}})
    assert await ids(store, keyed) == ["o-1"]
    assert await ids(store, keyed.model_copy(update={"positions": ((WORKFLOW.name, 1, 0),)})) == []


async def test_a_token_the_search_did_not_issue_is_refused(store: TableStateStore) -> None:
    for n in range(3):
        await store.create(searchable(f"a-{n}", "c-1", NOW + timedelta(seconds=n)))
    query = SearchQuery(fields={"customerId": "c-1"})
    page = await store.search_orders(query, 1, None)
    assert len(page.states) == 1 and page.continuation is not None
    other = await store.search_orders(SearchQuery(fields={"customerId": "c-0"}), 1, None)
    assert other.states == [] and other.continuation is None
    # Another search's place, a key outside the range, another number of ranges, not a token at all.
    forged = _encode_marks(["field|customerId|c-0|", None])
    for token in (forged, _encode_marks([None, None, None]), "not-a-token"):
        with pytest.raises(InvalidContinuation):
            await store.search_orders(query, 1, token)
