"""Bad requests: a 400 with a JSON error, nothing applied and no fault drawn; unknown routes: JSON 404.

Most tests share one process (``shared_client``): none of them applies anything, so its ledger stays empty.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.simulators.helpers import (
    COLLECTION,
    CREDIT,
    INVENTORY,
    PAYMENT,
    RESOURCE_IDS,
    RESOURCES,
    RESTOCK,
    SHIPPING,
    Service,
    assert_error,
    ledger,
    set_faults,
    stats,
)


@pytest.mark.parametrize("service", RESOURCES, ids=RESOURCE_IDS)
def test_missing_idempotency_key_is_refused(shared_client: httpx.Client, service: Service) -> None:
    message = assert_error(
        shared_client.post(service.collection, json=service.body), 400, "InvalidIdempotencyKey"
    )
    assert "Idempotency-Key" in message
    assert ledger(shared_client)[service.name] == {}


@pytest.mark.parametrize("key", ["", "k" * 201])
def test_idempotency_key_of_bad_length_is_refused(shared_client: httpx.Client, key: str) -> None:
    response = shared_client.post(INVENTORY.collection, json=INVENTORY.body, headers={"Idempotency-Key": key})
    assert_error(response, 400, "InvalidIdempotencyKey")
    assert ledger(shared_client)["inventory"] == {}


def test_compensation_key_longer_than_200_is_refused(shared_client: httpx.Client) -> None:
    assert_error(shared_client.post(INVENTORY.compensation_path("k" * 201)), 400, "InvalidIdempotencyKey")


def test_empty_compensation_key_is_refused(shared_client: httpx.Client) -> None:
    assert_error(shared_client.post("/inventory/reservations//release"), 400, "InvalidIdempotencyKey")


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


@pytest.mark.parametrize("content", [b"", b"{", b"orderId=o"])
def test_body_that_is_not_json_is_refused(shared_client: httpx.Client, content: bytes) -> None:
    response = shared_client.post(INVENTORY.collection, content=content, headers={"Idempotency-Key": "key-1"})
    assert_error(response, 400, "InvalidBody")
    assert ledger(shared_client)["inventory"] == {}


def test_fields_the_service_does_not_use_are_ignored(client: httpx.Client) -> None:
    body = {**SHIPPING.body, "address": {"city": "Lyon"}, "priority": "express"}
    response = client.post(SHIPPING.collection, json=body, headers={"Idempotency-Key": "ship-1"})
    assert response.status_code == 201, response.text


def test_bad_requests_draw_no_fault(client: httpx.Client) -> None:
    """Validation comes first: with every call failing, a bad request still gets its 400."""
    set_faults(client, {"inventory": {"transientRate": 1}})

    assert_error(client.post(INVENTORY.collection, json=INVENTORY.body), 400, "InvalidIdempotencyKey")

    assert stats(client)["inventory"] == {
        "calls": 0,
        "transient": 0,
        "permanent": 0,
        "hang": 0,
        "lostReply": 0,
    }


def test_body_too_large_is_refused(shared_client: httpx.Client) -> None:
    body = {**INVENTORY.body, "padding": "x" * (1024 * 1024)}
    response = shared_client.post(INVENTORY.collection, json=body, headers={"Idempotency-Key": "key-1"})
    assert_error(response, 413, "BodyTooLarge")
    assert ledger(shared_client)["inventory"] == {}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/nowhere"),
        ("POST", "/inventory"),
        ("POST", "/payment/charges/key-1/release"),
        # An undo action is served only under its own resource's collection.
        ("POST", "/shipping/collections/key-1/cancel"),
        ("POST", "/payment/charges/key-1/reverse-credit"),
    ],
)
def test_unknown_route_is_a_json_404(shared_client: httpx.Client, method: str, path: str) -> None:
    assert_error(shared_client.request(method, path), 404, "NotFound")


def test_wrong_method_is_a_json_405(shared_client: httpx.Client) -> None:
    response = shared_client.get(INVENTORY.collection)
    assert_error(response, 405, "MethodNotAllowed")
    assert response.headers["allow"] == "POST"


def test_health(shared_client: httpx.Client) -> None:
    response = shared_client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
