"""The simulators' HTTP contract as the tests see it, written out independently of the code under test."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class Service:
    """How to call one resource of one simulated service."""

    name: str
    collection: str
    verb: str
    applied: str
    compensated: str
    rejection: str
    body: dict[str, Any]

    def compensation_path(self, key: str) -> str:
        """The compensation route of ``key``."""
        return f"{self.collection}/{key}/{self.verb}"


ITEMS = [{"sku": "SKU-1", "quantity": 2}, {"sku": "SKU-2", "quantity": 1}]

INVENTORY = Service(
    "inventory",
    "/inventory/reservations",
    "release",
    "reserved",
    "released",
    "insufficient stock",
    {"orderId": "order-1", "items": ITEMS},
)
PAYMENT = Service(
    "payment",
    "/payment/charges",
    "refund",
    "charged",
    "refunded",
    "card declined",
    {"orderId": "order-1", "amount": 42.5, "currency": "EUR"},
)
SHIPPING = Service(
    "shipping",
    "/shipping/shipments",
    "cancel",
    "created",
    "cancelled",
    "address not deliverable",
    {"orderId": "order-1", "items": ITEMS},
)
# The returns' resources, one on each service.
RESTOCK = Service(
    "inventory",
    "/inventory/restocks",
    "unstock",
    "restocked",
    "unstocked",
    "unknown SKU",
    {"orderId": "order-1", "items": ITEMS},
)
CREDIT = Service(
    "payment",
    "/payment/credits",
    "reverse-credit",
    "credited",
    "reversed",
    "card cannot be credited",
    {"orderId": "order-1", "amount": 42.5, "currency": "EUR"},
)
COLLECTION = Service(
    "shipping",
    "/shipping/collections",
    "cancel-collection",
    "collected",
    "cancelled",
    "nothing to collect at that address",
    {"orderId": "order-1", "items": ITEMS},
)
# One resource per service, for tests about services.
SERVICES = [INVENTORY, PAYMENT, SHIPPING]
SERVICE_IDS = [service.name for service in SERVICES]
# Every resource of every service, for tests about what each route does.
RESOURCES = [INVENTORY, RESTOCK, PAYMENT, CREDIT, SHIPPING, COLLECTION]
RESOURCE_IDS = [service.collection.strip("/") for service in RESOURCES]

FAULT_DEFAULTS = {
    "transientRate": 0.0,
    "permanentRate": 0.0,
    "hangRate": 0.0,
    "lostReplyRate": 0.0,
    "latencyMs": 0,
    "hangMs": 30000,
}


def apply(client: httpx.Client, service: Service, key: str, **overrides: Any) -> httpx.Response:
    """Call the apply route of ``service`` with idempotency key ``key``."""
    return client.post(
        service.collection, json={**service.body, **overrides}, headers={"Idempotency-Key": key}
    )


def compensate(client: httpx.Client, service: Service, key: str) -> httpx.Response:
    """Call the compensation route of ``key``."""
    return client.post(service.compensation_path(key))


def set_faults(client: httpx.Client, profile: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``POST /faults`` and return the full profile it answers."""
    response = client.post("/faults", json=profile)
    assert response.status_code == 200, response.text
    return response.json()


def ledger(client: httpx.Client) -> dict[str, dict[str, dict[str, Any]]]:
    """``GET /ledger``."""
    response = client.get("/ledger")
    assert response.status_code == 200, response.text
    return response.json()


def stats(client: httpx.Client) -> dict[str, dict[str, int]]:
    """``GET /stats``."""
    response = client.get("/stats")
    assert response.status_code == 200, response.text
    return response.json()


def assert_error(response: httpx.Response, status: int, code: str) -> str:
    """Assert a JSON error with this status and code; return its message."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    return error["message"]
