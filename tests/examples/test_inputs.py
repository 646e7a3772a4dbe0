"""The example workflows' input models: what a fulfilment order and a return may carry (the API answers a
400 naming the field for anything else; tests/orders/test_api.py shows that over any catalog)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from orders.catalog import FULFILMENT, RETURNS
from orders.models import order_input

ORDER = FULFILMENT.examples()[0]
RETURN = RETURNS.examples()[0]
LINE = {"sku": "a", "quantity": 1, "unitPrice": 1}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"customerId": ""}, "customerId"),
        ({"items": []}, "items"),
        ({"items": [{**LINE, "quantity": 0}]}, "items.0.quantity"),
        ({"items": [{**LINE, "quantity": 1001}]}, "items.0.quantity"),
        ({"items": [{**LINE, "unitPrice": -1}]}, "items.0.unitPrice"),
        ({"items": [{**LINE, "quantity": "1"}]}, "items.0.quantity"),
        ({"items": [{**LINE, "digital": "yes"}]}, "items.0.digital"),
        ({"items": [LINE] * 101}, "items"),
        ({"currency": "EURO"}, "currency"),
        ({"currency": "E1R"}, "currency"),
        ({"unexpected": True}, "unexpected"),
    ],
)
def test_a_fulfilment_order_is_refused_naming_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        order_input(FULFILMENT, {**ORDER, **change})
    assert field in [".".join(str(p) for p in e["loc"]) for e in refused.value.errors()]


def test_a_fulfilment_order_is_stored_with_its_defaults_and_a_whole_number_written_as_3_0_is_3() -> None:
    stored = order_input(FULFILMENT, {**ORDER, "items": [{**LINE, "quantity": 3.0}]})
    assert stored["items"] == [{"sku": "a", "quantity": 3, "unitPrice": 1.0, "digital": False}]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"originalOrderId": "bad id!"}, "originalOrderId"),
        ({"reason": ""}, "reason"),
        ({"items": [{**LINE, "digital": True}]}, "items.0.digital"),  # a return names no digital goods
        ({"unexpected": True}, "unexpected"),
    ],
)
def test_a_return_takes_what_a_return_is(change: dict[str, Any], field: str) -> None:
    assert order_input(RETURNS, RETURN)["reason"] == RETURN["reason"]
    with pytest.raises(ValidationError) as refused:
        order_input(RETURNS, {**RETURN, **change})
    assert field in [".".join(str(p) for p in e["loc"]) for e in refused.value.errors()]
    without = {k: v for k, v in RETURN.items() if k != "originalOrderId"}
    with pytest.raises(ValidationError, match="originalOrderId"):
        order_input(RETURNS, without)
