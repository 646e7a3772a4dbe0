"""The example services (inventory, payment, shipping) as their simulators play them: routes, answers,
rejection reasons and the bodies each accepts, written out by hand, independently of the declaration.

What holds for any declared service is in ``tests/simulators/``; this is the example's own contract, so it
changes when the example services do.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.simulators.helpers import RESOURCES, Service, apply, assert_error, ledger

ITEMS = [{"sku": "SKU-1", "quantity": 2}, {"sku": "SKU-2", "quantity": 1}]
# Order order-1 of tests.simulators.helpers.ORDER: 2 x 9.5 + 1 x 3.
ITEMS_BODY = {"orderId": "order-1", "items": ITEMS}
AMOUNT_BODY = {"orderId": "order-1", "amount": 22.0, "currency": "EUR"}

INVENTORY = Service(
    "inventory",
    "/inventory/reservations",
    "release",
    "reserved",
    "released",
    "insufficient stock",
    ITEMS_BODY,
)
PAYMENT = Service(
    "payment", "/payment/charges", "refund", "charged", "refunded", "card declined", AMOUNT_BODY
)
SHIPPING = Service(
    "shipping", "/shipping/shipments", "cancel", "created", "cancelled", "address not deliverable", ITEMS_BODY
)
# The returns' resources, one on each service.
RESTOCK = Service(
    "inventory", "/inventory/restocks", "unstock", "restocked", "unstocked", "unknown SKU", ITEMS_BODY
)
CREDIT = Service(
    "payment",
    "/payment/credits",
    "reverse-credit",
    "credited",
    "reversed",
    "card cannot be credited",
    AMOUNT_BODY,
)
COLLECTION = Service(
    "shipping",
    "/shipping/collections",
    "cancel-collection",
    "collected",
    "cancelled",
    "nothing to collect at that address",
    ITEMS_BODY,
)
EXAMPLE = [INVENTORY, RESTOCK, PAYMENT, CREDIT, SHIPPING, COLLECTION]


@pytest.mark.parametrize("service", EXAMPLE, ids=[s.collection.strip("/") for s in EXAMPLE])
def test_the_declaration_serves_each_example_resource_as_written_here(service: Service) -> None:
    assert service in RESOURCES, f"declared: {[r for r in RESOURCES if r.collection == service.collection]}"


def test_a_charge_then_its_refund(client: httpx.Client) -> None:
    charged = apply(client, PAYMENT, "o-1:charge-payment")
    refunded = client.post("/payment/charges/o-1%3Acharge-payment/refund")
    assert charged.status_code == 201, charged.text
    assert charged.json() == {"id": "o-1:charge-payment", "orderId": "order-1", "status": "charged"}
    assert refunded.json() == {"id": "o-1:charge-payment", "status": "refunded"}
    assert ledger(client)["payment"] == {
        "o-1:charge-payment": {"orderId": "order-1", "applied": 1, "compensated": 1}
    }


def test_a_replayed_charge_answers_the_first_even_with_another_amount(client: httpx.Client) -> None:
    apply(client, PAYMENT, "pay-1")
    replay = apply(client, PAYMENT, "pay-1", orderId="order-other", amount=1.0)
    assert replay.status_code == 200
    assert replay.json() == {"id": "pay-1", "orderId": "order-1", "status": "charged"}


ITEM = {"sku": "SKU-1", "quantity": 1}
INVALID_BODIES: list[tuple[Service, Any]] = [
    (INVENTORY, {"items": [ITEM]}),
    (INVENTORY, {"orderId": "", "items": [ITEM]}),
    (INVENTORY, {"orderId": 7, "items": [ITEM]}),
    (INVENTORY, {"orderId": "o", "items": []}),
    (INVENTORY, {"orderId": "o", "items": [{"sku": "SKU-1", "quantity": 0}]}),
    (INVENTORY, {"orderId": "o", "items": [{"sku": "SKU-1", "quantity": "2"}]}),
    (INVENTORY, {"orderId": "o", "items": [{"quantity": 1}]}),
    (INVENTORY, [ITEM]),
    (PAYMENT, {"orderId": "o", "amount": -1, "currency": "EUR"}),
    (PAYMENT, {"orderId": "o", "amount": -5, "currency": "EUR"}),
    (PAYMENT, {"orderId": "o", "amount": "10", "currency": "EUR"}),
    (PAYMENT, {"orderId": "o", "amount": 10}),
    (PAYMENT, {"orderId": "o", "amount": 10, "currency": ""}),
    (SHIPPING, {"orderId": "o"}),
    (SHIPPING, {"orderId": "o", "items": "SKU-1"}),
    (RESTOCK, {"orderId": "o", "items": []}),
    (RESTOCK, {"items": [ITEM]}),
    (CREDIT, {"orderId": "o", "amount": "10", "currency": "EUR"}),
    (CREDIT, {"orderId": "o", "amount": 10}),
    (COLLECTION, {"orderId": "o"}),
    (COLLECTION, {"orderId": "o", "items": [{"sku": "", "quantity": 1}]}),
]


@pytest.mark.parametrize(("service", "body"), INVALID_BODIES, ids=lambda value: str(value))
def test_invalid_body_is_refused(shared_client: httpx.Client, service: Service, body: Any) -> None:
    response = shared_client.post(service.collection, json=body, headers={"Idempotency-Key": "key-1"})
    assert_error(response, 400, "InvalidBody")
    assert ledger(shared_client)[service.name] == {}


@pytest.mark.parametrize(
    "path",
    [
        "/inventory",
        "/payment/charges/key-1/release",
        # An undo action is served only under its own resource's collection.
        "/shipping/collections/key-1/cancel",
        "/payment/charges/key-1/reverse-credit",
    ],
)
def test_unknown_route_is_a_json_404(shared_client: httpx.Client, path: str) -> None:
    assert_error(shared_client.post(path), 404, "NotFound")
