"""The demo's mix of workflows: parsed against the catalog, spread over the orders by share; and the orders'
inputs: the workflows' declared examples, varied, every branch of their conditions taken."""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from typing import Any

import pytest

from devhost.demo import assign_workflows, order_inputs, parse_mix, vary
from engine.workflow import WorkflowDefinition
from orders.catalog import CATALOG
from orders.models import order_input

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


def branches(workflow: WorkflowDefinition, given: dict[str, Any]) -> set[tuple[str, bool]]:
    """Which way each condition that reads only the input goes on ``given`` (as the API stores it)."""
    document = {"input": order_input(workflow, given), "results": {}}
    return {
        (step.name, step.when.holds(document))
        for step in workflow.steps
        if step.when is not None and all(path.startswith("input.") for path in step.when.fields())
    }


@pytest.mark.parametrize("name", CATALOG.names)
def test_orders_submit_the_workflows_examples_varied_and_every_branch_the_examples_take(name: str) -> None:
    workflow = CATALOG.current(name)
    assert workflow is not None
    inputs = order_inputs([name] * 40, random.Random(7))

    # Each a valid input of its workflow (the API would refuse it otherwise), and not all alike.
    for given in inputs:
        assert workflow.input is not None
        workflow.input.model_validate(given)
    assert len({json.dumps(given, sort_keys=True) for given in inputs}) > 1
    # Every example's branches occur among the orders: an all-digital fulfilment has no shipment.
    taken = {branch for given in inputs for branch in branches(workflow, given)}
    assert {branch for example in workflow.examples() for branch in branches(workflow, example)} <= taken
    # A seed makes them reproducible.
    assert order_inputs([name] * 40, random.Random(7)) == inputs


def test_a_variation_the_input_model_refuses_is_not_submitted() -> None:
    """Scaled past its bound, a quantity is refused by the model: the example goes as it is."""
    workflow = CATALOG.current(CATALOG.default)
    assert workflow is not None and workflow.input is not None
    example = workflow.examples()[0]
    big = json.loads(json.dumps(example).replace('"quantity": 2', '"quantity": 1000'))
    if big == example:
        pytest.skip("the default workflow's first example has no quantity of 2")
    kept = [vary(big, workflow, random.Random(seed)) for seed in range(20)]
    for given in kept:
        workflow.input.model_validate(given)
    assert big in kept
