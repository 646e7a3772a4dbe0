"""The demo's mix of workflows: parsed against the catalog, and spread over the orders by share."""

from __future__ import annotations

import argparse
from collections import Counter

import pytest

from devhost.demo import assign_workflows, parse_mix
from orders.catalog import CATALOG

FIRST, LAST = CATALOG.names[0], CATALOG.names[-1]


def test_weights_are_read_and_zero_shares_dropped() -> None:
    assert parse_mix(f"{FIRST}=3") == {FIRST: 3.0}
    assert parse_mix(f"{FIRST}=2,{LAST}=0") == {FIRST: 2.0}
    assert parse_mix(FIRST) == {FIRST: 1.0}  # no weight: 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no-such-workflow=1", "not a workflow of the catalog"),
        (f"{FIRST}=many", "not a number"),
        (f"{FIRST}=-1", "0 or more"),
        (f"{FIRST}=0", "above 0"),
    ],
)
def test_a_bad_mix_is_a_usage_error(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse_mix(text)


def test_orders_are_spread_by_share_and_interleaved() -> None:
    chosen = assign_workflows(100, {"a": 3.0, "b": 1.0})
    assert Counter(chosen) == {"a": 75, "b": 25}
    # Interleaved, not in blocks: every run of four orders holds one of "b".
    assert all(chosen[i : i + 4].count("b") == 1 for i in range(0, 100, 4))
    assert assign_workflows(3, {"a": 1.0}) == ["a", "a", "a"]
