"""Apply and compensate with idempotency keys: nothing is applied or compensated twice."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.simulators.conftest import RunningSimulators
from tests.simulators.helpers import (
    FIRST,
    LAST,
    RESOURCE_IDS,
    RESOURCES,
    SECOND,
    SERVICES,
    UNDOABLE,
    UNDOABLE_IDS,
    Service,
    apply,
    compensate,
    empty,
    entry,
    ledger,
    set_faults,
    undo_body,
    without_seq,
)


@pytest.mark.parametrize("service", RESOURCES, ids=RESOURCE_IDS)
def test_apply_twice_with_one_key_applies_once(client: httpx.Client, service: Service) -> None:
    first = apply(client, service, "key-1")
    second = apply(client, service, "key-1")

    assert first.status_code == 201, first.text
    assert second.status_code == 200, second.text
    assert first.json() == second.json() == service.answer("key-1")
    assert without_seq(ledger(client)[service.name]) == {"key-1": entry(service, "key-1")}


def test_every_service_is_in_the_ledger_even_when_empty(client: httpx.Client) -> None:
    assert ledger(client) == empty()
    apply(client, SECOND, "p")
    assert without_seq(ledger(client)[SECOND.name]) == {"p": entry(SECOND, "p")}
    assert ledger(client) == {**empty(), SECOND.name: ledger(client)[SECOND.name]}


def test_keys_are_per_service(client: httpx.Client) -> None:
    for service in SERVICES:
        assert apply(client, service, "same-key").status_code == 201
    book = ledger(client)
    assert all(book[service.name]["same-key"]["applied"] == 1 for service in SERVICES)


def test_different_keys_are_different_effects(client: httpx.Client) -> None:
    assert apply(client, FIRST, "a").status_code == 201
    assert apply(client, FIRST, "b", orderId="order-2").status_code == 201
    entries = ledger(client)[FIRST.name]
    assert without_seq(entries) == {"a": entry(FIRST, "a"), "b": entry(FIRST, "b", order_id="order-2")}
    # Each change has its number, in the order the changes were made.
    assert entries["a"]["appliedSeq"] < entries["b"]["appliedSeq"]


def test_replay_answers_the_first_call_even_with_another_body(client: httpx.Client) -> None:
    """The key identifies the effect: a replay changes nothing and answers what was applied."""
    apply(client, SECOND, "key-1")
    replay = apply(client, SECOND, "key-1", orderId="order-other")
    assert replay.status_code == 200
    assert replay.json()["orderId"] == "order-1"
    assert ledger(client)[SECOND.name]["key-1"]["orderId"] == "order-1"


@pytest.mark.parametrize("service", UNDOABLE, ids=UNDOABLE_IDS)
def test_compensation_counts_once(client: httpx.Client, service: Service) -> None:
    apply(client, service, "key-1")

    first = compensate(client, service, "key-1", undo_body(service.resource, "key-1"))
    second = compensate(client, service, "key-1")

    assert first.status_code == second.status_code == 200
    assert first.json() == second.json() == {"id": "key-1", "status": service.compensated}
    recorded = ledger(client)[service.name]["key-1"]
    assert (recorded["applied"], recorded["compensated"]) == (1, 1)
    # The undo's body as received (naming the values the apply returned, if any); the second sent none.
    assert recorded["undoCarried"] == undo_body(service.resource, "key-1")


@pytest.mark.parametrize("service", UNDOABLE, ids=UNDOABLE_IDS)
def test_compensating_an_unknown_key_creates_no_entry(client: httpx.Client, service: Service) -> None:
    for _ in range(2):
        response = compensate(client, service, "never-applied")
        assert response.status_code == 200
        assert response.json() == {"id": "never-applied", "status": "not-found"}
    assert ledger(client)[service.name] == {}


def test_apply_after_compensation_changes_nothing(client: httpx.Client) -> None:
    apply(client, LAST, "key-1")
    compensate(client, LAST, "key-1")

    replay = apply(client, LAST, "key-1")

    assert replay.status_code == 200
    assert replay.json() == LAST.answer("key-1")
    assert without_seq(ledger(client)[LAST.name]) == {"key-1": entry(LAST, "key-1", compensated=1)}


def test_a_key_with_a_slash_can_be_compensated(client: httpx.Client) -> None:
    assert apply(client, FIRST, "order-1/step").status_code == 201
    encoded = client.post(f"{FIRST.collection}/order-1%2Fstep/{FIRST.verb}")
    assert encoded.json() == {"id": "order-1/step", "status": FIRST.compensated}
    assert ledger(client)[FIRST.name]["order-1/step"]["compensated"] == 1


def test_a_key_of_200_characters_is_accepted(client: httpx.Client) -> None:
    key = "k" * 200
    assert apply(client, FIRST, key).status_code == 201
    assert compensate(client, FIRST, key).json()["status"] == FIRST.compensated


def test_concurrent_calls_with_one_key_apply_once(
    simulators: RunningSimulators, client: httpx.Client
) -> None:
    # Latency keeps all the calls in flight together, so they reach the ledger at the same moment.
    set_faults(client, {FIRST.name: {"latencyMs": 100}})

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=simulators.base_url, timeout=10) as http:
            calls = [
                http.post(FIRST.collection, json=FIRST.body, headers={"Idempotency-Key": "hot"})
                for _ in range(20)
            ]
            return [response.status_code for response in await asyncio.gather(*calls)]

    statuses = asyncio.run(burst())

    assert sorted(statuses) == [200] * 19 + [201]
    assert without_seq(ledger(client)[FIRST.name]) == {"hot": entry(FIRST, "hot")}
