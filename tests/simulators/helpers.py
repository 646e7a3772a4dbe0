"""The simulators' HTTP contract as the tests see it, for every declared service.

The services, their routes, answers and rejection reasons come from the declaration
(``orders.catalog.SERVICES``), so these tests hold for whatever services a deployment declares; the example
services' own contract, written out by hand, is checked in ``tests/examples/test_simulated_services.py``.
Tests that need services in distinct roles take them by position: ``FIRST``, ``SECOND`` and ``LAST``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from orders.catalog import SERVICES as DECLARED
from orders.services.client import apply_path, undo_path
from orders.services.declaration import Resource, ServiceDefinition

# An order every body model can be built from: the fields the declared bodies read (items, total, currency).
ORDER: dict[str, Any] = {
    "items": [
        {"sku": "SKU-1", "quantity": 2, "unitPrice": 9.5},
        {"sku": "SKU-2", "quantity": 1, "unitPrice": 3},
    ],
    "currency": "EUR",
}


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

    @classmethod
    def of(cls, service: ServiceDefinition, resource: Resource) -> Service:
        """The resource as declared, with the body the agents' client would send for order ``order-1``."""
        return cls(
            name=service.name,
            collection=apply_path(service, resource),
            verb=resource.undo,
            applied=resource.applied,
            compensated=resource.undone,
            rejection=resource.rejection,
            body=resource.body.from_order("order-1", ORDER).wire(),
        )

    def compensation_path(self, key: str) -> str:
        """The compensation route of ``key``."""
        return f"{self.collection}/{key}/{self.verb}"


# Every resource of every service, for tests about what each route does.
RESOURCES = [Service.of(service, resource) for service in DECLARED for resource in service.resources]
RESOURCE_IDS = [service.collection.strip("/") for service in RESOURCES]
# One resource per service (its first), for tests about services.
SERVICES = [Service.of(service, service.resources[0]) for service in DECLARED]
SERVICE_IDS = [service.name for service in SERVICES]
# Services by role; with fewer than three declared, some roles are played by one service
# (``needs_services`` skips a test that needs them distinct).
FIRST, SECOND, LAST = SERVICES[0], SERVICES[min(1, len(SERVICES) - 1)], SERVICES[-1]
# A name no service has.
UNDECLARED = "-".join(SERVICE_IDS) + "-undeclared"


def needs_services(count: int) -> pytest.MarkDecorator:
    """Skip a test that needs ``count`` distinct services when fewer are declared."""
    return pytest.mark.skipif(len(SERVICES) < count, reason=f"needs {count} declared services")


def other_undo_paths() -> list[str]:
    """Undo paths that no route serves: a resource's collection with another resource's undo action."""
    undos = {resource.undo for service in DECLARED for resource in service.resources}
    return [
        undo_path(service, resource, "key-1").rsplit("/", 1)[0] + f"/{undo}"
        for service in DECLARED
        for resource in service.resources
        for undo in sorted(undos - {resource.undo})
    ]


def empty(value: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per declared service, ``value`` (a fresh copy each) or ``{}``."""
    return {name: dict(value or {}) for name in SERVICE_IDS}


FAULT_DEFAULTS = {
    "transientRate": 0.0,
    "permanentRate": 0.0,
    "hangRate": 0.0,
    "lostReplyRate": 0.0,
    "latencyMs": 0,
    "hangMs": 30000,
}
NO_CALLS = {"calls": 0, "transient": 0, "permanent": 0, "hang": 0, "lostReply": 0}


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
