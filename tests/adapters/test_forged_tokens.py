"""Continuation tokens a client forged, on Azurite: each is refused as a token this store did not issue
(InvalidContinuation, which the API answers 400), never a fault and never sent on to the table service."""

from __future__ import annotations

import base64

import pytest

from adapters.table_store import TableStateStore
from engine.errors import InvalidContinuation
from engine.search import SearchQuery
from engine.state import ProcessState
from tests.adapters.test_search import searchable
from tests.adapters.test_table_store import new_record, store

__all__ = ["store"]  # the fixture, on Azurite

pytestmark = pytest.mark.anyio


def forged(text: str) -> str:
    """A token as the store encodes one, around any JSON text."""
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


LISTING = [
    '{"s": 1e400, "t": null}',
    '{"s": Infinity, "t": null}',
    '{"s": -Infinity}',
    '{"s": NaN}',
    '{"s": "zero"}',
    '{"s": [0]}',
    '{"s": 0.5}',
    '{"s": true}',
    '{"s": -1}',
    '{"s": 0, "t": "text"}',
    '{"s": 0, "t": [1, 2]}',
    '{"s": 0, "t": 1e400}',
    '{"s": 0, "t": {"PartitionKey": 1e400}}',
    '{"s": 0, "t": {"PartitionKey": ["s00"], "RowKey": "x"}}',
    '{"s": 0, "t": {"PartitionKey": "s00", "Other": "x"}}',
    '{"s": 0, "t": {"PartitionKey": "s 00\\n"}}',
    "[" * 100_000,
    '"s"',
    "[]",
]
SEARCH = [
    '{"n": 4, "d": [1e400], "a": {}}',
    '{"n": 4, "d": [Infinity], "a": {}}',
    '{"n": 4, "d": ["x"], "a": {}}',
    '{"n": 4, "d": [-1], "a": {}}',
    '{"n": 4, "d": [true], "a": {}}',
    '{"n": 4, "d": [], "a": {"1e400": "x"}}',
    '{"n": 4, "d": [], "a": {"-1": "x"}}',
    '{"n": 4, "d": [], "a": {"0": 1e400}}',
    '{"n": 4, "d": [], "a": ["x"]}',
    '{"n": 1e400, "d": [], "a": {}}',
    "[" * 100_000,
]


async def test_a_forged_listing_token_is_refused(store: TableStateStore) -> None:
    for n in range(3):
        await store.create(new_record(f"o-{n}"))
    issued = (await store.list_by_state(ProcessState.PENDING, 1, None)).continuation
    assert issued is not None
    assert (await store.list_by_state(ProcessState.PENDING, 1, issued)).states  # an issued one goes on
    for text in LISTING:
        with pytest.raises(InvalidContinuation):
            await store.list_by_state(ProcessState.PENDING, 1, forged(text))
        with pytest.raises(InvalidContinuation):
            await store.index_page(0, forged(text))


async def test_a_forged_search_token_is_refused(store: TableStateStore) -> None:
    for n in range(3):
        await store.create(searchable(f"a-{n}", "c-1"))
    query = SearchQuery(fields={"customerId": "c-1"})
    issued = (await store.search_orders(query, 1, None)).continuation
    assert issued is not None
    assert (await store.search_orders(query, 1, issued)).states
    for text in SEARCH:
        with pytest.raises(InvalidContinuation):
            await store.search_orders(query, 1, forged(text))
