"""The demo's orders of the example workflows: both ways of the fulfilment's condition occur."""

from __future__ import annotations

import random

from devhost.demo import order_inputs
from orders.catalog import FULFILMENT
from orders.models import order_input


def test_some_fulfilment_orders_are_all_digital_and_have_no_shipment() -> None:
    shipment = next(step for step in FULFILMENT.steps if step.name == "create-shipment")
    assert shipment.when is not None
    inputs = order_inputs([FULFILMENT.name] * 10, random.Random(1))
    ships = [
        shipment.when.holds({"input": order_input(FULFILMENT, given), "results": {}}) for given in inputs
    ]
    all_digital = [all(item.get("digital") for item in given["items"]) for given in inputs]
    assert ships == [not digital for digital in all_digital]
    assert True in ships and False in ships
