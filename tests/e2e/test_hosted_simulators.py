"""A deployment with no remote services: the app serves the simulators itself and still processes orders."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from servicebus_emulator.launcher import free_port
from tests.e2e.conftest import LocalStack, start_stack, stop_stack


@pytest.fixture(scope="module")
def self_contained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    port = free_port()
    own = f"http://127.0.0.1:{port}/api/sim"
    env = {
        "ENABLE_SIMULATORS": "true",
        "SIMULATORS_DATA_DIR": str(tmp_path_factory.mktemp("hosted-ledger")),
        "INVENTORY_SERVICE_URL": own,
        "PAYMENT_SERVICE_URL": own,
        "SHIPPING_SERVICE_URL": own,
    }
    stack = start_stack(tmp_path_factory.mktemp("devhost-hosted"), workers=1, extra_env=env, port=port)
    try:
        yield stack
    finally:
        stop_stack(stack)


def test_orders_are_processed_against_the_apps_own_simulators(self_contained: LocalStack) -> None:
    order_id = self_contained.submit()
    assert self_contained.wait_terminal(order_id)["processState"] == "Processed"
    hosted = self_contained.api.get("/api/sim/ledger").json()
    assert {s: [e["applied"] for e in hosted[s].values() if e["orderId"] == order_id] for s in hosted} == {
        "inventory": [1],
        "payment": [1],
        "shipping": [1],
    }
    # The separate simulator process was not used.
    assert not any(e["orderId"] == order_id for s in self_contained.ledger().values() for e in s.values())


def test_the_hosted_simulators_take_fault_profiles(self_contained: LocalStack) -> None:
    response = self_contained.api.post("/api/sim/faults", json={"shipping": {"permanentRate": 1}})
    assert response.status_code == 200, response.text
    order_id = self_contained.submit()
    assert self_contained.wait_terminal(order_id)["processState"] == "Compensated"
