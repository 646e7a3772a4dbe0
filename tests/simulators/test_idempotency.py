"""Apply and compensate with idempotency keys: nothing is applied or compensated twice."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.simulators.conftest import RunningSimulators
from tests.simulators.helpers import (
    INVENTORY,
    PAYMENT,
    RESOURCE_IDS,
    RESOURCES,
    SERVICES,
    SHIPPING,
    Service,
    apply,
    compensate,
    ledger,
    set_faults,
)


@pytest.mark.parametrize("service", RESOURCES, ids=RESOURCE_IDS)
def test_apply_twice_with_one_key_applies_once(client: httpx.Client, service: Service) -> None:
    first = apply(client, service, "key-1")
    second = apply(client, service, "key-1")

    assert first.status_code == 201, first.text
    assert second.status_code == 200, second.text
    assert first.json() == second.json() == {"id": "key-1", "orderId": "order-1", "status": service.applied}
    assert ledger(client)[service.name] == {"key-1": {"orderId": "order-1", "applied": 1, "compensated": 0}}


def test_every_service_is_in_the_ledger_even_when_empty(client: httpx.Client) -> None:
    assert ledger(client) == {"inventory": {}, "payment": {}, "shipping": {}}
    apply(client, PAYMENT, "p")
    assert ledger(client)["inventory"] == {} and ledger(client)["shipping"] == {}


def test_keys_are_per_service(client: httpx.Client) -> None:
    for service in SERVICES:
        assert apply(client, service, "same-key").status_code == 201
    book = ledger(client)
    assert all(book[service.name]["same-key"]["applied"] == 1 for service in SERVICES)


def test_different_keys_are_different_effects(client: httpx.Client) -> None:
    assert apply(client, INVENTORY, "a").status_code == 201
    assert apply(client, INVENTORY, "b", orderId="order-2").status_code == 201
    assert ledger(client)["inventory"] == {
        "a": {"orderId": "order-1", "applied": 1, "compensated": 0},
        "b": {"orderId": "order-2", "applied": 1, "compensated": 0},
    }


def test_replay_answers_the_first_call_even_with_another_body(client: httpx.Client) -> None:
    """The key identifies the effect: a replay changes nothing and answers what was applied."""
    apply(client, PAYMENT, "pay-1")
    replay = apply(client, PAYMENT, "pay-1", orderId="order-other", amount=1.0)
    assert replay.status_code == 200
    assert replay.json()["orderId"] == "order-1"
    assert ledger(client)["payment"]["pay-1"]["orderId"] == "order-1"


@pytest.mark.parametrize("service", RESOURCES, ids=RESOURCE_IDS)
def test_compensation_counts_once(client: httpx.Client, service: Service) -> None:
    apply(client, service, "key-1")

    first = compensate(client, service, "key-1")
    second = compensate(client, service, "key-1")

    assert first.status_code == second.status_code == 200
    assert first.json() == second.json() == {"id": "key-1", "status": service.compensated}
    assert ledger(client)[service.name]["key-1"] == {"orderId": "order-1", "applied": 1, "compensated": 1}


@pytest.mark.parametrize("service", RESOURCES, ids=RESOURCE_IDS)
def test_compensating_an_unknown_key_creates_no_entry(client: httpx.Client, service: Service) -> None:
    for _ in range(2):
        response = compensate(client, service, "never-applied")
        assert response.status_code == 200
        assert response.json() == {"id": "never-applied", "status": "not-found"}
    assert ledger(client)[service.name] == {}


def test_apply_after_compensation_changes_nothing(client: httpx.Client) -> None:
    apply(client, SHIPPING, "ship-1")
    compensate(client, SHIPPING, "ship-1")

    replay = apply(client, SHIPPING, "ship-1")

    assert replay.status_code == 200
    assert replay.json() == {"id": "ship-1", "orderId": "order-1", "status": "created"}
    assert ledger(client)["shipping"]["ship-1"] == {"orderId": "order-1", "applied": 1, "compensated": 1}


def test_a_key_with_a_slash_can_be_compensated(client: httpx.Client) -> None:
    assert apply(client, INVENTORY, "order-1/inventory").status_code == 201
    encoded = client.post("/inventory/reservations/order-1%2Finventory/release")
    assert encoded.json() == {"id": "order-1/inventory", "status": "released"}
    assert ledger(client)["inventory"]["order-1/inventory"]["compensated"] == 1


def test_a_key_of_200_characters_is_accepted(client: httpx.Client) -> None:
    key = "k" * 200
    assert apply(client, INVENTORY, key).status_code == 201
    assert compensate(client, INVENTORY, key).json()["status"] == "released"


def test_concurrent_calls_with_one_key_apply_once(
    simulators: RunningSimulators, client: httpx.Client
) -> None:
    # Latency keeps all the calls in flight together, so they reach the ledger at the same moment.
    set_faults(client, {"inventory": {"latencyMs": 100}})

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=simulators.base_url, timeout=10) as http:
            calls = [
                http.post(INVENTORY.collection, json=INVENTORY.body, headers={"Idempotency-Key": "hot"})
                for _ in range(20)
            ]
            return [response.status_code for response in await asyncio.gather(*calls)]

    statuses = asyncio.run(burst())

    assert sorted(statuses) == [200] * 19 + [201]
    assert ledger(client)["inventory"] == {"hot": {"orderId": "order-1", "applied": 1, "compensated": 0}}
