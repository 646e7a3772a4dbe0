"""The example services (inventory, payment, shipping, notifications) as their simulators play them: routes,
answers with the values each returns, rejection reasons, the bodies each accepts and what the ledger records
of them, written out by hand, independently of the declaration.

What holds for any declared service is in ``tests/simulators/``; this is the example's own contract, so it
changes when the example services do.
"""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
import pytest

from tests.simulators.helpers import RESOURCES, Service, apply, assert_error, ledger

# The bodies of order order-1 of each workflow's first example (tests.simulators.helpers builds them so):
# fulfilment: 2 x sku-1 at 9.5 and one digital ebook-7 at 20; a return: 1 x sku-1 at 9.5.
ITEMS = [{"sku": "sku-1", "quantity": 2}, {"sku": "ebook-7", "quantity": 1}]
ITEMS_BODY = {"orderId": "order-1", "items": ITEMS}
# The charge also carries the order's payment token (the first example has one).
CHARGE_BODY = {"orderId": "order-1", "amount": 39.0, "currency": "EUR", "paymentToken": "tok-4242-visa"}
RETURN_BODY = {"orderId": "order-1", "items": [{"sku": "sku-1", "quantity": 1}]}
CREDIT_BODY = {"orderId": "order-1", "amount": 9.5, "currency": "EUR"}


def value(name: str, key: str) -> str:
    """The value of ``name`` a simulator returns for the effect applied under ``key``."""
    return f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


# The confirmation names the customer, counts the items and carries the shipment's tracking number.
CONFIRMATION_BODY = {
    "orderId": "order-1",
    "customerId": "customer-1",
    "items": 3,
    "trackingNumber": value("trackingNumber", "order-1:create-shipment"),
}

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
    "payment",
    "/payment/charges",
    "refund",
    "charged",
    "refunded",
    "card declined",
    CHARGE_BODY,
    ("chargeId",),
)
SHIPPING = Service(
    "shipping",
    "/shipping/shipments",
    "cancel",
    "created",
    "cancelled",
    "address not deliverable",
    ITEMS_BODY,
    ("trackingNumber",),
)
# A confirmation cannot be unsent: no undo.
NOTIFICATIONS = Service(
    "notifications",
    "/notifications/confirmations",
    None,
    "sent",
    None,
    "no contact address",
    CONFIRMATION_BODY,
)
# The returns' resources, one on each service.
RESTOCK = Service(
    "inventory", "/inventory/restocks", "unstock", "restocked", "unstocked", "unknown SKU", RETURN_BODY
)
CREDIT = Service(
    "payment",
    "/payment/credits",
    "reverse-credit",
    "credited",
    "reversed",
    "card cannot be credited",
    CREDIT_BODY,
    ("creditId",),
)
COLLECTION = Service(
    "shipping",
    "/shipping/collections",
    "cancel-collection",
    "collected",
    "cancelled",
    "nothing to collect at that address",
    RETURN_BODY,
)
EXAMPLE = [INVENTORY, RESTOCK, PAYMENT, CREDIT, SHIPPING, COLLECTION, NOTIFICATIONS]


@pytest.mark.parametrize("service", EXAMPLE, ids=[s.collection.strip("/") for s in EXAMPLE])
def test_the_declaration_serves_each_example_resource_as_written_here(service: Service) -> None:
    assert service in RESOURCES, f"declared: {[r for r in RESOURCES if r.collection == service.collection]}"


def test_a_charge_returns_its_id_and_its_refund_names_it(client: httpx.Client) -> None:
    key = "o-1:charge-payment"
    charged = apply(client, PAYMENT, key)
    charge_id = value("chargeId", key)
    refunded = client.post(
        "/payment/charges/o-1%3Acharge-payment/refund", json={"orderId": "order-1", "chargeId": charge_id}
    )
    assert charged.status_code == 201, charged.text
    assert charged.json() == {"chargeId": charge_id, "id": key, "orderId": "order-1", "status": "charged"}
    assert refunded.json() == {"id": key, "status": "refunded"}
    entry = ledger(client)["payment"][key]
    assert {k: v for k, v in entry.items() if not k.endswith("Seq")} == {
        "orderId": "order-1",
        "applied": 1,
        "compensated": 1,
        "result": {"chargeId": charge_id},
        # The bodies as received.
        "carried": CHARGE_BODY,
        "undoCarried": {"orderId": "order-1", "chargeId": charge_id},
        # No call came with a traceparent header.
        "traceIds": [],
    }


def test_a_replayed_charge_answers_the_first_even_with_another_amount(client: httpx.Client) -> None:
    apply(client, PAYMENT, "pay-1")
    replay = apply(client, PAYMENT, "pay-1", orderId="order-other", amount=1.0)
    assert replay.status_code == 200
    assert replay.json() == {
        "chargeId": value("chargeId", "pay-1"),
        "id": "pay-1",
        "orderId": "order-1",
        "status": "charged",
    }


def test_a_shipment_returns_its_tracking_number_which_the_confirmation_carries(client: httpx.Client) -> None:
    shipped = apply(client, SHIPPING, "order-1:create-shipment")
    tracking = shipped.json()["trackingNumber"]
    sent = apply(client, NOTIFICATIONS, "order-1:send-confirmation", trackingNumber=tracking)
    assert tracking == value("trackingNumber", "order-1:create-shipment")
    assert sent.json() == {"id": "order-1:send-confirmation", "orderId": "order-1", "status": "sent"}
    book = ledger(client)
    assert book["shipping"]["order-1:create-shipment"]["result"] == {"trackingNumber": tracking}
    confirmation = book["notifications"]["order-1:send-confirmation"]
    assert (confirmation["result"], confirmation["carried"]) == (
        {},
        {**CONFIRMATION_BODY, "trackingNumber": tracking},
    )


def test_a_confirmation_of_digital_goods_carries_no_tracking_number(client: httpx.Client) -> None:
    assert apply(client, NOTIFICATIONS, "order-2:send-confirmation", trackingNumber=None).status_code == 201
    carried = ledger(client)["notifications"]["order-2:send-confirmation"]["carried"]
    assert carried == {**CONFIRMATION_BODY, "trackingNumber": None}


def test_a_credit_returns_its_id_and_a_collection_returns_nothing(client: httpx.Client) -> None:
    credited = apply(client, CREDIT, "r-1:refund-payment")
    collected = apply(client, COLLECTION, "r-1:collect-return")
    assert credited.json()["creditId"] == value("creditId", "r-1:refund-payment")
    assert collected.json() == {"id": "r-1:collect-return", "orderId": "order-1", "status": "collected"}


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
    (NOTIFICATIONS, {"orderId": "o", "items": 1}),
    (NOTIFICATIONS, {"orderId": "o", "customerId": "c", "items": "1"}),
    (NOTIFICATIONS, {"orderId": "o", "customerId": "c", "items": 1, "trackingNumber": 5}),
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
        # A confirmation cannot be undone: there is no undo route under its collection at all.
        "/notifications/confirmations/key-1/cancel",
        "/notifications/confirmations/key-1/send",
        "/notifications/confirmations/key-1/undo",
    ],
)
def test_unknown_route_is_a_json_404(shared_client: httpx.Client, path: str) -> None:
    assert_error(shared_client.post(path), 404, "NotFound")
